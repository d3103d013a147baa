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

With a GPU (`--cluster gpunode_numa2-1`, bench/gpu_numa_split.sh on a GPU node) the same counts
take in the GPU's memory node (StarPU numbers it after the RAM nodes) and its CUDA worker: a RAM
buffer allocated there is pinned (cudaHostAlloc, datawizard/malloc.c `_starpu_malloc_flags_on_node`),
so "buffers allocated by <thread> on node <RAM node>" are the pinned allocations per thread kind.
`--engines real` or `numasim` runs one engine (numasim may not run where the GPU is); `--merge FILE`
adds the columns of an earlier counts.json of the same cluster, N and b, so that a table holds both.

Usage: .venv/bin/python bench/numa_split_counts.py [--cluster local_numa2-1] [--n 1920] [--b 192]
       [--runs 5] [--also-default] [--engines both|real|numasim|none] [--merge FILE]...
       [--out bench/data/numa-split-counts]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.traces.memory_counts import coherence_copies  # noqa: E402

ENV = ["--env", "STARPU_RESERVE_NCPU=0"]
#: numasim as StarPU 1.4.10 with Open MPI runs: StarPU's MPI backend, sends from the first RAM node
#: holding the tile (mpi/src/starpu_mpi.c `_starpu_mpi_choose_node`; docs/interfaces.md §4)
MPI = ["--mpi-backend", "mpi", "--mpi-memory-node", "choose_node"]


def testbed(args: list[str]) -> dict:
    """One `testbed simulate` run (the venv's interpreter, this checkout's package); its JSON."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
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
    protocol = coherence_copies(trace, ram_nodes=len(rank["ram_memory_nodes"])) \
        if single and not default_generation else None
    return {"makespan_s": out["makespan_s"], "ram_memory_nodes": rank["ram_memory_nodes"],
            "memory_nodes": rank["memory_nodes"], "lu": rank["phases"]["lu"],
            "generation": rank["phases"].get("generation"), "protocol_copies": protocol}


def _who(thread: str) -> str:
    """A thread label of memory_counts as the table writes it."""
    other = "other thread (main or MPI)"
    return thread.replace(other, "a thread that is no worker (main or MPI)") if thread.startswith(other) \
        else f"the {thread}"


def fail(message: str) -> SystemExit:
    """Bad input: one line on stderr, exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    return SystemExit(2)


def named(run: dict) -> dict:
    """A run's LU counters with its memory nodes named as the table writes them: StarPU numbers the
    RAM nodes first, then the GPUs (core/topology.c), so node 1 is NUMA 1's RAM node at A = +1 and
    the GPU at A = -1; the table says `RAM k` and `GPU j`."""
    ram = [int(k) for k in run["ram_memory_nodes"]]

    def node(k: str) -> str:
        return f"RAM {k}" if int(k) in ram else f"GPU {int(k) - len(ram)}"

    def label(text: str) -> str:
        return re.sub(r"node (\d+)", lambda m: node(m.group(1)), text)

    lu = run["lu"]
    out = {field: {label(k): v for k, v in lu.get(field, {}).items()}
           for field in ("tasks_by_worker", "copies_by_thread", "allocations_by_thread")}
    out["allocations"] = {node(k): v for k, v in lu["allocations"].items()}
    out["copies"] = {" -> ".join(node(k) for k in pair.split("->")): v for pair, v in lu["copies"].items()}
    return out


def _keys(runs: list[dict], field: str, always: tuple[str, ...] = ()) -> list[str]:
    """The keys of a counter of the LU phase over all runs (and `always`), sorted."""
    return sorted({*always, *(k for r in runs for k in named(r)[field])})


def rows(runs: list[dict]) -> list[tuple[str, Callable[[dict], Any]]]:
    """The table's rows for these runs: label, and how to read it from a run's counts. Node pairs,
    nodes and threads are those any run saw (RAM nodes 0 and 1 always)."""
    out: list[tuple[str, Callable[[dict], Any]]] = [
        ("RAM memory nodes", lambda r: len(r["ram_memory_nodes"])),
        ("makespan (s)", lambda r: r["makespan_s"]),
    ]
    for w in _keys(runs, "tasks_by_worker", ("cpu worker of RAM 0", "cpu worker of RAM 1")):
        out.append((f"LU tasks run by {_who(w)}", lambda r, w=w: named(r)["tasks_by_worker"].get(w, 0)))
    for n in _keys(runs, "allocations", ("RAM 0", "RAM 1")):
        out.append((f"replicas allocated on {n}", lambda r, n=n: named(r)["allocations"].get(n, 0)))
    for pair in _keys(runs, "copies", ("RAM 0 -> RAM 1", "RAM 1 -> RAM 0")):
        out.append((f"copies {pair}", lambda r, p=pair: named(r)["copies"].get(p, 0)))
    for t in _keys(runs, "copies_by_thread"):
        label = ("copies into a buffer already there (thread not recorded)" if t == "unattributed"
                 else f"copies run by {_who(t)}")
        out.append((label, lambda r, t=t: named(r)["copies_by_thread"].get(t, 0)))
    # with CUDA workers a RAM buffer is pinned: these are the pinned allocations per thread kind
    for t in _keys(runs, "allocations_by_thread"):
        out.append((f"buffers allocated by {_who(t)}", lambda r, t=t: named(r)["allocations_by_thread"].get(t, 0)))
    out.append(("MPI receptions landing on RAM 0 / RAM 1 (numasim)",
                lambda r: None if "mpi_receptions" not in r["lu"] else
                f"{r['lu']['mpi_receptions'].get('0', 0)} / {r['lu']['mpi_receptions'].get('1', 0)}"))
    out.append(("copies minus the protocol's count on the run's own schedule",
                lambda r: None if r["protocol_copies"] is None else
                sum(r["lu"]["copies"].values()) - sum(r["protocol_copies"].values())))
    return out


