"""Chameleon's LU on the testbed's heterogeneous tile mapping, by the three engines.

On local-hetero-2 (this machine as a 2-core and a 1-core node: both ranks run here, one CPU
worker each, STARPU_NCPU=1, as `--starpu-defaults --env STARPU_NCPU=1`), each side run by
`testbed.run.simulate.simulate` (the code `testbed simulate` and the experiments use):

1. real: `--engine real --app chameleon` (apps/chameleon_lu on the native Chameleon, two ranks
   under mpirun), the heterogeneous mapping and block-cyclic alternated, REPS runs each (seeds
   1..REPS); one more run per mapping with Chameleon's check (||A - LU|| / ||A||).
2. starpu-simgrid: `--engine starpu-simgrid --app chameleon` (apps/chameleon_lu on the SimGrid
   build of Chameleon, the generated models of the machines), each mapping twice (deterministic).
3. numasim: `--engine numasim`, the same cluster, N, b and mapping, seeds 1..REPS.

Every engine derives the heterogeneous mapping from the nodes' speeds (real: the described
cores x core flop/s; the simulators: the gemm model x the CPU workers of the bus files, the same
2:1 here); the driver prints each rank's tiles as Chameleon's descriptor had them, recorded
beside the mapping's. Needs a Chameleon of both flavours and apps/chameleon_lu built against
them (`CHAMELEON_SOURCE_TARBALL=... bash envs/setup.sh`). Usage:

    .venv/bin/python bench/chameleon_mapping.py [--n 3840] [--b 192] [--reps 5] [--out bench/data/chameleon-mapping-vm.json]

Prints the markdown table recorded in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from testbed import ROOT
from testbed.run import distribution
from testbed.run.engines import RunSpec, chameleon_app
from testbed.run.engines.real import cluster_ranks
from testbed.run.simulate import simulate

CLUSTER = "local-hetero-2"
MAPPINGS = ("heterogeneous", "block-cyclic")
ENV = {"STARPU_NCPU": "1"}


def expected_tiles(kind: str, nt: int) -> list[int]:
    """Each rank's tiles in the mapping (heterogeneous: from the described speeds)."""
    speeds = cluster_ranks(CLUSTER)[1]
    owners = (distribution.heterogeneous(nt, speeds) if kind == "heterogeneous"
              else distribution.block_cyclic(nt, *distribution.near_square_grid(len(speeds))))
    return [sum(row.count(r) for row in owners) for r in range(len(speeds))]


def run(engine: str, kind: str, n: int, b: int, seed: int, work: Path, check: bool = False) -> dict:
    env = {**ENV, "STARPU_HOME": str(work / "home")} if engine == "real" else dict(ENV)
    spec = RunSpec(engine=engine, app="lu" if engine == "numasim" else "chameleon", cluster=CLUSTER, n=n, b=b,
                   seed=seed, distribution={"kind": kind}, env=env, check=check, workdir=work)
    start = time.perf_counter()
    out = simulate(spec)
    out["measured_wall_s"] = time.perf_counter() - start
    return out


def measure(n: int, b: int, reps: int, work: Path) -> dict:
    res: dict = {k: {"real": [], "starpu-simgrid": [], "numasim": []} for k in MAPPINGS}
    for rep in range(reps):
        for kind in MAPPINGS:  # alternated: drifts of the machine hit both mappings alike
            res[kind]["real"].append(run("real", kind, n, b, rep + 1, work))
    for kind in MAPPINGS:
        res[kind]["check"] = run("real", kind, n, b, 1, work, check=True)
        res[kind]["starpu-simgrid"] = [run("starpu-simgrid", kind, n, b, 1, work) for _ in range(2)]
        res[kind]["numasim"] = [run("numasim", kind, n, b, seed, work) for seed in range(1, reps + 1)]
    return res


def summary(res: dict, n: int, b: int) -> list[dict]:
    rows = []
    for kind in MAPPINGS:
        r = res[kind]
        real = [o["makespan_s"] for o in r["real"]]
        sg = [o["makespan_s"] for o in r["starpu-simgrid"]]
        ns = [o["makespan_s"] for o in r["numasim"]]
        rows.append({"mapping": kind, "n": n, "b": b, "expected_tiles_by_rank": expected_tiles(kind, n // b),
                     "real_tiles_by_rank": r["real"][0]["tiles_by_rank"],
                     "starpu_simgrid_tiles_by_rank": r["starpu-simgrid"][0]["tiles_by_rank"],
                     "real_s": real, "real_median_s": statistics.median(real), "real_min_s": min(real),
                     "real_max_s": max(real), "real_wall_median_s": statistics.median(o["wall_s"] for o in r["real"]),
                     "check_residual": r["check"]["residual"], "check_passed": r["check"]["check_passed"],
                     "starpu_simgrid_s": sg, "starpu_simgrid_wall_s": [o["wall_s"] for o in r["starpu-simgrid"]],
                     "numasim_s": ns, "numasim_median_s": statistics.median(ns),
                     "numasim_wall_s": [o["wall_s"] for o in r["numasim"]]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3840)
    ap.add_argument("--b", type=int, default=192)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "data" / "chameleon-mapping-vm.json"))
    args = ap.parse_args()
    for flavour in ("native", "simgrid"):
        chameleon_app.driver(flavour)  # both built, before anything runs
    load = os.getloadavg()[0]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="chameleon-mapping-", dir=args.work) as tmp:
        rows = summary(measure(args.n, args.b, args.reps, Path(tmp)), args.n, args.b)
    doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": platform.node(), "cpus": os.cpu_count(), "load_average_1min": [load, os.getloadavg()[0]],
           "cluster": CLUSTER, "env": ENV, "reps": args.reps, "wall_s": time.perf_counter() - start, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\n{CLUSTER}, N = {args.n}, b = {args.b}, {args.reps} runs (real: medians [min, max]; numasim: median "
          "of the seeds)\n")
    print("| mapping | tiles per rank (mapping / Chameleon real / Chameleon StarPU-SimGrid) | real | StarPU-SimGrid "
          "| numasim | Chameleon's check |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        tiles = " / ".join(":".join(map(str, t)) for t in (r["expected_tiles_by_rank"], r["real_tiles_by_rank"],
                                                           r["starpu_simgrid_tiles_by_rank"]))
        print(f"| {r['mapping']} | {tiles} | {r['real_median_s']:.3f} s [{r['real_min_s']:.3f}, {r['real_max_s']:.3f}] "
              f"| {r['starpu_simgrid_s'][0]:.4f} s | {r['numasim_median_s']:.4f} s | {r['check_residual']:.1e} "
              f"({'passed' if r['check_passed'] else 'FAILED'}) |")


if __name__ == "__main__":
    main()
