"""Diagnostics of a traced run (testbed/traces/diagnostics.py, `testbed diagnose`): StarVZ's outlier
rule as StarVZ applies it, the area bound, copies against the scheduler's estimate, overheads; by
hand on small tables and on real numasim runs."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from testbed import ROOT
from testbed.common import paths
from testbed.common.errors import InputError
from testbed.traces.diagnostics import (
    TABLES,
    area_bound,
    bound_table,
    concat_runs,
    copy_class,
    diagnose,
    digest,
    gpu_numa_nodes,
    kernel_table,
    model_means,
    overhead_table,
    placement_table,
    plot_diagnostics,
    starvz_outliers,
    write_tables,
)
from testbed.traces.traces import read_tasks, read_transfers

needs_numasim = pytest.mark.skipif(not paths.NUMASIM.exists(), reason="numasim not built (make build)")


def tasks_frame(rows: list[tuple[str, float, float, str, int]]) -> pd.DataFrame:
    """(worker, start, end, kind, NUMA) rows as read_tasks returns them."""
    t = pd.DataFrame(rows, columns=["ResourceId", "Start", "End", "Value", "WorkerNuma"])
    t["Duration"] = t["End"] - t["Start"]
    t["WorkerType"] = ["cuda" if ".gpu" in r else "cpu" for r in t["ResourceId"]]
    t["NodeName"] = t["ResourceId"].str.split(".").str[0]
    t["Node"] = t["NodeName"].str[-1].astype(int)
    return t


def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed", *map(str, args)], capture_output=True, text=True, cwd=ROOT)


# ------------------------------------------------------------------ by hand
def test_starvz_outliers_pool_every_node_of_a_kind_and_worker_type():
    """StarVZ groups by Value x ResourceType over the whole trace: a node whose gemms are all slow
    has them all flagged (its own quartiles would flag none), GPUs and other kinds apart."""
    fast = [(f"a-1.cpu{i}", 0.0, 1.0 + 0.01 * i, "gemm", 0) for i in range(12)]
    slow = [(f"b-2.cpu{i}", 0.0, 2.0 + 0.01 * i, "gemm", 1) for i in range(3)]
    gpu = [("a-1.gpu0", 0.0, 2.0, "gemm", 0), ("a-1.gpu0", 2.0, 2.1, "gemm", 0)]
    trsm = [("a-1.cpu0", 5.0, 7.5, "trsm", 0)]
    t = tasks_frame(fast + slow + gpu + trsm)
    out = starvz_outliers(t)
    # CPU gemm durations: 12 near 1 s, 3 near 2 s; Q1, Q3 (type 7) from all 15 pooled
    cpu = t[(t["WorkerType"] == "cpu") & (t["Value"] == "gemm")]["Duration"].to_numpy()
    q1, q3 = np.quantile(cpu, [0.25, 0.75])
    assert q3 + 1.5 * (q3 - q1) < 2.0  # the pooled threshold is below every slow gemm
    assert out.tolist() == [False] * 12 + [True] * 3 + [False, False, False]
    k = kernel_table(t, {"a-1": "a", "b-2": "b"})
    b = k[(k["machine"] == "b") & (k["kind"] == "gemm")].iloc[0]
    assert b["outlier_share"] == 1.0 and b["tasks"] == 3 and b["numa"] == 1 and b["worker"] == "cpu"
    assert b["median_s"] == pytest.approx(2.01) and b["iqr_s"] == pytest.approx(0.01)
    a_gpu = k[(k["machine"] == "a") & (k["worker"] == "gpu0")].iloc[0]
    assert a_gpu["outlier_share"] == 0.0 and a_gpu["tasks"] == 2


def test_placement_groups_operands_by_their_allocating_thread_and_pages():
    t = tasks_frame([("a-1.cpu0", 0, 1, "gemm", 1), ("a-1.cpu1", 0, 1, "gemm", 1), ("a-1.gpu0", 0, 1, "gemm", 0),
                     ("a-1.cpu2", 0, 1, "trsm", 0)])
    t["OperandPages"] = ["0 1 0", "0 1 1", "gpu", "0 0"]
    t["OperandAllocators"] = ["cuda:0:1.5 cpu:1:2 main:0:0", "cuda:0:2.5 cpu:1:3 mpi:-1:4", "gpu", "main:0:0 ?"]
    p = placement_table(t, {"a-1": "a"}, run="r")
    gemm = p[(p["numa"] == 1) & (p["kind"] == "gemm")].set_index(["allocator", "allocator_numa", "page_numa"])
    assert gemm["operands"].sum() == 6 and gemm["share"].sum() == pytest.approx(1)  # the GPU task is left out
    assert gemm.loc[("cuda", 0, 0), "operands"] == 2 and gemm.loc[("cuda", 0, 0), "allocated_median_s"] == 2.0
    assert gemm.loc[("cpu", 1, 1), "share"] == pytest.approx(2 / 6)
    assert gemm.loc[("mpi", -1, 1), "operands"] == 1 and gemm.loc[("main", 0, 0), "operands"] == 1
    trsm = p[p["kind"] == "trsm"].set_index("allocator")
    assert trsm.loc["unknown", "operands"] == 1 and math.isnan(trsm.loc["unknown", "allocated_median_s"])
    assert (p["run"] == "r").all()
    # a trace without the column (another engine's) gives an empty table; a malformed entry is refused
    assert placement_table(t.drop(columns="OperandAllocators"), {"a-1": "a"}).empty
    t.loc[0, "OperandAllocators"] = "cuda:0 cpu:1:2 main:0:0"
    with pytest.raises(InputError, match="kind:numa:seconds"):
        placement_table(t, {"a-1": "a"})
    t.loc[0, "OperandAllocators"] = "cpu:1:2 main:0:0"
    with pytest.raises(InputError, match="one entry per operand"):
        placement_table(t, {"a-1": "a"})


def test_area_bound_by_hand():
    # one class: the work over the workers
    assert area_bound({"gemm": 10}, {("gemm", "cpu"): 2.0}, {"cpu": 4}) == pytest.approx(5.0)
    # getrf on the CPUs only; gemm on both: CPU load (2 x 5 + x 10) / 2, GPU load (10 - x) x 1,
    # equal at x = 5/6 gemms on the CPUs: T = 10 - 5/6
    times = {("gemm", "cpu"): 10.0, ("gemm", "gpu0"): 1.0, ("getrf", "cpu"): 5.0}
    assert area_bound({"gemm": 10, "getrf": 2}, times, {"cpu": 2, "gpu0": 1}) == pytest.approx(10 - 5 / 6)
    # two GPUs of different speeds share the gemms in proportion to their rates: 12 / (1 + 1/2)
    times = {("gemm", "gpu0"): 1.0, ("gemm", "gpu1"): 2.0}
    assert area_bound({"gemm": 12}, times, {"cpu": 0, "gpu0": 1, "gpu1": 1}) == pytest.approx(8.0)
    # a kind nothing can run: no bound
    assert math.isnan(area_bound({"getrf": 1}, {("gemm", "cpu"): 1.0}, {"cpu": 1}))


def test_bound_counts_the_workers_of_the_machine_type():
    """A worker that ran nothing is not in a trace: a node's CPU workers are the most any node of
    its machine type used, so a node that kept one of its two workers idle is bound by two."""
    t = tasks_frame([("a-1.cpu0", 0.0, 1.0, "gemm", 0), ("a-1.cpu1", 0.0, 1.0, "gemm", 1),
                     ("a-2.cpu0", 0.0, 1.0, "gemm", 0), ("a-2.cpu0", 1.0, 2.0, "gemm", 0)])
    bound = bound_table(t, {"a-1": "a", "a-2": "a"}, {("a", "gemm", "cpu"): 0.5}).set_index("node")
    assert bound.loc["a-2", "cpu_workers"] == 2 and bound.loc["a-2", "bound_trace_s"] == pytest.approx(1.0)
    assert bound.loc["a-2", "bound_model_s"] == pytest.approx(0.5) and bound.loc["a-2", "end_over_bound_trace"] == 2.0


def test_copy_classes_from_numasim_names():
    assert copy_class("c-1.ram0", "c-1.gpu0", "c-1.membus0 c-1.pcie0_DOWN") == "RAM->GPU, one socket"
    assert copy_class("c-1.ram1", "c-1.gpu0", "c-1.membus1 c-1.qpi_UP c-1.pcie0") == "RAM->GPU, across sockets"
    assert copy_class("c-1.gpu1", "c-1.ram0", "c-1.pcie1 c-1.qpi c-1.membus0") == "GPU->RAM, across sockets"
    assert copy_class("c-1.ram0", "c-1.ram1", "c-1.membus0 c-1.qpi c-1.membus1") == "RAM->RAM, across sockets"
    assert copy_class("c-1.ram0", "c-2.ram0", "c-1.eth_UP g.switch c-2.eth_DOWN") == "network (MPI)"


def test_overheads_read_thread_states_when_given():
    t = tasks_frame([("a-1.cpu0", 0.0, 4.0, "gemm", 0), ("a-1.gpu0", 1.0, 2.0, "gemm", 0)])
    none = overhead_table(t, {"a-1": "a"})
    assert none["thread_copy_s"].isna().all() and none["thread_alloc_s"].isna().all()
    assert none["thread_states"].str.startswith("not traced").all()
    cpu = none[none["worker_type"] == "cpu"].iloc[0]
    assert cpu["task_s"] == 4.0 and cpu["idle_s"] == 0.0
    states = pd.DataFrame({"ResourceId": ["a-1.gpu0", "a-1.gpu0", "a-1.gpu0", "a-1.cpu0", "elsewhere"],
                           "Start": [0.0, 2.0, 3.0, 0.5, 0.0], "End": [0.5, 2.25, 3.5, 0.75, 9.0],
                           "Value": ["DriverCopy", "Allocating", "Freeing", "DriverCopyAsync", "DriverCopy"]})
    got = overhead_table(t, {"a-1": "a"}, states=states).set_index("worker_type")
    assert got.loc["cuda", "thread_copy_s"] == 0.5 and got.loc["cuda", "thread_alloc_s"] == 0.75
    assert got.loc["cpu", "thread_copy_s"] == 0.25 and got.loc["cpu", "thread_alloc_s"] == 0.0


def test_overheads_read_the_transfer_logs_thread_and_the_runs_runtime_costs():
    """A transfer log naming the thread that ran each memcpy (`Thread`) gives the threads' copy time
    per machine type x worker type; the run's runtime_costs add a cluster-wide row."""
    t = tasks_frame([("a-1.cpu0", 0.0, 4.0, "gemm", 0), ("a-1.gpu0", 1.0, 2.0, "gemm", 0)])
    transfers = pd.DataFrame({"Start": [0.0, 1.0, 2.0], "End": [0.5, 1.25, 3.0], "Bytes": [8.0, 8.0, 8.0],
                              "Src": ["a-1.ram0", "a-1.ram1", "a-1.ram0"], "Dst": ["a-1.ram1", "a-1.ram0", "a-1.gpu0"],
                              "Links": ["", "", ""], "Thread": ["a-1.cpu0", "a-1.gpu0", math.nan]})
    costs = {"thread_copy_s": 0.75, "pinned_alloc_s": 0.1, "gpu_malloc_s": 0.2, "gpu_free_s": 0.3, "gpu_mallocs": 4}
    got = overhead_table(t, {"a-1": "a"}, transfers, runtime_costs=costs).set_index(["machine", "worker_type"])
    assert got.loc[("a", "cpu"), "thread_copy_s"] == 0.5 and got.loc[("a", "cuda"), "thread_copy_s"] == 0.25
    assert got.loc[("a", "cpu"), "thread_alloc_s"] != got.loc[("a", "cpu"), "thread_alloc_s"]  # NaN: not traced
    assert got.loc[("a", "cpu"), "copies_s"] == 0.75 and got.loc[("a", "cuda"), "copies_s"] == 1.0
    cluster = got.loc[("cluster", "all")]
    assert cluster["thread_copy_s"] == 0.75 and cluster["thread_alloc_s"] == pytest.approx(0.6)
    assert cluster["workers"] == 2 and cluster["task_s"] == 5.0


