"""StarPU FxT traces of the `real` and `starpu-simgrid` engines, as the tidy tables numasim writes.

Both StarPU builds are configured `--with-fxt` (envs/setup.sh). An engine asked for `--trace`
runs apps/lu with `STARPU_FXT_TRACE=1` and `STARPU_FXT_PREFIX=<dir>/`, so every MPI rank writes
`prof_file_<user>_<rank>` there (src/common/fxt.c); StarPU's own `starpu_fxt_tool` (of the build
that wrote them) merges the ranks' files into `tasks.rec`, `comms.rec` and `paje.trace`; this
module only reads those outputs (it does not decode FxT):

* `tasks.rec` (src/debug/traces/starpu_fxt.c, task_dump): one record per task, times in ms from
  StarPU's start, `WorkerId` per rank, `MPIRank`, `Model` (the perf-model symbol: dgemm, ... or
  StarPU's LU example symbols; dplrnt for matrix generation), `Priority`, `MemoryNode`.
* `paje.trace`: the worker containers, `7 <t> <r>_w<id> W <r>_t<tid> <r>_CPU3` (or `CUDA0_0`),
  inside their thread container `7 <t> <r>_t<tid> T <r>_mn<node> <r>_T<bindid>`: the worker's
  name and the PU it is bound to (same file, `_starpu_fxt_worker_init` handling).
* `comms.rec` (src/debug/traces/starpu_fxt_mpi.c): one record per MPI message, ranks, times
  in ms, size.
* `sched_tasks.rec` (starpu_fxt.c handle_job_push / handle_job_pop): one record per push and pop
  of a task in the scheduler, `Type`, `Time` (ms), `JobId` `<rank>_<id>`.
* `data.rec` (src/debug/traces/starpu_fxt.c, data_dump): one record per handle, `Handle` (its
  address in its rank's process), `MPIRank`, `Coordinates`; tasks.rec's `Handles` and `Modes` name
  each task's handles and access modes.

The task table gets numasim's columns (docs/interfaces.md §4; testbed/traces/traces.py reads both):
ResourceId `<node>.CPU3` / `<node>.CUDA0_0` (StarPU's worker names, under the cluster's node
name), Start/End/Duration in seconds from the first LU task's start, Value (the kernel kind),
JobId, Node (rank), WorkerNuma (NUMA node of the worker's PU for CPU workers, of its GPU for
CUDA workers, from the machine description; -1 when the description does not have that PU),
WorkerMemNode (StarPU's memory node, `<node>.memnode<k>`), OperandNuma (the NUMA node most
operands are on, from StarPU's `NumaNodes`; empty when unknown), Priority; numasim's own columns
Step (the task's `Iteration`, which apps/lu pushes per step k as Chameleon does), X, Y (the
coordinates of the task's first written handle in `data.rec`, which apps/lu sets to the tile's
(m, n) as Chameleon does: starpu_data_set_coordinates); OperandPages, RemoteBytes, OperandAllocators stay empty. Matrix generation tasks
(dplrnt) are left out, as numasim does not simulate them. Transfers: the MPI messages, from and to
main RAM (StarPU-MPI's buffers, `<node>.memnode0`). Runtime events (`--events`, numasim's
table: testbed/traces/traces.py `read_events`): a `Worker` row per worker container of paje.trace,
the idle ones too (memory node: its thread's container `<r>_mn<k>`), and the LU tasks' submissions,
pushes and pops; the threads' states, allocations and memory used stay numasim's.
"""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path
from typing import Any

from testbed.common.atomic import atomic_file
from testbed.common.errors import InputError


def lu_kind(name: str) -> str | None:
    """The kernel kind (getrf|trsm|gemm) of a task named by its perf-model symbol (StarPU names
    apps/lu's tasks after the model: Chameleon's dgemm, ... or StarPU's LU example symbols)."""
    from testbed.starpu.lu_codelets import SYMBOL_SETS

    for symbols in SYMBOL_SETS.values():
        for kind, (symbol, _, _) in symbols.items():
            if name == symbol:
                return kind.split("_")[0]
    return None
