"""`testbed trace-starvz` with a run's transfer log and runtime events, on a small multi-node GPU
run (simulator/tests/data/tiny2.xml: 2 nodes x (2 CPU workers on 2 NUMA nodes + 1 GPU), LU of
10 x 10 tiles): what StarVZ's phase-1 readers expect of each file (schnorr/starvz at commit
7426178, R/phase1.R and R/phase1_parse_csv.R: file names, columns, readr's col_types), and that
the export holds every worker of the run and a non-empty table for each panel StarVZ draws from
them. With StarVZ installed (envs/setup.sh puts it in .deps/R from ../shared/vendor/r; or
STARVZ_R_LIB, an R library holding StarVZ and data.tree), StarVZ itself draws the export
(bench/starvz_check.R): every panel the export's configuration turns on must draw something."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import yaml
from support.traces import DATA

from testbed import ROOT
from testbed.common import paths
from testbed.run.engines.numasim import run_binary

pytestmark = pytest.mark.skipif(not paths.NUMASIM.exists(), reason="numasim not built (make build)")

B = 96

#: each file starvz_phase1 opens: (its reader's col_types in phase1-workflow.sh's column order,
#: separator: pj_dump's ", " or rec2csv's ","); readr's types: d double, i integer, c character
PHASE1 = {
    "paje.worker_state.csv.gz": ("Nature:c ResourceId:c Type:c Start:d End:d Duration:d Depth:d Value:c Size:c "
                                 "Params:c Footprint:c Tag:c JobId:c SubmitOrder:c GFlop:c X:c Y:c Iteration:c "
                                 "Subiteration:c NumaNodes:c", ", "),  # read_worker_csv
    "entities.csv": ("Parent:c Name:c Type:c Nature:c", ", "),  # hl_y_paje_tree
    "rec.tasks.csv.gz": ("Control:c JobId:c SubmitOrder:i SubmitTime:d Handles:c MPIRank:i DependsOn:c Tag:c "
                         "Footprint:c Iteration:i Name:c Model:c Priority:i WorkerId:i MemoryNode:i StartTime:d "
                         "EndTime:d Parameters:c Modes:c Sizes:c", ","),  # tasks_csv_parser
    "dag.csv.gz": ("Dependent:c JobId:c", ","),  # read_dag
    "paje.variable.csv.gz": ("Nature:c ResourceId:c Type:c Start:d End:d Duration:d Value:d", ", "),
    "paje.memory_state.csv.gz": ("Nature:c ResourceId:c Type:c Start:d End:d Duration:d Depth:d Value:c", ", "),
    "paje.comm_state.csv.gz": ("Nature:c ResourceId:c Type:c Start:d End:d Duration:d Depth:d Value:c", ", "),
    "paje.other_state.csv.gz": ("Nature:c ResourceId:c Type:c Start:d End:d Duration:d Depth:d Value:c", ", "),
    "paje.link.csv.gz": ("Nature:c Container:c Type:c Start:d End:d Duration:d Size:i Origin:c Dest:c Key:c Tag:c "
                         "MPIType:c Priority:i Handle:c", ", "),  # read_links
    "paje.events.csv.gz": ("Nature:c Container:c Type:c Start:d Value:c Handle:c Info:i Size:i Tid:c Src:c",
                           ", "),  # events_csv_parser
}


def read_table(path: Path, spec: str, sep: str) -> list[dict]:
    """A phase-1 file as readr reads it (trim_ws = TRUE), each field checked against its col_type:
    empty is NA (any type); d a double; i an integer that fits R's 32 bits."""
    columns = [c.split(":") for c in spec.split()]
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as fh:
        header, *lines = fh.read().splitlines()
    assert header == sep.join(c for c, _ in columns), path.name
    rows = []
    for line in lines:
        fields = [f.strip() for f in line.split(",")]
        assert len(fields) == len(columns), (path.name, line)  # no field holds a comma
        row = {}
        for (name, kind), v in zip(columns, fields, strict=True):
            if v and kind == "d":
                float(v)
            if v and kind == "i":
                assert re.fullmatch(r"-?\d+", v) and abs(int(v)) < 2**31, (path.name, name, v)
            row[name] = v
        rows.append(row)
    return rows