# ------------------------------------------------------------------ real numasim runs
@pytest.fixture(scope="module")
def chifflet(tmp_path_factory):
    """One chifflet (2 sockets, 2 GPUs), 10 x 10 tiles of 960, traced, on a generated platform."""
    if not paths.NUMASIM.exists():
        pytest.skip("numasim not built (make build)")
    d = tmp_path_factory.mktemp("diag")
    assert run_cli("platform", "--cluster", "chifflet-1", "--out", d / "platform").returncode == 0
    runs = {}
    for label, factors in (("default", ""), ("A=1", "A=1")):
        tasks, transfers = d / f"{label}-tasks.csv", d / f"{label}-transfers.csv"
        proc = run_cli("simulate", "--engine", "numasim", "--cluster", "chifflet-1", "--n", 9600, "--b", 960,
                       "--platform-dir", d / "platform", "--seed", 3, "--trace", tasks, "--transfers", transfers,
                       *(["--factors", factors] if factors else []))
        assert proc.returncode == 0, proc.stderr
        (d / f"{label}.json").write_text(proc.stdout)
        runs[label] = (tasks, transfers, json.loads(proc.stdout)["makespan_s"])
    return d, runs


@needs_numasim
def test_numasim_counts_each_ranks_cpu_workers(chifflet):
    """cpu_workers_by_rank: one count per rank, summing to the CPU workers; the trace may show fewer."""
    d, runs = chifflet
    result = json.loads((d / "default.json").read_text())
    assert len(result["cpu_workers_by_rank"]) == 1
    assert sum(result["cpu_workers_by_rank"]) == result["workers_by_type"]["cpu"] > 0
    tasks = read_tasks(runs["default"][0])
    assert tasks.loc[tasks["WorkerType"] == "cpu", "ResourceId"].nunique() <= result["cpu_workers_by_rank"][0]


