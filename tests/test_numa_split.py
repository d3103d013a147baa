"""The real StarPU on this machine split into two NUMA nodes (docs/numa-split.md): `--topology`
hands it an hwloc XML topology, and `--memory-counts` reads what it did from its FxT trace.

The end-to-end test runs the native StarPU (apps/lu) on platforms/machines/local_numa2.yaml's
topology: at A = +1 StarPU must register two RAM memory nodes and copy tiles between them, at
A = -1 one node and no copy. It is skipped where the native StarPU, apps/lu or its FxT reader is
not built, or where this machine has fewer than the 2 PUs the split topology binds to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import ROOT
from testbed.common.errors import InputError
from testbed.common.paths import FXT_EVENTS, LU_REAL
from testbed.describe.hwloc_xml import check_topology, topology_tree, write_topology
from testbed.describe.machines import load_machine
from testbed.traces import memory_counts as mc


def _native_missing() -> str | None:
    from testbed.common.paths import STARPU_NATIVE

    if not (Path(STARPU_NATIVE) / "lib").is_dir():
        return f"native StarPU not installed ({STARPU_NATIVE}; envs/setup.sh)"
    for path, what in ((LU_REAL, "apps/lu"), (FXT_EVENTS, "apps/lu's FxT reader")):
        if not path.exists():
            return f"{what} not built ({path}; make build)"
    if len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0):
        return "the split topology binds StarPU's workers to PUs 0 and 1, which this process may not use"
    return None


def simulate_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "testbed", "-q", "simulate", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


def test_described_topology_splits_the_cores() -> None:
    """local_numa2's hwloc export: two NUMA nodes of one PU each, PUs 0 and 1."""
    root = topology_tree(load_machine("local_numa2")).getroot()
    numas = [o for o in root.iter("object") if o.get("type") == "NUMANode"]
    pus = [(o.get("os_index"), o.getparent().getparent().getparent().get("os_index"))
           for o in root.iter("object") if o.get("type") == "PU"]
    assert [n.get("os_index") for n in numas] == ["0", "1"]
    assert sorted(p for p, _ in pus) == ["0", "1"]


def test_check_topology_refuses_what_starpu_cannot_bind(tmp_path: Path) -> None:
    xml = tmp_path / "t.xml"
    write_topology(load_machine("local_numa2"), xml)
    assert check_topology(xml.read_bytes(), xml, "--topology", pus={0, 1}) == 2
    with pytest.raises(InputError, match=r"PU P#1: expected a PU of this machine \(0\)"):
        check_topology(xml.read_bytes(), xml, "--topology", pus={0})
    with pytest.raises(InputError, match="invalid XML"):
        check_topology(b"<topology", xml, "--topology", pus={0, 1})
    with pytest.raises(InputError, match="NUMANode and PU"):
        check_topology(b"<topology version='2.0'/>", xml, "--topology", pus={0, 1})


def test_topology_is_the_real_engines_option(tmp_path: Path) -> None:
    """Bad input: one line naming the option, exit 2, nothing written."""
    counts = tmp_path / "counts.json"
    run = simulate_cli("--engine", "numasim", "--cluster", "local_numa2-1", "--n", "384", "--b", "192",
                  "--topology", "described", cwd=tmp_path)
    assert run.returncode == 2 and run.stderr.strip().splitlines() == [
        "error: --topology: expected the real engine (the topology the real StarPU loads; numasim reads the "
        "machine description)"]
    run = simulate_cli("--engine", "numasim", "--cluster", "local_numa2-1", "--n", "384", "--b", "192",
                  "--memory-counts", str(counts), cwd=tmp_path)
    assert run.returncode == 2 and "--transfers and --events" in run.stderr and not counts.exists()
    bad = tmp_path / "bad.xml"
    bad.write_text("<topology version='2.0'><object type='Machine'/></topology>")
    run = simulate_cli("--engine", "real", "--cluster", "local_numa2-1", "--n", "384", "--b", "192",
                  "--topology", str(bad), "--memory-counts", str(counts), cwd=tmp_path)
    assert run.returncode == 2 and f"error: {bad}: --topology: expected" in run.stderr and not counts.exists()


