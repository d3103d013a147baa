"""`testbed trace-starvz TASKS --b B [--transfers T] [--events E] --out DIR`: a run as StarVZ phase-1 input.

StarVZ (github.com/schnorr/starvz) phase 1 (`starvz_phase1(directory)`, R/phase1.R) reads, in
a directory, the files StarVZ's `phase1-workflow.sh` makes of a StarPU FxT trace (`pj_dump` of
the Paje trace, `rec2csv` of tasks.rec, the edges of dag.dot). This module writes the ones the
application and runtime panels read, with the columns of StarVZ's readers (read at commit 7426178):

* `paje.worker_state.csv.gz` (R/phase1_parse_csv.R `read_worker_csv`): `Nature, ResourceId,
  Type, Start, End, Duration, Depth, Value, Size, Params, Footprint, Tag, JobId, SubmitOrder,
  GFlop, X, Y, Iteration, Subiteration, NumaNodes`, as StarPU's FxT tool fills them
  (src/debug/traces/starpu_fxt.c, handle_codelet_details / worker_set_detailed_state): times in
  ms; workers `<rank>_CPU<k>` / `<rank>_CUDA<d>_0` (StarVZ splits the rank off at the first
  `_`); Value = the codelet's name (Chameleon's `dgemm`, ...), which StarVZ takes for an
  application task as it is no StarPU state; Size = bytes of all buffers; Params = each
  buffer's StarPU matrix description `M<nx>x<ny>x<elemsize>` (matrix_interface.c, describe)
  joined by `_`; Footprint `%08lx`; GFlop = the task's flop count / 1e9 (LU_CODELETS: LAPACK
  Working Note 41's counts, as Chameleon's include/chameleon/flops.h writes them, for b x b
  tiles: gemm 2b^3, trsm b^3 (n m^2 with m = n = b), getrf_nopiv its leading term 2b^3/3, the
  whole count 2b^3/3 - b^2/2 + 5b/6 being 0.8 % less at b = 96); X, Y =
  row and column of the tile the task writes (numasim's X, Y; Chameleon sets a tile handle's
  coordinates to (m, n), StarPU reports those of the first written handle); Iteration = the
  step k (Chameleon's RUNTIME_iteration_push(k)); Subiteration -1 (never pushed).
* `entities.csv` (R/phase1.R `hl_y_paje_tree`): `Parent, Name, Type, Nature`, the container
  tree StarVZ computes its Y coordinates from (testbed/traces/starvz_runtime.py): every worker of
  the run, the idle ones too, when the run's events are given (`--events`); else the workers that
  ran a task.
* `rec.tasks.csv.gz` (R/phase1_parse_csv.R `tasks_csv_parser`): one row per task, StarPU's
  tasks.rec fields (starpu_fxt.c, task_dump): JobId, SubmitOrder, Handles / Modes / Sizes (one
  space-separated entry per buffer, the parser splits them together), MPIRank, DependsOn, Name,
  Model, Priority, MemoryNode, StartTime, EndTime (ms), Footprint, Parameters, Iteration.
* `dag.csv.gz` (R/phase1_parse_csv.R `read_dag`): `Dependent,JobId`, one line per edge
  `predecessor,successor`, as phase1-workflow.sh turns dag.dot's `"task_A"->"task_B"` lines
  (StarPU's starpu_fxt_dag.c) into `A,B`, sorted.
* `paje.variable.csv.gz` (`read_vars_set_new_zero`, which `starvz_phase1` requires non-empty):
  `Nature, ResourceId, Type, Start, End, Duration, Value`, each worker's `GFlops` variable as
  StarPU's FxT tool sets it (starpu_fxt.c, handle_end_codelet_body: the task's GFlop / its
  duration in s from its start, 0 from the end of the previous task if there is a gap; 0 from
  the trace's start; 0 all along for a worker that ran no task): pj_dump's intervals between
  successive values, the last to the end of the run.
* With the run's transfer log (`--transfers`) and runtime events (`--events`, numasim's run
  description key `events`): the communications (`paje.link.csv.gz`), the memory managers' states
  and events (`paje.memory_state.csv.gz`, `paje.events.csv.gz`), the MPI threads' states
  (`paje.comm_state.csv.gz`), the main thread's (`paje.other_state.csv.gz`), the workers' StarPU
  states beside their tasks, and the variables StarVZ plots (ready and submitted tasks, GPU memory
  used, bandwidths): testbed/traces/starvz_runtime.py says how each comes from numasim's outputs.
  Without them these files hold the header only (`starvz_phase1` reads the state files
  unconditionally and takes an empty one for none).

The DAG is that of the trace's tasks: each task reads and writes the tiles its kernel accesses
(Chameleon's LU: getrf RW A(k,k); trsm R A(k,k), RW its tile; gemm R A(m,k), R A(k,n), RW
A(m,n)) and depends on the last writer of each tile (RAW, WAW) and on the readers since that
write (WAR), in submission order (JobId): StarPU's implicit data dependencies
(src/core/dependencies/implicit_data_deps.c), as numasim builds them (simulator/src/lu_dag.cpp).
StarPU-MPI's transfers between ranks are not tasks: a task reading another rank's tile depends
on its writer directly. A trace without X, Y (the `real` engine's, from FxT: apps/lu sets no
tile coordinates) gets empty X, Y, Iteration, DependsOn and a DAG file with the header only.
WorkerId, SubmitTime and Tag stay empty (the tidy table lacks them); StarVZ reads NA.

StarVZ's sample configuration (inst/extdata/config.yaml) turns on `st.tasks` (the dependencies of
the tasks it lists, `1_308`), which reads the table `Gaps`; `starvz_phase1` never writes one (R/phase1.R:
`data$Gaps <- NULL # gaps(data)`), for a StarPU FxT trace neither, and `panel_st_raw` then fails on
`nrow(NULL) > 0`. The export writes `config.yaml` beside the tables (which `starvz_phase1` and
`starvz_read` read when no configuration is given): StarVZ's defaults (R/phase2_config.R
starvz_default_config) with `st.tasks` off, `st.cpb_mpi.tile_size` the tile size, and the panels
the export feeds turned on (`PANELS`, the memory states).
"""

