"""The Snakemake workflow: lint-clean, plans the embedded default, resumes an interrupted campaign."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support import faults
from support.experiments import TINY
from support.workflow import RULE_FILES, SNAKEMAKE, jobs, snakemake, workflow_copy

from testbed import ROOT
from testbed.common.paths import LU_REAL, NUMASIM


def test_lint_is_clean(tmp_path: Path):
    result = snakemake(workflow_copy(tmp_path), "--lint")
    assert result.returncode == 0, result.stderr
    assert "Congratulations, your workflow is in a good condition!" in result.stdout + result.stderr


def test_unlock_needs_no_cores(tmp_path: Path):
    """After a kill -9, `snakemake --unlock` is the documented recovery: it must not ask for
    --cores (no rule may read workflow.cores when the workflow is parsed)."""
    result = snakemake(workflow_copy(tmp_path), "--unlock")
    assert result.returncode == 0, result.stderr
    assert "Unlocked working directory" in result.stdout + result.stderr


@pytest.mark.parametrize("target", ["all", "sensitivity", "calibrate"])
def test_dag_and_rulegraph_need_no_cores(tmp_path: Path, target: str):
    """`snakemake --dag` and `--rulegraph` (like --report and --unlock) run without --cores: no rule
    reads the core count while the workflow is parsed (workflows/calibrate.smk reads it per job)."""
    wf = workflow_copy(tmp_path)
    for option in ("--dag", "--rulegraph"):
        result = snakemake(wf, target, option)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("digraph"), result.stdout[:200]
    batch = {"all": "campaign_batch", "sensitivity": "sensitivity_batch", "calibrate": "calibration_bundle"}[target]
    assert batch in result.stdout


def test_campaign_batches_have_benchmark_tables(tmp_path: Path):
    plan = snakemake(workflow_copy(tmp_path), "-n", "--cores", "2", "all", "--forceall", "--printshellcmds")
    assert plan.returncode == 0, plan.stderr
    assert "benchmark: results/lille21/benchmarks/batch-000.tsv" in plan.stdout


def test_calibration_options_are_typed(tmp_path: Path):
    """config/config.schema.yaml types each `calibration:` key: a mistake stops the workflow with one line."""
    wf = workflow_copy(tmp_path)
    for given, says in (("{reps: 0}", "calibration.reps: expected"), ("{rep: 3}", "'rep' was unexpected"),
                        ("{b: [64, x]}", "calibration.b.1: expected")):
        result = snakemake(wf, "-n", "--cores", "1", "calibrate", "--config", "machine=other", f"calibration={given}")
        assert result.returncode == 2 and says in result.stderr, (given, result.stderr)
    ok = snakemake(wf, "-n", "--cores", "1", "-p", "calibrate", "--config", "machine=other",
                   "calibration={b: [64, 128], reps: 3, unstable: 0.2, paired_runs: 0}")
    assert ok.returncode == 0, ok.stderr
    assert "--b 64 --b 128 --reps 3 --unstable 0.2 --paired-runs 0" in ok.stdout


def test_conda_env_file_is_independent_of_any_prefix():
    """workflows/envs/testbed.yaml names no conda prefix or environment name (snakemake places the
    environment) and reaches the checkout's files by paths relative to itself."""
    path = ROOT / "workflows" / "envs" / "testbed.yaml"
    env = yaml.safe_load(path.read_text())
    assert set(env) == {"channels", "dependencies"}
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    for line in pip:
        target = line.split()[-1]
        assert not Path(target).is_absolute() and (path.parent / target).resolve().is_relative_to(ROOT), line
    assert (path.parent / "../../envs/requirements.txt").is_file() and (path.parent / "../../pyproject.toml").is_file()


def test_repository_lint_is_clean():
    result = snakemake(ROOT, "--lint")
    out = result.stdout + result.stderr
    for name in ["Snakefile"] + RULE_FILES:
        assert not re.search(rf"Lints for .*{re.escape(name)}", out), out


def test_dry_run_of_the_embedded_default_and_the_study_scale(tmp_path: Path):
    wf = workflow_copy(tmp_path)
    default = snakemake(wf, "-n", "--cores", "2", "all")
    assert default.returncode == 0, default.stderr
    counts = jobs(default.stdout)
    assert counts["campaign_batch"] == 12
    for rule in ("design", "runs", "analyze_tables", "analyze_plots", "trace_pair", "report", "all"):
        assert counts[rule] == 1, rule
    study = snakemake(wf, "-n", "--cores", "2", "all", "--config", "scale=study")
    assert study.returncode == 0, study.stderr
    assert jobs(study.stdout)["campaign_batch"] == 128