def _events(*rows: tuple[int, int, list[int]]) -> list[tuple[int, int, int, list[int]]]:
    return [(0, t, code, params) for t, code, params in rows]


def _name(text: str) -> list[int]:
    raw = text.encode() + b"\0" * (8 - len(text) % 8)
    return [int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw), 8)]


def test_starpu_counts_from_events() -> None:
    """Phases, allocations, copies and the thread of a copy into a new buffer, on hand-made events
    with StarPU 1.4.10's codes and parameters (src/common/fxt.h)."""
    cpu0, cpu1, main = 11, 12, 10
    ev = _events(
        (1, mc.NEW_MEM_NODE, [0, main]), (2, mc.NEW_MEM_NODE, [1, main]),
        (3, mc.WORKER_INIT_START, [0x100, 0, 0, 0, 0, 1, cpu0]), (4, mc.WORKER_INIT_START, [0x100, 1, 1, 1, 1, 1, cpu1]),
        (5, mc.MODEL_NAME, [7, main, *_name("dplrnt")]), (6, mc.MODEL_NAME, [8, main, *_name("dgemm")]),
        (10, mc.TASK_SUBMIT, [7, 0, 0, 0, 0, 0, main]),
        (11, mc.START_ALLOC, [1, main, 64, 0xA, 1]),          # generation: a write-only allocation
        (20, mc.TASK_SUBMIT, [8, 0, 0, 0, 0, 0, main]),       # the LU starts
        (21, mc.START_DRIVER_COPY, [1, 0, 64, 1, 0, 0xA]),    # into the home buffer: thread unknown
        (22, mc.START_ALLOC, [1, cpu1, 64, 0xB, 0]),
        (23, mc.START_DRIVER_COPY, [0, 1, 64, 2, 0, 0xB]),    # into the buffer just allocated by cpu1
        (24, mc.START_DRIVER_COPY, [0, 1, 64, 3, 0, 0xA]),    # 0xA's buffer on node 1 predates its last copy
        (25, mc.END_CODELET_BODY, [8, 64, 0, 1, cpu1]),
        (30, mc.START_DRIVER_COPY, [1, 0, 64, 4, 0, 0xB]),    # after the LU: unregistration
    )
    c = mc.starpu_counts(ev, {"dgemm"})
    assert c["memory_nodes"] == [0, 1] and c["ram_memory_nodes"] == [0, 1]
    gen, lu, after = (c["phases"][k] for k in ("generation", "lu", "after"))
    assert gen["allocations"] == {"1": 1} and gen["ram_to_ram_copies"] == 0
    assert lu["allocations"] == {"1": 1} and lu["copies"] == {"0->1": 2, "1->0": 1}
    assert lu["copies_by_thread"] == {"cpu worker of node 1": 1, "unattributed": 2}
    assert lu["tasks_by_worker"] == {"cpu worker of node 1": 1}
    assert after["copies"] == {"1->0": 1}


def test_numasim_counts_per_rank(tmp_path: Path) -> None:
    """numasim's logs of two ranks: copies and allocations per rank, an MPI message counted on the
    receiver by the memory node it lands on, not as a copy."""
    events, transfers = tmp_path / "e.csv", tmp_path / "t.csv"
    events.write_text("Type,Start,End,Rank,Thread,MemNode,Value\n"
                      "Worker,0,0,0,a.cpu0,a.ram0,0\nWorker,0,0,0,a.cpu1,a.ram1,1\n"
                      "Worker,0,0,1,b.cpu0,b.ram0,0\nWorker,0,0,1,b.cpu1,b.ram1,1\n"
                      "Allocating,1,1,0,a.cpu1,a.ram1,64\nPop,1,1,0,a.cpu1,,7\nPop,1,1,1,b.cpu0,,8\n")
    transfers.write_text("Start,End,Bytes,Src,Dst,Links,Estimate,Calibrated,Thread\n"
                         "1,2,64,a.ram0,a.ram1,x,,,a.cpu1\n"
                         "2,3,64,a.ram0,b.ram0,x,,,\n"
                         "3,4,64,b.ram0,b.ram1,x,,,b.cpu1\n")
    a, b = mc.numasim_counts(transfers, events)
    assert a["phases"]["lu"]["copies"] == {"0->1": 1} and a["phases"]["lu"]["mpi_receptions"] == {}
    assert a["phases"]["lu"]["allocations_by_thread"] == {"cpu worker of node 1 on node 1": 1}
    assert a["phases"]["lu"]["tasks_by_worker"] == {"cpu worker of node 1": 1}
    assert b["phases"]["lu"]["copies"] == {"0->1": 1} and b["phases"]["lu"]["mpi_receptions"] == {"0": 1}
    assert b["phases"]["lu"]["copies_by_thread"] == {"cpu worker of node 1": 1}
    assert b["ram_memory_nodes"] == [0, 1] and b["phases"]["lu"]["tasks_by_worker"] == {"cpu worker of node 0": 1}


