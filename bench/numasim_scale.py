#!/usr/bin/env python3
"""numasim at the study's scale: wall, CPU time and peak RSS, plus a determinism check.

g5k-lille-21 (14 chetemi + 7 chifflet, `testbed platform`), LU N=96000, b=960 (100x100 tiles:
338,350 tasks), 2D block-cyclic 3x7, dmdas, STARPU_RESERVE_NCPU=1 (with the MPI thread's
core: 18 CPU workers per chetemi, 24 CPU + 2 CUDA per chifflet = 434 workers), variability
on, seed 1. Runs numasim twice; the two JSON outputs must be byte-identical once `wall_s`
is removed. Targets (issue 5): <= 10 s wall on one core, <= 2 GB RSS.

The machine this runs on may be shared: user+sys CPU time (getrusage of the child) is
reported next to the wall time.

Usage: .venv/bin/python bench/numasim_scale.py [--nt 100] [--out bench/results/numasim_scale.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NUMASIM = ROOT / "build" / "simulator" / "numasim"
ENV = {"STARPU_SCHED": "dmdas", "STARPU_RESERVE_NCPU": "1"}


def run_once(run_file: Path) -> tuple[dict, str, float, float, float]:
    """One child: (summary, stdout without wall_s, wall s, user+sys s, max RSS MB)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run([str(NUMASIM), str(run_file)], capture_output=True, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"numasim failed ({proc.returncode}): {proc.stderr[-2000:]}")
    summary = json.loads(proc.stdout)
    stable = dict(summary)
    stable.pop("wall_s", None)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # ru_maxrss of RUSAGE_CHILDREN is the largest child so far (KiB on Linux); each run is the largest.
    return summary, json.dumps(stable, sort_keys=True), wall, cpu, after.ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", default="g5k-lille-21")
    p.add_argument("--nt", type=int, default=100)
    p.add_argument("--b", type=int, default=960)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "numasim_scale.json")
    args = p.parse_args(argv)
    if not NUMASIM.exists():
        print(f"error: {NUMASIM} is missing (run `make build`)", file=sys.stderr)
        return 2
    from testbed.atomic import atomic_file
    from testbed.machines import load_cluster
    from testbed.platform_cmd import generate

    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        pdir = Path(tmp) / "platform"
        generate(load_cluster(args.cluster), pdir, (args.b,))
        xml = pdir / "numasim.xml"
        machines = sorted({z.split('"')[1] for z in xml.read_text().split('<prop id="machine" value=')[1:]})
        desc = {"platform": str(xml),
                "perfmodels": {m: str(pdir / "starpu" / m / "sampling") for m in machines},
                "workload": {"kind": "lu", "n": args.nt * args.b, "b": args.b,
                             "distribution": {"kind": "block-cyclic", "p": 3, "q": 7}},
                "env": ENV, "seed": 1, "variability": True}
        run_file = Path(tmp) / "run.json"
        run_file.write_text(json.dumps(desc, indent=1))
        s1, j1, wall1, cpu1, rss1 = run_once(run_file)
        s2, j2, wall2, cpu2, rss2 = run_once(run_file)
    record = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": platform.node(),
        "nproc": os.cpu_count(), "loadavg_after": os.getloadavg(), "cluster": args.cluster,
        "n": args.nt * args.b, "b": args.b, "env": ENV,
        "tasks": s1["tasks"], "workers": s1["workers"], "makespan_s": s1["makespan_s"],
        "transfers": s1.get("transfers"), "mpi_messages": s1.get("mpi_messages"),
        "runs": [{"wall_s": wall1, "cpu_s": cpu1, "numasim_wall_s": s1["wall_s"], "max_rss_mb": rss1},
                 {"wall_s": wall2, "cpu_s": cpu2, "numasim_wall_s": s2["wall_s"], "max_rss_mb": rss2}],
        "deterministic": j1 == j2,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(args.out) as fh:
        json.dump(record, fh, indent=1)
    best = min(record["runs"], key=lambda r: r["wall_s"])
    print(f"{args.cluster} N={args.nt * args.b} b={args.b}: {s1['tasks']} tasks, {s1['workers']} workers, "
          f"makespan {s1['makespan_s']:.3f} s; wall {best['wall_s']:.2f} s, user+sys {best['cpu_s']:.2f} s, "
          f"max RSS {max(rss1, rss2):.0f} MB; deterministic: {record['deterministic']} "
          f"(load average {record['loadavg_after'][0]:.1f} on {os.cpu_count()} cores)")
    return 0 if record["deterministic"] else 1


if __name__ == "__main__":
    sys.exit(main())
