#!/usr/bin/env python3
"""Per-run Python overhead of a campaign batch (target: at most 0.05 s per run).

One batch of the embedded default experiment (g5k-lille-21, 30 x 30 tiles of b = 960, numasim,
a slice of its design: --runs rows), run the way Snakemake runs it (`testbed.run.campaign.run_batch`,
platform from the cache), --reps times. The numasim processes are timed inside the same batch (the
engine's subprocess.run, wrapped by a timer), so overhead per run = (batch wall - sum of the numasim
process walls) / runs is the Python around numasim (resolution of the environment, run description,
temporary files, JSON) without run-to-run noise of numasim itself; median over the repetitions.

Usage: .venv/bin/python bench/campaign_overhead.py [--runs 16] [--reps 3]
           [--out bench/results/campaign_overhead.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def design_slice(runs: int, out: Path) -> Path:
    """The first `runs` rows of the default experiment's design, as one batch."""
    import pandas as pd

    from testbed.study.design import design_table, load_config, resolve_experiment

    config = load_config(ROOT / "config" / "config.yaml")
    exp = resolve_experiment(config, config["experiments"][0]["name"], "default")
    table = design_table(exp).head(runs).copy()
    table["batch"] = 0
    path = out / "design.csv"
    pd.DataFrame(table).to_csv(path, index=False)
    return path


class ProcessTimer:
    """Wraps subprocess.run in the numasim engine: calls it unchanged and adds up its wall time."""

    def __init__(self, module) -> None:
        self.module, self.real, self.total = module, module.subprocess.run, 0.0

    def __enter__(self) -> "ProcessTimer":
        def timed_run(*a, **kw):
            t0 = time.perf_counter()
            try:
                return self.real(*a, **kw)
            finally:
                self.total += time.perf_counter() - t0

        self.module.subprocess = type("timed_subprocess", (), {"run": staticmethod(timed_run)})
        return self

    def __exit__(self, *exc) -> None:
        self.module.subprocess = subprocess


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=16)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "campaign_overhead.json")
    args = p.parse_args(argv)
    from testbed.common.atomic import atomic_file
    from testbed.run.campaign import read_design, run_batch
    from testbed.run.engines import numasim

    with tempfile.TemporaryDirectory(prefix="campaign-overhead-") as tmp:
        design = read_design(design_slice(args.runs, Path(tmp)))
        cluster, b = design["cluster"].iloc[0], int(design["b"].iloc[0])
        run_batch(design, 0, None)  # warm-up (caches, page cache)
        per_run, batch_walls, alone_walls = [], [], []
        for _ in range(args.reps):
            with ProcessTimer(numasim) as timer:
                t0 = time.perf_counter()
                run_batch(design, 0, None)
                batch = time.perf_counter() - t0
            batch_walls.append(batch)
            alone_walls.append(timer.total)
            per_run.append((batch - timer.total) / len(design))
    row = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "nproc": os.cpu_count(),
           "cluster": cluster, "n": int(design["n"].iloc[0]), "b": b, "runs": len(design), "reps": args.reps,
           "batch_wall_s": batch_walls, "numasim_process_wall_s": alone_walls,
           "overhead_per_run_s": statistics.median(per_run), "loadavg": os.getloadavg()[0]}
    print(f"{cluster} n={row['n']} b={b}, {len(design)} runs per batch: batch {statistics.median(batch_walls):.2f} s, "
          f"numasim processes {statistics.median(alone_walls):.2f} s, overhead per run "
          f"{row['overhead_per_run_s'] * 1000:.0f} ms (load {row['loadavg']:.1f})", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(args.out) as fh:
        json.dump(row, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