@needs_numasim
def test_transfer_log_carries_the_schedulers_estimate(chifflet):
    """Estimate = starpu_transfer_predict: latency + bytes / bandwidth x 2 x ngpus, ngpus = the node's
    2 GPUs for a route from RAM (perfmodel_bus.c); Calibrated = latency + bytes / bandwidth."""
    _, runs = chifflet
    tr = read_transfers(runs["default"][1])
    assert {"Estimate", "Calibrated"} <= set(tr.columns) and len(tr)
    h2d = tr[tr["Src"].str.contains(".ram") & tr["Dst"].str.contains(".gpu")]
    assert len(h2d) > 10
    # the latency (µs) is small against a 7.4 MB tile at PCIe speed: the ratio is 4 within 1 %
    ratio = h2d["Estimate"] / h2d["Calibrated"]
    assert ratio.between(3.9, 4.0 + 1e-9).all()
    # a copy runs no faster than alone on the idle node, up to rounding
    assert ((h2d["End"] - h2d["Start"]) / h2d["Calibrated"] > 0.99).all()


@needs_numasim
def test_diagnostics_of_a_real_run(chifflet):
    d, runs = chifflet
    tasks_path, transfers_path, makespan = runs["default"]
    tasks, transfers = read_tasks(tasks_path), read_transfers(transfers_path)
    machines = {"chifflet-1": "chifflet"}
    means = model_means(d / "platform", {"chifflet"}, 960)
    # the models numasim samples from: one CPU and one per GPU for each LU kind with a CUDA version
    assert {("chifflet", "gemm", c) for c in ("cpu", "gpu0", "gpu1")} <= set(means)
    gpu_numa = gpu_numa_nodes(d / "platform")
    assert gpu_numa == {("chifflet", "gpu0"): 0, ("chifflet", "gpu1"): 1}  # platforms/machines/chifflet.yaml
    counts = json.loads((d / "default.json").read_text())["cpu_workers_by_rank"]
    tables = diagnose(tasks, transfers, machines, means, run="default", gpu_numa=gpu_numa, cpu_workers_by_rank=counts)
    bound = tables["bound.csv"].iloc[0]
    assert bound["cpu_workers"] == counts[0] and bound["workers_from"] == "run" and bound["gpus"] == 2
    # without the run's counts, the workers the trace shows: as many or fewer, so a bound as high or higher
    alone = diagnose(tasks, transfers, machines, means)["bound.csv"].iloc[0]
    assert alone["workers_from"] == "trace" and alone["cpu_workers"] == tasks.loc[
        tasks["WorkerType"] == "cpu", "ResourceId"].nunique() <= counts[0]
    assert alone["bound_model_s"] >= bound["bound_model_s"]
    # the makespan is the last task's end: never below either bound
    assert 0 < bound["bound_model_s"] <= makespan and 0 < bound["bound_trace_s"] <= makespan
    assert bound["end_s"] == pytest.approx(makespan, rel=1e-6)
    summary = tables["bound_summary.csv"].iloc[0]
    assert summary["makespan_over_bound_trace"] >= 1 and 0 < summary["busy_fraction"] <= 1
    k = tables["kernels.csv"]
    cpu_gemm = k[(k["worker_type"] == "cpu") & (k["kind"] == "gemm")]
    assert set(cpu_gemm["numa"]) == {0, 1} and cpu_gemm["tasks"].sum() == (
        (tasks["WorkerType"] == "cpu") & (tasks["Value"] == "gemm")).sum()
    gpus = k[k["worker_type"] == "cuda"]
    assert set(gpus["worker"]) == {"gpu0", "gpu1"} and k.loc[k["worker_type"] == "cpu", "device_numa"].isna().all()
    assert dict(zip(gpus["worker"], gpus["device_numa"], strict=True)) == {"gpu0": 0, "gpu1": 1}
    c = tables["copies.csv"]
    assert set(c["machine"]) == {"chifflet"}  # one node: no MPI message
    c = c.set_index("copy_class")
    assert "RAM->GPU, one socket" in c.index and "GPU->RAM, one socket" in c.index
    assert c["copies"].sum() == len(transfers)
    # what E scales: the estimate is 4 x the idle figure, so actual / estimate sits near 1/4 unloaded
    row = c.loc["RAM->GPU, one socket"]
    assert 3.9 < row["estimate_over_calibrated_median"] <= 4.0  # (latency + 4 x) / (latency + x)
    assert row["actual_over_estimate_median"] == pytest.approx(row["actual_over_calibrated_median"] / 4, rel=0.05)
    o = tables["overheads.csv"].set_index("worker_type")
    gpu_copies = transfers[transfers["Src"].str.contains(".gpu") | transfers["Dst"].str.contains(".gpu")]
    assert o.loc["cuda", "copies_s"] == pytest.approx((gpu_copies["End"] - gpu_copies["Start"]).sum())
    assert o.loc["cpu", "task_s"] + o.loc["cpu", "idle_s"] == pytest.approx(o.loc["cpu", "workers"] * makespan)


