"""What a run did with its memory nodes: RAM memory nodes, replicas allocated per node, copies per
node pair and the thread that ran each copy, counted the same way from the real StarPU's FxT trace
and from numasim's transfer log and runtime events (`testbed simulate --memory-counts FILE`,
docs/numa-split.md).

StarPU (the `real` engine): apps/lu/fxt_events prints every event of the ranks' FxT files with
FxT's own reader; the events read here are StarPU 1.4.10's (src/common/fxt.h):

* `_STARPU_FUT_NEW_MEM_NODE` 0x5122 (node id, thread): one per memory node StarPU registers
  (datawizard/memory_nodes.c `_starpu_memory_node_register`, always recorded);
* `_STARPU_FUT_WORKER_INIT_START` 0x5100 (kind key 0x100 + kind, worker id, device id, memory node,
  bind id, sync, thread): each worker's kind, memory node and thread (kind 0 CPU, 1 CUDA:
  include/starpu_worker.h `enum starpu_worker_archtype`);
* `_STARPU_FUT_START_ALLOC` 0x5127 (memory node, thread, size, handle, prefetch): a buffer
  allocated for a replica (datawizard/memalloc.c `_starpu_allocate_interface`; the application's
  own `starpu_malloc` of the tiles it registers is not one);
* `_STARPU_FUT_START_DRIVER_COPY` 0x5133 (source node, destination node, size, com id, prefetch,
  handle): a copy (datawizard/copy_driver.c `_starpu_driver_copy_data_1_to_1`, the place that
  also counts STARPU_BUS_STATS' transfers per node pair, `_starpu_bus_update_profiling_info`);
* `_STARPU_FUT_MODEL_NAME` 0x511c (job id, thread, name), `_STARPU_FUT_TASK_SUBMIT` 0x511a (job
  id, ...) and `_STARPU_FUT_END_CODELET_BODY` 0x5103 (job id, size, hash, worker id, ...): the LU's
  first submission and its last task's end, which bound its phase, and the worker that ran each
  LU task. apps/lu generates the matrix first (dplrnt tasks,
  phase `generation`), factorizes it after a barrier (`lu`), then unregisters the tiles, which
  brings each one back to its home node, memory node 0 (`after`: datawizard/filters.c and
  interfaces/data_interface.c `_starpu_data_unregister` fetch the data on its home node).

FxT records no thread id with a copy, so the thread that ran one is known when the copy needed a
new buffer: `_starpu_driver_copy_data_1_to_1` allocates it (`_starpu_allocate_memory_on_node`) and
copies in the same call, so a START_ALLOC of that handle on that node, with no copy of the handle between it
and the copy, names the thread. (An allocation with no copy, coherency.c
`_starpu_create_request_to_fetch_data` for a write-only access to a RAM node without pinning,
made by whichever thread asks, is followed by the task's own write, not by a copy of the handle.)
A copy into a buffer the replica already had is counted as `unattributed`.

numasim: the transfer CSV (`Src`, `Dst` hosts `<node>.ram<k>` and `<node>.gpu<j>`, `Thread`: the
worker that ran a copy between RAM nodes) and the events CSV (`Worker` rows, `Allocating` rows on a
memory node), docs/interfaces.md §4 and §10, its memory nodes numbered as StarPU numbers them (the
RAM nodes first, NUMA node k as k, then GPU j as the number of RAM nodes + j: core/topology.c
registers the RAM nodes, then one per CUDA device). numasim does not simulate the matrix
generation: its counts are the LU's.
"""

from __future__ import annotations

import csv
import subprocess
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

NEW_MEM_NODE = 0x5122
WORKER_INIT_START = 0x5100
START_ALLOC = 0x5127
START_DRIVER_COPY = 0x5133
MODEL_NAME = 0x511C
TASK_SUBMIT = 0x511A
END_CODELET_BODY = 0x5103
WORKER_KINDS = {0: "cpu", 1: "cuda"}  # include/starpu_worker.h enum starpu_worker_archtype


