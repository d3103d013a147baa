"""The runtime side of `testbed trace-starvz` (testbed/traces/starvz.py): StarPU's containers, the
communications, the memory managers, the threads' states and the variables StarVZ plots, built from
numasim's transfer log (`--transfers`) and runtime events (`--events`, simulator/src/runtime_events.hpp).

Every name below is the one StarPU's FxT tool gives in a real trace (src/debug/traces/starpu_paje.c
for the types and values, starpu_fxt.c and starpu_fxt_mpi.c for the containers and keys) and the one
StarVZ's readers and panels select on (schnorr/starvz at commit 7426178: R/phase1.R `hl_y_paje_tree`,
R/phase1_parse_csv.R, R/phase2_var_panels.R, R/phase2_memory.R, R/phase2_mpi.R):

* Containers (entities.csv): `root` (MPI Program) > `<rank>_program` (Program) > `<rank>_MEMNODE<i>`
  (Memory Node; StarPU's memory node numbers: the RAM (NUMA) nodes, then the GPUs, as
  src/core/topology.c registers them) > the workers (Worker, with a `Worker State` state and a
  `GFlops` variable) and `<rank>_MEMMANAGER<i>` (Memory Manager: `Memory Node State`, the memory
  events, `Used (MB)`, `Bandwidth In (MB/s)`, `Bandwidth Out (MB/s)`); `<rank>_scheduler`
  (Scheduler State: `Number of Ready Tasks`, `Number of Submitted Uncompleted Tasks`);
  `<rank>_mpict` (MPI Communication Thread: `Communication Thread State`, its bandwidths) when
  the run has more than one rank; `<rank>_UserThread0` (User Thread: `User Thread State`).
  Every worker of the run is listed, the idle ones too (the events' `Worker` rows).
* `paje.link.csv.gz` (`read_links`): MPI messages as `MPI communication` links in `root` from
  `<src>_mpict` to `<dst>_mpict`, key `mpicom_<i>` (starpu_fxt_mpi.c display_all_transfers);
  copies between memory nodes of one rank as `Intra-node data Fetch` links in `<rank>_program`
  from `<rank>_MEMMANAGER<src>` to `<rank>_MEMMANAGER<dst>`, key `com_<i>` (starpu_fxt.c
  handle_start_driver_copy). Size in bytes. An MPI link's Tag and Handle are the message's number
  in the log (which names no MPI tag or data handle), its MPIType `PointToPoint` (numasim's sends
  are StarPU-MPI's point-to-point ones: starpu_fxt_mpi.c get_mpi_type_str), its Priority 0 (StarPU's
  default: numasim's messages have none); StarVZ's MPI panels drop a link with an empty field
  (R/phase2_mpi.R concurrent_mpi: na.omit). Intra-node links leave them empty, as StarPU's do.
* `paje.memory_state.csv.gz` (`read_memory_state_csv`): `Memory Node State` of each memory
  manager: `DriverCopy` while a copy into it runs (handle_start_driver_copy pushes it on the
  destination), `Allocating` (cudaMalloc by a GPU's driver, or a RAM buffer allocated by the
  thread that runs a copy: cudaHostAlloc when the node has GPUs), `AllocatingReuse` (a GPU buffer
  taken from the chunks StarPU keeps), `Freeing` (cudaFree). Depth: the states open under it.
* `paje.events.csv.gz` (`events_csv_parser`, whose `Events_memory` the memory panel reads):
  `Allocating Start` / `Allocating End` and `Free Start` / `Free End` of each allocation and free,
  with the columns memnode_event writes (Value 0, Handle, Info = bytes on the end event, Size =
  bytes on the start event, Tid = the manager's alias `<rank>_mm<i>`); the Handle is a number
  per allocation (the log names no data handle), so that each start pairs with its end.
* `paje.comm_state.csv.gz` (`read_comm_state_csv`, the mpistate panel): `Communication Thread
  State` of `<rank>_mpict`: `Sleeping` (no request), `SendSubmitted` (a send request handled),
  `ReceiveCompleted` (a landed message handled), numasim's progression thread (mpi/starpu_mpi.cpp).
* `paje.other_state.csv.gz` (`read_other_state_csv`): `User Thread State` of the main thread:
  `Submitting task` from its first submission to its last (numasim submits the whole graph at 0),
  then `Waiting all tasks` to the end (Chameleon waits for the sequence).
* Worker states beside the tasks (paje.worker_state.csv.gz, the `starpu` panel): `Sleeping` while
  a worker waits for a task or its inputs, `Progressing` while it runs a copy between RAM nodes
  (its allocation included): StarPU's worker-state names, which StarVZ counts as runtime states.
* Variables (paje.variable.csv.gz, pj_dump's intervals between successive values, the last to the
  end of the run): `Number of Ready Tasks` (tasks pushed to the scheduler and not popped:
  starpu_fxt.c handle_job_push / handle_job_pop) and `Number of Submitted Uncompleted Tasks`
  (submitted and not popped: handle_update_task_cnt, handle_job_pop) of `<rank>_scheduler`;
  `Used (MB)` of each GPU's manager (bytes allocated / 2^20, handle_used_mem); `Bandwidth In (MB/s)`
  and `Bandwidth Out (MB/s)` of each manager (intra-node copies) and MPI thread (messages): the
  total rate of the copies under way, in starpu_fxt.c's unit (0.001 * bytes / ms). StarPU adds up
  each copy's bytes / duration; the transfer log holds no rate over time either (start, end,
  bytes, links), but that sum overstates copies that overlapped on a link: on g5k-lille-21 an MPI
  thread's showed up to 2.3 GB/s through a 1.25 GB/s NIC. min_peak_rates builds instead the least
  peaked total rate that carries every copy's bytes inside its logged start and end: the bytes
  add up to the log's, and the peak stays under a link's capacity wherever the simulated rates did.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.common.errors import InputError
from testbed.traces.traces import node_name, worker_sort_key

if TYPE_CHECKING:
    import pandas as pd

Copy = tuple[float, float, int, str, str]  # start, end (s), bytes, source and destination hosts

#: pj_dump's state columns (phase1-workflow.sh's header of the memory, comm and other state files)
STATE_COLUMNS = ["Nature", "ResourceId", "Type", "Start", "End", "Duration", "Depth", "Value"]
#: phase1-workflow.sh's header of paje.link.csv.gz (read_links' col_types)
LINK_COLUMNS = ["Nature", "Container", "Type", "Start", "End", "Duration", "Size", "Origin", "Dest", "Key", "Tag",
                "MPIType", "Priority", "Handle"]
#: phase1-workflow.sh's header of paje.events.csv.gz (events_csv_parser's col_types)
PAJE_EVENT_COLUMNS = ["Nature", "Container", "Type", "Start", "Value", "Handle", "Info", "Size", "Tid", "Src"]
#: worker-state fields after Value that a StarPU state leaves empty (phase1-workflow.sh pads them)
WORKER_STATE_EMPTY = 12

MPI_LINK = "MPI communication"
INTRA_LINK = "Intra-node data Fetch"
READY = "Number of Ready Tasks"
SUBMITTED = "Number of Submitted Uncompleted Tasks"
USED = "Used (MB)"
BW_IN, BW_OUT = "Bandwidth In (MB/s)", "Bandwidth Out (MB/s)"
MEMORY_STATES = ("Allocating", "AllocatingReuse", "Freeing")
WORKER_STATES = ("Sleeping", "Progressing")
MPI_STATES = ("Sleeping", "SendSubmitted", "ReceiveCompleted")
#: the memory manager's event types of an allocation and a free (starpu_paje.c: Al/AlE, Fe/FeE)
MEMORY_EVENTS = {"Allocating": ("Allocating Start", "Allocating End"), "Freeing": ("Free Start", "Free End")}


def starpu_worker_name(resource: str, rank: int) -> str:
    """`chifflet-1.cpu3` -> `0_CPU3`, `chifflet-1.gpu1` -> `0_CUDA1_0`, `n0.CUDA0_0` -> `0_CUDA0_0`
    (StarPU's names in a StarPU-MPI trace: rank, then the worker)."""
    local = resource.split(".", 1)[-1]
    if local.startswith("CUDA") or local.startswith("CPU"):
        return f"{rank}_{local}"
    digits = "".join(c for c in local if c.isdigit()) or "0"
    if local.startswith("gpu"):
        return f"{rank}_CUDA{int(digits)}_0"
    return f"{rank}_CPU{int(digits)}"


def _is_gpu(host: str) -> bool:
    return ".gpu" in host or "CUDA" in host


@dataclass
class Layout:
    """A run's workers and memory nodes with StarPU's names."""

    workers: dict[str, tuple[int, str]]  # numasim worker -> (rank, its memory node's host)
    memnode: dict[tuple[int, str], int]  # (rank, memory node host) -> StarPU's memory node number
    rank_of_host: dict[str, int]
    ranks: list[int]
    end_ms: float  # the run's last task, copy or event

    def worker(self, resource: str) -> str:
        return starpu_worker_name(resource, self.workers[resource][0])

    def memory_number(self, host: str) -> tuple[int, int]:
        rank = self.rank_of_host[host]
        return rank, self.memnode[(rank, host)]

    def manager(self, host: str) -> str:
        rank, i = self.memory_number(host)
        return f"{rank}_MEMMANAGER{i}"


def build_layout(tasks: pd.DataFrame, transfers: pd.DataFrame | None = None, events: pd.DataFrame | None = None,
                 events_path: str | Path | None = None) -> Layout:
    """Workers from the events' `Worker` rows (every worker of the run), else from the task trace
    (those that ran a task); memory nodes from the workers, the copies and the events."""
    workers: dict[str, tuple[int, str]] = {}
    if events is not None:
        declared = events[events["Type"] == "Worker"]
        workers = {str(w): (int(r), str(m)) for w, r, m in zip(declared["Thread"], declared["Rank"],
                                                                 declared["MemNode"], strict=True)}
        missing = sorted(set(tasks["ResourceId"]) - set(workers))
        if missing:
            raise InputError(events_path, "Worker rows", f"every worker of the task trace (the same run's "
                                                         f"events), missing {', '.join(missing[:3])}")
    mem = tasks["WorkerMemNode"].astype(str) if "WorkerMemNode" in tasks.columns else tasks["ResourceId"]
    for res, node, m in zip(tasks["ResourceId"], tasks["Node"], mem, strict=True):
        workers.setdefault(str(res), (int(node), str(m)))
    rank_of_host = {m: r for r, m in workers.values()}
    rank_of_node = {node_name(w): r for w, (r, _) in workers.items()}
    hosts = set(rank_of_host)
    ends = [float(tasks["End"].max())]
    if transfers is not None and len(transfers):
        hosts |= set(transfers["Src"]) | set(transfers["Dst"])
        ends.append(float(transfers["End"].max()))
    if events is not None:
        hosts |= {h for h in events["MemNode"] if h}
        ends.append(float(events["End"].max()))
    for h in sorted(hosts - set(rank_of_host)):
        if node_name(h) not in rank_of_node:
            raise InputError(events_path, "memory nodes", f"a memory node of a node with workers, got {h!r}")
        rank_of_host[h] = rank_of_node[node_name(h)]
    memnode: dict[tuple[int, str], int] = {}
    for rank in sorted(set(rank_of_host.values())):
        mine = sorted((h for h, r in rank_of_host.items() if r == rank), key=lambda h: (_is_gpu(h), worker_sort_key(h)))
        memnode.update({(rank, h): i for i, h in enumerate(mine)})
    return Layout(workers, memnode, rank_of_host, sorted(set(rank_of_host.values())), max(ends) * 1e3)


def _ms(x: float) -> str:
    return f"{x * 1e3:.6f}"


def entity_rows(lay: Layout, with_runtime: bool) -> list[list]:
    """StarPU's container tree (module docstring); the runtime containers only with the events."""
    rows = [["0", "0", "0", "Container"], ["0", "root", "MPI Program", "Container"],
            ["root", MPI_LINK, MPI_LINK, "Link"]]
    for rank in lay.ranks:
        program = f"{rank}_program"
        rows += [["root", program, "Program", "Container"], [program, INTRA_LINK, INTRA_LINK, "Link"]]
        if with_runtime:
            user, sched = f"{rank}_UserThread0", f"{rank}_scheduler"
            rows += [[program, user, "User Thread", "Container"],
                     [user, "User Thread State", "User Thread State", "State"],
                     [program, sched, "Scheduler State", "Container"],
                     [sched, READY, READY, "Variable"], [sched, SUBMITTED, SUBMITTED, "Variable"]]
        hosts = sorted((h for (r, h) in lay.memnode if r == rank), key=lambda h: lay.memnode[(rank, h)])
        for host in hosts:
            i = lay.memnode[(rank, host)]
            name_mem, manager = f"{rank}_MEMNODE{i}", f"{rank}_MEMMANAGER{i}"
            rows.append([program, name_mem, "Memory Node", "Container"])
            mine = sorted((w for w, (r, m) in lay.workers.items() if r == rank and m == host), key=worker_sort_key)
            for res in mine:
                name = lay.worker(res)
                rows += [[name_mem, name, "Worker", "Container"], [name, "Worker State", "Worker State", "State"],
                         [name, "GFlops", "GFlops", "Variable"]]
            rows += [[name_mem, manager, "Memory Manager", "Container"],
                     [manager, "Memory Node State", "Memory Node State", "State"]]
            rows += [[manager, t, t, "Event"] for pair in MEMORY_EVENTS.values() for t in pair]
            rows += [[manager, v, v, "Variable"] for v in (BW_IN, BW_OUT, USED)]
        if len(lay.ranks) > 1:
            mpict = f"{rank}_mpict"
            rows += [[program, mpict, "MPI Communication Thread", "Container"],
                     [mpict, "Communication Thread State", "Communication Thread State", "State"],
                     [mpict, BW_IN, BW_IN, "Variable"], [mpict, BW_OUT, BW_OUT, "Variable"]]
    return rows


def _split(transfers: pd.DataFrame | None, lay: Layout) -> tuple[list[Copy], list[Copy]]:
    """(MPI messages, copies within a rank) of the transfer log, each as a list of row tuples."""
    mpi: list[Copy] = []
    intra: list[Copy] = []
    if transfers is None:
        return mpi, intra
    for s, e, size, src, dst in zip(transfers["Start"], transfers["End"], transfers["Bytes"], transfers["Src"],
                                    transfers["Dst"], strict=True):
        (intra if lay.rank_of_host[src] == lay.rank_of_host[dst] else mpi).append((s, e, int(size), src, dst))
    return mpi, intra


def link_rows(transfers: pd.DataFrame | None, lay: Layout) -> list[list]:
    mpi, intra = _split(transfers, lay)
    rows = []
    for i, (s, e, size, src, dst) in enumerate(sorted(mpi)):
        rows.append(["Link", "root", MPI_LINK, _ms(s), _ms(e), _ms(e - s), size,
                     f"{lay.rank_of_host[src]}_mpict", f"{lay.rank_of_host[dst]}_mpict", f"mpicom_{i}",
                     i, "PointToPoint", 0, f"{i:x}"])
    for i, (s, e, size, src, dst) in enumerate(sorted(intra)):
        rows.append(["Link", f"{lay.rank_of_host[src]}_program", INTRA_LINK, _ms(s), _ms(e), _ms(e - s), size,
                     lay.manager(src), lay.manager(dst), f"com_{i}", None, None, None, None])
    return rows


def _with_depth(states: list[tuple[str, float, float, str]], type_: str) -> list[list]:
    """pj_dump's rows of (container, start, end, value) states, sorted; Depth = the states of the
    same container still open when it starts (Paje's push/pop stack)."""
    rows: list[list] = []
    open_: dict[str, list[float]] = defaultdict(list)
    for res, s, e, value in sorted(states, key=lambda t: (t[0], t[1], -t[2])):
        stack = [x for x in open_[res] if x > s]
        rows.append(["State", res, type_, _ms(s), _ms(e), _ms(e - s), f"{len(stack):.6f}", value])
        open_[res] = [*stack, e]
    return sorted(rows, key=lambda r: (float(r[3]), r[1]))


def memory_state_rows(transfers: pd.DataFrame | None, events: pd.DataFrame | None, lay: Layout) -> list[list]:
    _, intra = _split(transfers, lay)
    states = [(lay.manager(dst), s, e, "DriverCopy") for s, e, _, _, dst in intra]
    if events is not None:
        mem = events[events["Type"].isin(MEMORY_STATES)]
        states += [(lay.manager(m), s, e, t) for t, s, e, m in zip(mem["Type"], mem["Start"], mem["End"],
                                                                    mem["MemNode"], strict=True)]
    return _with_depth(states, "Memory Node State")


def memory_event_rows(events: pd.DataFrame | None, lay: Layout) -> list[list]:
    rows = []
    if events is None:
        return rows
    mem = events[events["Type"].isin(list(MEMORY_EVENTS))]
    for i, (t, s, e, m, size) in enumerate(zip(mem["Type"], mem["Start"], mem["End"], mem["MemNode"], mem["Value"],
                                               strict=True)):
        rank, k = lay.memory_number(m)
        start, end = MEMORY_EVENTS[t]
        manager, alias, handle = f"{rank}_MEMMANAGER{k}", f"{rank}_mm{k}", f"{i:x}"
        rows += [["Event", manager, start, _ms(s), 0, handle, 0, int(size), alias, None],
                 ["Event", manager, end, _ms(e), 0, handle, int(size), 0, alias, None]]
    return sorted(rows, key=lambda r: float(r[3]))


def _thread_states(events: pd.DataFrame | None, lay: Layout, values: tuple[str, ...],
                   mpi: bool) -> list[tuple[str, float, float, str]]:
    if events is None:
        return []
    ev = events[events["Type"].isin(values)]
    out = []
    for t, s, e, rank, thread in zip(ev["Type"], ev["Start"], ev["End"], ev["Rank"], ev["Thread"], strict=True):
        if (thread in lay.workers) != mpi:
            out.append((f"{rank}_mpict" if mpi else lay.worker(thread), s, e, t))
    return out


def comm_state_rows(events: pd.DataFrame | None, lay: Layout) -> list[list]:
    return _with_depth(_thread_states(events, lay, MPI_STATES, mpi=True), "Communication Thread State")


def worker_runtime_rows(events: pd.DataFrame | None, lay: Layout) -> list[list]:
    """The workers' StarPU states, in paje.worker_state's columns (the task fields empty)."""
    return [[*r, *[None] * WORKER_STATE_EMPTY]
            for r in _with_depth(_thread_states(events, lay, WORKER_STATES, mpi=False), "Worker State")]


def other_state_rows(events: pd.DataFrame | None, lay: Layout) -> list[list]:
    if events is None:
        return []
    end = lay.end_ms / 1e3
    submits = events[events["Type"] == "Submit"].groupby("Rank")["Start"].agg(["min", "max"])
    states = []
    for rank, (first, last) in submits.iterrows():
        states += [(f"{rank}_UserThread0", first, last, "Submitting task"),
                   (f"{rank}_UserThread0", last, end, "Waiting all tasks")]
    return _with_depth(states, "User Thread State")


def step_rows(resource: str, type_: str, points: list[tuple[float, float]], end_ms: float) -> list[list]:
    """A variable set to each (time ms, value) in turn, as pj_dump's intervals: one per value, up to
    the next one's time (the last to end_ms); several values at one time: the last one counts."""
    merged: list[tuple[float, float]] = []
    for at, v in sorted(points, key=lambda p: p[0]):  # stable: the order of equal times is kept
        if merged and merged[-1][0] == at:
            merged[-1] = (at, v)
        else:
            merged.append((at, v))
    nexts = [*(p[0] for p in merged[1:]), max(end_ms, merged[-1][0])]
    return [["Variable", resource, type_, f"{a:.6f}", f"{b:.6f}", f"{b - a:.6f}", f"{v:.6f}"]
            for (a, v), b in zip(merged, nexts, strict=True)]


def _components(jobs: list[tuple[float, float, float]]) -> list[list[tuple[float, float, float]]]:
    """(start, end, bytes) windows grouped into runs of overlapping ones (a window that starts when
    the previous ones have all ended opens a new group), each sorted by start."""
    groups: list[list[tuple[float, float, float]]] = []
    reach = float("-inf")
    for job in sorted(jobs):
        if job[0] >= reach:
            groups.append([])
        groups[-1].append(job)
        reach = max(reach, job[1])
    return groups


def min_peak_rates(jobs: list[tuple[float, float, float]]) -> list[tuple[float, float, float]]:
    """The total rate of transfers of fixed bytes, each within its recorded window, as pieces
    (from, to, bytes per unit of time): the least peaked profile that carries them all (Yao, Demers
    and Shenker's critical intervals: the interval of highest density, the bytes of the windows
    inside it over its length, gets that rate; then the same on what is left, the time already
    given counted out of the windows that overlap it). Every window gets its bytes, so the pieces
    integrate to the total; the peak is the least any schedule of these windows has, so it is at
    most that of the rates the simulation gave them: under the capacity of a link they all crossed.
    A lone transfer keeps its average rate. jobs: (start, end, bytes) with end > start."""
    import numpy as np

    pieces: list[tuple[float, float, float]] = []
    for group in _components(jobs):
        if len(group) == 1:
            s, e, w = group[0]
            pieces.append((s, e, w / (e - s)))
            continue
        times = np.unique([t for s, e, _ in group for t in (s, e)])
        length = np.diff(times)  # the elementary intervals between successive event times
        si = np.searchsorted(times, [s for s, _, _ in group])
        ei = np.searchsorted(times, [e for _, e, _ in group])
        w = np.array([b for _, _, b in group], dtype=float)
        live = np.ones(len(length), dtype=bool)
        rate = np.zeros(len(length))
        left = np.ones(len(group), dtype=bool)
        m = len(times)
        while left.any():
            # work[i, j]: bytes of the windows left inside [times[i], times[j]]
            work = np.zeros((m, m))
            np.add.at(work, (si[left], ei[left]), w[left])
            work = np.cumsum(np.cumsum(work[::-1], axis=0)[::-1], axis=1)
            cum = np.concatenate(([0.0], np.cumsum(np.where(live, length, 0.0))))
            span = cum[None, :] - cum[:, None]  # time not yet given, between times[i] and times[j]
            density = np.where((span > 0) & (work > 0), work / np.where(span > 0, span, 1.0), -1.0)
            i, j = np.unravel_index(np.argmax(density), density.shape)
            peak = float(density[i, j])
            # the critical interval takes in the time already given that touches it (a window
            # inside it and that time has no time of its own left)
            while i > 0 and not live[i - 1]:
                i -= 1
            while j < m - 1 and not live[j]:
                j += 1
            rate[i:j][live[i:j]] = peak
            live[i:j] = False
            left &= ~((si >= i) & (ei <= j))
        pieces += [(float(a), float(b), float(r)) for a, b, r in zip(times[:-1], times[1:], rate, strict=True)]
    return pieces


def _bandwidth(copies: list[Copy], end_ms: float, resource_of: Callable[[str], str]) -> list[list]:
    """Bandwidth In / Out of each resource (MB/s, starpu_fxt.c _starpu_fxt_process_bandwidth's
    0.001 * bytes / ms): the total rate of the transfers under way, as min_peak_rates builds it
    from their recorded start, end and bytes. The log gives no rate over time, and the sum of each
    transfer's average rate (bytes / duration, StarPU's figure) overstates overlapping ones: two
    messages that shared a NIC, one begun before the other, add up to more than the NIC carries."""
    windows: dict[tuple[str, str], list[tuple[float, float, float]]] = defaultdict(list)
    for s, e, size, src, dst in copies:
        if e <= s:
            continue
        for key in ((resource_of(src), BW_OUT), (resource_of(dst), BW_IN)):
            windows[key].append((s * 1e3, e * 1e3, float(size)))
    rows = []
    for (res, type_), jobs in sorted(windows.items()):
        points = [(0.0, 0.0)]
        for a, b, r in min_peak_rates(jobs):  # a piece's end is 0 unless the next one starts there
            points += [(a, 0.001 * r), (b, 0.0)]
        rows += step_rows(res, type_, points, end_ms)
    return rows


def runtime_variable_rows(transfers: pd.DataFrame | None, events: pd.DataFrame | None, lay: Layout) -> list[list]:
    mpi, intra = _split(transfers, lay)
    rows = _bandwidth(intra, lay.end_ms, lay.manager)
    rows += _bandwidth(mpi, lay.end_ms, lambda h: f"{lay.rank_of_host[h]}_mpict")
    if events is None:
        return rows
    t0 = min(0.0, float(events["Start"].min()) * 1e3)  # the real engine's submissions precede its first task
    for rank in lay.ranks:
        mine = events[(events["Rank"] == rank) & events["Type"].isin(["Submit", "Push", "Pop"])]
        ready = submitted = 0
        pr, ps = [(t0, 0.0)], [(t0, 0.0)]
        for t, at in zip(mine["Type"], mine["Start"], strict=True):
            if t == "Submit":
                submitted += 1
                ps.append((at * 1e3, float(submitted)))
                continue
            ready += 1 if t == "Push" else -1
            pr.append((at * 1e3, float(ready)))
            if t == "Pop":
                submitted -= 1
                ps.append((at * 1e3, float(submitted)))
        rows += step_rows(f"{rank}_scheduler", READY, pr, lay.end_ms)
        if len(ps) > 1:
            rows += step_rows(f"{rank}_scheduler", SUBMITTED, ps, lay.end_ms)
    used = events[events["Type"] == "Used"]
    by_manager: dict[str, list[tuple[float, float]]] = defaultdict(lambda: [(t0, 0.0)])
    for at, m, v in zip(used["Start"], used["MemNode"], used["Value"], strict=True):
        by_manager[lay.manager(m)].append((at * 1e3, v / 2**20))
    for res in sorted(by_manager):
        rows += step_rows(res, USED, by_manager[res], lay.end_ms)
    return rows
