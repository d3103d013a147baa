"""`testbed trace-pair`: an experiment's all-default configuration and its best one, each run
once more with a task trace, side by side (compare-traces' table, per-NUMA kernel boxplots and
space-time chart) for the report, and the utilisation over time of each run (busy CPU workers and
GPUs per node, bytes in flight per link class: testbed/traces/utilisation.py).

The two runs are the design's own rows (the first in run order of each configuration, with its
seed), simulated exactly as `testbed campaign` runs them (campaign.spec_for), plus `--trace`.
Only numasim writes task traces (docs/interfaces.md §10).
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from pathlib import Path

from testbed.analyze.runs_table import factor_columns
from testbed.common.errors import InputError
from testbed.run.campaign import read_design, spec_for
from testbed.run.simulate import simulate
from testbed.traces.compare_traces import write_comparison
from testbed.traces.traces import read_tasks, read_transfers
from testbed.traces.utilisation import utilisation

log = logging.getLogger(__name__)


def pick_rows(design, factors: list[str], best: dict[str, int], where: str) -> tuple[dict, dict]:
    """(first all-default row, first row of the best configuration), in run order."""
    rows = design.sort_values(["batch", "order"]).to_dict("records")

    def first(levels: dict[str, int], what: str) -> dict:
        for row in rows:
            if all(int(row[f]) == levels.get(f, -1) for f in factors):
                return row
        raise InputError(where, what, f"a design row with levels {levels or 'all -1'}")

    return first({}, "all-default configuration"), first(best, "best configuration")


def label(row: dict, factors: list[str]) -> str:
    return " ".join(f"{f}{'+' if int(row[f]) == 1 else '-'}" for f in factors)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--design", required=True, help="design table (testbed design)")
    p.add_argument("--best", required=True, help="best.json of the experiment (testbed analyze)")
    p.add_argument("--platform-dir", default=None, help="output of `testbed platform` to reuse")
    p.add_argument("--out", required=True, help="directory for compare.md/json, utilisation.csv and the plots")
    p.add_argument("--bins", type=int, default=100, help="time bins of the utilisation table (default 100)")


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.bins <= 100000:
        raise InputError(None, "--bins", f"a number of time bins in [1, 100000], got {args.bins}")
    design = read_design(args.design)
    factors = factor_columns(list(design.columns))
    try:
        best = {f: int(v) for f, v in json.loads(Path(args.best).read_text())["best"]["levels"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise InputError(args.best, "best.levels", f"the best configuration's factor levels ({err})") from None
    default_row, best_row = pick_rows(design, factors, best, args.design)
    if default_row["engine"] != "numasim":
        raise InputError(args.design, "engine", f"numasim (the only engine writing task traces), got "
                                                f"{default_row['engine']!r}")
    platform_dir = Path(args.platform_dir).resolve() if args.platform_dir else None
    with tempfile.TemporaryDirectory(prefix="testbed-trace-pair-") as scratch:
        traces, usage = [], {}
        for name, row in (("default", default_row), ("best", best_row)):
            spec = spec_for(row, factors, platform_dir, Path(scratch))
            spec.trace = Path(scratch) / f"{name}.csv"
            spec.transfers = Path(scratch) / f"{name}-transfers.csv"
            result = simulate(spec)
            log.info(f"trace-pair: {name} ({label(row, factors)}, seed {row['seed']}): makespan "
                     f"{result['makespan_s']:.3f} s")
            traces.append(read_tasks(spec.trace))
            usage["all default" if name == "default" else "best"] = utilisation(
                traces[-1], read_transfers(spec.transfers), args.bins)
        names = (f"all default (seed {default_row['seed']})",
                 f"best: {label(best_row, factors)} (seed {best_row['seed']})")
        write_comparison(traces[0], traces[1], *names, args.out, labels=("all default", "best"), utilisation=usage)
    return 0
