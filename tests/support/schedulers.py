"""Campaigns through a batch scheduler (one-node SLURM and OAR clusters; tests/test_slurm.py,
tests/test_oar.py): the processes of a campaign, waiting, interrupting, and the resume check."""

from __future__ import annotations

import contextlib
import csv
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.workflow import SNAKEMAKE
from testbed import ROOT

#: 4 configurations x 4 repetitions = 16 runs in 8 batches of 2 (tiny N: the runs take
#: 0.1 s; a batch job's time is snakemake's start inside the job)
CONFIG = {
    "experiments": [{
        "name": "ci", "cluster": "g5k-lille-21", "engine": "numasim",
        "workload": {"n": 3840, "b": 960, "distribution": {"kind": "heterogeneous"}},
        "factors": {"A": [-1, 1], "E": [-1, 1]}, "repetitions": 4, "seed": 20240501, "batches": 8,
    }],
    "analysis": {"boxplots": [["A"], ["A", "E"]]},
    "report": {"title": "ci on SLURM", "reference": None},
}
BATCHES = [f"{i:03d}" for i in range(8)]


def campaign_processes(workdir: Path) -> dict[int, str]:
    """`testbed campaign --batch N` processes running in workdir (`python -m testbed campaign`, as
    the workflow's rules start it, or a `testbed` script): pid -> batch."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv]
        testbed = any(a.endswith("/testbed") for a in args[:2]) or args[1:3] == ["-m", "testbed"]
        if testbed and "campaign" in args and "--batch" in args and Path(cwd) == workdir.resolve():
            found[int(proc.name)] = f"{int(args[args.index('--batch') + 1]):03d}"
    return found


def processes_in(workdir: Path) -> list[str]:
    """Processes (but this one) whose working directory is in workdir: what the jobs left."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if Path(os.readlink(proc / "cwd")).is_relative_to(workdir.resolve()):
                argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{proc.name}: {argv[:200]}")
        except OSError:
            continue
    return found


def wait_for(what: str, predicate, timeout: float, proc: subprocess.Popen | None = None, log: Path | None = None,
             poll: float = 0.05, fail: bool = True):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"snakemake ended (rc {proc.returncode}) before {what}: {log.read_text()[-3000:]}")
        time.sleep(poll)
    if not fail:
        return None
    pytest.fail(f"timeout ({timeout} s) waiting for {what}")