def test_coherence_copies(tmp_path: Path) -> None:
    """The protocol's count on a hand-made schedule of a 2 x 2 LU: every copy the operands need."""
    trace = tmp_path / "t.csv"
    rows = [("0.0", "getrf", 0, 0, 0, "n.ram0"),   # A(0,0) at home
            ("1.0", "trsm", 0, 1, 0, "n.ram1"),    # reads A(0,0), writes A(1,0): 2 copies 0->1
            ("1.5", "trsm", 0, 0, 1, "n.ram0"),    # reads A(0,0) (still valid on 0), writes A(0,1)
            ("2.0", "gemm", 0, 1, 1, "n.ram0"),    # reads A(1,0) (valid on 1 only): 1 copy 1->0
            ("3.0", "getrf", 1, 1, 1, "n.ram1")]   # A(1,1), written on 0 since: 1 copy 0->1
    trace.write_text("Start,Value,Step,X,Y,WorkerMemNode\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    assert mc.coherence_copies(trace) == {"0->1": 3, "1->0": 1}


@pytest.mark.skipif(_native_missing() is not None, reason=_native_missing() or "")
def test_real_starpu_on_a_split_topology(tmp_path: Path) -> None:
    """The real StarPU sees two RAM memory nodes at A = +1 and copies tiles between them, each copy
    into a new buffer run by the CPU worker of the destination node, as many as the invalidation
    protocol needs on its schedule; one node and no copy at A = -1."""
    seen = {}
    for a in (-1, 1):
        counts, trace = tmp_path / f"counts{a}.json", tmp_path / f"tasks{a}.csv"
        run = simulate_cli("--engine", "real", "--cluster", "local_numa2-1", "--n", "768", "--b", "192",
                           "--factors", f"A={a}", "--env", "STARPU_RESERVE_NCPU=0", "--topology", "described",
                           "--generate-on-main-ram", "--memory-counts", str(counts), "--trace", str(trace),
                           cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        out = json.loads(run.stdout)
        assert out["topology_numa_nodes"] == {"local_numa2": 2}
        seen[a] = json.loads(counts.read_text())["ranks"][0]
        assert out["ram_memory_nodes_by_rank"] == [seen[a]["ram_memory_nodes"]]
        assert seen[a]["lu_phase_found"]
        assert sum(seen[a]["phases"]["lu"]["tasks_by_worker"].values()) == out["tasks"]
        # StarPU copies exactly what the invalidation protocol needs on the schedule it ran
        assert seen[a]["phases"]["lu"]["copies"] == mc.coherence_copies(trace)
    assert seen[-1]["ram_memory_nodes"] == [0]
    assert seen[-1]["phases"]["lu"]["ram_to_ram_copies"] == 0
    assert seen[1]["ram_memory_nodes"] == [0, 1]
    lu = seen[1]["phases"]["lu"]
    assert lu["copies"].get("0->1", 0) > 0 and lu["allocations"].get("1", 0) > 0
    # every tile starts on memory node 0 (--generate-on-main-ram): nothing was allocated on node 1 before
    assert seen[1]["phases"]["generation"]["allocations"] == {}
    assert lu["copies_by_thread"].get("cpu worker of node 1", 0) == lu["allocations"]["1"]


def test_numasim_counts_number_a_gpu_after_the_ram_nodes(tmp_path: Path) -> None:
    """With a GPU, numasim's memory nodes are StarPU's numbers: the RAM nodes, then GPU j as their
    count + j (core/topology.c), for copies, allocations, workers and the protocol's count."""
    events, transfers, trace = tmp_path / "e.csv", tmp_path / "t.csv", tmp_path / "tasks.csv"
    events.write_text("Type,Start,End,Rank,Thread,MemNode,Value\n"
                      "Worker,0,0,0,a.gpu0,a.gpu0,0\nWorker,0,0,0,a.cpu0,a.ram0,1\nWorker,0,0,0,a.cpu1,a.ram1,2\n"
                      "Allocating,1,1,0,a.gpu0,a.gpu0,64\nAllocating,1,1,0,a.gpu0,a.ram1,64\n"
                      "Pop,1,1,0,a.gpu0,,7\n")
    transfers.write_text("Start,End,Bytes,Src,Dst,Links,Estimate,Calibrated,Thread\n"
                         "1,2,64,a.ram0,a.gpu0,x,,,\n2,3,64,a.gpu0,a.ram1,x,,,\n3,4,64,a.ram0,a.ram1,x,,,a.cpu1\n")
    (a,) = mc.numasim_counts(transfers, events)
    lu = a["phases"]["lu"]
    assert a["ram_memory_nodes"] == [0, 1] and a["memory_nodes"] == [0, 1, 2]
    assert lu["copies"] == {"0->2": 1, "2->1": 1, "0->1": 1} and lu["ram_to_ram_copies"] == 1
    assert lu["allocations"] == {"1": 1, "2": 1}
    assert lu["allocations_by_thread"] == {"cuda worker of node 2 on node 1": 1, "cuda worker of node 2 on node 2": 1}
    assert lu["tasks_by_worker"] == {"cuda worker of node 2": 1}
    trace.write_text("Start,Value,Step,X,Y,WorkerMemNode\n0.0,getrf,0,0,0,a.gpu0\n")
    assert mc.coherence_copies(trace, ram_nodes=2) == {"0->2": 1}


def _split_counts(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "bench" / "numa_split_counts.py"), *args], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)


