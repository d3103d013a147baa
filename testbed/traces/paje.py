"""`testbed trace-paje`: a numasim trace (task CSV + transfer CSV) as a Paje trace file.

Paje is the trace format of the Paje/ViTE/PajeNG family (StarPU's `starpu_fxt_tool` writes it
too); `pj_dump` (Debian `pajeng`) turns it into the CSV tables StarVZ reads. Written from the
format's public description: a header of `%EventDef` blocks declaring each event's fields,
then one event per line, its first field the event id.

What the file holds (times in seconds, as numasim's CSVs):

* container types Cluster > Node > {Worker, Memory}; one Node container per MPI rank's
  node, one Worker per worker that ran a task, one Memory per memory node (RAM of a NUMA
  node, GPU memory) named `<host>.mem` (a CUDA worker and its GPU memory share the host
  name `n.gpu0`, and Paje container names should be unique);
* state type `Task` on workers, one entity value per task kind: each task is a PushState at
  its start and a PopState at its end (depth 0, no "idle" states: the gaps are the idle
  time), with the task's `JobId` as an extra field, as StarPU's own traces carry it (numasim
  runs one task at a time per worker; a trace whose tasks overlap on a worker would show
  as nested states, depth > 0, in pj_dump);
* link type `Transfer` between Memory containers, held by the Cluster container (the common
  ancestor of both ends, transfers cross nodes), value `intra-node` or `network`, with the
  transfer's `Size` in bytes as an extra field.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from testbed.common.atomic import atomic_file
from testbed.common.outputs import Out, check_distinct
from testbed.common.palette import paje_rgb
from testbed.traces.traces import node_name, read_tasks, read_transfers, worker_sort_key

log = logging.getLogger(__name__)

#: event ids, as declared in the header
EV = {name: i for i, name in enumerate([
    "PajeDefineContainerType", "PajeDefineStateType", "PajeDefineLinkType", "PajeDefineEntityValue",
    "PajeCreateContainer", "PajeDestroyContainer", "PajePushState", "PajePopState",
    "PajeStartLink", "PajeEndLink",
])}

#: fields of each event (name, Paje field type), the order of the values on an event line
FIELDS = {
    "PajeDefineContainerType": [("Alias", "string"), ("Type", "string"), ("Name", "string")],
    "PajeDefineStateType": [("Alias", "string"), ("Type", "string"), ("Name", "string")],
    "PajeDefineLinkType": [("Alias", "string"), ("Type", "string"), ("StartContainerType", "string"),
                           ("EndContainerType", "string"), ("Name", "string")],
    "PajeDefineEntityValue": [("Alias", "string"), ("Type", "string"), ("Name", "string"), ("Color", "color")],
    "PajeCreateContainer": [("Time", "date"), ("Alias", "string"), ("Type", "string"),
                            ("Container", "string"), ("Name", "string")],
    "PajeDestroyContainer": [("Time", "date"), ("Type", "string"), ("Name", "string")],
    "PajePushState": [("Time", "date"), ("Type", "string"), ("Container", "string"), ("Value", "string"),
                      ("JobId", "string")],
    "PajePopState": [("Time", "date"), ("Type", "string"), ("Container", "string")],
    "PajeStartLink": [("Time", "date"), ("Type", "string"), ("Container", "string"), ("Value", "string"),
                      ("StartContainer", "string"), ("Key", "string"), ("Size", "string")],
    "PajeEndLink": [("Time", "date"), ("Type", "string"), ("Container", "string"), ("Value", "string"),
                    ("EndContainer", "string"), ("Key", "string")],
}

def _field(value) -> str:
    """A Paje field: strings with blanks (or empty) in double quotes."""
    s = str(value)
    return f'"{s}"' if not s or any(c.isspace() for c in s) else s


def _time(t: float) -> str:
    return f"{t:.9f}"  # numasim's own precision (ns)


def header() -> list[str]:
    lines = []
    for name, ident in EV.items():
        lines.append(f"%EventDef {name} {ident}")
        lines += [f"%       {f} {t}" for f, t in FIELDS[name]]
        lines.append("%EndEventDef")
    return lines


def paje_lines(tasks, transfers=None) -> list[str]:
    """The Paje trace of a tidy task table (and transfer table), as lines."""

    def event(name: str, *values) -> str:
        assert len(values) == len(FIELDS[name]), name
        return " ".join([str(EV[name]), *(_field(v) for v in values)])

    lines = header()
    lines += [event("PajeDefineContainerType", "CL", "0", "Cluster"),
              event("PajeDefineContainerType", "NO", "CL", "Node"),
              event("PajeDefineContainerType", "WK", "NO", "Worker"),
              event("PajeDefineContainerType", "MM", "NO", "Memory"),
              event("PajeDefineStateType", "ST", "WK", "Task"),
              event("PajeDefineLinkType", "LK", "CL", "MM", "MM", "Transfer")]
    kinds = sorted(tasks["Value"].unique())
    for kind in kinds:
        lines.append(event("PajeDefineEntityValue", kind, "ST", kind, paje_rgb(kind)))
    lines += [event("PajeDefineEntityValue", "intra-node", "LK", "intra-node", "0.4 0.4 0.4"),
              event("PajeDefineEntityValue", "network", "LK", "network", "0.8 0.2 0.8")]

    workers = sorted(tasks["ResourceId"].unique(), key=worker_sort_key)
    memories = set(tasks["WorkerMemNode"]) if "WorkerMemNode" in tasks.columns else set()
    if transfers is not None:
        memories |= set(transfers["Src"]) | set(transfers["Dst"])
    memories = sorted(memories, key=worker_sort_key)
    nodes = sorted({node_name(w) for w in workers} | {node_name(m) for m in memories}, key=worker_sort_key)
    node_alias = {n: f"n{i}" for i, n in enumerate(nodes)}
    worker_alias = {w: f"w{i}" for i, w in enumerate(workers)}
    mem_alias = {m: f"m{i}" for i, m in enumerate(memories)}

    start = 0.0
    lines.append(event("PajeCreateContainer", _time(start), "c", "CL", "0", "cluster"))
    for n in nodes:
        lines.append(event("PajeCreateContainer", _time(start), node_alias[n], "NO", "c", n))
    for w in workers:
        lines.append(event("PajeCreateContainer", _time(start), worker_alias[w], "WK", node_alias[node_name(w)], w))
    for m in memories:
        lines.append(event("PajeCreateContainer", _time(start), mem_alias[m], "MM", node_alias[node_name(m)],
                           f"{m}.mem"))

    # Events must come in time order. Each worker's tasks are emitted in start order, a pop
    # before the next push, and the sort is stable on (time): a task ending at t is popped
    # before the next one on that worker is pushed at t; across containers the order at
    # equal times does not matter.
    timed: list[tuple[float, str]] = []
    ordered = tasks.sort_values(["ResourceId", "Start", "End"], kind="stable")
    job_ids = ordered["JobId"] if "JobId" in ordered.columns else ordered.index
    for w, s, e, kind, job in zip(ordered["ResourceId"], ordered["Start"], ordered["End"], ordered["Value"],
                                  job_ids, strict=False):
        timed.append((s, event("PajePushState", _time(s), "ST", worker_alias[w], kind, job)))
        timed.append((e, event("PajePopState", _time(e), "ST", worker_alias[w])))
    end = float(tasks["End"].max())
    if transfers is not None and not transfers.empty:
        end = max(end, float(transfers["End"].max()))
        for i, (s, e, size, src, dst) in enumerate(zip(transfers["Start"], transfers["End"], transfers["Bytes"],
                                                       transfers["Src"], transfers["Dst"], strict=False)):
            value = "intra-node" if node_name(src) == node_name(dst) else "network"
            timed.append((s, event("PajeStartLink", _time(s), "LK", "c", value, mem_alias[src], f"t{i}",
                                   f"{size:.0f}")))
            timed.append((e, event("PajeEndLink", _time(e), "LK", "c", value, mem_alias[dst], f"t{i}")))
    timed.sort(key=lambda item: item[0])  # stable: insertion order at equal times
    lines += [line for _, line in timed]

    for alias in [*worker_alias.values(), *mem_alias.values()]:
        kind = "WK" if alias.startswith("w") else "MM"
        lines.append(event("PajeDestroyContainer", _time(end), kind, alias))
    for n in nodes:
        lines.append(event("PajeDestroyContainer", _time(end), "NO", node_alias[n]))
    lines.append(event("PajeDestroyContainer", _time(end), "CL", "c"))
    return lines


def export_paje(tasks_csv: str | Path, transfers_csv: str | Path | None, out: str | Path,
                option: str = "--out") -> Path:
    """Writes the Paje trace of a numasim run's CSVs to `out` (atomically); returns `out`."""
    tasks = read_tasks(tasks_csv)
    transfers = read_transfers(transfers_csv) if transfers_csv else None
    lines = paje_lines(tasks, transfers)
    with atomic_file(out, option=option) as fh:
        fh.write("\n".join(lines) + "\n")
    return Path(out)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("tasks", help="task trace CSV (testbed simulate --engine numasim --trace)")
    p.add_argument("--transfers", default=None, help="transfer CSV of the same run (--transfers): links")
    p.add_argument("--out", required=True, help="Paje file to write (read it with pj_dump, ViTE)")


def run(args: argparse.Namespace) -> int:
    check_distinct([("", args.tasks), ("--transfers", args.transfers)], [Out("--out", args.out)])
    out = export_paje(args.tasks, args.transfers, args.out)
    log.info(f"wrote {out}")
    return 0