#: numasim's trace columns (simulator/src/output.cpp), in its order: the two tables are the same
#: table. Step (the LU iteration), X, Y (the tile written) from the trace; OperandPages,
#: RemoteBytes and OperandAllocators are numasim's own and stay empty.
TASK_HEADER = ["ResourceId", "Start", "End", "Duration", "Value", "JobId", "Node", "WorkerNuma",
               "WorkerMemNode", "OperandNuma", "Priority", "Step", "X", "Y", "OperandPages", "RemoteBytes",
               "OperandAllocators"]
TRANSFER_HEADER = ["Start", "End", "Bytes", "Src", "Dst", "Links"]


def trace_env(fxt_dir: Path) -> dict[str, str]:
    """The variables that make StarPU write its FxT files into `fxt_dir` (src/common/fxt.c)."""
    return {"STARPU_FXT_TRACE": "1", "STARPU_FXT_PREFIX": str(fxt_dir) + "/"}


def read_rec(path: Path) -> list[dict[str, str]]:
    """A recutils file: records separated by blank lines, `Key: value` lines."""
    records, current = [], {}
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            if current:
                records.append(current)
            current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current[key.strip()] = value.strip()
    if current:
        records.append(current)
    return records


def paje_containers(paje: Path) -> dict[tuple[int, int], tuple[str, int, int]]:
    """(rank, StarPU worker id) -> (worker name without the rank prefix, bound PU, memory node),
    from the container definitions of paje.trace (`7` lines of types T and W): a worker sits in
    its thread's container `<r>_t<tid>` (named `<r>_T<bindid>`), which sits in its memory node's
    `<r>_mn<k>` (starpu_fxt.c, _starpu_fxt_worker_init handling)."""
    threads: dict[str, tuple[int, int]] = {}
    workers: list[tuple[str, str, str]] = []
    with paje.open(errors="replace") as fh:
        for line in fh:
            if not line.startswith("7\t"):
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 6:
                continue
            alias, kind, parent, name = fields[2], fields[3].strip(), fields[4], fields[5]
            if kind == "T" and "_T" in "_" + name:
                node = parent.rpartition("mn")[2]
                threads[alias] = (int(name.rsplit("T", 1)[1]), int(node) if node.isdigit() else 0)
            elif kind == "W":
                workers.append((alias, parent, name))
    out = {}
    for alias, parent, name in workers:
        prefix, _, wid = alias.rpartition("w")
        rank = int(prefix.rstrip("_")) if prefix.rstrip("_").isdigit() else 0
        pu, memnode = threads.get(parent, (-1, 0))
        out[(rank, int(wid))] = (name[len(prefix):] if name.startswith(prefix) else name, pu, memnode)
    return out


def paje_workers(paje: Path) -> dict[tuple[int, int], tuple[str, int]]:
    """(rank, StarPU worker id) -> (worker name without the rank prefix, bound PU)."""
    return {k: (name, pu) for k, (name, pu, _) in paje_containers(paje).items()}


