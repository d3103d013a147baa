"""`testbed campaign`: run one batch of a design table, or merge batches into runs.csv.

A batch is one Snakemake job; its table is written atomically at the end, so an
interrupted campaign resumes by running only the batches whose table is missing. Batches
written to one `--out` are merged there (under a lock: concurrent batches too): the rows of
the other batches are kept, this batch's rows replace its earlier ones.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import os
import tempfile
import time
from pathlib import Path

import pandas as pd

from testbed.analyze.runs_table import concat_runs, factor_columns, read_runs, write_runs
from testbed.common.atomic import atomic_file, check_output_file
from testbed.common.errors import InputError
from testbed.common.inputs import TABLE_BYTES, check_repeated_inputs, read_input_text
from testbed.common.outputs import Out, check_distinct, file_lock
from testbed.describe.machines import load_cluster
from testbed.run.engines import RunSpec, given_platform_dir
from testbed.run.resolve import resolve_run_env
from testbed.run.simulate import simulate

log = logging.getLogger(__name__)

DESIGN_REQUIRED = ["experiment", "run", "order", "batch", "config", "repetition", "seed",
                   "engine", "cluster", "n", "b", "distribution", "env", "variability"]


def read_design(path: str | Path) -> pd.DataFrame:
    text = read_input_text(path, "--design", "a design table (testbed design)", TABLE_BYTES)
    try:
        table = pd.read_csv(io.StringIO(text), dtype={"distribution": str, "env": str})
    except (ValueError, pd.errors.ParserError) as exc:
        raise InputError(path, "--design", f"a design table, CSV ({' '.join(str(exc).split())})") from None
    missing = [c for c in DESIGN_REQUIRED if c not in table.columns]
    if missing:
        raise InputError(path, "header", f"design columns {', '.join(missing)}")
    return table


def spec_for(row: dict, factors: list[str], platform_dir: Path | None, workdir: Path, cluster=None) -> RunSpec:
    """The run of a design row; `cluster` (a loaded `Cluster`) saves reading its YAML again."""
    levels = {f: int(row[f]) for f in factors}
    fixed_env = json.loads(row["env"]) if isinstance(row["env"], str) and row["env"] else {}
    factor_env = json.loads(row["factor_env"]) if isinstance(row.get("factor_env"), str) and row["factor_env"] else {}
    # Factors with explicit variables (factor_env) bypass config/factors.yaml on every machine type.
    run_env = resolve_run_env(cluster if cluster is not None else row["cluster"], levels, fixed_env, None, factor_env)
    return RunSpec(
        engine=row["engine"],
        app=row.get("app") if isinstance(row.get("app"), str) else "lu",  # designs before the app column: apps/lu
        cluster=row["cluster"],
        n=int(row["n"]),
        b=int(row["b"]),
        env=run_env.common,
        env_per_machine=run_env.per_machine,
        factors=levels,
        seed=int(row["seed"]),
        distribution=json.loads(row["distribution"]),
        variability=str(row["variability"]).lower() in ("true", "1"),
        # designs before the mpi_backend column: the study's backend
        mpi_backend=row.get("mpi_backend") if isinstance(row.get("mpi_backend"), str) else "nmad",
        platform_dir=platform_dir,
        workdir=workdir,
    )


def run_batch(design: pd.DataFrame, batch: int, platform_dir: Path | None = None,
              where: str = "design") -> list[dict]:
    """Run every design row of `batch` (in design order); returns the runs-table rows. Logs a
    progress line per run (INFO)."""
    rows = design[design["batch"] == batch].sort_values("order").to_dict("records")
    if not rows:
        batches = sorted(design["batch"].unique())
        raise InputError(where, "--batch", f"a batch of the design ({batches[0]}..{batches[-1]}), got {batch}")
    factors = factor_columns(list(design.columns))
    clusters = {name: load_cluster(name) for name in {r["cluster"] for r in rows}}  # read once per batch
    out: list[dict] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="testbed-campaign-") as scratch:
        for i, row in enumerate(rows, 1):
            spec = spec_for(row, factors, platform_dir, Path(scratch), clusters[row["cluster"]])
            result = simulate(spec)
            record = {**row, "env": json.dumps(result.get("env", spec.env), sort_keys=True),
                      "env_per_machine": json.dumps(spec.env_per_machine, sort_keys=True),
                      "makespan_s": float(result["makespan_s"]), "wall_s": float(result["wall_s"]),
                      "tasks": int(result.get("tasks", 0))}
            out.append(record)
            levels = " ".join(f"{f}{'+' if row[f] == 1 else '-'}" for f in factors)
            elapsed = time.perf_counter() - t0
            eta = elapsed / i * (len(rows) - i)
            log.info(f"[{row['experiment']} batch {batch}] run {i}/{len(rows)} ({levels}, seed {row['seed']}): "
                     f"makespan {record['makespan_s']:.3f} s, wall {record['wall_s']:.2f} s, eta {eta:.0f} s")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--design", help="design table CSV (testbed design)")
    p.add_argument("--batch", type=int, help="batch number to run")
    p.add_argument("--platform-dir", default=None, help="output of `testbed platform` to reuse")
    p.add_argument("--merge", nargs="+", metavar="BATCH_CSV", help="concatenate batch tables instead of running")
    p.add_argument("--out", required=True, help="batch table (or runs.csv with --merge) to write")


def write_batch(out: Path, rows: list[dict], option: str = "--out") -> int:
    """Write a batch's `rows` into the runs table `out`, keeping the rows there of the other
    batches (keyed by experiment and batch); the read, merge and write are locked against
    concurrent batches. Returns the number of rows written."""
    check_output_file(out, option)
    out.parent.mkdir(parents=True, exist_ok=True)
    columns = list(rows[0])
    with file_lock(out):
        kept: list[dict] = []
        if out.exists():
            check_output_file(out, option)
            read_runs(out)  # a valid runs table (InputError naming the row otherwise)
            with io.StringIO(out.read_text(), newline="") as fh:
                old = list(csv.DictReader(fh))
            new_header = _header(columns)
            if old and list(old[0]) != new_header:
                raise InputError(out, option, f"a batch table of this design (columns {', '.join(new_header)}); it "
                                              "holds runs of another one (not merged; choose another path)")
            keys = {(str(r["experiment"]), str(r["batch"])) for r in rows}
            kept = [r for r in old if (r["experiment"], r["batch"]) not in keys]
        merged = sorted(kept + rows, key=lambda r: (int(r["order"]), int(r["batch"])))
        with atomic_file(out, option=option) as fh:
            write_runs(merged, fh)
    return len(merged)


def _header(columns: list[str]) -> list[str]:
    """The columns `write_runs` writes for rows with `columns`."""
    with io.StringIO() as fh:
        write_runs([dict.fromkeys(columns, "")], fh)
        return fh.getvalue().splitlines()[0].split(",")


def run(args: argparse.Namespace) -> int:
    if args.merge:
        check_repeated_inputs("--merge", args.merge)
        check_distinct([("--merge", m) for m in args.merge], [Out("--out", args.out)])
        with atomic_file(args.out, option="--out") as fh:
            count = concat_runs(args.merge, fh)
        log.info(f"campaign: {count} runs from {len(args.merge)} batches -> {args.out}")
        return 0
    if args.design is None or args.batch is None:
        raise InputError(None, "--design/--batch", "a design table and a batch number (or --merge)")
    check_distinct([("--design", args.design), ("--platform-dir", args.platform_dir)], [Out("--out", args.out)])
    check_output_file(Path(args.out), "--out")  # refused before the batch runs, not after
    platform_dir = given_platform_dir(args.platform_dir)  # absolute: engines run in scratch directories
    design = read_design(args.design)
    t0 = time.perf_counter()
    rows = run_batch(design, args.batch, platform_dir, args.design)
    write_batch(Path(args.out), rows)
    campaign_progress(design, Path(args.out), time.perf_counter() - t0)
    return 0


def campaign_progress(design: pd.DataFrame, out: Path, batch_s: float) -> None:
    """One line for the whole campaign after a batch: batch tables written next to this one
    (the resume state), and the time left if the other batches take as long as this one on
    TESTBED_JOBS (default: all cores) parallel jobs, as `snakemake --cores N` runs them."""
    total = int(design["batch"].nunique())
    done = len(list(out.parent.glob(f"*{out.suffix}")))
    jobs = max(1, int(os.environ.get("TESTBED_JOBS", os.cpu_count() or 1)))
    left = max(0, total - done)
    eta = left * batch_s / jobs
    log.info(f"[campaign] {done}/{total} batches written; this batch {batch_s:.0f} s; "
             f"about {eta / 60:.0f} min left on {jobs} jobs")
