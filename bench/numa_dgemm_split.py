"""CPU dgemm durations per machine type and NUMA node of a numasim task trace, with the share
StarVZ flags as outliers (docs/references/study-case.md: duration > Q3 + 1.5 IQR of all tasks of
the kind on the resource type over the whole trace; StarVZ R/phase1_parse_csv.R, R/phase1_outlier.R).

    testbed simulate --engine numasim --cluster g5k-lille-21 --n 96000 --b 960 --factors \\
        --distribution heterogeneous --seed 1 --trace t.csv
    python -m bench.numa_dgemm_split t.csv

Columns of the trace: ResourceId (<node>.cpu<k> / <node>.gpu<k>), Duration, Value (kernel),
WorkerNuma (testbed/traces, numasim's task trace).
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path


def split(path: Path) -> tuple[float, dict[tuple[str, str], tuple[int, float, float]]]:
    """(StarVZ threshold, {(machine type, numa): (tasks, median s, flagged share)}) of the CPU gemms."""
    rows = [r for r in csv.DictReader(path.open()) if r["Value"] == "gemm" and ".cpu" in r["ResourceId"]]
    d = [float(r["Duration"]) for r in rows]
    q1, _, q3 = statistics.quantiles(d, n=4)
    thr = q3 + 1.5 * (q3 - q1)
    groups: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        machine = r["ResourceId"].split(".")[0].rsplit("-", 1)[0]
        groups.setdefault((machine, r["WorkerNuma"]), []).append(float(r["Duration"]))
    return thr, {k: (len(v), statistics.median(v), sum(x > thr for x in v) / len(v)) for k, v in sorted(groups.items())}


def main(argv: list[str] | None = None) -> int:
    paths = [Path(a) for a in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    for p in paths:
        thr, groups = split(p)
        print(f"{p}: StarVZ outlier threshold {thr * 1e3:.2f} ms")
        for (machine, numa), (n, med, flagged) in groups.items():
            print(f"  {machine} NUMA {numa}: {n} CPU dgemms, median {med * 1e3:.2f} ms, flagged {100 * flagged:.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