def convert(fxt_tool: Path, fxt_dir: Path, work: Path) -> Path:
    """Runs starpu_fxt_tool on every rank's file of `fxt_dir`; returns its output directory."""
    files = sorted(fxt_dir.glob("prof_file_*"), key=lambda p: int(p.name.rsplit("_", 1)[1])
                   if p.name.rsplit("_", 1)[1].isdigit() else 0)
    if not files:
        raise RuntimeError(f"StarPU wrote no FxT file in {fxt_dir} (was it built --with-fxt? envs/setup.sh)")
    if not fxt_tool.is_file():
        raise FileNotFoundError(f"{fxt_tool} is missing: StarPU built without FxT (run envs/setup.sh)")
    out = work / "fxt-tool"
    out.mkdir(parents=True, exist_ok=True)
    cmd = [str(fxt_tool)] + [a for f in files for a in ("-i", str(f))] + ["-d", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", cwd=out)
    if proc.returncode != 0 or not (out / "tasks.rec").is_file():
        raise RuntimeError(f"starpu_fxt_tool failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    return out


def tile_coordinates(data_rec: list[dict[str, str]]) -> dict[tuple[int, str], tuple[str, str]]:
    """(rank, handle) -> the handle's first two coordinates, for handles that have some."""
    out = {}
    for d in data_rec:
        coords = d.get("Coordinates", "").split()
        if len(coords) >= 2 and "Handle" in d:
            out[(max(0, int(d.get("MPIRank", "0") or 0)), d["Handle"])] = (coords[0], coords[1])
    return out


def written_tile(r: dict[str, str], rank: int, coords: dict[tuple[int, str], tuple[str, str]]) -> tuple[str, str]:
    """X, Y of a task: the coordinates of its first handle accessed in write mode, or empty."""
    for handle, mode in zip(r.get("Handles", "").split(), r.get("Modes", "").split(), strict=False):
        if "W" in mode:
            return coords.get((rank, handle), ("", ""))
    return "", ""


def tidy_tasks(rec: list[dict[str, str]], workers: dict[tuple[int, int], tuple[str, int]],
               nodes: list[str], layouts: list[Any],
               coords: dict[tuple[int, str], tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """Rows of the tidy task table (times still in ms, not shifted)."""
    rows = []
    for r in rec:
        kind = lu_kind(r.get("Model", r.get("Name", "")))
        if kind is None or "StartTime" not in r or "EndTime" not in r or "WorkerId" not in r:
            continue  # plrnt, control records ("Control: WontUse"), tasks not executed
        rank = max(0, int(r.get("MPIRank", "0") or 0))  # -1: a process without MPI rank
        wid = int(r["WorkerId"])
        name, pu = workers.get((rank, wid), (f"W{wid}", -1))
        node = nodes[rank] if rank < len(nodes) else f"rank{rank}"
        x, y = written_tile(r, rank, coords or {})
        rows.append({"ResourceId": f"{node}.{name}", "Start": float(r["StartTime"]), "End": float(r["EndTime"]),
                     "Value": kind, "JobId": r.get("JobId", ""), "Node": rank,
                     "WorkerNuma": worker_numa(name, pu, layouts[rank] if rank < len(layouts) else None),
                     "WorkerMemNode": f"{node}.memnode{r.get('MemoryNode', '0')}",
                     "OperandNuma": operand_numa(r.get("NumaNodes", "")), "Priority": r.get("Priority", "0"),
                     "Step": r.get("Iteration", "").split()[0] if r.get("Iteration", "").split() else "",
                     "X": x, "Y": y})
    return rows


def operand_numa(numa_nodes: str) -> str:
    """The NUMA node most of a task's operands are on (StarPU's `NumaNodes`, one per handle, -1 when
    unknown), empty when none is known."""
    known = [int(v) for v in numa_nodes.split() if v.lstrip("-").isdigit() and int(v) >= 0]
    return str(max(set(known), key=known.count)) if known else ""


def worker_numa(name: str, pu: int, layout: Any) -> int:
    """NUMA node of a worker: of its bound PU (CPU) or of its GPU (CUDA<j>_<stream>)."""
    if layout is None:
        return -1
    if name.startswith("CUDA"):
        j = int(name[4:].split("_")[0])
        return layout.gpu_numa[j] if j < len(layout.gpu_numa) else -1
    core = pu // max(1, layout.threads_per_core) if pu >= 0 else -1
    return layout.core_numa[core] if 0 <= core < layout.ncores else -1


def event_rows(tool_out: Path, nodes: list[str], layouts: list[Any], tasks: list[dict[str, Any]],
               t0: float) -> list[dict[str, Any]]:
    """numasim's runtime-event rows (testbed/traces/traces.py EVENT_COLUMNS) that StarPU's FxT tool
    gives: a `Worker` row per worker container of paje.trace (every worker, idle ones too), and
    the LU tasks' submissions (tasks.rec's SubmitTime) and their pushes and pops in the scheduler
    from `sched_tasks.rec` (starpu_fxt.c handle_job_push / handle_job_pop; JobId `<rank>_<id>`),
    times in s from t0 (ms)."""
    def node(rank: int) -> str:
        return nodes[rank] if rank < len(nodes) else f"rank{rank}"

    rows: list[dict[str, Any]] = []
    for (rank, _), (name, pu, memnode) in sorted(paje_containers(tool_out / "paje.trace").items()):
        rows.append({"Type": "Worker", "Start": 0, "End": 0, "Rank": rank, "Thread": f"{node(rank)}.{name}",
                     "MemNode": f"{node(rank)}.memnode{memnode}",
                     "Value": worker_numa(name, pu, layouts[rank] if rank < len(layouts) else None)})
    lu_jobs = {str(t["JobId"]) for t in tasks}  # tasks.rec's JobId, as sched_tasks.rec writes it
    for r in read_rec(tool_out / "tasks.rec"):
        if r.get("JobId") in lu_jobs and r.get("SubmitTime"):
            at = f"{(float(r['SubmitTime']) - t0) / 1e3:.9f}"
            rows.append({"Type": "Submit", "Start": at, "End": at, "Rank": max(0, int(r.get("MPIRank", "0") or 0)),
                         "Thread": "", "MemNode": "", "Value": r["JobId"].rpartition("_")[2]})
    sched = tool_out / "sched_tasks.rec"
    for r in read_rec(sched) if sched.is_file() else []:
        rank, _, job = r.get("JobId", "").rpartition("_")
        rank_i = int(rank) if rank.isdigit() else 0
        if r.get("Type") in ("push", "pop") and r.get("JobId") in lu_jobs:
            at = f"{(float(r['Time']) - t0) / 1e3:.9f}"
            rows.append({"Type": r["Type"].capitalize(), "Start": at, "End": at, "Rank": rank_i, "Thread": "",
                         "MemNode": "", "Value": job})
    return rows


def write_tables(tool_out: Path, nodes: list[str], layouts: list[Any], trace: Path | None,
                 transfers: Path | None, events: Path | None = None) -> int:
    """Writes the tidy task table, the MPI transfer table and the runtime events; returns the
    number of tasks."""
    data = read_rec(tool_out / "data.rec") if (tool_out / "data.rec").is_file() else []
    rows = tidy_tasks(read_rec(tool_out / "tasks.rec"), paje_workers(tool_out / "paje.trace"), nodes, layouts,
                      tile_coordinates(data))
    if not rows:
        raise InputError(tool_out / "tasks.rec", "tasks", "at least one executed LU task in the FxT trace")
    t0 = min(r["Start"] for r in rows)
    if trace is not None:
        with atomic_file(trace, option="--trace") as fh:
            w = csv.DictWriter(fh, fieldnames=TASK_HEADER, lineterminator="\n")
            w.writeheader()
            for r in sorted(rows, key=lambda r: (r["Start"], r["ResourceId"])):
                start, end = (r["Start"] - t0) / 1e3, (r["End"] - t0) / 1e3
                w.writerow({**r, "Start": f"{start:.9f}", "End": f"{end:.9f}", "Duration": f"{end - start:.9f}"})
    if transfers is not None:
        comms = read_rec(tool_out / "comms.rec") if (tool_out / "comms.rec").is_file() else []
        with atomic_file(transfers, option="--transfers") as fh:
            w = csv.DictWriter(fh, fieldnames=TRANSFER_HEADER, lineterminator="\n")
            w.writeheader()
            for c in comms:
                src, dst = int(c["Src"]), int(c["Dst"])
                w.writerow({"Start": f"{(float(c['SendTime']) - t0) / 1e3:.9f}",
                            "End": f"{(float(c['RecvTime']) - t0) / 1e3:.9f}", "Bytes": c.get("Size", "0"),
                            "Src": f"{nodes[src] if src < len(nodes) else src}.memnode0",
                            "Dst": f"{nodes[dst] if dst < len(nodes) else dst}.memnode0", "Links": "mpi"})
    if events is not None:
        from testbed.traces.traces import EVENT_COLUMNS

        with atomic_file(events, option="--events") as fh:
            w = csv.DictWriter(fh, fieldnames=EVENT_COLUMNS, lineterminator="\n")
            w.writeheader()
            w.writerows(event_rows(tool_out, nodes, layouts, rows, t0))
    return len(rows)
