#!/usr/bin/env python3
"""`testbed simulate` against numasim alone and against StarPU-SimGrid, in one run.

For each tile count (g5k-lille-21, b = 960, study defaults, seed 1): the whole command
`testbed simulate --engine numasim ...` (platform and run description from results/cache, after
one warm-up call that fills it), numasim alone on the same run description, and the whole
`testbed simulate --engine starpu-simgrid ...` command, interleaved (A B A B ...), wall time of
each process. Reported: medians, the CLI overhead (median of the paired differences) and the
StarPU-SimGrid / testbed-numasim wall ratio.

Usage: .venv/bin/python bench/cli_overhead.py [--tiles 20 40] [--reps 5] [--starpu-reps 1]
           [--out bench/results/cli_overhead.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(cmd: list[str]) -> tuple[float, str]:
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr[-1000:]}")
    return wall, proc.stdout


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", default="g5k-lille-21")
    p.add_argument("--b", type=int, default=960)
    p.add_argument("--tiles", type=int, nargs="+", default=[20, 40])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--starpu-reps", type=int, default=1)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "cli_overhead.json")
    args = p.parse_args(argv)
    from testbed.cli import build_parser
    from testbed.common import paths
    from testbed.common.atomic import atomic_file
    from testbed.run import run_cache

    testbed = [sys.executable, "-m", "testbed"]
    rows = []
    for nt in args.tiles:
        cli = ["simulate", "--engine", "numasim", "--cluster", args.cluster, "--n", str(nt * args.b), "--b", str(args.b)]
        timed(testbed + cli)  # warm-up: fills the platform and run caches
        hit = run_cache.lookup(build_parser("simulate").parse_args(cli))
        if hit is None:
            raise RuntimeError("the run cache did not keep this command (TESTBED_PLATFORM_CACHE=0?)")
        alone = [str(paths.NUMASIM), str(hit[0])]
        starpu = testbed + ["simulate", "--engine", "starpu-simgrid", "--cluster", args.cluster,
                            "--n", str(nt * args.b), "--b", str(args.b)]
        w_cli, w_alone, w_starpu = [], [], []
        for i in range(args.reps):
            w_cli.append(timed(testbed + cli)[0])
            w_alone.append(timed(alone)[0])
            if i < args.starpu_reps:
                w, out = timed(starpu)
                w_starpu.append(w)
                starpu_makespan = json.loads(out)["makespan_s"]
        numasim_makespan = json.loads(timed(testbed + cli)[1])["makespan_s"]
        row = {
            "tiles": nt, "testbed_numasim_wall_s": w_cli, "numasim_alone_wall_s": w_alone,
            "testbed_starpu_simgrid_wall_s": w_starpu,
            "overhead_s": statistics.median(a - b for a, b in zip(w_cli, w_alone, strict=False)),
            "speedup_vs_starpu_simgrid": statistics.median(w_starpu) / statistics.median(w_cli),
            "makespan_numasim_s": numasim_makespan, "makespan_starpu_simgrid_s": starpu_makespan,
            "loadavg": os.getloadavg()[0],
        }
        rows.append(row)
        print(f"{args.cluster} {nt}x{nt}: testbed simulate (numasim) {statistics.median(w_cli):.3f} s, numasim alone "
              f"{statistics.median(w_alone):.3f} s, overhead {row['overhead_s']:.3f} s; StarPU-SimGrid "
              f"{statistics.median(w_starpu):.2f} s ({row['speedup_vs_starpu_simgrid']:.0f}x); makespans "
              f"{numasim_makespan:.3f} / {starpu_makespan:.3f} s (load {row['loadavg']:.1f})", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(args.out) as fh:
        json.dump({"date": datetime.datetime.now().isoformat(timespec="seconds"), "nproc": os.cpu_count(),
                   "cluster": args.cluster, "b": args.b, "cases": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
