"""Campaigns on a real SLURM cluster: batches through sbatch, faults, resume.

A one-node cluster (slurmctld, slurmd, munged, slurmdbd + MariaDB for sacct) is started on
this machine by envs/slurm-local.sh for the module and stopped at its end. The campaign goes
through `snakemake --profile profiles/slurm all`, one batch job is cancelled with scancel,
another batch's process is killed, snakemake itself is interrupted, and a second snakemake
submits only the missing batches; runs.csv then equals the local run's but for wall_s. The
fault-injection campaign (tests/support/faults.py) takes a seeded series of such faults in a row,
and its runs table and ANOVA are then the uninterrupted local run's.

Select with `pytest -m slurm`. Skipped, with the reason, where the cluster cannot start
(not root, SLURM not installed: `TESTBED_SLURM=1 bash envs/setup.sh`, or the ports or
/etc/slurm/slurm.conf taken by another SLURM).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from support import faults
from support.schedulers import (
    BATCHES,
    CONFIG,
    batch_of,
    campaign_processes,
    cancel_a_running_batch,
    check_resume,
    popen_interruptible,
    processes_in,
    running_batches,
    slurm_cannot_start,
    slurm_cluster,
    slurm_queue,
    wait_for,
    without_wall_time,
)
from support.workflow import SNAKEMAKE, workflow_copy

from testbed import ROOT
from testbed.common.commands import mpi_singleton_env
from testbed.common.paths import LU_REAL, NUMASIM

MACHINE_TYPES = ("typea", "typeb")  # node features: one calibration job per machine type
#: the plugin's first status query 1 s after a submission instead of 40 s
FAST = ("--slurm-init-seconds-before-status-checks", "1")
SACCT_FIELDS = ["JobIDRaw", "State", "Comment", "ReqMem", "Timelimit", "AllocCPUS", "Constraints"]


@pytest.fixture(scope="module")
def cluster():
    """Environment of a running one-node SLURM cluster with accounting."""
    why = slurm_cannot_start()
    if why:
        pytest.skip(f"no SLURM cluster can start here: {why}")
    with slurm_cluster(MACHINE_TYPES) as env:
        yield env


def sacct(env: dict) -> list[dict]:
    out = subprocess.run(["sacct", "-X", "-n", "-P", "--starttime", "now-1days",
                          f"--format={','.join(SACCT_FIELDS)}"],
                         env=env, capture_output=True, text=True, check=True).stdout
    return [dict(zip(SACCT_FIELDS, line.split("|"), strict=False)) for line in out.splitlines() if line]


def test_mpi_singletons_do_not_take_a_slurm_step_for_their_launcher():
    """Open MPI aborts a singleton that sees srun's step variables (calibration, real engine)."""
    env = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_STEPID": "0", "STARPU_SCHED": "dmdas"}
    assert mpi_singleton_env(env) == {"SLURM_JOB_ID": "7", "STARPU_SCHED": "dmdas"}
    if LU_REAL.exists() and shutil.which("mpirun"):
        run = subprocess.run([str(LU_REAL), "--n", "128", "--b", "64"], capture_output=True, text=True,
                             env=mpi_singleton_env({**os.environ, **env, "STARPU_SILENT": "1"}), timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]