from __future__ import annotations

import argparse
import gzip
import io
import logging
import math
from pathlib import Path

from testbed.common.atomic import atomic_members
from testbed.common.errors import InputError
from testbed.common.outputs import Out, check_distinct
from testbed.starpu.lu_codelets import BY_KIND, BY_SYMBOL, Codelet
from testbed.starpu.perfmodel_files import square_tiles_footprint
from testbed.traces.starvz_runtime import (
    LINK_COLUMNS,
    PAJE_EVENT_COLUMNS,
    STATE_COLUMNS,
    Layout,
    build_layout,
    comm_state_rows,
    entity_rows,
    link_rows,
    memory_event_rows,
    memory_state_rows,
    other_state_rows,
    runtime_variable_rows,
    starpu_worker_name,
    worker_runtime_rows,
)
from testbed.traces.traces import read_events, read_tasks, read_transfers, worker_sort_key

log = logging.getLogger(__name__)

#: read_worker_csv's columns, in the order of StarPU's pj_dump output (phase1-workflow.sh's header)
WORKER_STATE_COLUMNS = ["Nature", "ResourceId", "Type", "Start", "End", "Duration", "Depth", "Value", "Size",
                        "Params", "Footprint", "Tag", "JobId", "SubmitOrder", "GFlop", "X", "Y", "Iteration",
                        "Subiteration", "NumaNodes"]
ENTITY_COLUMNS = ["Parent", "Name", "Type", "Nature"]
#: tasks_csv_parser's columns
TASK_RECORD_COLUMNS = ["Control", "JobId", "SubmitOrder", "SubmitTime", "Handles", "MPIRank", "DependsOn", "Tag",
                       "Footprint", "Iteration", "Name", "Model", "Priority", "WorkerId", "MemoryNode", "StartTime",
                       "EndTime", "Parameters", "Modes", "Sizes"]
#: read_dag's columns, in phase1-workflow.sh's order
DAG_COLUMNS = ["Dependent", "JobId"]
VARIABLE_COLUMNS = ["Nature", "ResourceId", "Type", "Start", "End", "Duration", "Value"]
OUT_FILES = ["paje.worker_state.csv.gz", "entities.csv", "rec.tasks.csv.gz", "dag.csv.gz", "paje.variable.csv.gz",
             "paje.memory_state.csv.gz", "paje.comm_state.csv.gz", "paje.other_state.csv.gz", "paje.link.csv.gz",
             "paje.events.csv.gz", "config.yaml"]
#: bytes of a double: Chameleon's dgetrf_nopiv works on doubles (apps/lu registers b x b doubles)
ELEMSIZE = 8


def _csv(rows: list[list], columns: list[str], sep: str = ", ") -> str:
    # pj_dump's layout (", " between fields), which StarVZ reads with trim_ws = TRUE
    out = io.StringIO()
    out.write(sep.join(columns) + "\n")
    for r in rows:
        out.write(sep.join("" if v is None else str(v) for v in r) + "\n")
    return out.getvalue()