@needs_numasim
def test_placement_of_a_real_run(chifflet):
    """Who allocated what the CPU tasks read. One RAM node (A = -1): the application's matrix, which
    the main thread allocated pinned, its pages on the main thread's NUMA node (0). One memory node per
    NUMA node (A = +1): the NUMA nodes' replicas are allocated by the threads that took the copy
    requests, CPU workers and CUDA drivers, and their pinned pages lie where that thread ran."""
    _, runs = chifflet
    machines = {"chifflet-1": "chifflet"}
    tables = {}
    for label in ("default", "A=1"):
        tasks = read_tasks(runs[label][0])
        p = diagnose(tasks, machines=machines, run=label)["placement.csv"]
        cpu = tasks[tasks["WorkerType"] == "cpu"]
        assert p["operands"].sum() == sum(len(str(x).split()) for x in cpu["OperandPages"])
        assert np.allclose(p.groupby(["numa", "kind"])["share"].sum(), 1)
        tables[label] = p
    default = tables["default"]
    assert set(default["allocator"]) == {"main"} and set(default["page_numa"]) == {0}
    a1 = tables["A=1"]
    numa1 = a1[a1["numa"] == 1]
    threads = numa1[numa1["allocator"].isin(["cpu", "cuda"])]
    assert set(threads["allocator"]) == {"cpu", "cuda"}  # both kinds took NUMA 1's copy requests
    assert (threads["page_numa"] == threads["allocator_numa"]).all()  # cudaHostAlloc: where the thread ran
    assert (threads["allocated_median_s"] > 0).all()
    assert ((numa1["page_numa"] != 1) * numa1["share"]).sum() > 0  # some NUMA-1 operands on NUMA 0's pages


