"""`testbed trace-pair`: an experiment's all-default configuration and its best one, each run
once more with a task trace, side by side (compare-traces' table, per-NUMA kernel boxplots and
space-time chart) for the report, the utilisation over time of each run (busy CPU workers and
GPUs per node, bytes in flight per link class: testbed/traces/utilisation.py), and the
diagnostics of each run (testbed/traces/diagnostics.py: `diagnostics/*.csv`, one `run` column).

`--extra A=1[,E=1]` (repeatable) traces more configurations for the diagnostics: the all-default
row with those factors changed, with its seed (a paired comparison with the default).

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
from testbed.common.atomic import atomic_members
from testbed.common.errors import InputError
from testbed.common.inputs import read_input_text
from testbed.common.outputs import Out, check_distinct
from testbed.run.campaign import read_design, spec_for
from testbed.run.engines import given_platform_dir
from testbed.run.simulate import simulate
from testbed.traces.compare_traces import OUT_FILES, UTILISATION_FILES, write_comparison
from testbed.traces.diagnostics import (
    TABLES,
    concat_runs,
    diagnose,
    digest,
    gpu_numa_nodes,
    model_means,
    node_machines,
    plot_diagnostics,
    write_tables,
)
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
    p.add_argument("--extra", action="append", default=[], metavar="LEVELS",
                   help="also trace the all-default configuration with these factor levels (e.g. A=1 or A=1,E=1) "
                        "for the diagnostics; repeatable")


def extra_rows(default_row: dict, factors: list[str], extras: list[str]) -> list[tuple[str, dict]]:
    """(label, design row) of each --extra: the all-default row with the given levels."""
    from testbed.run.simulate import parse_assignments

    out = []
    for text in extras:
        levels = parse_assignments([text], "--extra")
        row = dict(default_row)
        for f, v in levels.items():
            if f not in factors:
                raise InputError(None, "--extra", f"factors of the design ({', '.join(factors)}), got {f!r} in {text!r}")
            if v not in ("-1", "1", "+1"):
                raise InputError(None, "--extra", f"a level -1 or 1 for {f}, got {v!r} in {text!r}")
            row[f] = int(v)
        out.append((",".join(f"{f}={int(v):+d}" for f, v in levels.items()), row))
    return out


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.bins <= 100000:
        raise InputError(None, "--bins", f"a number of time bins in [1, 100000], got {args.bins}")
    check_distinct([("--design", args.design), ("--best", args.best), ("--platform-dir", args.platform_dir)],
                   [Out("--out", args.out, "members", tuple([*OUT_FILES, *UTILISATION_FILES, "diagnostics"]))])
    platform_dir = given_platform_dir(args.platform_dir)  # absolute: engines run in scratch directories
    design = read_design(args.design)
    factors = factor_columns(list(design.columns))
    text = read_input_text(args.best, "--best", "the best configuration (`testbed analyze`'s best.json)")
    try:
        best = {f: int(v) for f, v in json.loads(text)["best"]["levels"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise InputError(args.best, "best.levels", f"the best configuration's factor levels ({err})") from None
    default_row, best_row = pick_rows(design, factors, best, args.design)
    extras = extra_rows(default_row, factors, args.extra)
    if default_row["engine"] != "numasim":
        raise InputError(args.design, "engine", f"numasim (the only engine writing task traces), got "
                                                f"{default_row['engine']!r}")
    with tempfile.TemporaryDirectory(prefix="testbed-trace-pair-") as scratch:
        traces, usage, diagnostics = [], {}, []
        runs = [("default", "all default", default_row), ("best", "best", best_row),
                *((f"extra{i}", f"default, {text}", row) for i, (text, row) in enumerate(extras))]
        for name, run_label, row in runs:
            spec = spec_for(row, factors, platform_dir, Path(scratch))
            spec.trace = Path(scratch) / f"{name}.csv"
            spec.transfers = Path(scratch) / f"{name}-transfers.csv"
            result = simulate(spec)
            log.info(f"trace-pair: {run_label} ({label(row, factors)}, seed {row['seed']}): makespan "
                  f"{result['makespan_s']:.3f} s")
            tasks, transfers = read_tasks(spec.trace), read_transfers(spec.transfers)
            traces.append(tasks)
            if name in ("default", "best"):
                usage[run_label] = utilisation(tasks, transfers, args.bins)
            machines = node_machines(tasks, platform_dir)
            means = model_means(platform_dir, set(machines.values()), int(row["b"])) if platform_dir else None
            gpu_numa = gpu_numa_nodes(platform_dir) if platform_dir else None
            diagnostics.append(diagnose(tasks, transfers, machines, means, run=run_label, gpu_numa=gpu_numa,
                                        cpu_workers_by_rank=result.get("cpu_workers_by_rank"),
                                        runtime_costs=result.get("runtime_costs")))
        names = (f"all default (seed {default_row['seed']})",
                 f"best: {label(best_row, factors)} (seed {best_row['seed']})")
        tables = concat_runs(diagnostics)
        out = Path(args.out)
        write_comparison(traces[0], traces[1], *names, out, labels=("all default", "best"), utilisation=usage)
        with atomic_members(out / "diagnostics", [*TABLES, "digest.md", "diagnostics.png"]) as tmp:
            write_tables(tables, tmp)
            (tmp / "digest.md").write_text(digest(tables))
            plot_diagnostics(tables, tmp / "diagnostics.png")
    return 0
