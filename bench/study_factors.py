#!/usr/bin/env python3
"""The study's factors at the study's scale, several seeds each, with 95 % confidence intervals;
and, for the all-default configuration, the kernel-duration distributions the study's traces
were read for (dgemm per NUMA node of a chifflet and of a chetemi node, task durations per GPU).

g5k-lille-21 (7 chifflet + 14 chetemi), N = 96000, b = 960 (100 × 100 tiles, 338,350 tasks),
the heterogeneity-aware tile mapping the study used, numasim with seeded variability. The
configurations: all factors at −1 (the study's baseline), each factor alone at +1, A, B, C,
E at +1, and A and E at +1 (with the baseline, A alone and E alone: the four A × E
combinations). Whatever comes out is reported as it is (bench/RESULTS.md; the first runs in
CHANGELOG.md's benchmark history, "Factors at study scale, with seeds"), next to
the trace observations of the study (docs and bench/data/real-node-16c-h100/README.shared.md
point to the study case).

With `--transfers`, each configuration's first seed also writes numasim's transfer log, read for the
bytes that leave the busiest node's NIC (MPI messages, forwarded copies included) and the number of
messages. `--mpi-backend` chooses StarPU-MPI's backend (docs/network-model.md, "Cooperative sends").

Usage: .venv/bin/python bench/study_factors.py [--seeds 5] [--nt 100] [--mpi-backend nmad|mpi] [--transfers]
       [--configs NAME ...] [--out bench/results/study_factors.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.run.engines import RunSpec  # noqa: E402
from testbed.run.resolve import resolve_run_env  # noqa: E402
from testbed.run.simulate import simulate  # noqa: E402

CLUSTER = "g5k-lille-21"
# the four A x E combinations are "all default", "A=+1", "E=+1" and "A,E=+1"
CONFIGS = {"all default": {}, **{f"{x}=+1": {x: 1} for x in "ABCDEFG"}, "A,B,C,E=+1": dict.fromkeys("ABCE", 1),
           "A,E=+1": dict.fromkeys("AE", 1)}


def spec(levels: dict[str, int], seed: int, nt: int, pdir: Path, trace: Path | None = None,
         mpi_backend: str = "nmad", transfers: Path | None = None, cluster: str = CLUSTER) -> RunSpec:
    factors = {x: levels.get(x, -1) for x in "ABCDEFG"}
    return RunSpec(engine="numasim", cluster=cluster, n=960 * nt, b=960, factors=factors,
                   **resolve_run_env(cluster, factors, {}, None).spec_fields(), seed=seed,
                   distribution={"kind": "heterogeneous"}, platform_dir=pdir, trace=trace,
                   mpi_backend=mpi_backend, transfers=transfers)


def nic_bytes(transfers: Path) -> dict:
    """Bytes each node sends to other nodes (through its NIC), from numasim's transfer log."""
    out: dict[str, float] = defaultdict(float)
    messages = 0
    with transfers.open() as fh:
        for r in csv.DictReader(fh):
            src, dst = r["Src"].split(".")[0], r["Dst"].split(".")[0]
            if src != dst:
                out[src] += float(r["Bytes"])
                messages += 1
    busiest = max(out, key=out.get)
    return {"busiest": busiest, "busiest_bytes": out[busiest], "messages": messages, "bytes": sum(out.values())}


def ci95(xs: list[float]) -> tuple[float, float]:
    m = statistics.mean(xs)
    from scipy.stats import t

    h = t.ppf(0.975, len(xs) - 1) * statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else float("nan")
    return m, h


def durations(trace: Path) -> dict:
    """dgemm durations per (node, NUMA node of the worker) and all task durations per GPU."""
    by_numa: dict[tuple[str, str], list[float]] = defaultdict(list)
    by_gpu: dict[str, list[float]] = defaultdict(list)
    with trace.open() as fh:
        for r in csv.DictReader(fh):
            node = r["ResourceId"].split(".")[0]
            d = float(r["Duration"])
            if ".gpu" in r["ResourceId"]:
                by_gpu[r["ResourceId"]].append(d)
            elif r["Value"] == "gemm":
                by_numa[(node, r["WorkerNuma"])].append(d)
    return {"dgemm_by_numa": by_numa, "tasks_by_gpu": by_gpu}


def quantiles(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=20)
    return f"{len(xs)} | {statistics.median(xs) * 1e3:.2f} | {q[0] * 1e3:.2f} | {q[-1] * 1e3:.2f} | {max(xs) * 1e3:.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--nt", type=int, default=100)
    ap.add_argument("--mpi-backend", choices=["nmad", "mpi"], default="nmad")
    ap.add_argument("--transfers", action="store_true", help="the busiest NIC's bytes (first seed of each configuration)")
    ap.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    from testbed.describe.machines import load_cluster
    from testbed.platform.platform_cmd import generate

    results: dict[str, list[float]] = {}
    nics: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="study-factors-") as tmp:
        pdir = Path(tmp) / "platform"
        generate(load_cluster(CLUSTER), pdir, (960,))
        trace = Path(tmp) / "tasks.csv"
        log = Path(tmp) / "transfers.csv"
        for name in args.configs:
            levels = CONFIGS[name]
            results[name] = []
            for seed in range(1, args.seeds + 1):
                first = name == "all default" and seed == 1
                with_log = args.transfers and seed == 1
                out = simulate(spec(levels, seed, args.nt, pdir, trace if first else None, args.mpi_backend,
                                    log if with_log else None))
                if with_log:
                    nics[name] = nic_bytes(log)
                results[name].append(out["makespan_s"])
                print(f"{name} seed {seed}: {out['makespan_s']:.3f} s ({out['wall_s']:.1f} s wall)", file=sys.stderr)
        dist = durations(trace) if trace.exists() else {"dgemm_by_numa": {}, "tasks_by_gpu": {}}
    base = statistics.mean(results["all default"]) if "all default" in results else float("nan")
    print(f"StarPU-MPI backend: {args.mpi_backend}")
    print()
    print("| configuration | makespan mean ± 95 % CI (s), seeds | vs all default | busiest NIC out (GB) | messages |")
    print("|---|---|---|---|---|")
    for name, xs in results.items():
        m, h = ci95(xs)
        nic = nics.get(name)
        cols = f"{nic['busiest_bytes'] / 1e9:.2f} ({nic['busiest']}) | {nic['messages']}" if nic else "| "
        print(f"| {name} | {m:.2f} ± {h:.2f}, {len(xs)} | {100 * (m / base - 1):+.1f} % | {cols} |")
    print()
    print("dgemm durations (ms) in the all-default run, seed 1, per node and NUMA node of the worker:")
    print()
    print("| node | NUMA | tasks | median | 5 % | 95 % | max |")
    print("|---|---|---|---|---|---|---|")
    nodes = sorted({n for n, _ in dist["dgemm_by_numa"]}, key=lambda s: (s.rstrip("0123456789"), int(s.split("-")[-1])))
    shown = [n for n in nodes if n.startswith("chifflet")][:1] + [n for n in nodes if n.startswith("chetemi")][:1]
    for node in shown:
        for (n, numa), xs in sorted(dist["dgemm_by_numa"].items()):
            if n == node:
                print(f"| {node} | {numa} | {quantiles(xs)} |")
    print()
    print("| GPU | tasks | median (ms) | 5 % | 95 % | max |")
    print("|---|---|---|---|---|---|")
    for gpu, xs in sorted(dist["tasks_by_gpu"].items())[:4]:
        print(f"| {gpu} | {quantiles(xs)} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"mpi_backend": args.mpi_backend, "makespans": results, "nics": nics},
                                       indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