def test_split_counts_tables_name_memory_nodes_and_merge_runs(tmp_path: Path) -> None:
    """bench/numa_split_counts.py: a run's nodes named RAM k / GPU j (StarPU numbers the GPU after
    the RAM nodes, so node 1 is the GPU at A = -1 and NUMA 1 at A = +1), the columns of an earlier
    counts.json merged in; a counts.json of another cluster, N or b is refused (one line, exit 2)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import numa_split_counts as nsc

    run = {"ram_memory_nodes": [0], "lu": {"tasks_by_worker": {"cuda worker of node 1": 3},
                                           "copies_by_thread": {}, "allocations_by_thread": {
                                               "cuda worker of node 1 on node 0": 2},
                                           "allocations": {"1": 4}, "copies": {"0->1": 5}}}
    assert nsc.named(run) == {"tasks_by_worker": {"cuda worker of GPU 0": 3}, "copies_by_thread": {},
                              "allocations_by_thread": {"cuda worker of GPU 0 on RAM 0": 2},
                              "allocations": {"GPU 0": 4}, "copies": {"RAM 0 -> GPU 0": 5}}
    earlier = tmp_path / "counts.json"
    earlier.write_text(json.dumps({"cluster": "local_numa2-1", "n": 384, "b": 192, "results": {"StarPU A=-1": [
        {**run, "makespan_s": 0.5, "memory_nodes": [0, 1], "protocol_copies": None}]}}))
    ok = _split_counts("--n", "384", "--b", "192", "--engines", "none", "--merge", str(earlier))
    assert ok.returncode == 0, ok.stderr
    assert "| copies RAM 0 -> GPU 0 | 5.0 |" in ok.stdout and "| makespan (s) | 0.5000 |" in ok.stdout
    bad = _split_counts("--n", "768", "--b", "192", "--engines", "none", "--merge", str(earlier))
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [f"error: {earlier}: n: expected 768 (this run's), got 384"]