def test_testbed_workflow_runs_snakemake_with_a_checked_configfile(tmp_path: Path):
    """`testbed workflow ARGS` is `snakemake ARGS` once the --configfile files read: the study
    scale set by a config file of the user's reaches the dry run (128 batches), and snakemake's
    exit status comes back."""
    wf = workflow_copy(tmp_path)
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["scale"] = "study"
    (wf / "mine.yaml").write_text(yaml.safe_dump(config))
    run = subprocess.run([sys.executable, "-m", "testbed", "workflow", "-n", "--cores", "2", "all",
                          "--configfile", "mine.yaml"], cwd=wf, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-2000:]
    assert jobs(run.stdout)["campaign_batch"] == 128
    missing = subprocess.run([sys.executable, "-m", "testbed", "workflow", "-n", "no-such-target"], cwd=wf,
                             capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert missing.returncode == 1, missing.stderr[-2000:]


#: one job that runs until the test creates `release`: a run holds the working directory as
#: long as the test wants, whatever the machine's load
WAITING_WORKFLOW = """rule all:
    output: "done.txt"
    shell: "while [ ! -e release ]; do sleep 0.05; done; echo done > {output}"
"""


def start_workflow(wf: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`testbed workflow ARGS` started in `wf`, its output captured."""
    return subprocess.Popen([sys.executable, "-m", "testbed", "workflow", *args], cwd=wf, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**(os.environ if env is None else env), "PYTHONPATH": str(ROOT)})


def refused_and_completed(procs: list[subprocess.Popen], wf: Path, timeout: int) -> subprocess.Popen:
    """Of two runs started at once in `wf`, the one that completed (exit 0), once the other was
    refused in one line naming `wf`, exit 1."""
    outputs = [p.communicate(timeout=timeout) for p in procs]
    refused = [i for i, p in enumerate(procs) if p.returncode != 0]
    assert len(refused) == 1, [(p.returncode, err[-1500:]) for p, (_, err) in zip(procs, outputs, strict=True)]
    out, err = outputs[refused[0]]
    assert procs[refused[0]].returncode == 1 and out == "", err
    assert err.strip().splitlines() == [
        f"error: another run of this workflow is under way in {wf} (it holds .snakemake/testbed-workflow.lock); "
        "wait for it to end"], err[-3000:]
    return procs[1 - refused[0]]


@pytest.mark.slow
def test_two_runs_started_at_once_in_one_folder_one_is_refused(tmp_path: Path):
    """`testbed workflow --cores 1` twice at the same instant in one folder, 20 times: snakemake's
    own lock (checked, then written) let both pass or failed both; testbed workflow's flock lets
    one through and refuses the other in one line while the first runs to its end."""
    for attempt in range(20):
        wf = tmp_path / f"wf{attempt}"
        wf.mkdir()
        (wf / "Snakefile").write_text(WAITING_WORKFLOW)
        procs = [start_workflow(wf, "--cores", "1") for _ in range(2)]
        try:
            for _ in range(1200):  # the refused run ends while the other waits for `release`
                if any(p.poll() is not None for p in procs):
                    break
                time.sleep(0.05)
            (wf / "release").touch()
            survivor = refused_and_completed(procs, wf, timeout=120)
        finally:
            for p in procs:
                p.kill()
                p.wait()
        assert survivor.returncode == 0 and (wf / "done.txt").read_text() == "done\n", attempt
    # a dry run takes no lock, as in snakemake: it plans while a run is under way
    wf = tmp_path / "wf0"
    (wf / "done.txt").unlink()
    (wf / "release").unlink()
    run = start_workflow(wf, "--cores", "1")
    try:
        for _ in range(1200):
            if (wf / ".snakemake" / "locks").is_dir() and any((wf / ".snakemake" / "locks").iterdir()):
                break
            time.sleep(0.05)
        dry = subprocess.run([sys.executable, "-m", "testbed", "workflow", "-n", "--cores", "1"], cwd=wf,
                             capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert dry.returncode == 0 and "another run" not in dry.stderr, dry.stderr[-2000:]
        (wf / "release").touch()
        assert run.wait(timeout=120) == 0
    finally:
        run.kill()
        run.wait()


@pytest.mark.slow
@pytest.mark.skipif(not NUMASIM.exists(), reason="numasim not built (make build)")
def test_a_campaign_started_twice_at_once_runs_once_with_the_reference_results(tmp_path: Path):
    """tests/support/faults.py's campaign (8 numasim runs in 4 batches, up to the ANOVA table)
    started twice at the same instant through `testbed workflow`: one start is refused in one
    line, the other writes the runs table and ANOVA of a single uninterrupted run."""
    reference = faults.completed(faults.workflow(tmp_path / "once"))
    wf = faults.workflow(tmp_path / "twice")
    env = faults.environment(wf / "cache")
    procs = [start_workflow(wf, *faults.LOCAL, faults.TARGET, env=env) for _ in range(2)]
    try:
        survivor = refused_and_completed(procs, wf, timeout=900)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert survivor.returncode == 0
    runs, anova = faults.results(wf)
    assert runs.equals(reference[0]) and anova == reference[1]


def test_rules_run_the_venvs_testbed_without_an_activated_venv(tmp_path: Path):
    """`.venv/bin/snakemake` with a PATH that lacks the venv (not activated): the rules call the
    testbed through the interpreter snakemake runs under, not a `testbed` looked up on PATH
    (exit status 127 in the rule before). The design rule runs for real; the dry run of `all`
    shows every rule's command."""
    wf = workflow_copy(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                  if Path(p).resolve() != SNAKEMAKE.parent.resolve())
    assert shutil.which("testbed", path=env["PATH"]) is None, "a testbed outside the venv is on PATH"
    plan = subprocess.run([str(SNAKEMAKE), "-n", "-p", "--cores", "1", "all"], cwd=wf, env=env,
                          capture_output=True, text=True, timeout=600)
    assert plan.returncode == 0, plan.stderr
    interpreters = {Path(line.split(" -m testbed ")[0].split()[-1]).resolve()
                    for line in plan.stdout.splitlines() if " -m testbed " in line}
    assert interpreters == {Path(sys.executable).resolve()}, plan.stdout[-3000:]
    run = subprocess.run([str(SNAKEMAKE), "--cores", "1", "results/lille21/design.csv"], cwd=wf, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:] + (wf / "results/lille21/logs/design.log").read_text()
    assert len((wf / "results/lille21/design.csv").read_text().splitlines()) == 1 + 384


def test_bad_config_stops_before_any_job(tmp_path: Path):
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["experiments"][0]["engine"] = "gem5"
    result = snakemake(workflow_copy(tmp_path, config), "-n", "--cores", "1")
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "engine" in out and "gem5" in out


@pytest.mark.slow
@pytest.mark.skipif(not LU_REAL.exists(), reason="apps/lu not built (make build)")
def test_interrupted_campaign_resumes_without_rerunning_finished_batches(tmp_path: Path):
    config = {"experiments": [{k: v for k, v in TINY.items()}],
              "analysis": {"p_max": 0.05, "min_variance_pct": 0.5, "boxplots": [["E"], ["E", "S"], ["A"]]},
              "report": {"title": "tiny", "reference": None}}
    wf = workflow_copy(tmp_path, config)
    # a campaign stopped after its first batch
    first = snakemake(wf, "--cores", "2", "results/tiny/batches/batch-000.csv")
    assert first.returncode == 0, first.stderr
    done = wf / "results/tiny/batches/batch-000.csv"
    stamp = done.stat().st_mtime_ns
    plan = snakemake(wf, "-n", "--cores", "2", "all")
    assert plan.returncode == 0, plan.stderr
    assert jobs(plan.stdout)["campaign_batch"] == 1 and "batch-001.csv" in plan.stdout
    assert "design" not in jobs(plan.stdout)
    rest = snakemake(wf, "--cores", "2", "all")
    assert rest.returncode == 0, rest.stderr
    assert done.stat().st_mtime_ns == stamp
    assert "[tiny batch 1] run" in (wf / "results/tiny/logs/batch-001.log").read_text()
    assert (wf / "results/tiny/anova.csv").exists()
    html = (wf / "results/report/report.html").read_text()
    assert "data:image/png;base64," in html and "tiny: analysis of variance" in html
    assert sorted(p.name for p in (wf / "results/tiny/figures").glob("*.png")) == [
        "boxplot_E.png", "boxplot_ES.png", "halfnormal_effects.png", "interactions_E.png", "main_effects.png",
        "residuals_fitted.png", "residuals_qq.png"]
    # the real engine writes no task trace: no traced default-vs-best pair (numasim experiments have one)
    assert not (wf / "results/tiny/traces").exists() and "traces, default vs best" not in html
    again = snakemake(wf, "-n", "--cores", "2", "all")
    assert "Nothing to be done" in again.stdout + again.stderr
    # each batch job's benchmark table (one row: seconds, memory, I/O), and the report without --cores
    bench = (wf / "results/tiny/benchmarks/batch-001.tsv").read_text().splitlines()
    assert bench[0].startswith("s\th:m:s") and len(bench) == 2
    report = snakemake(wf, "--report", "results/report.zip")
    assert report.returncode == 0, report.stderr
    assert (wf / "results/report.zip").stat().st_size > 0