def popen_interruptible(cmd: list[str], **kwargs) -> subprocess.Popen:
    """subprocess.Popen of a command that must be able to receive SIGINT.

    A command started in the background by a non-interactive shell (`.ci/run &`) ignores SIGINT,
    and an ignored signal stays ignored across exec: snakemake would not see the test's interrupt
    and would finish the workflow (rc 0: the fresh-clone failures of 2026-11-23/24; the checkout's
    runs under `timeout`, which installs its own handler, passed). A handler in this process is
    reset to the default at exec, so the command starts with SIGINT at its default.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(cmd, **kwargs)
    finally:
        signal.signal(signal.SIGINT, previous)


def finished_batches(log: str) -> set[str]:
    """Batches that snakemake counted as done, from its log (rule blocks name output and jobid)."""
    jobs = {}
    for block in log.split("rule campaign_batch:")[1:]:
        output = re.search(r"output: results/ci/batches/batch-(\d+)\.csv", block)
        jobid = re.search(r"jobid: (\d+)", block)
        if output and jobid:
            jobs[jobid[1]] = output[1]
    return {jobs[j] for j in re.findall(r"Finished jobid: (\d+) \(Rule: campaign_batch\)", log) if j in jobs}


def cancel_a_running_batch(running, cancel, cancelled, not_batch: str, proc, log: Path) -> tuple[str, str]:
    """Cancel a running batch job (not of batch not_batch); one that ended first does not count,
    the next running one is taken. Returns (job id, batch)."""
    tried = set()
    for _ in range(10):
        job, batch = wait_for("a running batch job", lambda: next(
            ((j, b) for j, b in running().items() if b != not_batch and j not in tried), None), 180, proc, log)
        tried.add(job)
        cancel(job)
        if wait_for("the cancelled job's end", lambda job=job: cancelled(job), 120) == "cancelled":
            return job, batch
    pytest.fail(f"every batch job ended before its cancellation: {sorted(tried)}")


def check_resume(first: str, second_batches: list[str], out: Path, done: dict[str, int]) -> None:
    """The second run ran every missing batch once, none that the first run saw finish, and
    left the batch tables it did not rerun as they were."""
    unfinished = set(BATCHES) - finished_batches(first)
    missing = {b for b in BATCHES if f"batch-{b}.csv" not in done}
    # `missing` is usually not empty, but may be. Seen in a fresh clone (2026-11-24): the two
    # retries submitted in the scheduling round of the interrupt ran to their end, and a running
    # job's inner snakemake finished its batch 6 s after the interrupt, so every table was written
    # (likely: jobs not yet among the SLURM plugin's active jobs escape its scancel, and snakemake
    # exits gracefully on SIGTERM, after its running job). What follows still holds: batches the
    # first run saw finish are not rerun, their tables kept.
    if not missing:
        print(f"the interrupt left no batch to resume (all {len(BATCHES)} tables written)")
    # a batch that ended while snakemake was interrupted counts as done if the job's own
    # snakemake recorded it (shared .snakemake), else it is incomplete and reruns
    assert len(second_batches) == len(set(second_batches)), second_batches
    assert missing <= set(second_batches) <= unfinished, (second_batches, missing, unfinished)
    kept = {p.name: p.stat().st_mtime_ns for p in out.glob("batch-*.csv")}
    for b in set(BATCHES) - set(second_batches) - missing:
        assert kept[f"batch-{b}.csv"] == done[f"batch-{b}.csv"], b


def without_wall_time(path: Path) -> list[list[str]]:
    rows = list(csv.reader(path.open()))
    i = rows[0].index("wall_s")
    return [r[:i] + r[i + 1:] for r in rows]


# ------------------------------------------------------------------ the one-node SLURM cluster
SLURM_SCRIPT = ROOT / "envs" / "slurm-local.sh"


def slurm_cannot_start() -> str | None:
    """Why no SLURM cluster can start here (None when one can)."""
    if shutil.which("bash") is None:
        return "no bash"
    check = subprocess.run(["bash", str(SLURM_SCRIPT), "check"], capture_output=True, text=True)
    return None if check.returncode == 0 else (check.stdout + check.stderr).strip()


@contextlib.contextmanager
def slurm_cluster(features: tuple[str, ...] = ()) -> Iterator[dict[str, str]]:
    """A one-node SLURM cluster with accounting (envs/slurm-local.sh), stopped at the end: the
    environment to submit to it, the jobs running this checkout's testbed (PYTHONPATH) and the
    venv's commands (PATH). `features`: the node's features (machine types)."""
    # not under pytest's 0700 tmp: munged runs as the munge user and must reach its socket
    state = Path(tempfile.mkdtemp(prefix="testbed-slurm-"))
    state.chmod(0o755)
    env = {**os.environ, "SLURM_LOCAL_ACCOUNTING": "yes", "SLURM_LOCAL_FEATURES": ",".join(features)}
    try:
        start = subprocess.run(["bash", str(SLURM_SCRIPT), "start", str(state)], env=env, capture_output=True,
                               text=True, timeout=180)
        if start.returncode != 0:
            raise RuntimeError(f"envs/slurm-local.sh start failed: {start.stderr[-3000:]}")
        conf = start.stdout.strip().removeprefix("export SLURM_CONF=")
        yield {**os.environ, "SLURM_CONF": conf, "PYTHONPATH": str(ROOT),
               "PATH": f"{SNAKEMAKE.parent}:{os.environ['PATH']}"}
    finally:
        subprocess.run(["bash", str(SLURM_SCRIPT), "stop", str(state)], env=env, timeout=120)
        shutil.rmtree(state, ignore_errors=True)


def batch_of(job: dict) -> str | None:
    """Batch number from the SLURM plugin's comment rule_campaign_batch_wildcards_<experiment>_003."""
    m = re.fullmatch(r"rule_campaign_batch_wildcards_.+_(\d+)", job["Comment"])
    return m[1] if m else None


def running_batches(env: dict) -> dict[str, str]:
    """Running batch jobs of the SLURM queue: job id -> batch."""
    out = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i|%k"], env=env, capture_output=True,
                         text=True).stdout
    jobs = {}
    for line in out.splitlines():
        job_id, _, comment = line.partition("|")
        batch = batch_of({"Comment": comment})
        if batch:
            jobs[job_id] = batch
    return jobs


def slurm_queue(env: dict) -> str:
    """The SLURM queue's jobs, one line each (id, state, comment, reason); "" when empty."""
    return subprocess.run(["squeue", "-h", "-o", "%i %T %k %r"], env=env, capture_output=True,
                          text=True).stdout.strip()