@needs_numasim
def test_diagnose_command_writes_the_tables_and_refuses_bad_input(chifflet, tmp_path):
    d, runs = chifflet
    tasks, transfers, _ = runs["A=1"]
    out = tmp_path / "diag"
    proc = run_cli("diagnose", tasks, "--transfers", transfers, "--platform-dir", d / "platform", "--b", 960,
                   "--result", d / "A=1.json", "--run", "A=1", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in out.iterdir()} == {*TABLES, "digest.md", "diagnostics.png", ".testbed-files"}
    assert (out / "diagnostics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "chifflet" in proc.stdout and "RAM->GPU" in proc.stdout
    for name in TABLES:
        assert set(pd.read_csv(out / name)["run"]) == {"A=1"}
    assert set(pd.read_csv(out / "bound.csv")["workers_from"]) == {"run"}
    # A = 1: replicas on every NUMA node, so RAM-to-RAM copies appear
    assert any(c.startswith("RAM->RAM") for c in pd.read_csv(out / "copies.csv")["copy_class"])
    # bad input: one line naming the option or the file, exit 2, nothing written
    bad = tmp_path / "bad.csv"
    bad.write_text("ResourceId,Start,End\nx.cpu0,0,1\n")
    bad_costs = tmp_path / "costs.json"
    bad_costs.write_text('{"cpu_workers_by_rank": [4], "runtime_costs": {"thread_copy_s": "x"}}')
    for args, needle in (([tasks, "--platform-dir", d / "platform"], "--b"),
                         ([bad], "bad.csv"),
                         ([tasks, "--transfers", tmp_path / "none.csv"], "none.csv"),
                         ([tasks, "--platform-dir", d, "--b", 960], "summary.json"),
                         ([tasks, "--result", bad], "cpu_workers_by_rank"),
                         ([tasks, "--result", bad_costs], "runtime_costs")):
        proc = run_cli("diagnose", *args, "--out", tmp_path / "never")
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert needle in proc.stderr and not (tmp_path / "never").exists()


@needs_numasim
def test_report_shows_the_diagnostics_digest(chifflet, tmp_path):
    """The report's trace section carries the digest `testbed trace-pair` writes, tables as HTML."""
    from testbed.report.report import trace_section

    d, runs = chifflet
    traces = tmp_path / "exp" / "traces"
    traces.mkdir(parents=True)
    (traces / "compare.md").write_text("| kind |\n|---|\n| gemm |\n")
    tables = [diagnose(read_tasks(t), read_transfers(x), {"chifflet-1": "chifflet"}, run=label)
              for label, (t, x, _) in runs.items()]
    (traces / "diagnostics").mkdir()
    merged = concat_runs(tables)
    write_tables(merged, traces / "diagnostics")
    (traces / "diagnostics" / "digest.md").write_text(digest(merged))
    plot_diagnostics(merged, traces / "diagnostics" / "diagnostics.png")
    section = trace_section("exp", traces, tmp_path)
    assert "| machine | default | A=1 |" in section.markdown and "area bound" in section.markdown
    # compare.md's table and the digest's five (the placement of the CPU dgemms' operands), all as HTML tables
    assert section.html.count("<table") == 6 and "chifflet NUMA 1" in section.html and "chifflet: RAM-&gt;GPU, one socket" in section.html
    assert "|---|" not in section.html
    assert "chifflet gpu1" in section.html
    assert section.html.count("data:image/png;base64,") == 1 and "![diagnostics](" in section.markdown