def cell(values: list, digits: int = 1) -> str:
    if any(v is None for v in values):
        return "—"
    if any(isinstance(v, str) for v in values):
        return ", ".join(dict.fromkeys(values))
    mean = statistics.fmean(values)
    lo, hi = min(values), max(values)
    if digits > 1:  # a time: its range at the same precision
        return f"{mean:.{digits}f}" if lo == hi else f"{mean:.{digits}f} [{lo:.{digits}f}–{hi:.{digits}f}]"
    return f"{mean:.1f}" if lo == hi else f"{mean:.1f} [{lo:g}–{hi:g}]"


def table(results: dict[str, list[dict]], columns: list[str]) -> str:
    lines = ["| count (LU phase) | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for label, get in rows([r for c in columns for r in results[c]]):
        digits = 4 if label == "makespan (s)" else 1
        lines.append(f"| {label} | " + " | ".join(cell([get(r) for r in results[c]], digits) for c in columns) + " |")
    return "\n".join(lines)


def merged(path: Path, cluster: str, n: int, b: int) -> dict[str, list[dict]]:
    """The columns of an earlier counts.json (--merge) of the same cluster, N and b; else one line
    naming the file and key, exit 2."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise fail(f"{path}: expected a counts.json of bench/numa_split_counts.py ({e})") from None
    for key, want in (("cluster", cluster), ("n", n), ("b", b)):
        if not isinstance(data, dict) or data.get(key) != want:
            got = data.get(key) if isinstance(data, dict) else None
            raise fail(f"{path}: {key}: expected {want!r} (this run's), got {got!r}")
    if not isinstance(data.get("results"), dict):
        raise fail(f"{path}: results: expected the runs of each column")
    return data["results"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="local_numa2-1",
                    help="local_numa2-1 (one rank) or local_numa2-2 (two ranks on this machine)")
    ap.add_argument("--n", type=int, default=1920)
    ap.add_argument("--b", type=int, default=192)
    ap.add_argument("--runs", type=int, default=5, help="runs per cell (real: repetitions; numasim: seeds 1..runs)")
    ap.add_argument("--also-default", action="store_true",
                    help="also real runs with StarPU's own placement of the matrix generation")
    ap.add_argument("--engines", choices=["both", "real", "numasim", "none"], default="both",
                    help="which engines run (none: only the --merge files' columns)")
    ap.add_argument("--merge", action="append", default=[], type=Path, metavar="FILE",
                    help="an earlier counts.json of the same cluster, N and b whose columns join the table")
    ap.add_argument("--out", default=None, help="directory for counts.json and table.md")
    args = ap.parse_args(argv)
    results: dict[str, list[dict]] = {}
    for path in args.merge:
        results.update(merged(path, args.cluster, args.n, args.b))
    engines = {"both": ("real", "numasim"), "real": ("real",), "numasim": ("numasim",), "none": ()}[args.engines]
    with tempfile.TemporaryDirectory(prefix="numa-split-counts-") as tmp:
        for a in (-1, 1):
            for engine, gen in (("real", False), ("numasim", False)) + ((("real", True),) if args.also_default else ()):
                if engine not in engines:
                    continue
                name = f"{'StarPU' if engine == 'real' else 'numasim'} A={a:+d}" + (" (StarPU's generation)" if gen else "")
                results[name] = [run_counts(args.cluster, engine, a, args.n, args.b, s, Path(tmp), gen)
                                 for s in range(1, args.runs + 1)]
                print(f"{name}: {len(results[name])} runs", file=sys.stderr)
    columns = sorted(results, key=lambda c: ("A=+1" in c, "generation" in c, "numasim" in c))
    if not columns:
        raise fail("--engines none: expected runs from --merge FILE")
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
