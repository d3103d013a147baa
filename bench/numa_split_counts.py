#!/usr/bin/env python3
"""StarPU's own counts of factor A's mechanisms against numasim's, on this machine split into two
NUMA nodes (docs/numa-split.md).

The real StarPU (native build) runs apps/lu on platforms/machines/local_numa2.yaml's hwloc topology
(`--topology described`: one core per NUMA node, so STARPU_USE_NUMA=1 gives two RAM memory nodes),
numasim runs the same DAG on the same description; both write `--memory-counts` (RAM memory nodes,
replicas allocated per node, copies per node pair, the thread that ran each copy:
testbed/traces/memory_counts.py) and a task trace, from which the copies an invalidation protocol
needs on that run's own schedule are counted (memory_counts.coherence_copies). Every core is a CPU worker (STARPU_RESERVE_NCPU=0): with StarPU's
one CPU worker per 2-core node, only one NUMA node would hold a worker and StarPU creates RAM nodes
for the NUMA nodes of its CPU workers (core/topology.c `_starpu_init_numa_node`).

The real runs generate the matrix on a CPU worker of memory node 0 (`--generate-on-main-ram`), so
that the LU starts from numasim's state (every tile valid on its home node alone); `--also-default`
adds real runs with StarPU's own placement of the generation. Real counts vary from run to run (the
schedule follows measured times): each cell is the mean of `--runs` runs with its range; numasim's
runs differ by seed (kernel variability).

Usage: .venv/bin/python bench/numa_split_counts.py [--n 1920] [--b 192] [--runs 5] [--also-default]
       [--out bench/data/numa-split-counts]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.traces.memory_counts import coherence_copies  # noqa: E402

ENV = ["--env", "STARPU_RESERVE_NCPU=0"]
#: numasim as StarPU 1.4.10 with Open MPI runs: StarPU's MPI backend, sends from the first RAM node
#: holding the tile (mpi/src/starpu_mpi.c `_starpu_mpi_choose_node`; docs/interfaces.md §4)
MPI = ["--mpi-backend", "mpi", "--mpi-memory-node", "choose_node"]


def testbed(args: list[str]) -> dict:
    """One `testbed simulate` run (the venv's interpreter, this checkout's package); its JSON."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "testbed", "-q", "simulate", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"testbed simulate {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def run_counts(cluster: str, engine: str, a: int, n: int, b: int, seed: int, tmp: Path,
               default_generation: bool) -> dict:
    """The memory counts of one run (rank 0's LU phase, and the run's RAM memory nodes)."""
    tag = f"{engine}-A{a}-s{seed}{'-gen' if default_generation else ''}"
    counts, trace = tmp / f"{tag}.json", tmp / f"{tag}-tasks.csv"
    args = ["--engine", engine, "--cluster", cluster, "--n", str(n), "--b", str(b), "--factors", f"A={a}",
            *ENV, "--seed", str(seed), "--memory-counts", str(counts), "--trace", str(trace)]
    if engine == "real":
        args += ["--topology", "described"] + ([] if default_generation else ["--generate-on-main-ram"])
    else:
        args += ["--transfers", str(tmp / f"{tag}-transfers.csv"), "--events", str(tmp / f"{tag}-events.csv"), *MPI]
    out = testbed(args)
    rank = json.loads(counts.read_text())["ranks"][0]
    # StarPU's own generation leaves tiles valid elsewhere than home, and received tiles start
    # elsewhere too: the protocol is counted from home on one rank only
    single = len(json.loads(counts.read_text())["ranks"]) == 1
    protocol = coherence_copies(trace) if single and not default_generation else None
    return {"makespan_s": out["makespan_s"], "ram_memory_nodes": rank["ram_memory_nodes"],
            "lu": rank["phases"]["lu"], "generation": rank["phases"].get("generation"),
            "protocol_copies": protocol}


#: The table's rows: label, and how to read it from a run's LU counts.
ROWS = [
    ("RAM memory nodes", lambda r: len(r["ram_memory_nodes"])),
    ("LU tasks run by the CPU worker of node 0", lambda r: r["lu"]["tasks_by_worker"].get("cpu worker of node 0", 0)),
    ("LU tasks run by the CPU worker of node 1", lambda r: r["lu"]["tasks_by_worker"].get("cpu worker of node 1", 0)),
    ("replicas allocated on node 0", lambda r: r["lu"]["allocations"].get("0", 0)),
    ("replicas allocated on node 1", lambda r: r["lu"]["allocations"].get("1", 0)),
    ("copies node 0 -> node 1", lambda r: r["lu"]["copies"].get("0->1", 0)),
    ("copies node 1 -> node 0", lambda r: r["lu"]["copies"].get("1->0", 0)),
    ("copies run by the CPU worker of node 0", lambda r: r["lu"]["copies_by_thread"].get("cpu worker of node 0", 0)),
    ("copies run by the CPU worker of node 1", lambda r: r["lu"]["copies_by_thread"].get("cpu worker of node 1", 0)),
    ("copies run by another thread", lambda r: r["lu"]["copies_by_thread"].get("other thread (main or MPI)", 0)),
    ("copies into a buffer already there (thread not recorded)",
     lambda r: r["lu"]["copies_by_thread"].get("unattributed", 0)),
    ("buffers allocated by another thread (main or MPI: receptions) on node 0",
     lambda r: r["lu"]["allocations_by_thread"].get("other thread (main or MPI) on node 0", 0)),
    ("buffers allocated by another thread (main or MPI: receptions) on node 1",
     lambda r: r["lu"]["allocations_by_thread"].get("other thread (main or MPI) on node 1", 0)),
    ("MPI receptions landing on node 0 / node 1 (numasim)",
     lambda r: None if "mpi_receptions" not in r["lu"] else
     f"{r['lu']['mpi_receptions'].get('0', 0)} / {r['lu']['mpi_receptions'].get('1', 0)}"),
    ("copies minus the protocol's count on the run's own schedule",
     lambda r: None if r["protocol_copies"] is None else
     r["lu"]["ram_to_ram_copies"] - sum(r["protocol_copies"].values())),
]


def cell(values: list) -> str:
    if any(v is None for v in values):
        return "—"
    if any(isinstance(v, str) for v in values):
        return ", ".join(dict.fromkeys(values))
    mean = statistics.fmean(values)
    lo, hi = min(values), max(values)
    return f"{mean:.1f}" if lo == hi else f"{mean:.1f} [{lo:g}–{hi:g}]"


def table(results: dict[str, dict[str, list[dict]]], columns: list[str]) -> str:
    lines = ["| count (LU phase) | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for label, get in ROWS:
        lines.append(f"| {label} | " + " | ".join(cell([get(r) for r in results[c]]) for c in columns) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="local_numa2-1",
                    help="local_numa2-1 (one rank) or local_numa2-2 (two ranks on this machine)")
    ap.add_argument("--n", type=int, default=1920)
    ap.add_argument("--b", type=int, default=192)
    ap.add_argument("--runs", type=int, default=5, help="runs per cell (real: repetitions; numasim: seeds 1..runs)")
    ap.add_argument("--also-default", action="store_true",
                    help="also real runs with StarPU's own placement of the matrix generation")
    ap.add_argument("--out", default=None, help="directory for counts.json and table.md")
    args = ap.parse_args(argv)
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="numa-split-counts-") as tmp:
        for a in (-1, 1):
            for engine, gen in (("real", False), ("numasim", False)) + ((("real", True),) if args.also_default else ()):
                name = f"{'StarPU' if engine == 'real' else 'numasim'} A={a:+d}" + (" (StarPU's generation)" if gen else "")
                results[name] = [run_counts(args.cluster, engine, a, args.n, args.b, s, Path(tmp), gen)
                                 for s in range(1, args.runs + 1)]
                print(f"{name}: {len(results[name])} runs", file=sys.stderr)
    columns = list(results)
    md = table(results, columns)
    print(md)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "counts.json").write_text(json.dumps({"n": args.n, "b": args.b, "runs": args.runs, "cluster": args.cluster,
                                                     "results": results}, indent=1, sort_keys=True) + "\n")
        (out / "table.md").write_text(md + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