def codelet_of(value: str, path) -> Codelet:
    c = BY_KIND.get(value) or BY_SYMBOL.get(value)
    if c is None:
        raise InputError(path, "task trace column Value",
                         f"an LU kernel ({', '.join(sorted(BY_KIND))} or {', '.join(sorted(BY_SYMBOL))}), got {value!r}")
    return c


def _int_or_none(v) -> int | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else int(f)


def operands(kind: str, x: int, y: int, k: int) -> list[tuple[tuple[int, int], str]]:
    """The tiles a task of Chameleon's LU accesses and how, the written one last: getrf RW A(k,k);
    trsm R A(k,k), RW A(x,y); gemm R A(x,k), R A(k,y), RW A(x,y) (compute/pzgetrf_nopiv.c)."""
    if kind == "getrf":
        return [((x, y), "RW")]
    if kind == "trsm":
        return [((k, k), "R"), ((x, y), "RW")]
    if kind == "gemm":
        return [((x, k), "R"), ((k, y), "R"), ((x, y), "RW")]
    raise ValueError(kind)


def task_graph(tasks: list[dict]) -> dict[str, list[str]]:
    """Predecessors of each task (JobId -> JobIds), from the tiles accessed, in submission
    order: StarPU's implicit dependencies (src/core/dependencies/implicit_data_deps.c: a writer
    waits for the last writer and the readers since; a reader for the last writer)."""
    last_writer: dict[tuple[int, int], str] = {}
    readers: dict[tuple[int, int], list[str]] = {}
    preds: dict[str, list[str]] = {}
    for t in sorted(tasks, key=lambda t: t["order"]):
        job, deps = t["job"], []
        for tile, mode in t["operands"]:
            w = last_writer.get(tile)
            if w is not None and w != job:
                deps.append(w)
            if mode == "R":
                readers.setdefault(tile, []).append(job)
            else:
                deps += [r for r in readers.pop(tile, []) if r != job]
                last_writer[tile] = job
        preds[job] = list(dict.fromkeys(deps))
    return preds


def task_records(tasks, b: int, path, lay: Layout) -> list[dict]:
    """One dict per task with what every file needs, in trace order."""
    has_xy = all(c in tasks.columns for c in ("X", "Y", "Step"))
    mem = tasks["WorkerMemNode"].astype(str) if "WorkerMemNode" in tasks.columns else tasks["ResourceId"]
    job = tasks["JobId"] if "JobId" in tasks.columns else tasks.index
    prio = tasks["Priority"] if "Priority" in tasks.columns else [None] * len(tasks)
    pages = tasks["OperandPages"] if "OperandPages" in tasks.columns else [None] * len(tasks)
    xs, ys, ks = ((tasks[c] for c in ("X", "Y", "Step")) if has_xy else [[None] * len(tasks)] * 3)
    recs = []
    for i, (res, node, s, e, value, j, p, m, pg, x, y, k) in enumerate(zip(
            tasks["ResourceId"], tasks["Node"], tasks["Start"], tasks["End"], tasks["Value"], job, prio, mem, pages,
            xs, ys, ks, strict=True)):
        c = codelet_of(value, path)
        rank = int(node)
        x, y, k = _int_or_none(x), _int_or_none(y), _int_or_none(k)
        ops = operands(c.kind, x, y, k) if None not in (x, y, k) else None
        order = _int_or_none(j)
        recs.append({
            "job": f"{rank}_{j}", "order": order if order is not None else i, "rank": rank,
            "worker": starpu_worker_name(res, rank), "start_ms": s * 1e3, "end_ms": e * 1e3,
            "codelet": c, "x": x, "y": y, "k": k, "operands": ops, "priority": _int_or_none(p),
            "memnode": lay.memnode[(rank, m)], "pages": None if pg is None or pg != pg else str(pg),
            "b": b,
        })
    return recs


def _fp(c: Codelet, b: int) -> str:
    return f"{square_tiles_footprint(b, c.buffers):08x}"


def worker_state_rows(recs: list[dict]) -> list[list]:
    rows = []
    for r in sorted(recs, key=lambda r: (r["start_ms"], r["end_ms"])):
        c, b = r["codelet"], r["b"]
        ms_s, ms_e = r["start_ms"], r["end_ms"]
        rows.append(["State", r["worker"], "Worker State", f"{ms_s:.6f}", f"{ms_e:.6f}", f"{ms_e - ms_s:.6f}",
                     "0.000000", c.symbol, c.size_bytes(b), "_".join([f"M{b}x{b}x{ELEMSIZE}"] * c.buffers),
                     _fp(c, b), None, r["job"], f"{r['rank']}_{r['order']}", f"{c.flop_count(b) / 1e9:.6f}",
                     r["x"], r["y"], r["k"], -1,
                     None if r["pages"] is None else "_".join(r["pages"].replace(",", " ").split())])
    return rows