def run(out: Path, events: bool) -> dict:
    desc = {
        "platform": str(DATA / "tiny2.xml"),
        "perfmodels": {"tiny": str(DATA / "tiny_sampling")},
        "workload": {"kind": "lu", "n": 10 * B, "b": B, "distribution": {"kind": "block-cyclic", "p": 1, "q": 2}},
        "env": {"STARPU_SCHED": "dmdas"},
        "seed": 7,
        "variability": True,
        "trace": str(out / "tasks.csv"),
        "transfers": str(out / "transfers.csv"),
    }
    if events:
        desc["events"] = str(out / "events.csv")
    return run_binary(desc)


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """(export directory, tables by file name, the run's summary, the run's files)."""
    d = tmp_path_factory.mktemp("starvz")
    (d / "plain").mkdir()
    summary, plain = run(d, events=True), run(d / "plain", events=False)
    # the events change nothing in the run
    assert summary["makespan_s"] == plain["makespan_s"]
    assert (d / "tasks.csv").read_text() == (d / "plain" / "tasks.csv").read_text()
    assert (d / "transfers.csv").read_text() == (d / "plain" / "transfers.csv").read_text()
    out = d / "sv"
    proc = subprocess.run([sys.executable, "-m", "testbed", "trace-starvz", str(d / "tasks.csv"), "--b", str(B),
                           "--transfers", str(d / "transfers.csv"), "--events", str(d / "events.csv"),
                           "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    tables = {name: read_table(out / name, *PHASE1[name]) for name in PHASE1}
    return out, tables, summary, d


def test_files_and_columns_are_phase_ones(export):
    out, tables, _, _ = export
    assert {p.name for p in out.iterdir()} == {*PHASE1, "config.yaml", ".testbed-files"}
    for name in PHASE1:
        if name not in ("dag.csv.gz", "rec.tasks.csv.gz", "entities.csv"):
            assert tables[name], f"{name} is empty"
    # StarVZ takes a trace for multi-node when the part after the first `_` of the first (sorted)
    # resource names CPU or CUDA (worker states, variables) or mpict (communication thread states)
    for name, pattern in (("paje.worker_state.csv.gz", "CUDA|CPU"), ("paje.variable.csv.gz", "CUDA|CPU"),
                          ("paje.comm_state.csv.gz", "mpict")):
        first = sorted({r["ResourceId"] for r in tables[name]})[0]
        assert re.search(pattern, first.split("_")[1]), (name, first)


def test_every_worker_of_the_run_is_listed(export):
    _, tables, summary, _ = export
    entities = tables["entities.csv"]
    workers = {e["Name"] for e in entities if e["Type"] == "Worker"}
    assert len(workers) == summary["workers"] == 6
    assert Counter(re.sub(r"^\d+_|\d+(_0)?$", "", w) for w in workers) == Counter(
        {"CPU": summary["workers_by_type"]["cpu"], "CUDA": summary["workers_by_type"]["cuda"]})
    for w in workers:
        assert {"Parent": w, "Name": "Worker State", "Type": "Worker State", "Nature": "State"} in entities
    # each worker has its GFlops variable, and a state row (a task, or StarPU's Sleeping) to draw
    variables = tables["paje.variable.csv.gz"]
    assert {v["ResourceId"] for v in variables if v["Type"] == "GFlops"} == workers
    assert {s["ResourceId"] for s in tables["paje.worker_state.csv.gz"]} == workers
    # every resource a table names is a container of the tree (StarVZ joins its Y coordinates on it)
    containers = {e["Name"] for e in entities if e["Nature"] == "Container"}
    for name in ("paje.worker_state.csv.gz", "paje.variable.csv.gz", "paje.memory_state.csv.gz",
                 "paje.comm_state.csv.gz", "paje.other_state.csv.gz"):
        assert {r["ResourceId"] for r in tables[name]} <= containers, name
    for r in tables["paje.link.csv.gz"]:
        assert {r["Container"], r["Origin"], r["Dest"]} <= containers
    assert {r["Container"] for r in tables["paje.events.csv.gz"]} <= containers


def test_communications_match_the_transfer_log(export):
    _, tables, summary, d = export
    links = tables["paje.link.csv.gz"]
    mpi = [r for r in links if r["Type"] == "MPI communication"]
    intra = [r for r in links if r["Type"] == "Intra-node data Fetch"]
    assert len(mpi) == summary["mpi_messages"] > 0
    assert len(mpi) + len(intra) == summary["transfers"]
    assert len({r["Key"] for r in mpi}) == len(mpi) and all(r["Key"].startswith("mpicom_") for r in mpi)
    for r in mpi:  # StarPU-MPI's messages go between the ranks' MPI threads
        assert r["Container"] == "root" and re.fullmatch(r"\d+_mpict", r["Origin"]) and r["Origin"] != r["Dest"]
        assert int(r["Size"]) == B * B * 8
    for r in intra:  # copies between memory managers of one rank
        rank = r["Container"].split("_")[0]
        assert r["Origin"].startswith(f"{rank}_MEMMANAGER") and r["Dest"].startswith(f"{rank}_MEMMANAGER")
        assert float(r["End"]) >= float(r["Start"])
    # a copy into a memory node is its manager's DriverCopy state
    copies = Counter(r["Dest"] for r in intra)
    states = Counter(s["ResourceId"] for s in tables["paje.memory_state.csv.gz"] if s["Value"] == "DriverCopy")
    assert copies == states


def test_memory_managers_threads_and_variables(export):
    _, tables, _, d = export
    memory = Counter(s["Value"] for s in tables["paje.memory_state.csv.gz"])
    assert memory["Allocating"] > 0 and memory["DriverCopy"] > 0
    events = tables["paje.events.csv.gz"]
    pairs = defaultdict(list)
    for e in events:
        pairs[(e["Container"], e["Handle"])].append(e["Type"])
    assert pairs and all(v in (["Allocating Start", "Allocating End"], ["Free Start", "Free End"])
                         for v in pairs.values())
    comm = Counter(s["Value"] for s in tables["paje.comm_state.csv.gz"])
    assert comm["SendSubmitted"] == comm["ReceiveCompleted"] > 0
    assert {s["Value"] for s in tables["paje.worker_state.csv.gz"] if not s["JobId"]} <= {"Sleeping", "Progressing"}

    variables = defaultdict(list)
    for v in tables["paje.variable.csv.gz"]:
        variables[(v["ResourceId"], v["Type"])].append(v)
    tasks = Counter(r["MPIRank"] for r in tables["rec.tasks.csv.gz"])
    for rank, n in tasks.items():
        ready = variables[(f"{rank}_scheduler", "Number of Ready Tasks")]
        submitted = variables[(f"{rank}_scheduler", "Number of Submitted Uncompleted Tasks")]
        assert min(float(v["Value"]) for v in ready) == 0 and max(float(v["Value"]) for v in ready) > 0
        assert float(ready[-1]["Value"]) == 0
        # the rank's tasks, submitted at 0, less those popped at 0 (pj_dump keeps a time's last value)
        values = [float(v["Value"]) for v in submitted]
        assert n - 4 <= values[0] <= n and values[-1] == 0 and values == sorted(values, reverse=True)
        user = [s for s in tables["paje.other_state.csv.gz"] if s["ResourceId"] == f"{rank}_UserThread0"]
        assert sorted((s["Value"], float(s["Start"])) for s in user) == [("Submitting task", 0),
                                                                          ("Waiting all tasks", 0)]
    # the manager of the memory node holding each node's CUDA worker (StarPU numbers it after the RAM)
    parent = {e["Name"]: e["Parent"] for e in tables["entities.csv"] if e["Nature"] == "Container"}
    gpus = {w.split("_")[0]: parent[w].replace("MEMNODE", "MEMMANAGER") for w in parent if "_CUDA" in w}
    assert set(gpus) == set(tasks) and all(m.endswith("MEMMANAGER1") for m in gpus.values())
    for rank in tasks:  # GPU memory used and bandwidths of each node's GPU manager and MPI thread
        gpu = gpus[rank]
        used = [float(v["Value"]) for v in variables[(gpu, "Used (MB)")]]
        assert used[0] == 0 and max(used) > 0 and max(used) <= 10 * 10 * B * B * 8 / 2**20
        for res in (gpu, f"{rank}_mpict"):
            for kind in ("Bandwidth In (MB/s)", "Bandwidth Out (MB/s)"):
                assert max(float(v["Value"]) for v in variables[(res, kind)]) > 0, (res, kind)
    # every variable covers the run without gaps
    for rows in variables.values():
        assert float(rows[0]["Start"]) == 0
        assert all(a["End"] == b["Start"] for a, b in zip(rows, rows[1:], strict=False))


def test_config_turns_off_what_phase1_cannot_feed(export):
    out, *_ = export
    config = yaml.safe_load((out / "config.yaml").read_text())["default"]
    assert config["st"]["tasks"]["active"] is False and config["st"]["cpb_mpi"]["tile_size"] == B
    # the lack of ready tasks aggregates over the variables' step, 1/100 of the run
    assert config["lackready"]["aggregation"] == config["global_agg_step"] < 200


def test_events_refused_by_other_engines(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "testbed", "simulate", "--engine", "starpu-simgrid", "--cluster",
                           "chifflet-1", "--n", "960", "--b", "96", "--events", str(tmp_path / "e.csv")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and "--events" in proc.stderr and not (tmp_path / "e.csv").exists()


def starvz_library() -> tuple[Path | None, str]:
    """The R library holding StarVZ (STARVZ_R_LIB, else envs/setup.sh's .deps/R), or why there is none."""
    if shutil.which("Rscript") is None:
        return None, ("R not installed (no Rscript): envs/setup.sh installs it with StarVZ when "
                      "../shared/vendor/r is beside the repository (TESTBED_STARVZ)")
    lib = Path(os.environ.get("STARVZ_R_LIB") or paths.DEPS / "R")
    if not (lib / "starvz" / "DESCRIPTION").exists() or not (lib / "data.tree" / "DESCRIPTION").exists():
        return None, (f"StarVZ not installed in {lib} (envs/setup.sh installs it from ../shared/vendor/r, "
                      "TESTBED_STARVZ; or STARVZ_R_LIB: an R library with starvz and data.tree)")
    return lib, ""


STARVZ_LIB, NO_STARVZ = starvz_library()
needs_starvz = pytest.mark.skipif(STARVZ_LIB is None, reason=NO_STARVZ)
#: bench/starvz_check.R's names of StarVZ's panels (starvz_plot_list), all turned on by the export's config.yaml
PANELS = ("st", "st_mm", "starpu", "ijk", "lackready", "ready", "submitted", "memory", "mpi", "mpiconc",
          "mpiconcout", "mpistate", "gpu")


def starvz_check(directory: Path) -> tuple[int, dict[str, str], str]:
    """bench/starvz_check.R on an export: (exit status, each panel's verdict, stdout)."""
    proc = subprocess.run(["Rscript", str(ROOT / "bench" / "starvz_check.R"), str(STARVZ_LIB), str(directory)],
                          capture_output=True, text=True, timeout=600)
    assert "panel " in proc.stdout, proc.stderr[-2000:]
    drawn = dict(re.findall(r"^panel (\S+)\s+(content|blank|off|error.*)", proc.stdout, re.M))
    return proc.returncode, {k: v.split(":")[0].split()[0] for k, v in drawn.items()}, proc.stdout


@needs_starvz
def test_starvz_draws_the_export(export):
    out, *_ = export
    rc, drawn, stdout = starvz_check(out)
    assert drawn == dict.fromkeys(PANELS, "content"), stdout
    assert rc == 0, stdout


@needs_starvz
def test_starvz_check_fails_on_a_panel_without_data(export, tmp_path):
    """The same export without the MPI threads' bandwidths: the MPI bandwidth panel draws nothing,
    bench/starvz_check.R says so and exits 1 (the check above can fail)."""
    out, *_ = export
    cut = tmp_path / "sv"
    shutil.copytree(out, cut)
    path = cut / "paje.variable.csv.gz"
    with gzip.open(path, "rt") as fh:
        lines = fh.read().splitlines(keepends=True)
    kept = [line for line in lines if not ("_mpict," in line and "Bandwidth" in line)]
    assert len(kept) < len(lines)
    with gzip.open(path, "wt") as fh:
        fh.write("".join(kept))
    rc, drawn, stdout = starvz_check(cut)
    assert rc == 1, stdout
    assert drawn["mpi"] in ("blank", "error"), stdout
    assert stdout.rstrip().splitlines()[-1].split(":")[-1].split() == [p for p in PANELS if drawn[p] != "content"]
