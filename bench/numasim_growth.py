#!/usr/bin/env python3
"""How numasim's cost grows with the tiles and with the nodes (target: 200² tiles at most 8× the 100² cost).

The study's cluster (g5k-lille-21: 14 chetemi + 7 chifflet) at 50², 100², 150², 200² tiles
(b = 960), and the same machines at 2× and 4× the node count (28 + 14, 56 + 28 nodes, same
switch) at 100² tiles: wall, user+sys CPU and peak RSS of numasim alone (one child process
per case, getrusage), the growth exponents fitted by least squares on log(CPU) against
log(tasks) and log(nodes), and the 200² / 100² CPU ratio (target ≤ 8). Study defaults: all
factors at -1, dmdas, variability on, seed 1, block-cyclic over a near-square p × q grid.

The machine may be shared: CPU times are the figures to compare; the load average is recorded.
Each case runs --repeats times (default 3), the cases in turn (all cases once, then again), and
the fits and the ratio use each case's least CPU time: noise only adds time, and on a shared
virtual machine single runs of one case varied by ±20 % (the 200² case once 11.2–16.9
s within ten minutes). Each case's runs must give the same makespan.

Usage: .venv/bin/python bench/numasim_growth.py [--tiles 50 100 150 200] [--scales 1 2 4]
           [--repeats 3] [--out bench/results/numasim_growth.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NUMASIM = ROOT / "build" / "simulator" / "numasim"


def run_child(run_file: Path) -> tuple[dict, float, float, float]:
    """(summary, wall s, user+sys s, peak RSS MB) of one numasim process."""
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        fd = os.open(str(run_file) + ".out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.execv(str(NUMASIM), [str(NUMASIM), str(run_file)])
    _, status, ru = os.wait4(pid, 0)
    wall = time.monotonic() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"numasim failed on {run_file}")
    summary = json.loads(Path(str(run_file) + ".out").read_text())
    return summary, wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def scaled_cluster(name: str, scale: int, where: Path) -> str:
    """The cluster YAML with every node group's count multiplied by `scale` (same machines)."""
    import yaml

    from testbed.describe.machines import load_cluster

    if scale == 1:
        return name
    src = load_cluster(name)
    data = yaml.safe_load(src.path.read_text())
    for group in data["nodes"]:
        group["machine"] = str(src.machines[group["machine"]].path)  # absolute: file moved
        group["count"] *= scale
    data["name"] = f"{data['name']}-x{scale}"
    out = where / f"{data['name']}.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(out)


