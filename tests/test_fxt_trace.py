"""--trace for the real and starpu-simgrid engines: StarPU's FxT trace converted by StarPU's own
starpu_fxt_tool, then read into numasim's tidy task table (testbed/traces/fxt_trace.py), so
`testbed compare-traces` and the Paje export take any engine's trace."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import ROOT
from testbed.cli import main
from testbed.common.paths import LU_REAL, STARPU_NATIVE
from testbed.traces.traces import read_tasks, read_transfers

needs_real = pytest.mark.skipif(not (LU_REAL.exists() and (STARPU_NATIVE / "bin" / "starpu_fxt_tool").exists()),
                                reason="apps/lu or the FxT-enabled native StarPU not built (make build)")


def simulate(*argv: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "testbed", "simulate", *argv], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@needs_real
def test_real_run_trace_is_the_tidy_task_table(tmp_path: Path) -> None:
    trace = tmp_path / "real.csv"
    out = simulate("--engine", "real", "--cluster", "local-1", "--n", "960", "--b", "192", "--trace", str(trace))
    tasks = read_tasks(trace)
    assert tasks["Value"].value_counts().to_dict() == {k: v for k, v in out["tasks_by_kind"].items() if k != "plrnt"}
    assert tasks["Start"].min() == 0 and (tasks["Duration"] > 0).all()
    assert set(tasks["NodeName"]) == {"local-1"} and set(tasks["WorkerType"]) == {"cpu"}
    assert set(tasks["WorkerNuma"]) == {0}  # this machine's one NUMA node, from the worker's bound PU
    assert tasks["ResourceId"].str.fullmatch(r"local-1\.CPU\d+").all()
    # ~ the app's own makespan (it times from the first task's submission to the last task's end)
    assert tasks["End"].max() == pytest.approx(out["makespan_s"], rel=0.5)


@needs_real
def test_real_two_ranks_with_mpi_transfers_and_paje(tmp_path: Path) -> None:
    """Two ranks of this machine (a two-node cluster file of the local description): one FxT file
    per rank, merged by starpu_fxt_tool; MPI messages become the transfer table."""
    cluster = tmp_path / "local-2.yaml"
    text = (ROOT / "platforms" / "clusters" / "local-1.yaml").read_text()
    cluster.write_text(text.replace("name: local-1", "name: local-2").replace("count: 1", "count: 2"))
    trace, transfers, paje = tmp_path / "t.csv", tmp_path / "x.csv", tmp_path / "t.paje"
    # one core per rank under mpirun on two cores: one CPU worker each, as tests/test_lu.py runs them
    out = simulate("--engine", "real", "--cluster", str(cluster), "--n", "1920", "--b", "192", "--starpu-defaults",
                   "--env", "STARPU_NCPU=1",
                   "--trace", str(trace),
                   "--transfers", str(transfers), "--paje", str(paje))
    tasks = read_tasks(trace)
    assert set(tasks["Node"]) == {0, 1} and len(tasks) == out["tasks"]  # LU tasks; generation left out
    # Step, X, Y from apps/lu's iterations and tile coordinates (data.rec, per rank's handles): a
    # getrf writes A(k,k), a trsm a tile of row or column k, a gemm one below and right of it;
    # owner computes: the rank owning A(x, y) on the P x Q grid, (x mod P) Q + (y mod Q).
    k, x, y = (tasks[c].astype(int) for c in ("Step", "X", "Y"))
    kind = tasks["Value"]
    assert ((x == k) & (y == k))[kind == "getrf"].all() and ((x == k) ^ (y == k))[kind == "trsm"].all()
    assert ((x > k) & (y > k))[kind == "gemm"].all() and (tasks["Node"] == (x % out["p"]) * out["q"] + y % out["q"]).all()
    moved = read_transfers(transfers)
    # tiles, and the 48-byte task counters apps/lu gathers on rank 0 at the end
    assert (moved["Bytes"] == 192 * 192 * 8).sum() == len(moved) - 1 and (moved["Src"] != moved["Dst"]).all()
    assert paje.read_text().startswith("%EventDef")


def test_starpu_simgrid_says_why_it_has_no_trace(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "testbed", "simulate", "--engine", "starpu-simgrid", "--cluster",
                           "chifflet-1", "--n", "1920", "--b", "960", "--trace", str(tmp_path / "t.csv")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "PIC libfxt.a" in proc.stderr and not (tmp_path / "t.csv").exists()


@needs_real
def test_compare_traces_real_against_simulated(tmp_path: Path) -> None:
    """The comparison the issue asks for: a real run's trace against numasim's, one table."""
    a, b = tmp_path / "real.csv", tmp_path / "numasim.csv"
    common = ["--cluster", "local-1", "--n", "1920", "--b", "192"]
    simulate("--engine", "real", *common, "--trace", str(a))
    simulate("--engine", "numasim", *common, "--trace", str(b))
    assert a.read_text().splitlines()[0] == b.read_text().splitlines()[0]  # the same columns
    assert main(["compare-traces", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 0
    table = (tmp_path / "cmp" / "compare.md").read_text()
    assert "gemm" in table and "makespan" in table.lower()


def test_events_of_an_fxt_trace_list_every_worker_and_the_lu_tasks_pushes(tmp_path: Path) -> None:
    """starpu_fxt_tool's outputs (written here as StarPU 1.4.10 writes them, two ranks): the events
    hold a Worker row per worker container, the idle one too, and the submissions, pushes and pops
    of the LU tasks (matrix generation left out, as in the task table); trace-starvz lists every worker."""
    from testbed.traces.fxt_trace import write_tables
    from testbed.traces.traces import read_events

    out = tmp_path / "fxt-tool"
    out.mkdir()
    paje = []
    for r in (0, 1):
        paje += [f"7\t0.0\t{r}_t{t}\tT\t{r}_mn{m}\t{r}_T{pu}" for t, m, pu in ((0, 0, 0), (1, 0, 1), (2, 1, 2))]
        paje += [f"7\t0.0\t{r}_w{w}\tW\t{r}_t{t}\t{r}_{name}"
                 for w, t, name in ((0, 0, "CPU0"), (1, 1, "CPU1"), (2, 2, "CUDA0_0"))]
    (out / "paje.trace").write_text("\n".join(paje) + "\n")
    tasks = [("0_1", 0, 0, "dplrnt", 1.0, 2.0, 0), ("0_2", 0, 2, "dgetrf_nopiv", 3.0, 5.0, 1),
             ("1_3", 1, 0, "dgemm", 4.0, 6.0, 0)]
    (out / "tasks.rec").write_text("".join(
        f"JobId: {j}\nMPIRank: {r}\nWorkerId: {w}\nModel: {m}\nName: {m}\nSubmitTime: 0.1\nStartTime: {s}\nEndTime: {e}\n"
        f"MemoryNode: {mn}\nPriority: 0\n\n" for j, r, w, m, s, e, mn in tasks))
    (out / "sched_tasks.rec").write_text("".join(
        f"Type: {t}\nTime: {at}\nPriority: 0\nJobId: {j}\n\n"
        for t, at, j in (("push", 0.5, "0_1"), ("pop", 0.9, "0_1"), ("push", 2.5, "0_2"), ("push", 3.5, "1_3"),
                         ("pop", 2.9, "0_2"), ("pop", 3.9, "1_3"))))
    trace, events = tmp_path / "t.csv", tmp_path / "e.csv"
    assert write_tables(out, ["n0", "n1"], [None, None], trace, None, events) == 2
    ev = read_events(events)
    workers = ev[ev["Type"] == "Worker"]
    assert sorted(workers["Thread"]) == sorted(f"n{r}.{w}" for r in (0, 1) for w in ("CPU0", "CPU1", "CUDA0_0"))
    assert dict(zip(workers["Thread"], workers["MemNode"], strict=True))["n1.CUDA0_0"] == "n1.memnode1"
    submits = ev[ev["Type"] == "Submit"]
    assert list(zip(submits["Rank"], submits["Value"].astype(int), submits["Start"], strict=True)) == [
        (0, 2, pytest.approx(-0.0029)), (1, 3, pytest.approx(-0.0029))]
    pushes = ev[ev["Type"].isin(["Push", "Pop"])]
    # the LU tasks only (not the generation task 0_1), times in s from the first LU task's start (3 ms)
    assert list(zip(pushes["Type"], pushes["Rank"], pushes["Value"].astype(int), strict=True)) == [
        ("Push", 0, 2), ("Push", 1, 3), ("Pop", 0, 2), ("Pop", 1, 3)]
    assert pushes["Start"].tolist() == pytest.approx([-0.0005, 0.0005, -0.0001, 0.0009])
    sv = tmp_path / "sv"
    proc = subprocess.run([sys.executable, "-m", "testbed", "trace-starvz", str(trace), "--b", "96", "--events",
                           str(events), "--out", str(sv)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    entities = (sv / "entities.csv").read_text()
    assert sum(", Worker, Container" in line for line in entities.splitlines()) == 6
    with gzip.open(sv / "paje.variable.csv.gz", "rt") as fh:
        submitted = [line.split(", ") for line in fh if "0_scheduler, Number of Submitted" in line]
    assert [float(v[-1]) for v in submitted] == [1, 0]  # submitted at -2.9 ms (the start), popped at -0.1 ms
