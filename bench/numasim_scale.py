#!/usr/bin/env python3
"""numasim at the study's scale: wall, CPU time and peak RSS, plus a determinism check.

g5k-lille-21 (14 chetemi + 7 chifflet, `testbed platform`), LU N=96000, b=960 (100x100 tiles:
338,350 tasks), 2D block-cyclic 3x7 (or `--distribution heterogeneous`, the study's and the
campaign's mapping: more tiles, copies and messages on the GPU nodes), dmdas, variability on, seed 1. The StarPU variables come
from config/factors.yaml exactly as for `testbed simulate --factors ...`: all factors at -1 is
the study's baseline (one core for the MPI thread, one for the main thread: 18 CPU workers per
chetemi, 24 CPU + 2 CUDA per chifflet = 434 workers). Each `--factors` configuration runs
twice; the two JSON outputs must be byte-identical once `wall_s` is removed. Figures:
<= 10 s wall on one core, <= 2 GB RSS (the first target; now <= 2 s, <= 500 MB); the makespans of the factor
configurations and their ratio to the first one.

The machine this runs on may be shared: user+sys CPU time (getrusage of the child) is
reported next to the wall time.

Usage: .venv/bin/python bench/numasim_scale.py [--nt 100] [--factors ""] [--factors A=1,B=1,C=1,E=1]
           [--distribution block-cyclic|heterogeneous] [--out bench/results/numasim_scale.json]
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
    p.add_argument("--factors", action="append", default=None,
                   help="factor levels of one configuration (e.g. A=1,E=1; empty = all default); repeatable")
    p.add_argument("--distribution", choices=("block-cyclic", "heterogeneous"), default="block-cyclic",
                   help="tile mapping: 2D block-cyclic 3x7, or the study's heterogeneity-aware one")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "numasim_scale.json")
    args = p.parse_args(argv)
    if not NUMASIM.exists():
        print(f"error: {NUMASIM} is missing (run `make build`)", file=sys.stderr)
        return 2
    from testbed.common.atomic import atomic_file
    from testbed.describe.machines import load_cluster
    from testbed.platform.platform_cmd import generate
    from testbed.run.engines import RunSpec
    from testbed.run.engines.numasim import run_description
    from testbed.run.factors import check_factors
    from testbed.run.resolve import resolve_run_env
    from testbed.run.simulate import parse_assignments

    configs = args.factors if args.factors is not None else [""]
    distribution = ({"kind": "block-cyclic", "p": 3, "q": 7} if args.distribution == "block-cyclic"
                    else {"kind": "heterogeneous"})
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        pdir = Path(tmp) / "platform"
        generate(load_cluster(args.cluster), pdir, (args.b,))
        for text in configs:
            factors = check_factors({k: int(v) for k, v in parse_assignments([text], "--factors").items()})
            spec = RunSpec(engine="numasim", cluster=args.cluster, n=args.nt * args.b, b=args.b,
                           **resolve_run_env(args.cluster, factors, {}, "dmdas").spec_fields(), factors=factors, seed=1,
                           distribution=distribution, platform_dir=pdir)
            run_file = Path(tmp) / "run.json"
            run_file.write_text(json.dumps(run_description(spec, pdir, Path(tmp)), indent=1))
            s1, j1, wall1, cpu1, rss1 = run_once(run_file)
            s2, j2, wall2, cpu2, rss2 = run_once(run_file)
            results.append({
                "factors": text or "(all default)", "levels": factors, "env": spec.env,
                "tasks": s1["tasks"], "workers": s1["workers"], "makespan_s": s1["makespan_s"],
                "transfers": s1.get("transfers"), "mpi_messages": s1.get("mpi_messages"),
                "bytes_by_link_class": s1.get("bytes_by_link_class"),
                "runs": [{"wall_s": wall1, "cpu_s": cpu1, "numasim_wall_s": s1["wall_s"], "max_rss_mb": rss1},
                         {"wall_s": wall2, "cpu_s": cpu2, "numasim_wall_s": s2["wall_s"], "max_rss_mb": rss2}],
                "deterministic": j1 == j2,
            })
    base = results[0]["makespan_s"]
    for r in results:
        r["ratio_to_first"] = r["makespan_s"] / base
    record = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": platform.node(),
        "nproc": os.cpu_count(), "loadavg_after": os.getloadavg(), "cluster": args.cluster,
        "distribution": args.distribution,
        "n": args.nt * args.b, "b": args.b, "configurations": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(args.out) as fh:
        json.dump(record, fh, indent=1)
    for r in results:
        best = min(r["runs"], key=lambda x: x["wall_s"])
        print(f"{args.cluster} N={args.nt * args.b} b={args.b} {args.distribution} factors {r['factors']}: {r['tasks']} tasks, "
              f"{r['workers']} workers, makespan {r['makespan_s']:.3f} s (x{r['ratio_to_first']:.3f}); "
              f"wall {best['wall_s']:.2f} s, user+sys {best['cpu_s']:.2f} s, "
              f"max RSS {max(x['max_rss_mb'] for x in r['runs']):.0f} MB; deterministic: {r['deterministic']}")
    print(f"(load average {record['loadavg_after'][0]:.1f} on {os.cpu_count()} cores)")
    return 0 if all(r["deterministic"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