def task_record_rows(recs: list[dict], preds: dict[str, list[str]]) -> list[list]:
    rows = []
    for r in sorted(recs, key=lambda r: (r["rank"], r["order"])):
        c, b = r["codelet"], r["b"]
        ops = r["operands"]
        # the parser splits Handles, Modes and Sizes together: all three, or none (tiles unknown)
        handles = " ".join(f"A{m}_{n}" for (m, n), _ in ops) if ops else None
        modes = " ".join(mode for _, mode in ops) if ops else None
        sizes = " ".join([str(b * b * ELEMSIZE)] * c.buffers) if ops else None
        rows.append([None, r["job"], r["order"], None, handles, r["rank"],
                     " ".join(preds.get(r["job"], [])) or None, None, _fp(c, b), r["k"], c.symbol, c.symbol,
                     r["priority"], None, r["memnode"], f"{r['start_ms']:.6f}", f"{r['end_ms']:.6f}",
                     " ".join([f"M{b}x{b}x{ELEMSIZE}"] * c.buffers), modes, sizes])
    return rows


def variable_rows(recs: list[dict], workers: list[str], end: float) -> list[list]:
    """Each worker's `GFlops` variable (StarPU's: task GFlop / duration while it runs, 0 in
    gaps; 0 all along for a worker that ran no task), as pj_dump's intervals, from the trace's
    start to `end` (ms)."""
    by_worker: dict[str, list[dict]] = {w: [] for w in workers}
    for r in recs:
        by_worker.setdefault(r["worker"], []).append(r)
    rows = []
    for worker in sorted(by_worker, key=worker_sort_key):
        t, value = 0.0, 0.0
        points: list[tuple[float, float]] = [(0.0, 0.0)]
        for r in sorted(by_worker[worker], key=lambda r: (r["start_ms"], r["end_ms"])):
            if r["start_ms"] != t:
                points.append((t, 0.0))
            d = r["end_ms"] - r["start_ms"]
            value = r["codelet"].flop_count(r["b"]) / 1e9 / (d / 1e3) if d > 0 else 0.0
            points.append((r["start_ms"], value))
            t = r["end_ms"]
        points.append((t, 0.0))
        # successive values: one interval each, up to the next value's time (pj_dump)
        merged: list[tuple[float, float]] = []
        for at, v in points:
            if merged and merged[-1][0] == at:
                merged[-1] = (at, v)
            else:
                merged.append((at, v))
        for (a, v), (b, _) in zip(merged, [*merged[1:], (max(end, merged[-1][0]), 0.0)], strict=True):
            rows.append(["Variable", worker, "GFlops", f"{a:.6f}", f"{b:.6f}", f"{b - a:.6f}", f"{v:.6f}"])
    return rows


def dag_rows(preds: dict[str, list[str]]) -> list[list]:
    return sorted([p, j] for j, ps in preds.items() for p in ps)


def _gz(path: Path, text: str) -> None:
    with gzip.GzipFile(path, "wb", mtime=0) as fh:  # mtime=0: the same trace gives the same bytes
        fh.write(text.encode())


#: StarVZ's panels (R/phase2.R starvz_plot_list) that the export feeds, turned on in its config.yaml
PANELS = ["kiteration", "starpu", "ready", "submitted", "lackready", "usedmemory", "mpibandwidth", "mpiconcurrent",
          "mpiconcurrentout", "mpistate"]


def starvz_config(b: int, end_ms: float) -> str:
    """StarVZ's configuration for the export (module docstring): YAML, its `default` entry, read
    over StarVZ's defaults (R/phase2_config.R starvz_read_config, modifyList). The variable panels
    aggregate over 1/100 of the run (`global_agg_step`, ms; StarVZ's default step is 100 ms), and
    so does the lack of ready tasks (`lackready.aggregation`; StarVZ's 200 ms leave a run shorter
    than two steps without a bar); `gpubandwidth.total`, which panel_gpubandwidth tests and
    StarVZ's defaults leave unset, is on."""
    step = float(f"{max(end_ms / 100, 1e-3):.3g}")
    lines = ["# StarVZ (starvz_read_config): this export's settings over StarVZ's defaults", "default:",
             f"  global_agg_step: {step}", "  st:", "    cpb: true", "    tasks:",
             "      active: false  # reads the Gaps table, which starvz_phase1 does not write",
             "    cpb_mpi:", f"      tile_size: {b}", "  memory:", "    state:", "      active: true"]
    lines += [f"  {p}:\n    active: true" + (f"\n    aggregation: {step}" if p == "lackready" else "")
              for p in PANELS]
    lines += ["  gpubandwidth:\n    active: true\n    total: true"]
    return "\n".join(lines) + "\n"


