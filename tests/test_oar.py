"""Campaigns on a real OAR cluster (Grid'5000's scheduler): batches through oarsub, faults, resume.

The OAR twin of test_slurm.py: a one-node OAR 2.5 (PostgreSQL, oar-node sshd, Almighty) is
started by envs/oar-local.sh for the module and stopped at its end. The campaign goes through
`snakemake --profile profiles/oar all` as the unprivileged user testbed-oar (OAR refuses root);
one batch job is deleted with oardel, another batch's process is killed, snakemake is
interrupted, and a second snakemake submits only the missing batches; runs.csv then equals
the local run's but for wall_s. profiles/calibrate-oar submits one whole-node job per
machine type (OAR property `cluster`).

Select with `pytest -m oar`. Skipped, with the reason, where the cluster cannot start (not
root, OAR or the user testbed-oar missing: `TESTBED_OAR=1 bash envs/setup.sh`).
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import psutil
import pytest
from support.schedulers import (
    BATCHES,
    CONFIG,
    campaign_processes,
    cancel_a_running_batch,
    check_resume,
    popen_interruptible,
    processes_in,
    wait_for,
    without_wall_time,
)
from support.workflow import SNAKEMAKE, workflow_copy

from testbed import ROOT

SCRIPT = ROOT / "envs" / "oar-local.sh"
USER = "testbed-oar"
MACHINE_TYPES = ("typea", "typeb")  # the resources' `cluster` property, one core each


def cannot_start() -> str | None:
    check = subprocess.run(["bash", str(SCRIPT), "check"], capture_output=True, text=True)
    if check.returncode != 0:
        return (check.stdout + check.stderr).strip()
    try:
        pwd.getpwnam(USER)
    except KeyError:
        return f"no user {USER} to submit with (OAR refuses root): TESTBED_OAR=1 bash envs/setup.sh"
    # The jobs run this checkout's venv as that user: every directory above it must let others in
    # (a clone under `mktemp -d`, mode 0700, does not).
    closed = [d for d in (SNAKEMAKE, *SNAKEMAKE.parents) if d.is_dir() and not d.stat().st_mode & 0o001]
    if closed:
        return (f"user {USER} cannot reach {SNAKEMAKE}: {closed[-1]} is mode {closed[-1].stat().st_mode & 0o777:o} "
                "(chmod o+x it, or clone the repository under a directory others can enter)")
    return None


@pytest.fixture(scope="module")
def cluster():
    why = cannot_start()
    if why:
        pytest.skip(f"no OAR cluster can start here: {why}")
    state = Path(tempfile.mkdtemp(prefix="testbed-oar-"))
    env = {**os.environ, "OAR_LOCAL_CLUSTERS": " ".join(MACHINE_TYPES)}
    try:
        start = subprocess.run(["bash", str(SCRIPT), "start", str(state)], env=env, capture_output=True,
                               text=True, timeout=300)
        assert start.returncode == 0, start.stderr
        yield
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], timeout=120)
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def user_dir():
    """A directory of the submitting user (pytest's tmp_path is root's, mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix="testbed-oar-wf-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_user(wf: Path) -> list[str]:
    """Command prefix: the submitting user, this checkout's testbed and the venv's commands."""
    shutil.copytree(ROOT / "profiles", wf / "profiles")
    account = pwd.getpwnam(USER)
    for top, dirs, files in os.walk(wf):  # not into the links to the checkout's platforms/
        for name in [".", *dirs, *files]:
            os.lchown(os.path.join(top, name), account.pw_uid, account.pw_gid)
    return ["runuser", "-u", USER, "--", "env", f"HOME={account.pw_dir}", f"PYTHONPATH={ROOT}",
            f"PATH={SNAKEMAKE.parent}:{os.environ['PATH']}", str(SNAKEMAKE)]


def oar_job(job_id: str) -> dict[str, str]:
    out = subprocess.run(["oarstat", "-f", "-j", job_id], capture_output=True, text=True).stdout
    return dict(re.findall(r"^\s+(\w+) = (.*?)\s*$", out, re.M))


def submitted(log: str) -> list[str]:
    return re.findall(r"Submitted job \d+ with external jobid '(\d+)'", log)


def batch_of(job: dict[str, str]) -> str | None:
    """Batch of a job named by profiles/oar: campaign_batch_batch-003_experiment-ci."""
    match = re.fullmatch(r"campaign_batch_batch-(\d+)_experiment-ci", job.get("name", ""))
    return match[1] if match else None


def running_batches() -> dict[str, str]:
    """Running OAR batch jobs: job id -> batch."""
    out = subprocess.run(["oarstat"], capture_output=True, text=True).stdout
    jobs = {}
    for line in out.splitlines()[2:]:
        fields = line.split()
        if len(fields) > 1 and fields[1] == "R":
            batch = batch_of(oar_job(fields[0]))
            if batch:
                jobs[fields[0]] = batch
    return jobs


@pytest.mark.oar
def test_campaign_on_oar_survives_oardel_a_killed_batch_and_an_interrupt(cluster, user_dir: Path):
    local = workflow_copy(user_dir / "local", CONFIG)
    ref = subprocess.run([str(SNAKEMAKE), "--cores", "2", "results/ci/runs.csv"], cwd=local, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT),
                                                      "PATH": f"{SNAKEMAKE.parent}:{os.environ['PATH']}"})
    assert ref.returncode == 0, ref.stderr[-3000:]

    wf = workflow_copy(user_dir / "oar", CONFIG)
    snakemake = as_user(wf)
    out = wf / "results" / "ci" / "batches"
    first_log = user_dir / "first.log"
    with first_log.open("w") as log:
        first = popen_interruptible([*snakemake, "--profile", "profiles/oar", "all"], cwd=wf, stdout=log,
                                    stderr=subprocess.STDOUT)
    try:
        pid, killed = next(iter(wait_for("a running batch process", lambda: campaign_processes(wf), 240,
                                         first, first_log).items()))
        os.kill(pid, signal.SIGKILL)

        def state(job: str) -> str | None:
            return {"Error": "cancelled", "Terminated": "ended"}.get(oar_job(job).get("state"))

        job, deleted = cancel_a_running_batch(
            running_batches, lambda j: subprocess.run(["oardel", j], check=True, capture_output=True), state,
            killed, first, first_log)
        # (the retries are queued behind the other batches: when half of the tables are written
        # some batches are left, whatever snakemake's status queries have seen yet)
        wait_for("half of the batches", lambda: len(list(out.glob("batch-*.csv"))) >= 4, 300, first, first_log,
                 poll=0.2)
        # snakemake, not runuser, gets the interrupt: it oardels its jobs and stops
        psutil.Process(first.pid).children()[0].send_signal(signal.SIGINT)
        first.wait(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    log = first_log.read_text()
    assert first.returncode != 0, log[-3000:]
    wait_for("no OAR job", lambda: len(subprocess.run(["oarstat"], capture_output=True, text=True)
                                       .stdout.splitlines()) <= 2, 120)
    wait_for("no process left by the deleted jobs", lambda: not processes_in(wf), 60)
    done = {p.name: p.stat().st_mtime_ns for p in out.glob("batch-*.csv")}
    jobs_first = {j: oar_job(j) for j in submitted(log)}
    states = [(batch_of(j), j["state"], j.get("exit_code", "")) for j in jobs_first.values()]
    assert any(b == killed and s == "Terminated" and not e.startswith("0 ") for b, s, e in states), states
    assert any(b == deleted and s == "Error" for b, s, _ in states), states
    # the profile's retries=1 resubmits a failed batch once snakemake's status query sees it fail;
    # under load the second failure may only be seen after the interrupt (then the resume reruns it)
    restarted = log.count("Trying to restart job")
    # 0 when both failures were seen only after the interrupt: on a quiet machine half of the
    # batches were written before snakemake's status query saw either (fresh-clone CI, 2026-11-23);
    # the resume below must then rerun both
    assert 0 <= restarted <= 2, log[-3000:]

    # resume: only the batches snakemake had not seen finish are submitted; the others are kept
    second = subprocess.run([*snakemake, "--profile", "profiles/oar", "all"], cwd=wf, capture_output=True,
                            text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    jobs_second = {j: oar_job(j) for j in submitted(second.stdout + second.stderr)}
    assert all(j["state"] == "Terminated" and j["exit_code"].startswith("0 ") for j in jobs_second.values())
    check_resume(log, [batch_of(j) for j in jobs_second.values()], out, done)

    # one core and the rule's runtime per batch job, a log per job that ran
    for job_id, j in {**jobs_first, **jobs_second}.items():
        assert "/core=1,walltime=2:0:0" in j["wanted_resources"], j
        if j.get("startTime", "0") != "0":
            assert (wf / "results" / "logs" / "oar" / f"{j['name']}-{job_id}.out").exists(), j
    assert {batch_of(j) for j in [*jobs_first.values(), *jobs_second.values()]} == set(BATCHES)
    assert (wf / "results" / "report" / "report.html").exists()
    assert not processes_in(wf)
    assert (wf / "results/ci/design.csv").read_bytes() == (local / "results/ci/design.csv").read_bytes()
    assert without_wall_time(wf / "results/ci/runs.csv") == without_wall_time(local / "results/ci/runs.csv")


@pytest.mark.oar
def test_calibration_profile_submits_one_job_per_machine_type_on_oar(cluster, user_dir: Path):
    wf = workflow_copy(user_dir / "wf")
    (wf / "calibration").unlink()  # the bundles are written here, not into the checkout
    (wf / "calibration").mkdir()
    snakemake = as_user(wf)
    # As tests/test_calibrate.py: b = 64 kernels take ~20 us, and StarPU flushes a model entry whose
    # samples spread over more than 1.5x (perfmodel_history.c): the entry could stay at 0-1 samples
    # for all 40 rounds on a noisy machine; STARPU_HISTORY_MAX_ERROR=1000 % keeps them.
    small = ("{b: [64], reps: 3, bw_mb: 32, bw_reps: 2, lu_nt: 5, max_rounds: 40, history_max_error: 1000, "
             "lu_reps: 2, paired_runs: 0}")
    ids = []
    for machine in MACHINE_TYPES:
        run = subprocess.run([*snakemake, "--profile", "profiles/calibrate-oar", "calibrate", "--config",
                              f"machine={machine}", f"calibration={small}"], cwd=wf, capture_output=True,
                             text=True, timeout=900)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert (wf / "calibration" / machine / "validation.json").exists()
        ids += submitted(run.stdout + run.stderr)
    jobs = [oar_job(j) for j in ids]
    assert [j["name"] for j in jobs] == [f"calibrate-{m}" for m in MACHINE_TYPES]
    for j, machine in zip(jobs, MACHINE_TYPES, strict=False):
        assert j["state"] == "Terminated" and j["exit_code"].startswith("0 "), j
        assert f"cluster='{machine}'" in j["properties"] and "network_address=1," in j["wanted_resources"], j
