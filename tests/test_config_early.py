"""Config mistakes are reported while the Snakefile is read, in one line, exit 2:
schema violations (snakemake's validate() printed 15 to 800 lines, exit 1), and the
mistakes that used to pass `snakemake -n` and fail in every batch job: N not a multiple of b, an
unknown factor or StarPU variable, a missing distribution file, scale overrides out of range,
more batches than runs. A nested `--config 'analysis={p_max: 0.01}'` is accepted."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support.workflow import snakemake, workflow_copy

from testbed import ROOT
from testbed.common import paths
from testbed.common.errors import InputError
from testbed.run.engines.numasim import ENV_VARIABLES
from testbed.study.design import resolve_experiment, validate_config

BASE = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def config_with(**exp_changes) -> dict:
    c = copy.deepcopy(BASE)
    c["experiments"][0].update(exp_changes)
    return c


def resolved(config: dict, scale: str = "default") -> dict:
    config = validate_config(config, "c.yaml", cli_strings=True)
    return resolve_experiment(config, config["experiments"][0]["name"], scale, "c.yaml")


@pytest.mark.parametrize("changes,scale,key,words", [
    ({"workload": {"n": 28800, "b": 961}}, "default", "experiments.lille21.workload.n", "multiple of b"),
    ({"workload": {"n": 2**40, "b": 1024}}, "default", "experiments.lille21.workload", "tiles"),
    ({"factors": {"A": [-1, 1], "H": [-1, 1]}}, "default", "experiments.lille21.factors.H", "config/factors.yaml"),
    ({"env": {"STARPU_SCHED_BETTA": "10"}}, "default", "experiments.lille21.env.STARPU_SCHED_BETTA", "numasim"),
    ({"workload": {"n": 28800, "b": 960, "distribution": {"kind": "file", "path": "no/such.txt"}}}, "default",
     "experiments.lille21.workload.distribution.path", "existing"),
    ({"batches": 100000}, "default", "experiments.lille21.batches", "at most the number of runs"),
    ({"scales": {"study": {"factors": {"A": [-1, 7]}}}}, "study", "experiments.0.scales.study.factors.A.1",
     "A coded factor level"),
    ({"scales": {"study": {"repetitions": 1, "batches": 500}}}, "study", "experiments.lille21.batches", "scale study"),
    ({"scales": {"study": {"workload": {"n": 1000}}}}, "study", "experiments.lille21.workload.n", "scale study"),
    ({"cluster": "no-such-cluster"}, "default", None, "no-such-cluster"),
])
def test_experiment_mistakes_found_when_resolving(changes, scale, key, words):
    with pytest.raises(InputError) as e:
        resolved(config_with(**changes), scale)
    if key:
        assert e.value.key == key, e.value.message()
    assert words in e.value.message()


@pytest.mark.parametrize("override,key", [
    ({"workload": {"nn": 96000}}, "experiments.0.scales.study.workload"),
    ({"design": {"typ": "full"}}, "experiments.0.scales.study.design"),
    ({"engine": "numasm"}, "experiments.0.scales.study.engine"),
    ({"factors": {"A": [3]}}, "experiments.0.scales.study.factors.A.0"),
])
def test_scale_overrides_checked_when_not_selected(override, key):
    """A typo inside a `scales:` entry is a mistake even while another scale is selected (it
    passed validation on 4295b50 and surfaced only when that scale was chosen)."""
    with pytest.raises(InputError) as e:
        validate_config(config_with(scales={"study": override}), "c.yaml")
    assert e.value.key == key, e.value.message()


def test_scale_design_replaces_the_experiment_design():
    fractional = {"type": "fractional", "generators": ["G=ABCDEF"]}
    assert resolved(config_with(design=fractional), "default")["design"] == fractional
    assert resolved(config_with(design=fractional, scales={"study": {"design": {"type": "full"}}}),
                    "study")["design"] == {"type": "full", "generators": []}


def test_non_finite_and_cli_strings():
    c = copy.deepcopy(BASE)
    c["analysis"]["p_max"] = float("nan")  # JSON Schema's exclusiveMinimum lets NaN through
    with pytest.raises(InputError, match="analysis.p_max: expected a finite number"):
        validate_config(c, "c.yaml")
    c["analysis"] = {"p_max": "0.01"}  # snakemake's BaseLoader string for a nested --config
    assert validate_config(c, "c.yaml", cli_strings=True)["analysis"]["p_max"] == 0.01
    with pytest.raises(InputError, match="p_max"):
        validate_config(c, "c.yaml")  # from a file, a string stays a mistake


def test_design_spec_is_checked(tmp_path):
    spec = resolved(config_with())
    spec["workload"] = {"n": 100, "b": 7}
    proc = subprocess.run([sys.executable, "-m", "testbed", "design", "--spec", json.dumps(spec), "--out",
                           str(tmp_path / "d.csv")], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "workload.n" in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "testbed", "design", "--spec", "[1]", "--out",
                           str(tmp_path / "d.csv")], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def snakemake_dry(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return snakemake(workflow_copy(tmp_path), "-n", "--cores", "1", *args, timeout=300)


@pytest.mark.parametrize("args,words", [
    (["--config", "repetitions=3"], ["(top level)", "repetitions"]),          # was 800 lines, exit 1
    (["--config", "analysis={p_max: abc}"], ["config/config.yaml + --config: analysis.p_max"]),
    (["--config", "scale=nosuch"], ["scales", "nosuch"]),
])
def test_snakemake_reports_one_line_before_the_dag(tmp_path, args, words):
    proc = snakemake_dry(tmp_path, *args)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "is extended by additional config" not in ln]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for w in words:
        assert w in lines[0]
    assert "Job stats" not in proc.stdout


def test_snakemake_accepts_a_nested_config_value(tmp_path):
    proc = snakemake_dry(tmp_path, "--config", "analysis={p_max: 0.01}")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(not paths.NUMASIM.exists(), reason="numasim not built (make build)")
def test_env_variable_list_matches_numasim(tmp_path):
    """Every name of ENV_VARIABLES is one numasim knows (a bad value is then refused for the value,
    not the name), and a name outside it is refused by numasim too."""
    data = ROOT / "simulator" / "tests" / "data"

    def refusal(var: str) -> str:
        f = tmp_path / "run.json"
        f.write_text(json.dumps({"platform": str(data / "tiny2.xml"), "perfmodels": {"tiny": str(data / "tiny_sampling")},
                                 "workload": {"kind": "lu", "n": 96, "b": 96}, "env": {var: "%bad%"}}))
        return subprocess.run([str(paths.NUMASIM), str(f)], capture_output=True, text=True).stderr

    unknown = "a StarPU variable numasim interprets"
    for var in sorted(ENV_VARIABLES):
        assert unknown not in refusal(var), var
    assert unknown in refusal("STARPU_NOT_A_VARIABLE")


def test_snakemake_refuses_an_alias_bomb_in_the_config_quickly(tmp_path):
    """A 4 KB alias bomb in config/config.yaml made snakemake's own loader grow for a
    minute before a MemoryError; the project's reader refuses it first, in one line."""
    copy = workflow_copy(tmp_path)
    config = copy / "config" / "config.yaml"
    bomb = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    bomb += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    config.write_text(config.read_text() + "\nnotes:\n" + "".join(f"  {line}\n" for line in bomb))
    start = time.monotonic()
    proc = snakemake(copy, "-n", "--cores", "1", timeout=120)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr[-500:]
    assert len(lines) == 1 and lines[0].startswith("error: config/config.yaml") and "alias bomb" in lines[0]
    assert time.monotonic() - start < 60


def test_a_fresh_clone_calibrates_its_own_machine(tmp_path):
    """Stale calibration: no committed bundle is named like the default machine, so
    `snakemake calibrate` on a fresh clone plans a calibration instead of "Nothing to be done"
    (the committed bundle of the 2-core development VM is calibration/vm-2c)."""
    assert not (ROOT / "calibration" / "local").exists()
    proc = snakemake_dry(tmp_path, "calibrate")
    assert proc.returncode == 0, proc.stderr[-500:]
    assert "calibration_bundle" in proc.stdout and "Nothing to be done" not in proc.stdout + proc.stderr
