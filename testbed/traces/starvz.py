"""`testbed trace-starvz TASKS --out DIR`: a numasim task trace as StarVZ phase-1 input.

StarVZ (github.com/schnorr/starvz) phase 1 (`starvz_phase1(directory)`) reads, in a
directory, the CSVs that `pj_dump` makes of a StarPU FxT trace. The application panels need
two of them; their columns are those of StarVZ's readers (R/phase1_parse_csv.R
`read_worker_csv`, R/phase1.R `hl_y_paje_tree`, read at commit 7426178):

* `paje.worker_state.csv.gz`: `Nature, ResourceId, Type, Start, End, Duration, Depth, Value,
  Size, Params, Footprint, Tag, JobId, SubmitOrder, GFlop, X, Y, Iteration, Subiteration,
  NumaNodes`. StarPU's conventions, which StarVZ relies on: times in milliseconds; workers
  named `<rank>_CPU<k>` / `<rank>_CUDA<d>_0` (StarVZ splits the rank off at the first `_` and
  takes the resource type from the letters); an application task is a state whose Value is no
  StarPU runtime state and whose JobId is set; its Value is the codelet's name (Chameleon's
  `dgemm`, ... as the perf models name them).
* `entities.csv` (`Parent, Name, Type, Nature`): the container tree StarVZ computes its Y
  coordinates from; each worker container has a `Worker State` state child, as in StarPU's.

What numasim's trace lacks is left empty (StarVZ reads NA): tile coordinates X, Y (the trace
has the step k only, written as Iteration), Size/Params/Footprint, GFlop. NumaNodes carries
the NUMA node of each operand's pages as read (`OperandPages`).
"""

from __future__ import annotations

import argparse
import gzip
import io
import logging
from pathlib import Path

from testbed.common.atomic import atomic_members
from testbed.common.outputs import Out, check_distinct
from testbed.starpu.lu_codelets import KIND_SYMBOL
from testbed.traces.traces import read_tasks, worker_sort_key

log = logging.getLogger(__name__)

WORKER_STATE_COLUMNS = ["Nature", "ResourceId", "Type", "Start", "End", "Duration", "Depth", "Value", "Size",
                        "Params", "Footprint", "Tag", "JobId", "SubmitOrder", "GFlop", "X", "Y", "Iteration",
                        "Subiteration", "NumaNodes"]
ENTITY_COLUMNS = ["Parent", "Name", "Type", "Nature"]
OUT_FILES = ["paje.worker_state.csv.gz", "entities.csv"]

#: numasim's task kinds -> the codelet names of Chameleon's LU (the perf-model symbols)


def starpu_worker_name(resource: str, rank: int) -> str:
    """`chifflet-1.cpu3` -> `0_CPU3`, `chifflet-1.gpu1` -> `0_CUDA1_0` (StarPU's names in a
    StarPU-MPI trace: rank, then the worker)."""
    local = resource.split(".", 1)[-1]
    digits = "".join(c for c in local if c.isdigit()) or "0"
    if local.startswith("gpu"):
        return f"{rank}_CUDA{int(digits)}_0"
    return f"{rank}_CPU{int(digits)}"


def _csv(rows: list[list], columns: list[str]) -> str:
    # pj_dump's layout (", " between fields), which StarVZ reads with trim_ws = TRUE
    out = io.StringIO()
    out.write(", ".join(columns) + "\n")
    for r in rows:
        out.write(", ".join("" if v is None else str(v) for v in r) + "\n")
    return out.getvalue()


def worker_state_rows(tasks) -> list[list]:
    rows = []
    ordered = tasks.sort_values(["Start", "End"], kind="stable")
    pages = ordered["OperandPages"] if "OperandPages" in ordered.columns else [None] * len(ordered)
    step = ordered["Step"] if "Step" in ordered.columns else [None] * len(ordered)
    job = ordered["JobId"] if "JobId" in ordered.columns else ordered.index
    for res, node, s, e, kind, j, k, p in zip(ordered["ResourceId"], ordered["Node"], ordered["Start"],
                                              ordered["End"], ordered["Value"], job, step, pages, strict=False):
        ms_s, ms_e = s * 1e3, e * 1e3
        job_id = f"{int(node)}_{j}"  # StarPU-MPI's JobId: rank, then the job's number
        rows.append(["State", starpu_worker_name(res, int(node)), "Worker State", f"{ms_s:.6f}", f"{ms_e:.6f}",
                     f"{ms_e - ms_s:.6f}", "0.000000", KIND_SYMBOL.get(kind, kind), None, None, None, None,
                     job_id, job_id, None, None, None, None if k is None else int(k), -1,
                     None if p is None else str(p).replace(",", " ")])
    return rows


def entity_rows(tasks) -> list[list]:
    """StarPU's container tree, reduced to what StarVZ's Y coordinates use: MPI Program >
    per rank Program > Memory Node > Worker > its `Worker State`."""
    rows = [["0", "0", "0", "Container"], ["0", "root", "MPI Program", "Container"]]
    workers = tasks.groupby("ResourceId")[["Node", "WorkerMemNode"]].first() if "WorkerMemNode" in tasks.columns \
        else tasks.groupby("ResourceId")[["Node"]].first().assign(WorkerMemNode=lambda d: d.index)
    for rank in sorted({int(n) for n in workers["Node"]}):
        program = f"{rank}_program"
        rows.append(["root", program, "Program", "Container"])
        mine = workers[workers["Node"] == rank]
        # memory nodes numbered as StarPU does: the RAM (NUMA) nodes first, then the GPUs
        mems = sorted(set(mine["WorkerMemNode"]),
                      key=lambda m: (".gpu" in m, worker_sort_key(m)))
        for i, mem in enumerate(mems):
            memnode = f"{rank}_MEMNODE{i}"
            rows.append([program, memnode, "Memory Node", "Container"])
            for res in sorted(mine.index[mine["WorkerMemNode"] == mem], key=worker_sort_key):
                name = starpu_worker_name(res, rank)
                rows += [[memnode, name, "Worker", "Container"], [name, "Worker State", "Worker State", "State"]]
    return rows


def export_starvz(tasks_csv: str | Path, out: str | Path) -> Path:
    """Writes StarVZ's phase-1 application inputs for a numasim trace into directory `out`."""
    tasks = read_tasks(tasks_csv)
    with atomic_members(out, OUT_FILES) as tmp:
        # mtime=0: the same trace gives the same bytes
        with gzip.GzipFile(tmp / "paje.worker_state.csv.gz", "wb", mtime=0) as fh:
            fh.write(_csv(worker_state_rows(tasks), WORKER_STATE_COLUMNS).encode())
        (tmp / "entities.csv").write_text(_csv(entity_rows(tasks), ENTITY_COLUMNS))
    return Path(out)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("tasks", help="task trace CSV (testbed simulate --engine numasim --trace)")
    p.add_argument("--out", required=True,
                   help="directory for paje.worker_state.csv.gz and entities.csv (other files left alone)")


def run(args: argparse.Namespace) -> int:
    check_distinct([("", args.tasks)], [Out("--out", args.out, "members", tuple(OUT_FILES))])
    log.info(f"wrote {export_starvz(args.tasks, args.out)}")
    return 0
