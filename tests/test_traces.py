"""Trace exports and comparisons on small numasim runs (the tiny two-node platform of
simulator/tests/data: 2 nodes x (4 CPUs on 2 NUMA nodes + 1 GPU), LU of 10 x 10 tiles)."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from support.traces import run_tiny

from testbed import ROOT
from testbed.common import paths

pytestmark = pytest.mark.skipif(not paths.NUMASIM.exists(), reason="numasim not built (make build)")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs of the same case with different seeds: (tasks CSV, transfers CSV, summary)."""
    d = tmp_path_factory.mktemp("runs")
    return run_tiny(d, 7), run_tiny(d, 8)


def run_testbed(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "testbed", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd)


def csv_rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# ------------------------------------------------------------------------------- Paje export

def pj_dump_lines(paje: Path) -> list[list[str]]:
    # -u: the user-defined fields (JobId, Size) too; -l 9: times to the ns, as numasim writes them
    proc = subprocess.run(["pj_dump", "-u", "-l", "9", str(paje)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return [[f.strip() for f in line.split(",")] for line in proc.stdout.splitlines() if line.strip()]


@pytest.mark.skipif(shutil.which("pj_dump") is None,
                    reason="pj_dump not installed (Debian package pajeng, listed in envs/setup.sh)")
def test_pj_dump_reads_the_paje_export(runs, tmp_path):
    (tasks, transfers, _), _ = runs
    paje = tmp_path / "run.paje"
    proc = run_testbed("trace-paje", tasks, "--transfers", transfers, "--out", paje)
    assert proc.returncode == 0, proc.stderr
    dump = pj_dump_lines(paje)

    rows = csv_rows(tasks)
    # pj_dump: State, container, state type, start, end, duration, depth, value[, extra fields]
    states = [r for r in dump if r[0] == "State"]
    assert Counter(s[1] for s in states) == Counter(r["ResourceId"] for r in rows)
    assert Counter(s[7] for s in states) == Counter(r["Value"] for r in rows)
    assert {s[2] for s in states} == {"Task"} and {float(s[6]) for s in states} == {0.0}  # depth: no nesting
    assert sorted(s[8] for s in states) == sorted(r["JobId"] for r in rows)  # the JobId extra field
    by_job = {r["JobId"]: r for r in rows}
    for s in states[:50]:
        r = by_job[s[8]]
        assert float(s[3]) == pytest.approx(float(r["Start"]), abs=1e-9)
        assert float(s[4]) == pytest.approx(float(r["End"]), abs=1e-9)

    # pj_dump: Container, parent, type, start, end, duration, name
    containers = [r for r in dump if r[0] == "Container"]
    assert {(r[1], r[6]) for r in containers if r[2] == "Node"} == {("cluster", "n1"), ("cluster", "n2")}
    workers = {(r[1], r[6]) for r in containers if r[2] == "Worker"}
    assert workers == {(r["ResourceId"].split(".")[0], r["ResourceId"]) for r in rows}

    # one link per transfer, between the memory containers of its ends
    moves = csv_rows(transfers)
    # pj_dump: Link, container, type, start, end, duration, value, from, to, key, Size
    links = [r for r in dump if r[0] == "Link"]
    assert len(links) == len(moves) > 0
    assert Counter((lk[7], lk[8]) for lk in links) == Counter((f"{m['Src']}.mem", f"{m['Dst']}.mem") for m in moves)
    assert {lk[6] for lk in links} == {"intra-node", "network"}
    assert sum(int(lk[10]) for lk in links) == sum(int(m["Bytes"]) for m in moves)


def test_paje_export_bad_input_is_one_line(runs, tmp_path):
    (tasks, _, _), _ = runs
    missing = tmp_path / "nope.csv"
    proc = run_testbed("trace-paje", missing, "--out", tmp_path / "x.paje")
    assert proc.returncode == 2
    assert proc.stderr == f"error: {missing}: task trace: expected an existing file (a CSV file)\n"
    proc = run_testbed("trace-paje", tasks, "--transfers", tasks, "--out", tmp_path / "x.paje")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert f"{tasks}: transfer trace: expected columns Start, End, Bytes, Src, Dst (missing Bytes, Src, Dst)" \
        in proc.stderr
    assert not (tmp_path / "x.paje").exists()


# ------------------------------------------------------------------------------- compare-traces

def test_compare_traces_of_two_seeds(runs, tmp_path):
    (tasks_a, _, sum_a), (tasks_b, _, sum_b) = runs
    out = tmp_path / "cmp"
    proc = run_testbed("compare-traces", tasks_a, tasks_b, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "| kind | worker | NUMA | n A | n B | median A | median B | Δ median |" in proc.stdout
    assert "## Idle fraction per node" in proc.stdout
    assert (out / "compare.md").read_text() == proc.stdout
    for png in ("durations-by-worker.png", "space-time.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = json.loads((out / "compare.json").read_text())

    # the numbers, recomputed from the CSVs by hand
    import numpy as np

    for tag, tasks, summary in (("a", tasks_a, sum_a), ("b", tasks_b, sum_b)):
        rows = csv_rows(tasks)
        end = max(float(r["End"]) for r in rows)
        assert result["makespan"][tag] == pytest.approx(end)
        assert end == pytest.approx(summary["makespan_s"], abs=1e-9)  # the CSV's times are to the ns
        assert result["tasks"][tag] == len(rows) == summary["tasks"]
        groups: dict[tuple, list[float]] = {}
        for r in rows:
            wtype = "cuda" if ".gpu" in r["ResourceId"] else "cpu"  # tiny2.xml: CUDA workers are nX.gpu0
            groups.setdefault((r["Value"], wtype, int(r["WorkerNuma"])), []).append(
                float(r["End"]) - float(r["Start"]))
        got = {(k["kind"], k["worker_type"], k["numa"]): k for k in result["kernels"] if k[f"count_{tag}"]}
        assert set(got) == set(groups)
        for key, durations in groups.items():
            d = np.array(durations)
            k = got[key]
            assert k[f"count_{tag}"] == len(d)
            assert k[f"median_{tag}"] == pytest.approx(np.median(d))
            assert k[f"mean_{tag}"] == pytest.approx(d.mean())
            assert k[f"p10_{tag}"] == pytest.approx(np.quantile(d, 0.1))
            assert k[f"p90_{tag}"] == pytest.approx(np.quantile(d, 0.9))
        for node in {r["ResourceId"].split(".")[0] for r in rows}:
            mine = [r for r in rows if r["ResourceId"].startswith(node + ".")]
            workers = {r["ResourceId"] for r in mine}
            busy = sum(float(r["End"]) - float(r["Start"]) for r in mine)
            idle = next(i for i in result["idle"] if i["node"] == node)
            assert idle[f"workers_{tag}"] == len(workers)
            assert idle[f"idle_{tag}"] == pytest.approx(1 - busy / (len(workers) * end))
    for k in result["kernels"]:
        if k["median_a"] and k["median_b"]:
            assert k["median_rel"] == pytest.approx((k["median_b"] - k["median_a"]) / k["median_a"])
    assert result["makespan"]["a"] != result["makespan"]["b"]  # the seeds differ
    gemm = [k for k in result["kernels"] if k["kind"] == "gemm"]
    assert {k["worker_type"] for k in gemm} == {"cpu", "cuda"} and {k["numa"] for k in gemm} == {0, 1}


def test_compare_traces_bad_input_is_one_line(runs, tmp_path):
    (tasks, transfers, _), _ = runs
    missing = tmp_path / "missing.csv"
    proc = run_testbed("compare-traces", tasks, missing)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"error: {missing}: task trace: expected an existing file (a CSV file)\n"

    proc = run_testbed("compare-traces", transfers, tasks, "--out", tmp_path / "cmp")  # a transfer CSV as A
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"error: {transfers}: task trace: expected columns ResourceId, Start, End, Value, Node, "
                           "WorkerNuma (missing ResourceId, Value, Node, WorkerNuma); a trace written by "
                           "`testbed simulate --engine numasim --trace`\n")
    assert not (tmp_path / "cmp").exists()

    bad = tmp_path / "bad.csv"
    lines = tasks.read_text().splitlines()
    first = lines[1].split(",")
    first[2] = "soon"  # End
    bad.write_text("\n".join([lines[0], ",".join(first), *lines[2:]]) + "\n")
    proc = run_testbed("compare-traces", tasks, bad)
    assert proc.returncode == 2
    assert proc.stderr == f"error: {bad}: task trace line 2 column End: expected a number, got 'soon'\n"


# ------------------------------------------------------------------------------- simulate --paje

@pytest.mark.skipif(shutil.which("pj_dump") is None,
                    reason="pj_dump not installed (Debian package pajeng, listed in envs/setup.sh)")
def test_simulate_writes_paje(tmp_path):
    case = ["simulate", "--engine", "numasim", "--cluster", "chifflet-1", "--n", "4800", "--b", "960"]
    proc = run_testbed(*case, "--paje", "run.paje", cwd=tmp_path)  # CSVs in a temporary directory
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    states = [r for r in pj_dump_lines(tmp_path / "run.paje") if r[0] == "State"]
    assert len(states) == summary["tasks"]
    # no CSV left behind; the registry lists run.paje as the testbed's (testbed/common/atomic.py)
    assert sorted(tmp_path.iterdir()) == [tmp_path / ".testbed-files", tmp_path / "run.paje"]

    proc = run_testbed(*case, "--seed", "2", "--trace", "t.csv", "--paje", "run2.paje", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = csv_rows(tmp_path / "t.csv")  # the user's CSV is kept and is what was exported
    states = [r for r in pj_dump_lines(tmp_path / "run2.paje") if r[0] == "State"]
    assert Counter(s[1] for s in states) == Counter(r["ResourceId"] for r in rows)

    # starpu-simgrid has no trace (no FxT in that build): refused before running, nothing written
    proc = run_testbed("simulate", "--engine", "starpu-simgrid", "--cluster", "chifflet-1", "--n", "4800", "--b",
                       "960", "--paje", "x.paje", cwd=tmp_path)
    assert proc.returncode == 2 and "--trace/--transfers" in proc.stderr and not (tmp_path / "x.paje").exists()


# ------------------------------------------------------------------------------- StarVZ phase 1
# What StarVZ's phase-1 readers expect of each file (schnorr/starvz commit 7426178, R/phase1.R and
# R/phase1_parse_csv.R): readr's read_csv(trim_ws = TRUE) with the col_types below, matched by name;
# the files under the names starvz_phase1 opens. Checked here without R; CHANGELOG.md's benchmark history records
# StarVZ itself reading them.

#: read_worker_csv (paje.worker_state.csv.gz), in the order of phase1-workflow.sh's header
STARVZ_WORKER_STATE = ["Nature", "ResourceId", "Type", "Start", "End", "Duration", "Depth", "Value", "Size",
                       "Params", "Footprint", "Tag", "JobId", "SubmitOrder", "GFlop", "X", "Y", "Iteration",
                       "Subiteration", "NumaNodes"]
#: hl_y_paje_tree (entities.csv)
STARVZ_ENTITIES = ["Parent", "Name", "Type", "Nature"]
#: tasks_csv_parser (rec.tasks.csv.gz)
STARVZ_TASKS = ["Control", "JobId", "SubmitOrder", "SubmitTime", "Handles", "MPIRank", "DependsOn", "Tag",
                "Footprint", "Iteration", "Name", "Model", "Priority", "WorkerId", "MemoryNode", "StartTime",
                "EndTime", "Parameters", "Modes", "Sizes"]
#: read_dag (dag.csv.gz), phase1-workflow.sh's header
STARVZ_DAG = ["Dependent", "JobId"]
#: read_vars_set_new_zero (paje.variable.csv.gz)
STARVZ_VARIABLE = ["Nature", "ResourceId", "Type", "Start", "End", "Duration", "Value"]
#: read_memory_state_csv, read_comm_state_csv, read_other_state_csv
STARVZ_STATE = ["Nature", "ResourceId", "Type", "Start", "End", "Duration", "Depth", "Value"]
#: StarPU's own states, which StarVZ does not count as application tasks (R/phase2_applications.R)
STARPU_STATES = {"Callback", "FetchingInput", "Idle", "Initializing", "Overhead", "PushingOutput", "Scheduling",
                 "Submitting task", "Progressing", "Sleeping", "Submiting task", "Waiting all tasks",
                 "Building task", "Deinitializing", "execute_on_all_wrapper", "HandleRequests", "Executing"}


def starvz_table(path: Path, columns: list[str], sep: str) -> list[dict]:
    """A phase-1 file as readr reads it: gzip when named .gz, header = `columns` joined by `sep`
    (pj_dump's ", " or rec2csv's ","), fields trimmed (trim_ws = TRUE)."""
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as fh:
        text = fh.read()
    header, *lines = text.splitlines()
    assert header == sep.join(columns), path.name
    assert all(line.count(",") == len(columns) - 1 for line in lines), path.name  # no field holds a comma
    return [dict(zip(columns, (f.strip() for f in line.split(",")), strict=True)) for line in lines]


def is_double(v: str) -> bool:  # readr col_double
    try:
        float(v)
    except ValueError:
        return False
    return True


def test_starvz_phase1_export(runs, tmp_path):
    import re

    from testbed.starpu.lu_codelets import BY_KIND

    (tasks, _, _), _ = runs
    b = 96
    out = tmp_path / "starvz"
    proc = run_testbed("trace-starvz", tasks, "--b", b, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in out.iterdir()} == {
        ".testbed-files", "paje.worker_state.csv.gz", "entities.csv", "rec.tasks.csv.gz", "dag.csv.gz",
        "paje.variable.csv.gz", "paje.memory_state.csv.gz", "paje.comm_state.csv.gz", "paje.other_state.csv.gz",
        "paje.link.csv.gz", "paje.events.csv.gz", "config.yaml"}
    states = starvz_table(out / "paje.worker_state.csv.gz", STARVZ_WORKER_STATE, ", ")
    rows = csv_rows(tasks)
    assert len(states) == len(rows)

    name = {}
    for r in rows:
        local = r["ResourceId"].split(".")[1]
        name[r["ResourceId"]] = (f"{r['Node']}_CUDA{local[3:]}_0" if local.startswith("gpu")
                                 else f"{r['Node']}_CPU{local[3:]}")
    assert Counter(s["ResourceId"] for s in states) == Counter(name[r["ResourceId"]] for r in rows)
    # StarVZ: multi-node trace when the part after the first `_` names CUDA or CPU; node = an integer
    assert all(re.fullmatch(r"\d+_(CPU\d+|CUDA\d+_0)", s["ResourceId"]) for s in states)
    codelet = {"getrf": "dgetrf_nopiv", "trsm": "dtrsm", "gemm": "dgemm"}
    by_job = {f"{r['Node']}_{r['JobId']}": r for r in rows}
    assert len(by_job) == len(rows)
    nt = 960 // b
    for s in states:
        r = by_job[s["JobId"]]  # every state is an application task: JobId set ...
        assert s["Value"] == codelet[r["Value"]] and s["Value"] not in STARPU_STATES  # ... not a StarPU state
        assert (s["Nature"], s["Type"], float(s["Depth"])) == ("State", "Worker State", 0.0)
        assert all(is_double(s[c]) for c in ("Start", "End", "Duration", "GFlop"))
        assert float(s["Start"]) == pytest.approx(float(r["Start"]) * 1e3, abs=1e-5)  # ms
        assert float(s["End"]) == pytest.approx(float(r["End"]) * 1e3, abs=1e-5)
        # the panels' columns: the tile written (X row, Y column), step k, flops of the kernel at b
        c = BY_KIND[r["Value"]]
        assert (int(s["X"]), int(s["Y"]), int(s["Iteration"]), int(s["Subiteration"])) == (
            int(r["X"]), int(r["Y"]), int(r["Step"]), -1)
        assert 0 <= int(s["X"]) < nt and 0 <= int(s["Y"]) < nt
        assert float(s["GFlop"]) == pytest.approx({"getrf": 2 * b**3 / 3, "trsm": b**3, "gemm": 2 * b**3}[c.kind]
                                                  / 1e9, rel=1e-3)
        assert int(s["Size"]) == c.buffers * b * b * 8 and s["Params"] == "_".join([f"M{b}x{b}x8"] * c.buffers)
        assert re.fullmatch(r"[0-9a-f]{8}", s["Footprint"]) and s["SubmitOrder"] == s["JobId"]
    # the kernels' tiles: getrf on the diagonal, trsm in step k's row or column, gemm below and right of k
    for s in states:
        x, y, k = int(s["X"]), int(s["Y"]), int(s["Iteration"])
        assert {"dgetrf_nopiv": x == y == k, "dtrsm": (x == k) != (y == k) and min(x, y) == k,
                "dgemm": x > k and y > k}[s["Value"]], s

    records = starvz_table(out / "rec.tasks.csv.gz", STARVZ_TASKS, ",")
    assert {r["JobId"] for r in records} == set(by_job)
    for r in records:
        # the parser splits Handles, Modes and Sizes together (tidyr unnest): as many of each
        handles, modes, sizes = r["Handles"].split(" "), r["Modes"].split(" "), r["Sizes"].split(" ")
        assert len(handles) == len(modes) == len(sizes) == BY_KIND[by_job[r["JobId"]]["Value"]].buffers
        assert modes[-1] == "RW" and set(modes[:-1]) <= {"R"} and all(int(z) == b * b * 8 for z in sizes)
        assert int(r["SubmitOrder"]) == int(by_job[r["JobId"]]["JobId"]) and int(r["MPIRank"]) >= 0
        assert is_double(r["StartTime"]) and is_double(r["EndTime"]) and int(r["Iteration"]) >= 0

    # the DAG: edges between the trace's tasks, each successor started after its predecessor ended,
    # and the in-degrees of Chameleon's LU (a task waits for the last writer of each tile it accesses)
    dag = starvz_table(out / "dag.csv.gz", STARVZ_DAG, ",")
    assert dag == sorted(dag, key=lambda e: (e["Dependent"], e["JobId"]))
    preds: dict[str, set] = {j: set() for j in by_job}
    for e in dag:
        assert float(by_job[e["JobId"]]["Start"]) >= float(by_job[e["Dependent"]]["End"]) - 1e-9, e
        preds[e["JobId"]].add(e["Dependent"])
    for job, r in by_job.items():
        k, first = int(r["Step"]), int(r["Step"]) == 0
        assert len(preds[job]) == {"getrf": 0 if first else 1, "trsm": 1 if first else 2,
                                   "gemm": 2 if first else 3}[r["Value"]], (job, r["Value"], k)
    assert {r["JobId"]: set(r["DependsOn"].split()) for r in records} == preds

    # each worker's GFlops variable covers the run, the task's GFlop / duration while it runs
    variables = starvz_table(out / "paje.variable.csv.gz", STARVZ_VARIABLE, ", ")
    assert {v["ResourceId"] for v in variables} == set(name.values()) and {v["Type"] for v in variables} == {"GFlops"}
    makespan = max(float(r["End"]) for r in rows) * 1e3
    for worker in set(name.values()):
        mine = [v for v in variables if v["ResourceId"] == worker]
        assert float(mine[0]["Start"]) == 0 and float(mine[-1]["End"]) == pytest.approx(makespan, abs=1e-5)
        assert all(float(a["End"]) == float(c["Start"]) for a, c in zip(mine, mine[1:], strict=False))
        busy = sum(float(v["Duration"]) * float(v["Value"]) for v in mine) / 1e3  # GFlop
        ran = [BY_KIND[r["Value"]].flop_count(b) / 1e9 for r in rows if name[r["ResourceId"]] == worker]
        assert busy == pytest.approx(sum(ran), rel=1e-4)
    for state_file in ("paje.memory_state.csv.gz", "paje.comm_state.csv.gz", "paje.other_state.csv.gz"):
        assert starvz_table(out / state_file, STARVZ_STATE, ", ") == []

    entities = starvz_table(out / "entities.csv", STARVZ_ENTITIES, ", ")
    parent = {e["Name"]: e["Parent"] for e in entities if e["Nature"] == "Container"}
    for worker in set(name.values()):
        assert {"Parent": worker, "Name": "Worker State", "Type": "Worker State", "Nature": "State"} in entities
        chain, node = [], worker
        while node in parent and node != "root":
            node = parent[node]
            chain.append(node)
        assert chain[-1] == "root" and chain[-2] == f"{worker.split('_')[0]}_program"


def test_starvz_export_of_a_trace_without_tiles(tmp_path):
    """A trace without X, Y, Step (the `real` engine's, from FxT): the files still load, X, Y and the
    DAG empty, a warning on stderr."""
    tasks = tmp_path / "t.csv"
    tasks.write_text("ResourceId,Start,End,Value,Node,WorkerNuma,WorkerMemNode,JobId\n"
                     "n0.CPU0,0.0,0.1,getrf,0,0,n0.memnode0,1\nn0.CUDA0_0,0.1,0.3,gemm,0,0,n0.memnode1,2\n")
    proc = run_testbed("trace-starvz", tasks, "--b", 96, "--out", tmp_path / "sv")
    assert proc.returncode == 0, proc.stderr
    assert "no X, Y, Step columns" in proc.stderr
    states = starvz_table(tmp_path / "sv" / "paje.worker_state.csv.gz", STARVZ_WORKER_STATE, ", ")
    assert [(s["ResourceId"], s["X"], s["Y"], s["Iteration"]) for s in states] == [
        ("0_CPU0", "", "", ""), ("0_CUDA0_0", "", "", "")]
    assert starvz_table(tmp_path / "sv" / "dag.csv.gz", STARVZ_DAG, ",") == []
    records = starvz_table(tmp_path / "sv" / "rec.tasks.csv.gz", STARVZ_TASKS, ",")
    assert [(r["Handles"], r["Modes"], r["Sizes"]) for r in records] == [("", "", "")] * 2


def test_starvz_export_refuses_an_unknown_kernel(tmp_path):
    tasks = tmp_path / "t.csv"
    tasks.write_text("ResourceId,Start,End,Value,Node,WorkerNuma\nn0.cpu0,0.0,0.1,potrf,0,0\n")
    proc = run_testbed("trace-starvz", tasks, "--b", 96, "--out", tmp_path / "sv")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "potrf" in proc.stderr
    assert not (tmp_path / "sv").exists()


def test_outliers_as_starvz_defines_them():
    """Q3 + 1.5 IQR with R's default quantiles (type 7, numpy's default): StarVZ's outlier_definition."""
    import numpy as np

    from testbed.traces.compare_traces import upper_outliers

    d = np.array([1.0, 2.0, 3.0, 4.0, 7.0, 7.01])  # Q1 = 2.25, Q3 = 6.25: threshold 12.25
    assert not upper_outliers(d).any()
    d = np.array([1.0, 2.0, 3.0, 4.0, 100.0])  # Q1 = 2, Q3 = 4: threshold 7
    assert upper_outliers(d).tolist() == [False, False, False, False, True]


def test_trace_pair_bad_best_is_one_line(tmp_path: Path) -> None:
    design = tmp_path / "design.csv"
    run = subprocess.run([sys.executable, "-m", "testbed", "design", "--config", str(ROOT / "config" / "config.yaml"),
                          "--experiment", "lille21", "--out", str(design)], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    best = tmp_path / "best.json"
    best.write_text('{"best": {}}')
    out = subprocess.run([sys.executable, "-m", "testbed", "trace-pair", "--design", str(design), "--best", str(best),
                          "--out", str(tmp_path / "traces")], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "best.levels" in out.stderr and not (tmp_path / "traces").exists()
    out = subprocess.run([sys.executable, "-m", "testbed", "trace-pair", "--design", str(design), "--best", str(best),
                          "--out", str(tmp_path / "traces"), "--bins", "0"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "--bins" in out.stderr and "[1, 100000]" in out.stderr and not (tmp_path / "traces").exists()
    best.write_text('{"best": {"levels": {}}}')
    out = subprocess.run([sys.executable, "-m", "testbed", "trace-pair", "--design", str(design), "--best", str(best),
                          "--out", str(tmp_path / "traces"), "--extra", "Z=1"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "--extra" in out.stderr and "'Z'" in out.stderr and not (tmp_path / "traces").exists()


def test_trace_pair_reruns_default_and_best_from_the_design(tmp_path: Path) -> None:
    """The design's first all-default row and first best row, rerun with traces and compared."""
    spec = {"name": "mini", "cluster": "chifflet-1", "engine": "numasim",
            "workload": {"n": 9600, "b": 960, "distribution": {"kind": "block-cyclic"}},
            "factors": {"A": [-1, 1], "E": [-1, 1]}, "design": {"type": "full", "generators": []},
            "repetitions": 2, "seed": 5, "randomize": True, "batches": 1, "env": {}, "variability": True}
    design = tmp_path / "design.csv"
    assert subprocess.run([sys.executable, "-m", "testbed", "design", "--spec", json.dumps(spec), "--out",
                           str(design)], cwd=ROOT, capture_output=True).returncode == 0
    best = tmp_path / "best.json"
    best.write_text(json.dumps({"best": {"levels": {"A": 1, "E": -1}}}))
    out = subprocess.run([sys.executable, "-m", "testbed", "trace-pair", "--design", str(design), "--best", str(best),
                          "--extra", "E=1", "--out", str(tmp_path / "traces")], cwd=ROOT, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert "default (A- E-" in out.stderr and "best (A+ E-" in out.stderr and "default, E=+1 (A- E+" in out.stderr
    assert {p.name for p in (tmp_path / "traces").iterdir()} == {".testbed-files",
        "compare.md", "compare.json", "durations-by-worker.png", "space-time.png", "utilisation.csv",
        "utilisation.png", "diagnostics", "durations-by-worker.pdf", "space-time.pdf", "utilisation.pdf"}
    # the diagnostics of the three runs, one `run` column (testbed/traces/diagnostics.py)
    diag = tmp_path / "traces" / "diagnostics"
    kernels = pd.read_csv(diag / "kernels.csv")
    assert set(kernels["run"]) == {"all default", "best", "default, E=+1"}
    bound = pd.read_csv(diag / "bound_summary.csv")
    assert (bound["makespan_over_bound_trace"] >= 1).all() and set(bound["machine"]) == {"chifflet"}
    assert "default, E=+1" in (diag / "digest.md").read_text()
    usage = pd.read_csv(tmp_path / "traces" / "utilisation.csv")
    assert set(usage["run"]) == {"all default", "best"} and (usage.groupby("run")["time_s"].nunique() == 100).all()
    busy = usage[usage["metric"] == "busy_fraction"]
    assert set(busy["resource"]) == {"cpu", "gpu"} and busy["value"].between(0, 1 + 1e-9).all()
    assert busy["value"].max() > 0.5  # chifflet-1's workers are busy most of the LU
    assert set(usage.loc[usage["metric"] == "bytes_per_s", "resource"]) >= {"PCIe (GPU)", "memory bus"}
    doc = json.loads((tmp_path / "traces" / "compare.json").read_text())
    assert doc["a"].startswith("all default (seed ") and doc["b"].startswith("best: A+ E- (seed ")
