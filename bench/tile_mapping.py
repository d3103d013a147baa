#!/usr/bin/env python3
"""Factor A under each pattern the speed-balanced tile mapping can choose, at the study's size.

The heterogeneity-aware mapping (testbed/run/distribution.py `heterogeneous`) deals the nodes
slots of a cyclic pattern of S slots in proportion to their gemm speeds, and takes the smallest S
whose slot shares are within 0.01 (absolute) of the speed shares. On g5k-lille-21 (7 chifflet,
14 chetemi) the nominal kernel rates give S = 35 (chifflet 3 slots, chetemi 1); slightly slower
chifflet kernels give S = 28 (2 and 1), which puts the chetemi nodes 16 % above their speed
share. This bench runs A = −1 and +1 (the other factors at −1) on each pattern given, with the
repository's descriptions, and reports per pattern: the grid, each machine type's slots and
its slot share over its speed share (load), the MPI messages and bytes through the cluster's switch
(A = −1, mean over the seeds), the share of the run each machine type's CPU workers and GPUs spend
in tasks (seed 1, from its trace), the makespans and A's coded effect per seed with
their mean and a 95 % t interval. Nothing is fitted; it shows what the model's A rests on.

Usage: .venv/bin/python bench/tile_mapping.py [--slots 28,35,63,98] [--seeds 3] [--jobs 2]
       [--out bench/data/tile-mapping]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.common.errors import InputError  # noqa: E402
from testbed.run import distribution as dist  # noqa: E402
from testbed.run.engines import RunSpec  # noqa: E402
from testbed.run.resolve import resolve_run_env  # noqa: E402
from testbed.study.explain import ci95  # noqa: E402

CLUSTER = "g5k-lille-21"
NT, B = 100, 960


def spec(a: int, seed: int, pdir: Path, mapping: dict, trace: Path | None = None) -> RunSpec:
    factors = dict.fromkeys("ABCDEFG", -1) | {"A": a}
    return RunSpec(engine="numasim", cluster=CLUSTER, n=NT * B, b=B, factors=factors,
                   **resolve_run_env(CLUSTER, factors, {}, None).spec_fields(), seed=seed,
                   distribution=mapping, platform_dir=pdir, trace=trace)


def busy_shares(trace: Path, makespan: float, cpu_workers: list[int], types: list[str]) -> dict[str, float]:
    """Per machine type, the share of the run its CPU workers (`cpu_<type>`) and GPUs (`gpu_<type>`)
    spend in tasks: task time on the type's nodes / (workers × makespan)."""
    node_type = {f"{t}-{sum(1 for u in types[:r + 1] if u == t)}": t for r, t in enumerate(types)}
    busy: dict[str, float] = {}
    gpus: dict[str, set[str]] = {}
    with trace.open() as fh:
        for r in csv.DictReader(fh):
            node, worker = r["ResourceId"].split(".", 1)
            kind = "gpu" if worker.startswith("gpu") else "cpu"
            key = f"{kind}_{node_type[node]}"
            busy[key] = busy.get(key, 0.0) + float(r["Duration"])
            if kind == "gpu":
                gpus.setdefault(key, set()).add(r["ResourceId"])
    out = {}
    for key, total in sorted(busy.items()):
        kind, t = key.split("_", 1)
        workers = (sum(w for w, u in zip(cpu_workers, types, strict=True) if u == t) if kind == "cpu"
                   else len(gpus[key]))
        out[key] = total / (workers * makespan)
    return out