@pytest.mark.slurm
def test_campaign_on_slurm_survives_scancel_a_killed_batch_and_an_interrupt(cluster, tmp_path: Path):
    env = cluster
    # reference: the same campaign on this machine, without SLURM
    local = workflow_copy(tmp_path / "local", CONFIG)
    ref = subprocess.run([str(SNAKEMAKE), "--cores", "2", "results/ci/runs.csv"], cwd=local, env=env,
                         capture_output=True, text=True, timeout=600)
    assert ref.returncode == 0, ref.stderr[-3000:]

    wf = workflow_copy(tmp_path / "slurm", CONFIG)
    profile = ["--profile", str(ROOT / "profiles" / "slurm")]
    out = wf / "results" / "ci" / "batches"
    first_log = tmp_path / "first.log"
    with first_log.open("w") as log:
        first = popen_interruptible([str(SNAKEMAKE), *profile, "all", *FAST], cwd=wf, env=env, stdout=log,
                                    stderr=subprocess.STDOUT)
    try:
        # fault 1: a batch's `testbed campaign` process killed mid-run (the job fails);
        # fault 2: another running batch job cancelled with scancel
        pid, killed = next(iter(wait_for("a running batch process", lambda: campaign_processes(wf), 240,
                                         first, first_log).items()))
        os.kill(pid, signal.SIGKILL)

        def state(job: str) -> str | None:
            out = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "State", "-j", job], env=env,
                                 capture_output=True, text=True).stdout.strip()
            return "cancelled" if out.startswith("CANCELLED") else "ended" if out in ("COMPLETED", "FAILED") else None

        job, cancelled = cancel_a_running_batch(
            lambda: running_batches(env), lambda j: subprocess.run(["scancel", j], env=env, check=True), state,
            killed, first, first_log)
        # the profile's retries=1 resubmits both (behind the queued batches); fault 3: snakemake
        # interrupted halfway, it cancels its SLURM jobs and stops
        # (the retries are queued behind the other batches: when half of the tables are written
        # some batches are left, whatever snakemake's status queries have seen yet)
        wait_for("half of the batches", lambda: len(list(out.glob("batch-*.csv"))) >= 4, 300, first, first_log,
                 poll=0.2)
        first.send_signal(signal.SIGINT)
        first.wait(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    log = first_log.read_text()
    assert first.returncode != 0, log[-3000:]
    # nothing of the interrupted campaign is left in the queue, nor on the node
    if not wait_for("an empty queue", lambda: not slurm_queue(env), 120, fail=False):
        pytest.fail(f"jobs left after the interrupt:\n{slurm_queue(env)}\n{log[-5000:]}")
    wait_for("no process left by the cancelled jobs", lambda: not processes_in(wf), 60)
    done = {p.name: p.stat().st_mtime_ns for p in out.glob("batch-*.csv")}
    jobs_first = sacct(env)
    states = [(batch_of(j), j["State"].split()[0]) for j in jobs_first]
    assert (killed, "FAILED") in states and (cancelled, "CANCELLED") in states, jobs_first
    # the profile's retries=1 resubmits a failed batch once snakemake's status query sees it fail;
    # under load the second failure may only be seen after the interrupt (then the resume reruns it)
    restarted = log.count("Trying to restart job")
    # 0 when both failures were seen only after the interrupt: on a quiet machine half of the
    # batches were written before snakemake's status query saw either (fresh-clone CI, 2026-11-23);
    # the resume below must then rerun both
    assert 0 <= restarted <= 2, log[-3000:]
    submissions = [[b for b, _ in states].count(x) for x in (killed, cancelled)]
    assert all(n in (1, 2) for n in submissions) and sum(submissions) - 2 == restarted, jobs_first

    # resume: only the batches snakemake had not seen finish are submitted; the others are kept
    second = subprocess.run([str(SNAKEMAKE), *profile, "all", *FAST], cwd=wf, env=env, capture_output=True,
                            text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    seen = {j["JobIDRaw"] for j in jobs_first}
    jobs_second = [j for j in sacct(env) if j["JobIDRaw"] not in seen]
    assert all(j["State"] == "COMPLETED" for j in jobs_second), jobs_second
    check_resume(log, [batch_of(j) for j in jobs_second], out, done)

    # every batch went through SLURM, each job with the rule's resources and its own log (a
    # job cancelled by the interrupt after its table was written may be the batch's only one)
    all_jobs = jobs_first + jobs_second
    assert {batch_of(j) for j in all_jobs} == set(BATCHES), all_jobs
    for j in all_jobs:
        assert (j["ReqMem"], j["Timelimit"], j["AllocCPUS"]) == ("1000M", "02:00:00", "1"), j
        if j["State"] in ("COMPLETED", "FAILED") or j["JobIDRaw"] == job:  # not cancelled while pending
            assert (wf / ".snakemake" / "slurm_logs" / "rule_campaign_batch" / f"ci_{batch_of(j)}"
                    / f"{j['JobIDRaw']}.log").exists(), j
    for b in BATCHES:
        assert f"[ci batch {int(b)}] run 2/2" in (wf / "results" / "ci" / "logs" / f"batch-{b}.log").read_text()
    assert (wf / "results" / "report" / "report.html").exists()
    assert not processes_in(wf)

    # the campaign's result is the local run's, byte for byte but for the wall times
    assert (wf / "results/ci/design.csv").read_bytes() == (local / "results/ci/design.csv").read_bytes()
    assert without_wall_time(wf / "results/ci/runs.csv") == without_wall_time(local / "results/ci/runs.csv")


@pytest.mark.slurm
@pytest.mark.skipif(not NUMASIM.exists(), reason="numasim not built (make build)")
def test_campaign_on_slurm_survives_a_seeded_sequence_of_faults(cluster, tmp_path: Path):
    """tests/support/faults.py's campaign (4 batch jobs) under the SLURM profile, hit by a seeded
    sequence of faults in a row: seed 2 draws a scancel of a running batch job, a SIGKILL of a
    batch's `testbed campaign` process, SIGINT of snakemake, another scancel, SIGKILL of snakemake
    (each after up to 8 s); then completed. Its runs table (without wall times) and ANOVA are the
    uninterrupted local run's, and nothing is left in the queue or on the node. The long version:
    bench/fault_injection.py --slurm."""
    env = cluster
    runs, anova = faults.completed(faults.workflow(tmp_path / "local"))

    wf = faults.workflow(tmp_path / "slurm")
    how = ("--profile", str(ROOT / "profiles" / "slurm"), *FAST)
    log = tmp_path / "attempts.log"
    report = faults.interrupted_on_scheduler(
        wf, how, env, count=5, seed=2, max_delay_s=8.0, running=lambda: running_batches(env),
        cancel=lambda job: subprocess.run(["scancel", job], env=env, check=True), queue=lambda: slurm_queue(env),
        log=log)
    print(*report.kills, sep="\n")
    targets = {k.target for k in report.kills}
    # the faults land on work under way (a later one may find the campaign done)
    assert report.hits >= 3 and targets & {"scancel", "job"} and targets & {"sigint", "sigkill"}, report.kills
    runs_s, anova_s = faults.completed(wf, how, env)
    assert anova_s == anova, report.kills
    assert runs_s.equals(runs), report.kills
    assert not [p for p in (wf / "results").rglob("*") if ".tmp" in p.name], report.kills
    assert not slurm_queue(env) and not processes_in(wf)


@pytest.mark.slurm
def test_calibration_profile_submits_one_exclusive_job_per_machine_type(cluster, tmp_path: Path):
    env = cluster
    wf = workflow_copy(tmp_path / "wf")
    (wf / "calibration").unlink()  # the bundles are written here, not into the checkout
    (wf / "calibration").mkdir()
    seen = {j["JobIDRaw"] for j in sacct(env)}
    # As tests/test_calibrate.py: b = 64 kernels take ~20 us, and StarPU flushes a model entry whose
    # samples spread over more than 1.5x (perfmodel_history.c): the entry could stay at 0-1 samples
    # for all 40 rounds on a noisy machine; STARPU_HISTORY_MAX_ERROR=1000 % keeps them.
    small = ("{b: [64], reps: 3, bw_mb: 32, bw_reps: 2, lu_nt: 5, max_rounds: 40, history_max_error: 1000, "
             "lu_reps: 2, paired_runs: 0}")
    for machine in MACHINE_TYPES:
        run = subprocess.run([str(SNAKEMAKE), "--profile", str(ROOT / "profiles" / "calibrate-slurm"), "calibrate",
                              "--config", f"machine={machine}", f"calibration={small}",
                              "--set-resources", f"calibration_bundle:constraint={machine}",
                              "calibration_bundle:mem_mb=1000", *FAST],  # the profile's 16 GB: not on every CI machine
                             cwd=wf, env=env, capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert (wf / "calibration" / machine / "validation.json").exists()
    jobs = [j for j in sacct(env) if j["JobIDRaw"] not in seen]
    assert sorted(j["Constraints"] for j in jobs) == list(MACHINE_TYPES), jobs
    for j in jobs:
        # --exclusive: the whole node (every core) for the microbenchmarks
        assert j["State"] == "COMPLETED" and j["Comment"] == f"rule_calibration_bundle_wildcards_{j['Constraints']}", j
        assert int(j["AllocCPUS"]) == os.cpu_count() and j["ReqMem"] == "1000M", j
