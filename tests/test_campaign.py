"""Campaign batches through testbed.run.simulate with the real engine (apps/lu on this machine)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from support.experiments import TINY

from testbed.analyze.runs_table import read_runs
from testbed.cli import main
from testbed.common.errors import InputError
from testbed.common.paths import LU_REAL, NUMASIM
from testbed.run.campaign import read_design, run_batch
from testbed.study.design import design_table

needs_real_engine = pytest.mark.skipif(not LU_REAL.exists(), reason="apps/lu not built (make build)")


@pytest.fixture
def design_csv(tmp_path: Path) -> Path:
    path = tmp_path / "design.csv"
    assert main(["design", "--spec", json.dumps(TINY), "--out", str(path)]) == 0
    return path


@needs_real_engine
def test_batches_run_merge_and_analyse(design_csv: Path, tmp_path: Path, capsys):
    design = read_design(design_csv)
    batches = []
    for batch in (0, 1):
        out = tmp_path / f"batch-{batch}.csv"
        assert main(["campaign", "--design", str(design_csv), "--batch", str(batch), "--out", str(out)]) == 0
        batches.append(out)
        assert len(read_runs(out)) == (design["batch"] == batch).sum()
    progress = capsys.readouterr().err
    assert "[tiny batch 1] run 2/2" in progress
    runs_csv = tmp_path / "runs.csv"
    assert main(["campaign", "--merge", *map(str, batches), "--out", str(runs_csv)]) == 0
    runs = read_runs(runs_csv)
    assert sorted(runs["run"]) == sorted(design["run"])
    assert list(runs["order"]) == sorted(runs["order"])
    for row in runs.to_dict("records"):
        env = json.loads(row["env"])
        assert env["STARPU_SCHED_BETA"] == ("10" if row["E"] == 1 else "1")
        assert env["STARPU_SCHED"] == ("eager" if row["S"] == 1 else "dmdas")
        assert env["STARPU_SILENT"] == "1"
        assert row["engine"] == "real" and row["makespan_s"] > 0 and row["tasks"] == 55
        assert row["seed"] == design.set_index("run").loc[row["run"], "seed"]
    # the analysis is engine-agnostic: real runs go through it unchanged
    assert main(["analyze", str(runs_csv), "--out", str(tmp_path / "analysis"), "--stage", "tables"]) == 0
    anova = pd.read_csv(tmp_path / "analysis" / "anova.csv")
    assert list(anova["term"]) == ["E", "S", "E:S", "Residuals"]


def test_regenerated_design_keeps_batches_valid(design_csv: Path, tmp_path: Path):
    """Resume relies on it: the same config gives the same runs in the same batches."""
    again = tmp_path / "again.csv"
    assert main(["design", "--spec", json.dumps(TINY), "--out", str(again)]) == 0
    assert design_csv.read_bytes() == again.read_bytes()
    assert design_table(TINY).equals(read_design(design_csv).astype(design_table(TINY).dtypes.to_dict()))


def test_unknown_batch_and_partial_batch_are_input_errors(design_csv: Path, tmp_path: Path):
    with pytest.raises(InputError, match="--batch"):
        run_batch(read_design(design_csv), 7)
    partial = tmp_path / "batch-0.csv"
    partial.write_text("experiment,run\ntiny,0\n")
    assert main(["campaign", "--merge", str(partial), "--out", str(tmp_path / "runs.csv")]) == 2
    assert not (tmp_path / "runs.csv").exists()


@pytest.mark.skipif(not NUMASIM.exists(), reason="numasim not built (make build)")
def test_numasim_batch_applies_the_study_factors(tmp_path: Path):
    """Factors without factor_env go through config/factors.yaml; numasim runs them in-process."""
    spec = {**TINY, "engine": "numasim", "cluster": "chifflet-1", "workload": {"n": 1920, "b": 960},
            "factors": {"A": [-1, 1], "E": [-1, 1]}, "factor_env": {}, "env": {}, "batches": 1,
            "repetitions": 2}
    platform = tmp_path / "platform"
    assert main(["platform", "--cluster", "chifflet-1", "--out", str(platform)]) == 0
    design = tmp_path / "design.csv"
    assert main(["design", "--spec", json.dumps(spec), "--out", str(design)]) == 0
    out = tmp_path / "batch-000.csv"
    assert main(["campaign", "--design", str(design), "--batch", "0", "--platform-dir", str(platform),
                 "--out", str(out)]) == 0
    runs = read_runs(out)
    assert len(runs) == 8 and (runs["engine"] == "numasim").all() and (runs["makespan_s"] > 0).all()
    for row in runs.to_dict("records"):
        env = json.loads(row["env"])
        assert env.get("STARPU_SCHED_BETA", "1") == ("10" if row["E"] == 1 else "1")
    # same seed, same configuration -> same makespan (deterministic engine)
    again = tmp_path / "again.csv"
    assert main(["campaign", "--design", str(design), "--batch", "0", "--platform-dir", str(platform),
                 "--out", str(again)]) == 0
    assert list(read_runs(again)["makespan_s"]) == list(runs["makespan_s"])