def export_starvz(tasks_csv: str | Path, out: str | Path, b: int, transfers_csv: str | Path | None = None,
                  events_csv: str | Path | None = None) -> Path:
    """Writes StarVZ's phase-1 inputs for a task trace of tile size b (and, when given, the same
    run's transfer log and runtime events) into `out`."""
    tasks = read_tasks(tasks_csv)
    transfers = read_transfers(transfers_csv) if transfers_csv else None
    events = read_events(events_csv) if events_csv else None
    lay = build_layout(tasks, transfers, events, events_csv)
    recs = task_records(tasks, b, tasks_csv, lay)
    if any(r["operands"] is None for r in recs):
        log.warning("%s: no X, Y, Step columns (tile and step of each task): X, Y, Iteration and the DAG "
                    "stay empty", tasks_csv)
        preds = {}
    else:
        preds = task_graph(recs)
    workers = [lay.worker(w) for w in lay.workers]
    states = worker_state_rows(recs) + worker_runtime_rows(events, lay)
    states.sort(key=lambda r: (float(r[3]), float(r[4])))
    with atomic_members(out, OUT_FILES) as tmp:
        _gz(tmp / "paje.worker_state.csv.gz", _csv(states, WORKER_STATE_COLUMNS))
        (tmp / "entities.csv").write_text(_csv(entity_rows(lay, events is not None), ENTITY_COLUMNS))
        # rec2csv's layout: "," alone (phase1-workflow.sh strips its quotes)
        _gz(tmp / "rec.tasks.csv.gz", _csv(task_record_rows(recs, preds), TASK_RECORD_COLUMNS, sep=","))
        _gz(tmp / "dag.csv.gz", _csv(dag_rows(preds), DAG_COLUMNS, sep=","))
        _gz(tmp / "paje.variable.csv.gz", _csv(variable_rows(recs, workers, lay.end_ms)
                                               + runtime_variable_rows(transfers, events, lay), VARIABLE_COLUMNS))
        _gz(tmp / "paje.memory_state.csv.gz", _csv(memory_state_rows(transfers, events, lay), STATE_COLUMNS))
        _gz(tmp / "paje.comm_state.csv.gz", _csv(comm_state_rows(events, lay), STATE_COLUMNS))
        _gz(tmp / "paje.other_state.csv.gz", _csv(other_state_rows(events, lay), STATE_COLUMNS))
        _gz(tmp / "paje.link.csv.gz", _csv(link_rows(transfers, lay), LINK_COLUMNS))
        _gz(tmp / "paje.events.csv.gz", _csv(memory_event_rows(events, lay), PAJE_EVENT_COLUMNS))
        (tmp / "config.yaml").write_text(starvz_config(b, lay.end_ms))
    if events is None:
        log.warning("%s: no runtime events (--events): entities.csv lists the workers that ran a task; no "
                    "scheduler, memory-manager or thread states", tasks_csv)
    return Path(out)


def _positive(s: str) -> int:
    v = int(s)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"a positive integer, got {s}")
    return v


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("tasks", help="task trace CSV (testbed simulate --engine numasim --trace)")
    p.add_argument("--b", type=_positive, required=True,
                   help="tile size b of the run (Size, Params, Footprint, GFlop of each task)")
    p.add_argument("--transfers", default=None,
                   help="transfer log of the same run (testbed simulate --transfers): links, copies, bandwidths")
    p.add_argument("--events", default=None,
                   help="runtime events of the same run (testbed simulate --events): every worker, ready and "
                        "submitted tasks, allocations, memory used, thread states")
    p.add_argument("--out", required=True, help=f"directory for {', '.join(OUT_FILES)} (other files left alone)")


def run(args: argparse.Namespace) -> int:
    check_distinct([("", args.tasks), ("--transfers", args.transfers), ("--events", args.events)],
                   [Out("--out", args.out, "members", tuple(OUT_FILES))])
    log.info(f"wrote {export_starvz(args.tasks, args.out, args.b, args.transfers, args.events)}")
    return 0