def read_events(tool: Path, files: list[Path]) -> list[tuple[int, int, int, list[int]]]:
    """(rank file index, time ns, code, params) of every event, in the files' order."""
    proc = subprocess.run([str(tool), *map(str, files)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{tool} failed with exit status {proc.returncode}: {proc.stderr.strip()[-500:]}")
    out = []
    for line in proc.stdout.splitlines():
        f = line.split("\t")
        out.append((int(f[0]), int(f[1]), int(f[3], 16), [int(p) for p in f[5:5 + int(f[4])]]))
    return out


def fxt_string(params: list[int]) -> str:
    """The string StarPU packs into an event's parameters after the numbers
    (`_STARPU_FUT_FULL_PROBE2STR`, src/common/fxt.h): 8 bytes per parameter, NUL-terminated."""
    raw = b"".join(p.to_bytes(8, "little") for p in params)
    return raw.split(b"\0", 1)[0].decode("ascii", "replace")


def _empty_phase() -> dict[str, Any]:
    return {"allocations": Counter(), "replicas": defaultdict(set), "copies": Counter(), "copy_bytes": Counter(),
            "copies_by_thread": Counter(), "tasks_by_worker": Counter(), "allocations_by_thread": Counter()}


def _finish(phase: dict[str, Any], ram_nodes: list[int]) -> dict[str, Any]:
    return {
        "allocations": {str(k): v for k, v in sorted(phase["allocations"].items())},
        "replicas": {str(k): len(v) for k, v in sorted(phase["replicas"].items())},
        "copies": dict(sorted(phase["copies"].items())),
        "copy_bytes": dict(sorted(phase["copy_bytes"].items())),
        "ram_to_ram_copies": sum(v for pair, v in phase["copies"].items()
                                 if all(int(k) in ram_nodes for k in pair.split("->"))),
        "copies_by_thread": dict(sorted(phase["copies_by_thread"].items())),
        "tasks_by_worker": dict(sorted(phase["tasks_by_worker"].items())),
        "allocations_by_thread": dict(sorted(phase["allocations_by_thread"].items())),
    }


def _who(workers: dict[int, tuple[str, int, int]], thread: int | None) -> str:
    if thread in workers:
        kind, _, mem = workers[thread]
        return f"{kind} worker of node {mem}"
    return "other thread (main or MPI)"


def starpu_counts(events: list[tuple[int, int, int, list[int]]], lu_models: set[str]) -> dict[str, Any]:
    """Counts of one rank's FxT events (read_events), per phase: `generation` before the LU's first
    task submission (a job whose model is in `lu_models`), `lu` from it to the end of its last task,
    `after` from then on."""
    nodes: set[int] = set()
    workers: dict[int, tuple[str, int, int]] = {}  # thread -> (kind, worker id, memory node)
    by_id: dict[int, tuple[str, int]] = {}  # worker id -> (kind, memory node)
    lu_jobs: set[int] = set()
    for _, _, code, p in events:
        if code == NEW_MEM_NODE:
            nodes.add(p[0])
        elif code == WORKER_INIT_START:
            workers[p[6]] = (WORKER_KINDS.get(p[0] - 0x100, f"kind{p[0] - 0x100}"), p[1], p[3])
            by_id[p[1]] = (workers[p[6]][0], p[3])
        elif code == MODEL_NAME and fxt_string(p[2:]) in lu_models:
            lu_jobs.add(p[0])
    lu_start = min((t for _, t, code, p in events if code == TASK_SUBMIT and p[0] in lu_jobs), default=None)
    lu_end = max((t for _, t, code, p in events if code == END_CODELET_BODY and p[0] in lu_jobs), default=None)
    ram_nodes = sorted({0} | {mem for kind, _, mem in workers.values() if kind == "cpu"})
    phases = {"generation": _empty_phase(), "lu": _empty_phase(), "after": _empty_phase()}
    # handle -> (node, thread) of its latest allocation, until the handle's next copy
    last_alloc: dict[int, tuple[int, int]] = {}
    for _, t, code, p in events:
        if lu_start is None or t < lu_start:
            phase = phases["generation"]
        else:
            phase = phases["lu" if lu_end is None or t <= lu_end else "after"]
        if code == END_CODELET_BODY and p[0] in lu_jobs:
            kind, mem = by_id.get(p[3], ("unknown", -1))
            phase["tasks_by_worker"][f"{kind} worker of node {mem}"] += 1
        elif code == START_ALLOC:
            node, thread, handle = p[0], p[1], p[3]
            phase["allocations"][node] += 1
            phase["allocations_by_thread"][f"{_who(workers, thread)} on node {node}"] += 1
            phase["replicas"][node].add(handle)
            last_alloc[handle] = (node, thread)
        elif code == START_DRIVER_COPY:
            src, dst, size, handle = p[0], p[1], p[2], p[5]
            pair = f"{src}->{dst}"
            phase["copies"][pair] += 1
            phase["copy_bytes"][pair] += size
            node, thread = last_alloc.pop(handle, (None, None))
            phase["copies_by_thread"][_who(workers, thread) if node == dst else "unattributed"] += 1
    return {"engine": "real", "memory_nodes": sorted(nodes), "ram_memory_nodes": ram_nodes,
            "workers": dict(sorted(Counter(f"{k} worker of node {m}" for k, _, m in workers.values()).items())),
            "lu_phase_found": lu_start is not None,
            "phases": {name: _finish(ph, ram_nodes) for name, ph in phases.items()}}


def _ram_index(host: str) -> int | None:
    """k of a numasim RAM host `<node>.ram<k>`; None for other hosts."""
    tail = host.rsplit(".", 1)[-1]
    return int(tail[3:]) if tail.startswith("ram") and tail[3:].isdigit() else None


def _gpu_index(host: str) -> int | None:
    """j of a numasim GPU host `<node>.gpu<j>`; None for other hosts."""
    tail = host.rsplit(".", 1)[-1]
    return int(tail[3:]) if tail.startswith("gpu") and tail[3:].isdigit() else None


def numasim_counts(transfers: Path, events: Path) -> list[dict[str, Any]]:
    """The same counts from numasim's transfer CSV and events CSV, one per rank (node zone, in rank
    order); a transfer between two nodes is an MPI message, counted on the receiver by the memory
    node it lands on (`mpi_receptions`)."""
    with events.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    rank_of: dict[str, int] = {}
    workers: dict[str, int | None] = {}
    kinds: dict[str, str] = {}
    rams: dict[str, set[int]] = defaultdict(lambda: {0})  # node -> its RAM memory nodes (CPU workers' and 0)
    for r in rows:
        if r["Type"] == "Worker" and _ram_index(r["MemNode"]) is not None:
            rams[r["Thread"].rsplit(".", 1)[0]].add(_ram_index(r["MemNode"]))

    def mem(host: str) -> int | None:
        """The memory node of a RAM or GPU host, StarPU's numbering."""
        ram, gpu = _ram_index(host), _gpu_index(host)
        return ram if ram is not None else None if gpu is None else len(rams[host.rsplit(".", 1)[0]]) + gpu

    for r in rows:
        if r["Type"] == "Worker":
            rank_of.setdefault(r["Thread"].rsplit(".", 1)[0], int(r["Rank"]))
            workers[r["Thread"]] = mem(r["MemNode"])
            kinds[r["Thread"]] = "cuda" if ".gpu" in r["Thread"] else "cpu"

    def label(thread: str) -> str:
        return f"{kinds[thread]} worker of node {workers[thread]}" if thread in workers else "other thread (main or MPI)"

    nodes = sorted(rank_of, key=rank_of.get)
    phases = {n: _empty_phase() for n in nodes}
    receptions: dict[str, Counter] = {n: Counter() for n in nodes}
    for r in rows:
        node = mem(r["MemNode"])
        host = (r["Thread"] if r["Type"] == "Pop" else r["MemNode"]).rsplit(".", 1)[0]
        if host not in phases:
            continue
        if r["Type"] == "Allocating" and node is not None:
            phases[host]["allocations"][node] += 1
            phases[host]["allocations_by_thread"][f"{label(r['Thread'])} on node {node}"] += 1
        elif r["Type"] == "Pop" and r["Thread"] in workers:
            phases[host]["tasks_by_worker"][label(r["Thread"])] += 1
    with transfers.open(newline="") as fh:
        for r in csv.DictReader(fh):
            src, dst = mem(r["Src"]), mem(r["Dst"])
            src_host, dst_host = r["Src"].rsplit(".", 1)[0], r["Dst"].rsplit(".", 1)[0]
            if src is None or dst is None or dst_host not in phases:
                continue
            if src_host != dst_host:
                receptions[dst_host][str(dst)] += 1
                continue
            phase, pair = phases[dst_host], f"{src}->{dst}"
            phase["copies"][pair] += 1
            phase["copy_bytes"][pair] += int(r["Bytes"])
            thread = r.get("Thread", "")
            phase["copies_by_thread"][label(thread) if thread else "unattributed"] += 1
    out = []
    for n in nodes:
        lu = _finish(phases[n], sorted(rams[n]))
        # numasim allocates a RAM replica once per (tile, node) and keeps it (docs/page-placement.md)
        lu["replicas"] = dict(lu["allocations"])
        lu["mpi_receptions"] = dict(sorted(receptions[n].items()))
        mine = [t for t in workers if t.rsplit(".", 1)[0] == n]
        ram_nodes = sorted(rams[n])
        nodes_used = sorted({workers[t] for t in mine if workers[t] is not None} | set(ram_nodes))
        out.append({"engine": "numasim", "memory_nodes": nodes_used, "ram_memory_nodes": ram_nodes,
                    "workers": dict(sorted(Counter(label(t) for t in mine).items())),
                    "lu_phase_found": True, "phases": {"lu": lu}})
    return out


def coherence_copies(trace: Path, home_node: int = 0, ram_nodes: int = 1) -> dict[str, int]:
    """The copies an invalidation protocol needs for the schedule of a task trace (the
    tidy table of docs/interfaces.md §10: `Start`, `Value`, `Step`, `X`, `Y`, `WorkerMemNode`): the
    tasks in start order, each operand fetched to the worker's memory node unless a valid copy is
    there, a written tile then valid there alone (datawizard/coherency.c
    `_starpu_fetch_data_on_node`, `_starpu_update_data_state`), every tile valid on `home_node` alone
    at the start. Operands are the LU's (Chameleon's pzgetrf_nopiv): getrf(k) A(k,k); trsm writing
    A(m,n) at step k reads A(k,k); gemm writing A(m,n) reads A(m,k) and A(k,n). Comparing an
    engine's copies with this count on its own schedule separates how it copies from where it ran
    the tasks. Memory nodes are StarPU's numbers: the real trace's `<node>.memnode<k>`, numasim's
    `<node>.ram<k>`, and numasim's `<node>.gpu<j>` after the run's `ram_nodes` RAM nodes."""
    def node(text: str) -> int:  # `<node>.memnode<k>` (real), `<node>.ram<k>` or `<node>.gpu<j>` (numasim)
        tail = text[len(text.rstrip("0123456789")):]
        if not tail:
            return home_node
        return int(tail) + (ram_nodes if _gpu_index(text) is not None else 0)

    with trace.open(newline="") as fh:
        rows = sorted(csv.DictReader(fh), key=lambda r: float(r["Start"]))
    valid: dict[tuple[int, int], set[int]] = {}
    copies: Counter = Counter()
    for r in rows:
        k, m, n, here = int(r["Step"]), int(r["X"]), int(r["Y"]), node(r["WorkerMemNode"])
        reads = [] if r["Value"] == "getrf" else [(k, k)] if r["Value"] == "trsm" else [(m, k), (k, n)]
        for tile in [*reads, (m, n)]:
            where = valid.setdefault(tile, {home_node})
            if here not in where:
                copies[f"{min(where)}->{here}"] += 1
                where.add(here)
        valid[(m, n)] = {here}
    return dict(sorted(copies.items()))