def one_run(job: tuple[int, int, int, str, str]) -> dict:
    """One run; the first seed's also traced, for each machine type's busy shares."""
    from testbed.run.engines.numasim import machines_by_rank
    from testbed.run.simulate import simulate

    slots, a, seed, pdir, path = job
    with tempfile.TemporaryDirectory(prefix="tile-mapping-run-") as tmp:
        trace = Path(tmp) / "tasks.csv" if seed == 1 else None
        result = simulate(spec(a, seed, Path(pdir), {"kind": "file", "path": path}, trace))
        makespan = float(result["makespan_s"])
        busy = (busy_shares(trace, makespan, result["cpu_workers_by_rank"], machines_by_rank(Path(pdir) / "numasim.xml"))
                if trace else {})
    return {"slots": slots, "A": a, "seed": seed, "makespan_s": makespan,
            "mpi_messages": int(result["mpi_messages"]),
            "switch_bytes": float(result["bytes_by_link_class"].get("switch", 0.0)), "busy": busy}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slots", default="28,35,63,98", help="pattern sizes S to run (comma-separated)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "data" / "tile-mapping")
    args = ap.parse_args(argv)
    try:
        wanted = [int(s) for s in args.slots.split(",")]
    except ValueError:
        print(f"bench/tile_mapping.py: --slots: expected comma-separated integers, got {args.slots!r}", file=sys.stderr)
        return 2
    from testbed.describe.machines import load_cluster
    from testbed.platform.platform_cmd import generate
    from testbed.run.engines.numasim import machines_by_rank, node_speeds

    with tempfile.TemporaryDirectory(prefix="tile-mapping-") as tmp:
        pdir = Path(tmp) / "platform"
        generate(load_cluster(CLUSTER), pdir, (B,))
        speeds = node_speeds(spec(-1, 1, pdir, {"kind": "heterogeneous"}), pdir)
        types = machines_by_rank(pdir / "numasim.xml")
        candidates = {p["slots"]: p for p in dist.pattern_candidates(NT, speeds)}
        chosen = dist.chosen_pattern(list(candidates.values()))["slots"]
        patterns, jobs = [], []
        for slots in wanted:
            if slots not in candidates:
                print(f"bench/tile_mapping.py: --slots: {slots} is not a pattern size on {NT} x {NT} tiles "
                      f"(one of {sorted(candidates)})", file=sys.stderr)
                return 2
            try:
                owners = dist.heterogeneous(NT, speeds, slots=slots)
            except InputError as exc:
                print(f"bench/tile_mapping.py: {exc}", file=sys.stderr)
                return 2
            path = dist.write_distribution(Path(tmp) / f"mapping-{slots}.txt", owners, f"heterogeneous, S = {slots}")
            p = candidates[slots]
            total = sum(speeds)
            load = {}
            for m in sorted(set(types)):
                ranks = [r for r, t in enumerate(types) if t == m]
                load[m] = {"slots": sorted({p["counts"][r] for r in ranks}),
                           "load": max(p["counts"][r] / slots / (speeds[r] / total) for r in ranks)}
            patterns.append({"slots": slots, "grid": f"{p['r']} x {p['c']}", "chosen": slots == chosen,
                             "error": p["error"], "load": load})
            jobs += [(slots, a, seed, str(pdir), str(path)) for seed in range(1, args.seeds + 1) for a in (-1, 1)]
        print(f"{len(jobs)} runs at N = {NT * B}, b = {B}, {args.jobs} at a time", file=sys.stderr, flush=True)
        with ProcessPoolExecutor(args.jobs) as pool:
            runs = []
            for i, r in enumerate(pool.map(one_run, jobs), 1):
                runs.append(r)
                print(f"  {i}/{len(jobs)}: S = {r['slots']}, A = {r['A']:+d}, seed {r['seed']}: "
                      f"{r['makespan_s']:.3f} s", file=sys.stderr, flush=True)

    rows = []
    for p in patterns:
        ms = {(r["A"], r["seed"]): r["makespan_s"] for r in runs if r["slots"] == p["slots"]}
        effects = [(ms[(1, s)] - ms[(-1, s)]) / 2 for s in range(1, args.seeds + 1)]
        a_mean, a_lo, a_hi = ci95(effects)
        base = [r for r in runs if r["slots"] == p["slots"] and r["A"] == -1]
        rows.append({**p, "default_s": statistics.fmean(ms[(-1, s)] for s in range(1, args.seeds + 1)),
                     "mpi_messages": statistics.fmean(r["mpi_messages"] for r in base),
                     "busy_seed1": {a: next(r["busy"] for r in runs if r["slots"] == p["slots"] and r["A"] == a
                                            and r["seed"] == 1) for a in (-1, 1)},
                     "switch_gb": statistics.fmean(r["switch_bytes"] for r in base) / 1e9,
                     "a_plus_s": statistics.fmean(ms[(1, s)] for s in range(1, args.seeds + 1)),
                     "A": a_mean, "A_lo": a_lo, "A_hi": a_hi, "A_per_seed": effects})
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "runs.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["slots", "A", "seed", "makespan_s", "mpi_messages", "switch_bytes"],
                           extrasaction="ignore")
        w.writeheader()
        w.writerows(runs)
    (args.out / "patterns.json").write_text(json.dumps({"cluster": CLUSTER, "nt": NT, "b": B, "speeds": speeds,
                                                         "chosen": chosen, "patterns": rows}, indent=1) + "\n")
    header = ("| S | grid | slots chifflet / chetemi | load chifflet / chetemi | MPI messages, GB through the switch "
              "(A = −1) | busy CPU chifflet / chetemi, GPU chifflet (seed 1, A = −1 → +1) | A = −1 (s) | A = +1 (s) "
              "| A coded (s), 95 % CI | per seed |")
    lines = [header, "|" + "---|" * 10]

    def busy(b: dict) -> str:
        return " / ".join(f"{b.get(k, float('nan')):.3f}" for k in ("cpu_chifflet", "cpu_chetemi", "gpu_chifflet"))

    for r in rows:
        lc, le = r["load"].get("chifflet", {}), r["load"].get("chetemi", {})
        lines.append(f"| {r['slots']}{' (chosen)' if r['chosen'] else ''} | {r['grid']} | {lc.get('slots')} / {le.get('slots')} "
                     f"| {lc.get('load', float('nan')):.3f} / {le.get('load', float('nan')):.3f} "
                     f"| {r['mpi_messages']:.0f}, {r['switch_gb']:.0f} "
                     f"| {busy(r['busy_seed1'][-1])} → {busy(r['busy_seed1'][1])} | {r['default_s']:.2f} "
                     f"| {r['a_plus_s']:.2f} | {r['A']:+.3f} [{r['A_lo']:+.3f}, {r['A_hi']:+.3f}] "
                     f"| {', '.join(f'{e:+.3f}' for e in r['A_per_seed'])} |")
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
