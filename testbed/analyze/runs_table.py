"""The runs table (results/<experiment>/runs.csv): its columns and its validation.

One row per run, engine-agnostic: the design columns, the factor levels (one
column per factor letter, coded -1/+1), the StarPU variables applied (`env`,
JSON), and the measured `makespan_s` and `wall_s`. A corrupt or partial file
is rejected with the row that is wrong.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pandas as pd

from testbed.common.errors import InputError
from testbed.common.inputs import TABLE_BYTES, read_input_text

#: columns every runs table has, besides the factor letters
RUN_COLUMNS = [
    "experiment", "run", "order", "batch", "config", "repetition", "seed",
    "engine", "cluster", "n", "b", "distribution", "env", "variability",
    "makespan_s", "wall_s", "tasks",
]
#: columns written when the runs have them: `env_per_machine`, the JSON {machine type: {VAR: value}}
#: of the variables that differ between machine types (testbed/run/resolve.py); a rank on machine m ran
#: with {**env, **env_per_machine[m]}
OPTIONAL_COLUMNS = ["app", "env_per_machine"]
INT_COLUMNS = ["run", "order", "batch", "repetition", "seed", "n", "b", "tasks"]


def factor_columns(columns: list[str]) -> list[str]:
    """Factor columns: single capital letters, in letter order."""
    return sorted(c for c in columns if len(c) == 1 and c.isupper())


def _row_error(path: Path, row: int, line: int, column: str | None, expected: str) -> InputError:
    key = f"row {row} (line {line})" + (f", column {column}" if column else "")
    return InputError(path, key, expected)


def _float_or_nan(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _check_value(path: Path, row: int, line: int, column: str, text: str) -> None:
    if column in INT_COLUMNS:
        try:
            value = int(text)
        except ValueError:
            raise _row_error(path, row, line, column, f"an integer, got {text!r}") from None
        if not -2**63 <= value < 2**63:  # pandas stores the column as int64
            raise _row_error(path, row, line, column, f"an integer within 64 bits, got {text!r}")
    elif column == "makespan_s":
        value = _float_or_nan(text)
        if not math.isfinite(value) or value <= 0:
            raise _row_error(path, row, line, column, f"a positive finite makespan in seconds, got {text!r}")
    elif column == "wall_s":
        value = _float_or_nan(text)
        if not math.isfinite(value) or value < 0:
            raise _row_error(path, row, line, column, f"a non-negative wall time in seconds, got {text!r}")
    elif column == "env":
        try:
            ok = isinstance(json.loads(text), dict)
        except json.JSONDecodeError:
            ok = False
        if not ok:
            raise _row_error(path, row, line, column, f"a JSON object of StarPU variables, got {text!r}")
    elif column == "env_per_machine":
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = None
        if not (isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())):
            raise _row_error(path, row, line, column,
                             f"a JSON object {{machine type: {{VAR: value}}}}, got {text!r}")
    elif len(column) == 1 and column.isupper():
        if text.strip() not in ("-1", "1", "+1"):
            raise _row_error(path, row, line, column, f"a coded factor level -1 or 1, got {text!r}")
    elif column in ("engine", "cluster", "experiment", "config") and not text:
        raise _row_error(path, row, line, column, "a non-empty value")


def read_runs(path: str | Path, key: str | None = None) -> pd.DataFrame:
    """Read and validate a runs table (`key`: the option that named it); InputError names the
    first bad row. A regular file of bounded size (testbed/common/inputs.py), UTF-8 with or
    without the byte-order mark spreadsheet programs write."""
    text = read_input_text(path, key, "a runs table (CSV)", TABLE_BYTES)
    path = Path(path)
    with io.StringIO(text, newline="") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise InputError(path, "header", f"a CSV header with columns {', '.join(RUN_COLUMNS)}") from None
        except csv.Error as exc:
            raise InputError(path, "header (line 1)", f"valid CSV ({exc})") from None
        missing = [c for c in RUN_COLUMNS if c not in header]
        if missing:
            raise InputError(path, "header", f"columns {', '.join(missing)} (missing)")
        if len(set(header)) != len(header):
            raise InputError(path, "header", "distinct column names")
        factors = factor_columns(header)
        if not factors:
            raise InputError(path, "header", "at least one factor column (a capital letter, e.g. A)")
        rows: list[list[str]] = []
        seen_runs: dict[str, int] = {}
        row = 0
        while True:
            try:
                fields = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                raise _row_error(path, row + 1, reader.line_num, None, f"valid CSV ({exc})") from None
            row += 1
            line = reader.line_num
            if not fields:
                raise _row_error(path, row, line, None, "a run (empty line)")
            if len(fields) != len(header):
                raise _row_error(path, row, line, None,
                                 f"{len(header)} fields, got {len(fields)} (truncated or corrupt row)")
            for column, text in zip(header, fields, strict=False):
                _check_value(path, row, line, column, text)
            run_id = fields[header.index("run")]
            if run_id in seen_runs:
                raise _row_error(path, row, line, "run", f"a unique run id, {run_id} is also row {seen_runs[run_id]}")
            seen_runs[run_id] = row
            rows.append(fields)
    if not rows:
        raise InputError(path, "rows", "at least one run")
    table = pd.DataFrame(rows, columns=header)
    for c in INT_COLUMNS + factors:
        table[c] = table[c].astype(int)
    for c in ("makespan_s", "wall_s"):
        table[c] = table[c].astype(float)
    table["variability"] = table["variability"].map(lambda s: str(s).lower() in ("true", "1"))
    return table


#: Columns that must hold one value in a table analysed as one experiment: pooling runs of
#: another experiment, engine, cluster or size would fit one model to different systems.
DESIGN_CONSTANTS = ["experiment", "engine", "cluster", "n", "b", "distribution", "variability"]


def check_one_design(table: pd.DataFrame, path: str | Path) -> None:
    """InputError naming the first column that mixes designs (analyze --pool allows it)."""
    for column in [c for c in DESIGN_CONSTANTS + ["app"] if c in table.columns]:
        values = sorted(map(str, table[column].unique()))
        if len(values) > 1:
            raise InputError(path, column, f"one value for the whole table (runs of one experiment), got "
                                           f"{', '.join(values[:4])}{' ...' if len(values) > 4 else ''}; "
                                           "pass --pool to analyse them together")


def write_runs(rows: list[dict], fh) -> None:
    """Write rows (dicts) with the runs-table column order: RUN_COLUMNS, then factors."""
    if not rows:
        raise ValueError("no runs to write")
    factors = factor_columns(list(rows[0]))
    optional = [c for c in OPTIONAL_COLUMNS if c in rows[0]]
    writer = csv.DictWriter(fh, fieldnames=RUN_COLUMNS + optional + factors, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)


def concat_runs(paths: list[str | Path], fh) -> int:
    """Concatenate validated batch tables into one runs table; returns the number of runs."""
    frames = [read_runs(p, "--merge") for p in paths]
    headers = {tuple(f.columns) for f in frames}
    if len(headers) != 1:
        raise InputError(paths[0], "header", "the same columns in every batch")
    table = pd.concat(frames, ignore_index=True).sort_values("order")
    dup = table["run"].duplicated()
    if dup.any():
        raise InputError(None, "run", f"each run in one batch only, run {int(table['run'][dup].iloc[0])} repeats")
    table.to_csv(fh, index=False, lineterminator="\n")
    return len(table)
