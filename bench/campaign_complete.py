#!/usr/bin/env python3
"""Complete a campaign of more repetitions from one of fewer, run with the same campaign seed.

A run's seed depends only on (campaign seed, configuration, repetition)
(testbed/study/design.py `run_seed`), so repetitions 1..R of a design of R' > R repetitions
are the runs of the R-repetition design. This bench runs only the missing repetitions of the
full design (`testbed campaign` batches, grouped by repetition so an interrupted completion
leaves whole repetitions, resumable: a batch whose table exists is not run again), after
re-running `--check` runs of the existing table and requiring their makespans to the last
written digit (else the existing runs are of another model, and it stops). The merged table
takes the full design's experiment, run, order and batch columns for every row: it is the runs table of
the full design (the runs are independent processes; their grouping does not change them).

Usage: .venv/bin/python bench/campaign_complete.py --design FULL_DESIGN.csv --have RUNS.csv
       --work DIR --out RUNS_FULL.csv [--check 4] [--batch-size 32] [--jobs 2]

FULL_DESIGN.csv: `testbed design` of the full experiment (the workflow's rule `design`);
RUNS.csv: the runs table of the same experiment with fewer repetitions.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.analyze.runs_table import read_runs  # noqa: E402
from testbed.common.errors import InputError  # noqa: E402
from testbed.run.campaign import read_design  # noqa: E402

KEY = ["config", "repetition"]
RENUMBERED = ["experiment", "run", "order", "batch"]  # the full design's, for every row


def _campaign(design: Path, batch: int, out: Path, log: Path) -> None:
    with open(log, "w") as fh:
        subprocess.run([sys.executable, "-m", "testbed", "campaign", "--design", str(design), "--batch",
                        str(batch), "--out", str(out)], cwd=ROOT, stderr=fh, stdout=fh, check=True)


def split_design(full: pd.DataFrame, have: pd.DataFrame, design_path: str, have_path: str) -> pd.DataFrame:
    """The full design's rows missing from `have`; `have`'s seeds must be the design's."""
    joined = have[KEY + ["seed"]].merge(full[KEY + ["seed"]], on=KEY, how="left", suffixes=("", "_full"))
    if joined["seed_full"].isna().any() or (joined["seed"] != joined["seed_full"]).any():
        raise InputError(have_path, "seed", f"the seeds of {design_path} (the same campaign seed), "
                                            "found runs of another design")
    done = set(map(tuple, have[KEY].to_numpy()))
    return full[[tuple(k) not in done for k in full[KEY].to_numpy()]].copy()


def merge_runs(have: pd.DataFrame, new: pd.DataFrame, full: pd.DataFrame) -> pd.DataFrame:
    """The existing and the new runs as the full design's runs table: its columns RENUMBERED."""
    merged = pd.concat([have, new], ignore_index=True).drop(columns=RENUMBERED)
    return merged.merge(full[KEY + RENUMBERED], on=KEY)[list(have.columns)].sort_values("order")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--design", required=True, help="design table of the full experiment")
    p.add_argument("--have", required=True, help="runs table of the same experiment with fewer repetitions")
    p.add_argument("--work", required=True, help="folder of the completion's designs, batch tables and logs")
    p.add_argument("--out", required=True, help="runs table of the full design to write")
    p.add_argument("--check", type=int, default=4, help="existing runs re-run and required to the last digit")
    p.add_argument("--batch-size", type=int, default=32, help="runs per batch")
    p.add_argument("--jobs", type=int, default=2, help="batches run at once")
    p.add_argument("--seed", type=int, default=1, help="seed of the choice of the checked runs")
    args = p.parse_args()

    try:  # bad input: one line, exit 2, nothing written
        full = read_design(args.design)
        have = read_runs(args.have, "--have")
        missing = split_design(full, have, args.design, args.have)
    except InputError as exc:
        print(f"bench/campaign_complete.py: {exc}", file=sys.stderr)
        return 2
    work = Path(args.work)
    (work / "batches").mkdir(parents=True, exist_ok=True)
    (work / "logs").mkdir(exist_ok=True)

    # the existing runs must be this model's: re-run a seeded sample of them
    check_rows = have.sample(n=min(args.check, len(have)), random_state=args.seed)
    checks = full.merge(check_rows[KEY], on=KEY).assign(batch=0)
    checks.to_csv(work / "check-design.csv", index=False)
    check_out = work / "check-runs.csv"
    if not check_out.exists():
        _campaign(work / "check-design.csv", 0, check_out, work / "logs" / "check.log")
    rerun = read_runs(check_out, "--check").merge(have[KEY + ["makespan_s"]], on=KEY, suffixes=("", "_have"))
    for _, r in rerun.iterrows():
        print(f"check {r['config']} rep {r['repetition']} seed {r['seed']}: {r['makespan_s']!r} s now, "
              f"{r['makespan_s_have']!r} s in {args.have}", flush=True)
    if len(rerun) != len(check_rows) or (rerun["makespan_s"] != rerun["makespan_s_have"]).any():
        print(f"error: {args.have}: makespan_s: the runs of this model to the last digit, found others "
              "(not completed)", file=sys.stderr)
        return 1

    # whole repetitions first: an interrupted completion leaves full repetitions behind
    missing = missing.sort_values(["repetition", "order"]).reset_index(drop=True)
    missing["batch"] = np.arange(len(missing)) // args.batch_size
    missing.to_csv(work / "design-missing.csv", index=False)
    batches = sorted(missing["batch"].unique())
    todo = [b for b in batches if not (work / "batches" / f"batch-{b:03d}.csv").exists()]
    print(f"{len(have)} runs in {args.have}, {len(missing)} missing in {len(batches)} batches, "
          f"{len(todo)} to run", flush=True)
    t0, done = time.perf_counter(), 0

    def one(b: int) -> int:
        _campaign(work / "design-missing.csv", b, work / "batches" / f"batch-{b:03d}.csv",
                  work / "logs" / f"batch-{b:03d}.log")
        return b

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for b in pool.map(one, todo):
            done += 1
            elapsed = time.perf_counter() - t0
            print(f"batch {b} done ({done}/{len(todo)}), {elapsed:.0f} s, "
                  f"eta {elapsed / done * (len(todo) - done):.0f} s", flush=True)

    new = pd.concat([read_runs(work / "batches" / f"batch-{b:03d}.csv", "--merge") for b in batches])
    merged = merge_runs(have, new, full)
    if len(merged) != len(full) or merged[KEY].duplicated().any():
        print(f"error: {args.out}: one run per design row, got {len(merged)} for {len(full)}", file=sys.stderr)
        return 1
    merged.to_csv(args.out, index=False, lineterminator="\n")
    print(f"{len(merged)} runs -> {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
