#!/usr/bin/env python3
"""Fault injection, long version: a small campaign killed with SIGKILL --kills times in a row at
seeded random points, then completed; its runs table and ANOVA must be those of an uninterrupted
run (target: identical, whatever the kills hit).

The campaign and the kills are tests/support/faults.py's (tests/test_fault_injection.py runs 3
kills in `make test`): 2 factors × 2 repetitions = 8 numasim runs on chifflet-1 (N = 1920, b = 192)
in 4 batch jobs through the workflow up to `testbed analyze`'s tables; each attempt is started
after `snakemake --unlock` with `--rerun-incomplete` and killed after a delay drawn in (0,
--max-delay] s, either as a whole process group (snakemake and its jobs) or by killing one batch
job process (its testbed command or numasim) first. Reported: each kill (attempt, delay, what it
hit), how many landed while work was under way, the wall time, and whether the results match.

With --slurm, the same campaign through `snakemake --profile profiles/slurm` on a one-node SLURM
cluster started on this machine (envs/slurm-local.sh: root, `TESTBED_SLURM=1 bash envs/setup.sh`),
hit by --kills faults in a row (tests/support/faults.py interrupted_on_scheduler: scancel of a
running batch job, SIGKILL of a batch's `testbed campaign` process, SIGINT or SIGKILL of snakemake,
drawn with equal chances, each after a delay in (0, --max-delay] s from the previous one), then
completed; compared with the uninterrupted local run, the queue and the node checked empty
(tests/test_slurm.py runs 5 faults in `make test-schedulers`).

Usage: .venv/bin/python bench/fault_injection.py [--kills 50] [--seed 1] [--max-delay 12] [--slurm]
           [--out bench/results/fault_injection.json]
(about 10-15 s per kill on two cores, plus two complete runs; --slurm: about 10 s per fault.)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    from support import faults

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-delay", type=float, default=None, help="longest wait before a kill (s; default 12, "
                   "with --slurm 8)")
    p.add_argument("--slurm", action="store_true", help="through snakemake's SLURM profile on a one-node cluster")
    p.add_argument("--out", default=None, help="JSON written (default bench/results/fault_injection[-slurm].json)")
    args = p.parse_args()
    max_delay = args.max_delay or (8.0 if args.slurm else 12.0)
    out = args.out or str(ROOT / "bench" / "results" / f"fault_injection{'-slurm' if args.slurm else ''}.json")
    with tempfile.TemporaryDirectory(prefix="fault-injection-") as tmp, contextlib.ExitStack() as stack:
        clean = faults.workflow(Path(tmp) / "clean")
        t0 = time.perf_counter()
        runs, anova = faults.completed(clean)
        clean_s = time.perf_counter() - t0
        hurt = faults.workflow(Path(tmp) / "killed")
        t0 = time.perf_counter()
        if args.slurm:
            from support import schedulers

            why = schedulers.slurm_cannot_start()
            if why:
                print(f"no SLURM cluster can start here: {why}", file=sys.stderr)
                return 2
            env = stack.enter_context(schedulers.slurm_cluster())
            how = ("--profile", str(ROOT / "profiles" / "slurm"), "--slurm-init-seconds-before-status-checks", "1")
            report = faults.interrupted_on_scheduler(
                hurt, how, env, args.kills, args.seed, max_delay, running=lambda: schedulers.running_batches(env),
                cancel=lambda job: subprocess.run(["scancel", job], env=env, check=True),
                queue=lambda: schedulers.slurm_queue(env), log=Path(tmp) / "attempts.log")
            runs_k, anova_k = faults.completed(hurt, how, env)
            left = {"queue": schedulers.slurm_queue(env), "processes": schedulers.processes_in(hurt)}
        else:
            report = faults.interrupted(hurt, args.kills, args.seed, max_delay)
            runs_k, anova_k = faults.completed(hurt)
            left = {}
        killed_s = time.perf_counter() - t0
        leftovers = sorted(str(f.relative_to(hurt)) for f in (hurt / "results").rglob("*") if ".tmp" in f.name)
    same = bool(runs_k.equals(runs) and anova_k == anova and not leftovers and not any(left.values()))
    targets = faults.SCHEDULER_FAULTS if args.slurm else ("snakemake", "job")
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "scheduler": "slurm" if args.slurm else None,
        "kills": args.kills, "seed": args.seed, "max_delay_s": max_delay,
        "hits": report.hits, "by_target": {t: sum(k.target == t for k in report.kills) for t in (*targets, "none")},
        "uninterrupted_s": round(clean_s, 1), "interrupted_then_completed_s": round(killed_s, 1),
        "runs_and_anova_identical": same, "temporary_files_left": leftovers, **({"left": left} if left else {}),
        "log": [dataclasses.asdict(k) for k in report.kills],
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"{args.kills} kills ({report.hits} while work was under way: {result['by_target']}), "
          f"uninterrupted {clean_s:.0f} s, killed then completed {killed_s:.0f} s; runs table and ANOVA "
          f"{'identical' if same else 'DIFFERENT'}{', temporary files left: ' + ', '.join(leftovers) if leftovers else ''}"
          f"{f', left: {left}' if any(left.values()) else ''}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
