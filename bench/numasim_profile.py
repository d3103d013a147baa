#!/usr/bin/env python3
"""Where numasim's time goes, per subsystem: perf samples of one run, grouped by function.

Runs `perf record` (sampled CPU time, no call graphs) on numasim for one run description and
sums the samples' self time per subsystem: SimGrid's max-min sharing (lmm), its activities and
network model (comms, routes, actions), its actors and contexts (simcalls, context switches),
the rest of its engine; numasim's scheduler, data management, NUMA effects and memory model,
runtime (worker loops, task release, sleeps), set-up (parsing, the task graph); the allocator,
the C/C++ libraries and the kernel. Several binaries may be given (old and new): each is run
`--repeat` times in turn and the table gives, per binary, the share of each subsystem and its
seconds (share x median CPU time).

The run description is written like bench/numasim_scale.py's (g5k-lille-21, N = 96000, b = 960,
heterogeneity-aware mapping, all factors at their default), or given with --run.

Usage: .venv/bin/python bench/numasim_profile.py [--run RUN.json] [--nt 100] [--repeat 1]
           [[LABEL=]NUMASIM ...]   (default: build/simulator/numasim)
Needs perf (Debian: linux-perf) and kernel.perf_event_paranoid <= 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (subsystem, regular expression on "dso symbol"), first match wins.
RULES = [
    ("SimGrid: max-min sharing (lmm)", r"libsimgrid.*(lmm::|MaxMin|Constraint|Variable|Element)"),
    ("SimGrid: actors, contexts, simcalls", r"libsimgrid.*(context|Context|ActorImpl|s4u::Actor|this_actor|simcall|"
                                             r"Observer|swapcontext|smx_ctx|run_all_actors)"),
    ("SimGrid: comms, routes, actions", r"libsimgrid.*(Comm|comm|Network|network|route|Route|NetZone|Link|"
                                        r"Action|Model::|Activity|activity|Host::|latency)"),
    ("SimGrid: engine, timers, rest", r"libsimgrid"),
    ("numasim: scheduler (dmda, queues)", r"numasim .*(Dmda|SchedPolicy|sched|TaskQueue|Eager|Lws)"),
    ("numasim: data management (datawizard)", r"numasim .*(DataWizard|BusModel)"),
    ("numasim: NUMA effects, memory model", r"numasim .*(NumaEffects|MemorySystem|MemoryParams)"),
    ("numasim: MPI", r"numasim .*(Mpi|mpi)"),
    ("numasim: runtime, sleeps", r"numasim .*(Simulation|Sleeps|sleep_for|crosses_ethernet|Worker)"),
    ("numasim: set-up (parsing, task graph, models)", r"numasim .*(build_lu_dag|Config|json|Json|perfmodel|PerfModel|"
                                                      r"Topology|platform|nlohmann|parse|crc)"),
    ("numasim: other", r"numasim "),
    ("allocator (tcmalloc, malloc)", r"(tcmalloc|malloc|operator new|operator delete|tc_)"),
    ("C/C++ libraries, loader", r"(libc\.|libm\.|libstdc|ld-linux)"),
    ("kernel", r"kernel"),
]


def subsystem(dso: str, symbol: str) -> str:
    key = f"{dso} {symbol}"
    for name, rx in RULES:
        if re.search(rx, key):
            return name
    return "other"


def profile(binary: Path, run_file: Path, workdir: Path, freq: int) -> tuple[dict[str, float], float]:
    """One perf record: (share of the samples per subsystem, CPU seconds of the run)."""
    data = workdir / "perf.data"
    before = os.times()
    subprocess.run(["perf", "record", "-q", "-F", str(freq), "-o", str(data), str(binary), str(run_file)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    rep = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", "dso,symbol", "--stdio",
                          "-g", "none", "--percent-limit", "0"], check=True, capture_output=True, text=True).stdout
    shares: dict[str, float] = defaultdict(float)
    for line in rep.splitlines():
        m = re.match(r"\s*([0-9.]+)%\s+(\S+)\s+\[[.k]\]\s+(.*?)\s*$", line)
        if m:
            dso = "numasim" if m.group(2) == binary.name else m.group(2)  # a copy may have another name
            shares[subsystem(dso, m.group(3))] += float(m.group(1)) / 100
    return shares, cpu


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("numasim", nargs="*", default=[str(ROOT / "build" / "simulator" / "numasim")],
                   help="binaries to profile, each PATH or LABEL=PATH")
    p.add_argument("--run", type=Path, default=None, help="a run description (default: the study-scale one)")
    p.add_argument("--nt", type=int, default=100)
    p.add_argument("--repeat", type=int, default=1, help="profiles of each binary, in turn (default 1)")
    p.add_argument("--freq", type=int, default=999, help="samples per second (default 999)")
    p.add_argument("--json", type=Path, default=None, help="also write the shares there")
    args = p.parse_args(argv)
    if not shutil.which("perf"):
        print("error: perf is missing (Debian: apt-get install linux-perf)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="numasim-profile-") as tmp:
        run_file = args.run
        if run_file is None:
            from testbed.describe.machines import load_cluster
            from testbed.platform.platform_cmd import generate
            from testbed.run.engines import RunSpec
            from testbed.run.engines.numasim import run_description
            from testbed.run.resolve import resolve_run_env

            pdir = Path(tmp) / "platform"
            generate(load_cluster("g5k-lille-21"), pdir, (960,))
            factors = dict.fromkeys("ABCDEFG", -1)
            spec = RunSpec(engine="numasim", cluster="g5k-lille-21", n=args.nt * 960, b=960, factors=factors,
                           **resolve_run_env("g5k-lille-21", factors, {}, "dmdas").spec_fields(), seed=1,
                           distribution={"kind": "heterogeneous"}, platform_dir=pdir)
            run_file = Path(tmp) / "run.json"
            run_file.write_text(json.dumps(run_description(spec, pdir, Path(tmp)), indent=1))
        binaries = dict(x.split("=", 1) if "=" in x else (x, x) for x in args.numasim)
        results: dict[str, list[tuple[dict[str, float], float]]] = defaultdict(list)
        for _ in range(args.repeat):
            for label, b in binaries.items():
                results[label].append(profile(Path(b), run_file, Path(tmp), args.freq))
    names = [name for name, _ in RULES] + ["other"]
    table: dict[str, dict[str, dict[str, float]]] = {}
    for b, runs in results.items():
        cpu = statistics.median(c for _, c in runs)
        table[b] = {"cpu_s": {"median": cpu}}
        for name in names:
            share = statistics.median(s.get(name, 0.0) for s, _ in runs)
            table[b][name] = {"share": share, "seconds": share * cpu}
    header = "| subsystem | " + " | ".join(f"{b}: share, s" for b in table) + " |"
    print(header)
    print("|---|" + "---|" * len(table))
    for name in names:
        if all(table[b][name]["share"] < 0.0005 for b in table):
            continue
        cells = [f"{100 * table[b][name]['share']:.1f} %, {table[b][name]['seconds']:.2f}" for b in table]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("| total (CPU time, median) | " + " | ".join(f"{table[b]['cpu_s']['median']:.2f} s" for b in table) + " |")
    if args.json:
        args.json.write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