def fit(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log(y) on log(x)."""
    if len(set(xs)) < 2:
        return None
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=False)) / sum((a - mx) ** 2 for a in lx)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", default="g5k-lille-21")
    p.add_argument("--b", type=int, default=960)
    p.add_argument("--tiles", type=int, nargs="+", default=[50, 100, 150, 200])
    p.add_argument("--scales", type=int, nargs="+", default=[1, 2, 4], help="node-count multipliers (at 100² tiles)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each case (the least CPU time counts)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "numasim_growth.json")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    if not NUMASIM.exists():
        print(f"error: {NUMASIM} is missing (run `make build`)", file=sys.stderr)
        return 2
    from testbed.common.atomic import atomic_file
    from testbed.describe.machines import load_cluster
    from testbed.platform.platform_cache import cached_platform
    from testbed.run.engines import RunSpec
    from testbed.run.engines.numasim import run_description
    from testbed.run.resolve import resolve_run_env

    cases = [(1, nt) for nt in args.tiles] + [(s, 100) for s in args.scales if s != 1]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-growth-") as tmp:
        run_files = []
        for scale, nt in cases:
            cluster = scaled_cluster(args.cluster, scale, Path(tmp))
            pdir = cached_platform(cluster, (args.b,))
            spec = RunSpec(engine="numasim", cluster=cluster, n=nt * args.b, b=args.b,
                           **resolve_run_env(cluster, {}, {}, None).spec_fields(), factors={}, seed=1,
                           distribution={"kind": "block-cyclic"}, platform_dir=pdir)
            run_file = Path(tmp) / f"run-x{scale}-{nt}.json"
            run_file.write_text(json.dumps(run_description(spec, pdir, Path(tmp)), indent=1))
            run_files.append((run_file, len(load_cluster(cluster).nodes)))
            rows.append(None)
        for rep in range(args.repeats):
            for i, ((scale, nt), (run_file, nodes)) in enumerate(zip(cases, run_files, strict=True)):
                s, wall, cpu, rss = run_child(run_file)
                load = os.getloadavg()[0]
                print(f"[{rep + 1}/{args.repeats}] {nodes:3d} nodes {nt:3d}x{nt:<3d} tiles: {s['tasks']:8d} tasks, "
                      f"makespan {s['makespan_s']:.3f} s, wall {wall:.2f} s, user+sys {cpu:.2f} s, "
                      f"max RSS {rss:.0f} MB (load {load:.1f})", flush=True)
                if rows[i] is None:
                    rows[i] = {"nodes": nodes, "scale": scale, "tiles": nt, "tasks": s["tasks"],
                               "workers": s["workers"], "makespan_s": s["makespan_s"], "runs": []}
                elif s["makespan_s"] != rows[i]["makespan_s"]:
                    raise RuntimeError(f"{nodes} nodes, {nt}² tiles: makespan {s['makespan_s']} then "
                                       f"{rows[i]['makespan_s']}: not deterministic")
                rows[i]["runs"].append({"wall_s": wall, "cpu_s": cpu, "max_rss_mb": rss, "loadavg": load})
        for row in rows:
            best = min(row["runs"], key=lambda r: r["cpu_s"])
            row.update(cpu_s=best["cpu_s"], wall_s=best["wall_s"],
                       max_rss_mb=max(r["max_rss_mb"] for r in row["runs"]),
                       cpu_s_spread=[min(r["cpu_s"] for r in row["runs"]), max(r["cpu_s"] for r in row["runs"])])
    by_tiles = [r for r in rows if r["scale"] == 1]
    by_nodes = [r for r in rows if r["tiles"] == 100]
    base = next((r for r in by_tiles if r["tiles"] == 100), None)
    top = next((r for r in by_tiles if r["tiles"] == 200), None)
    record = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": platform.node(),
        "nproc": os.cpu_count(), "cluster": args.cluster, "b": args.b, "repeats": args.repeats, "cases": rows,
        "exponent_cpu_vs_tasks": fit([r["tasks"] for r in by_tiles], [r["cpu_s"] for r in by_tiles]),
        "exponent_cpu_vs_tiles_per_dim": fit([r["tiles"] for r in by_tiles], [r["cpu_s"] for r in by_tiles]),
        "exponent_cpu_vs_nodes": fit([r["nodes"] for r in by_nodes], [r["cpu_s"] for r in by_nodes]),
        "exponent_rss_vs_tasks": fit([r["tasks"] for r in by_tiles], [r["max_rss_mb"] for r in by_tiles]),
        "cpu_200_over_100": top["cpu_s"] / base["cpu_s"] if base and top else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(args.out) as fh:
        json.dump(record, fh, indent=1)
    for r in rows:
        print(f"{r['nodes']:3d} nodes {r['tiles']:3d}x{r['tiles']:<3d} tiles: least user+sys {r['cpu_s']:.2f} s "
              f"(of {len(r['runs'])}: {r['cpu_s_spread'][0]:.2f}-{r['cpu_s_spread'][1]:.2f} s), "
              f"max RSS {r['max_rss_mb']:.0f} MB")
    for k in ("exponent_cpu_vs_tasks", "exponent_cpu_vs_tiles_per_dim", "exponent_cpu_vs_nodes",
              "exponent_rss_vs_tasks", "cpu_200_over_100"):
        if record[k] is not None:
            print(f"{k}: {record[k]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
