"""A corrupt or partial runs.csv is rejected with the row that is wrong (and the CLI exits 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.experiments import synthetic_runs

from testbed.analyze.runs_table import read_runs
from testbed.cli import main
from testbed.common.errors import InputError


@pytest.fixture
def runs_csv(tmp_path: Path) -> Path:
    path = tmp_path / "runs.csv"
    synthetic_runs("AB", reps=2).to_csv(path, index=False)
    return path


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def test_valid_table_reads(runs_csv: Path):
    table = read_runs(runs_csv)
    assert len(table) == 8 and table["A"].dtype.kind == "i" and table["makespan_s"].dtype.kind == "f"


def test_truncated_last_row_names_the_row(runs_csv: Path):
    text = runs_csv.read_text()
    runs_csv.write_text(text[: len(text) - 40])  # a write interrupted mid-row
    with pytest.raises(InputError, match=r"row 8 \(line 9\).*fields"):
        read_runs(runs_csv)


@pytest.mark.parametrize("column, value, expected", [
    ("makespan_s", "nan", "positive finite makespan"),
    ("makespan_s", "12s", "positive finite makespan"),
    ("makespan_s", "-1", "positive finite makespan"),
    ("A", "2", "coded factor level"),
    ("seed", "x", "integer"),
    ("env", "STARPU_SCHED=dmdas", "JSON object"),
])
def test_bad_value_names_row_and_column(runs_csv: Path, column: str, value: str, expected: str):
    import csv

    rows = list(csv.reader(runs_csv.open()))
    rows[3][rows[0].index(column)] = value
    with runs_csv.open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    with pytest.raises(InputError) as err:
        read_runs(runs_csv)
    message = err.value.message()
    assert str(runs_csv) in message and "row 3 (line 4)" in message and f"column {column}" in message
    assert expected in message


def test_duplicate_run_and_missing_column_and_empty(runs_csv: Path, tmp_path: Path):
    content = lines(runs_csv)
    runs_csv.write_text("".join(content + [content[2]]))
    with pytest.raises(InputError, match=r"row 9 .*column run.*also row 2"):
        read_runs(runs_csv)
    header_only = tmp_path / "h.csv"
    header_only.write_text(content[0])
    with pytest.raises(InputError, match="at least one run"):
        read_runs(header_only)
    no_makespan = tmp_path / "m.csv"
    no_makespan.write_text("".join(line.replace("makespan_s", "time", 1) if i == 0 else line
                                   for i, line in enumerate(content)))
    with pytest.raises(InputError, match="makespan_s"):
        read_runs(no_makespan)


def test_cli_reports_the_row_and_writes_nothing(runs_csv: Path, tmp_path: Path, capsys):
    content = lines(runs_csv)
    content[5] = content[5].replace(",True,", ",True,oops", 1).replace(",0.5,", ",", 1)
    runs_csv.write_text("".join(content))
    out = tmp_path / "analysis"
    assert main(["analyze", str(runs_csv), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "row 5 (line 6)" in err
    assert not (out / "anova.csv").exists()


@pytest.mark.parametrize("column, other", [("cluster", "hetero-3"), ("n", 19200), ("engine", "starpu-simgrid"),
                                           ("experiment", "another")])
def test_mixed_designs_are_not_pooled_silently(tmp_path: Path, column: str, other):
    runs = synthetic_runs("AB", reps=2)
    runs.loc[runs.index[-1], column] = other
    path = tmp_path / "runs.csv"
    runs.to_csv(path, index=False)
    assert main(["analyze", str(path), "--out", str(tmp_path / "out"), "--stage", "tables"]) == 2
    assert not (tmp_path / "out" / "effects.csv").exists()
    assert main(["analyze", str(path), "--out", str(tmp_path / "pooled"), "--stage", "tables", "--pool"]) == 0


def test_non_utf8_and_oversized_integers_are_input_errors(runs_csv: Path):
    """Found by tests/test_fuzz.py: a UnicodeDecodeError and an OverflowError (pandas' int64)
    escaped as tracebacks."""
    data = runs_csv.read_bytes()
    runs_csv.write_bytes(data.replace(b"real", b"r\xffal", 1))
    with pytest.raises(InputError, match="UTF-8"):
        read_runs(runs_csv)
    text = data.decode().splitlines(keepends=True)
    header = text[0].rstrip("\n").split(",")
    row = text[1].split(",")
    row[header.index("seed")] = "99999999999999999999"
    runs_csv.write_text(text[0] + ",".join(row) + "".join(text[2:]))
    with pytest.raises(InputError, match="seed: expected an integer within 64 bits"):
        read_runs(runs_csv)
