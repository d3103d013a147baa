#!/usr/bin/env python3
"""The diagnostics of the study's default and of A = 1 at the study's scale (`testbed diagnose` on
each traced run): makespan against the area bound per machine type, CPU dgemm per NUMA node of
chifflet and chetemi and every kind per GPU with StarVZ's outlier share, copies against the
scheduler's estimate (what factor E scales), overheads.

g5k-lille-21, N = 96000, b = 960, the heterogeneity-aware mapping, numasim with seeded variability,
exactly as bench/study_factors.py runs them. The tables of every run go to OUT/*.csv (one `run`
column: `<config> seed <s>`), the digest to OUT/digest.md and stdout.

Usage: .venv/bin/python bench/study_diagnostics.py [--seeds 1] [--nt 100] [--configs default,A=1,A=1+B=1] --out DIR
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from study_factors import CLUSTER, spec  # noqa: E402

from testbed.common.atomic import atomic_members  # noqa: E402
from testbed.run.simulate import parse_assignments, simulate  # noqa: E402
from testbed.traces.diagnostics import (  # noqa: E402
    TABLES,
    concat_runs,
    diagnose,
    digest,
    gpu_numa_nodes,
    model_means,
    node_machines,
    write_tables,
)
from testbed.traces.traces import read_tasks, read_transfers  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--nt", type=int, default=100)
    ap.add_argument("--configs", default="default,A=1", help="comma-separated: `default` or FACTOR=LEVEL, several joined by + (A=1+B=1)")
    ap.add_argument("--cluster", default=CLUSTER,
                    help=f"the study's cluster (default: {CLUSTER}; g5k-lille-21-fitted: its fitted variant)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    from testbed.describe.machines import load_cluster
    from testbed.platform.platform_cmd import generate

    configs = {c: ({} if c == "default" else {k: int(v) for k, v in parse_assignments(c.split("+"), "--configs").items()})
               for c in args.configs.split(",")}
    tables = []
    with tempfile.TemporaryDirectory(prefix="study-diagnostics-") as tmp:
        pdir = Path(tmp) / "platform"
        generate(load_cluster(args.cluster), pdir, (960,))
        gpu_numa = gpu_numa_nodes(pdir)
        for seed in range(1, args.seeds + 1):
            for name, levels in configs.items():
                s = spec(levels, seed, args.nt, pdir, Path(tmp) / "tasks.csv", cluster=args.cluster)
                s.transfers = Path(tmp) / "transfers.csv"
                result = simulate(s)
                makespan = result["makespan_s"]
                print(f"{name}, seed {seed}: makespan {makespan:.3f} s", file=sys.stderr)
                tasks, transfers = read_tasks(s.trace), read_transfers(s.transfers)
                machines = node_machines(tasks, pdir)
                tables.append(diagnose(tasks, transfers, machines, model_means(pdir, set(machines.values()), 960),
                                       run=f"{name} seed {seed}", gpu_numa=gpu_numa,
                                       cpu_workers_by_rank=result["cpu_workers_by_rank"],
                                       runtime_costs=result.get("runtime_costs")))
    merged = concat_runs(tables)
    text = digest(merged)
    with atomic_members(args.out, [*TABLES, "digest.md"]) as out:
        write_tables(merged, out)
        (out / "digest.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
