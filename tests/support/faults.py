"""A small campaign killed with SIGKILL at random points, then completed: its runs table and ANOVA
must be those of an uninterrupted run. Shared by tests/test_fault_injection.py (a few kills, in
`make test`) and bench/fault_injection.py (many).

The campaign: 2 factors (A, E) × 2 repetitions = 8 numasim runs on chifflet-1 (N = 1920, b = 192)
in 4 batch jobs, through the workflow up to `testbed analyze`'s tables (target
results/fi/anova.csv). Each interrupted attempt starts `snakemake --cores 2 --rerun-incomplete`
(after `snakemake --unlock`, the documented recovery from a kill -9) in a process group of its
own, waits a seeded random time, then sends SIGKILL either to the whole group (snakemake and its
jobs: a lost node, the OOM killer) or first to one of its job processes (a batch job's testbed
command or numasim: snakemake sees the job die and retries it, `retries: 1`) and a moment later to
the group. After the kills one last attempt runs to the end.

The same campaign through a batch scheduler (`interrupted_on_scheduler`, tests/test_slurm.py and
bench/fault_injection.py --slurm): a seeded sequence of faults of the queue's kind: a running batch
job cancelled (scancel), a batch's `testbed campaign` process killed (SIGKILL), snakemake itself
interrupted (SIGINT: it cancels its jobs) or killed (SIGKILL: its jobs run out in the queue).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from support.schedulers import campaign_processes, popen_interruptible
from support.workflow import SNAKEMAKE, workflow_copy
from testbed import ROOT

EXPERIMENT = {
    "name": "fi", "cluster": "chifflet-1", "engine": "numasim", "app": "lu",
    "workload": {"n": 1920, "b": 192, "distribution": {"kind": "block-cyclic"}},
    "factors": {"A": [-1, 1], "E": [-1, 1]}, "design": {"type": "full", "generators": []},
    "repetitions": 2, "seed": 11, "randomize": True, "batches": 4, "factor_env": {}, "env": {},
    "variability": True,
}
TARGET = "results/fi/anova.csv"


def config() -> dict:
    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    return {"scale": "default", "experiments": [EXPERIMENT],
            "analysis": {"p_max": 0.05, "min_variance_pct": 0.5, "boxplots": [["A"]]},
            "report": {**base["report"], "title": "fault injection", "traced_extra": []}}


def environment(cache: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The venv's snakemake on PATH; the run and platform caches inside the work directory
    (`base`: the environment to start from, os.environ by default; a scheduler's jobs inherit it)."""
    base = dict(os.environ if base is None else base)
    return {**base, "PATH": f"{SNAKEMAKE.parent}:{base['PATH']}", "TESTBED_CACHE": str(cache)}


def workflow(tmp: Path) -> Path:
    wf = workflow_copy(tmp, config())
    (wf / "cache").mkdir()
    return wf


#: how snakemake runs the campaign here: the jobs on this machine
LOCAL = ("--cores", "2")


def command(how: tuple[str, ...] = LOCAL) -> list[str]:
    """snakemake's command line for the campaign, `how` saying where its jobs run (LOCAL, or a
    scheduler's profile)."""
    return [str(SNAKEMAKE), *how, "--rerun-incomplete", TARGET]


def start_attempt(wf: Path, env: dict[str, str], how: tuple[str, ...] = LOCAL, log: Path | None = None,
                  ) -> subprocess.Popen:
    """`snakemake --unlock` (the documented recovery from a kill -9), then snakemake started in a
    process group of its own, with SIGINT at its default (popen_interruptible); its output appended
    to `log`, else dropped."""
    subprocess.run([str(SNAKEMAKE), "--unlock"], cwd=wf, env=env, capture_output=True, timeout=120)
    with (log.open("a") if log else open(os.devnull, "w")) as out:
        return popen_interruptible(command(how), cwd=wf, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)


def run_to_end(wf: Path, timeout: int = 900, how: tuple[str, ...] = LOCAL,
               base: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = environment(wf / "cache", base)
    subprocess.run([str(SNAKEMAKE), "--unlock"], cwd=wf, env=env, capture_output=True, timeout=120)
    return subprocess.run(command(how), cwd=wf, env=env, capture_output=True, text=True, timeout=timeout)


def completed(wf: Path, how: tuple[str, ...] = LOCAL, base: dict[str, str] | None = None) -> tuple[pd.DataFrame, str]:
    """The workflow run to its end (`results`), or RuntimeError with snakemake's last words."""
    done = run_to_end(wf, how=how, base=base)
    if done.returncode != 0:
        raise RuntimeError(f"snakemake exited {done.returncode}: {done.stdout[-2000:]}{done.stderr[-3000:]}")
    return results(wf)


def descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every process below `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        found.append((p, commands.get(p, "")))
        todo += children.get(p, [])
    return found


def is_job(command: str) -> bool:
    """A batch job's process: its testbed command (`python -m testbed campaign`, the shell around
    it) or the numasim it runs."""
    argv = command.split()
    return bool(argv) and (Path(argv[0]).name == "numasim" or ("testbed" in argv and "campaign" in argv))


@dataclass
class Kill:
    attempt: int
    after_s: float
    # "snakemake" (the process group) | "job" (a batch job's process) | "none" (the attempt had
    # ended); through a scheduler also "scancel" | "sigint" | "sigkill" (of snakemake)
    target: str
    command: str = ""


@dataclass
class Faults:
    kills: list[Kill] = field(default_factory=list)

    @property
    def hits(self) -> int:
        return sum(k.target != "none" for k in self.kills)


def interrupted(wf: Path, kills: int, seed: int, max_delay_s: float) -> Faults:
    """`kills` attempts, each killed after a seeded random delay in (0, max_delay_s]: half of them
    (drawn) as a whole process group, the others by killing one of the batch job processes first
    (waited for when none runs yet), then the group a moment later, so that each attempt is one
    fault. Four draws per attempt: the sequence of delays and kinds depends on the seed alone."""
    rng = random.Random(seed)
    env = environment(wf / "cache")
    faults = Faults()
    for attempt in range(kills):
        delay = rng.uniform(0.05, 1.0) * max_delay_s
        whole_group, pick, linger = rng.random() < 0.5, rng.random(), rng.uniform(0.0, 1.0)
        proc = start_attempt(wf, env)
        sleep_while(proc, delay)
        kill = Kill(attempt, round(delay, 2), "none")
        jobs: list[tuple[int, str]] = []
        if not whole_group:  # a job to kill: the next one to start, if none runs yet
            give_up = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < give_up:
                jobs = sorted((p, c) for p, c in descendants(proc.pid) if is_job(c))
                if jobs:
                    break
                time.sleep(0.05)
        if proc.poll() is None:
            if jobs:
                pid, command = jobs[int(pick * len(jobs))]
                try:
                    os.kill(pid, signal.SIGKILL)
                    kill = Kill(attempt, round(delay, 2), "job", command.strip()[:160])
                except ProcessLookupError:
                    pass
                time.sleep(linger)  # snakemake sees the job die (and retries it) meanwhile
            if kill.target == "none":
                kill = Kill(attempt, round(delay, 2), "snakemake", "process group")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        with contextlib.suppress(ProcessLookupError):  # jobs of the group that outlived snakemake
            os.killpg(proc.pid, signal.SIGKILL)
        faults.kills.append(kill)
    return faults


def sleep_while(proc: subprocess.Popen, seconds: float) -> None:
    """Waits `seconds`, or less if proc ends."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)


def first(proc: subprocess.Popen, found, timeout: float = 120):
    """found()'s first true value while proc runs (None when it ends or after `timeout` s)."""
    give_up = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < give_up:
        value = found()
        if value:
            return value
        time.sleep(0.05)
    return None


#: the faults of interrupted_on_scheduler, drawn with equal chances
SCHEDULER_FAULTS = ("scancel", "job", "sigint", "sigkill")


def scheduler_faults(count: int, seed: int, max_delay_s: float) -> list[tuple[str, float, float]]:
    """The seeded sequence of (fault, delay, pick): three draws per fault, the sequence depends on
    the seed alone."""
    rng = random.Random(seed)
    return [(rng.choice(SCHEDULER_FAULTS), rng.uniform(0.05, 1.0) * max_delay_s, rng.random()) for _ in range(count)]


def interrupted_on_scheduler(wf: Path, how: tuple[str, ...], base: dict[str, str], count: int, seed: int,
                             max_delay_s: float, running, cancel, queue, log: Path) -> Faults:
    """`count` faults in a row on the campaign run through a scheduler (`how`: its profile), each
    after a seeded random delay in (0, max_delay_s] from the previous one, within one attempt of
    snakemake as long as it runs (a new attempt is started when the last one has ended):

    * scancel: one running batch job, drawn, cancelled (`cancel(job)`; `running()`: job id ->
      batch), the next one to start when none runs yet; the profile's retries resubmit it;
    * job: one batch's `testbed campaign` process, drawn, killed with SIGKILL: its job fails;
    * sigint: snakemake interrupted: it cancels its jobs and stops;
    * sigkill: snakemake's process group killed with SIGKILL: its jobs stay in the queue and run out.

    After an attempt ends, the queue (`queue()`: its jobs as text, "" when empty) is waited empty
    before the next. After the last fault the attempt in flight runs to its end."""
    env = environment(wf / "cache", base)
    faults = Faults()
    proc: subprocess.Popen | None = None
    attempt = -1

    def ended() -> None:
        with contextlib.suppress(ProcessLookupError):  # what the group left
            os.killpg(proc.pid, signal.SIGKILL)
        drained = time.monotonic() + 600
        while queue() and time.monotonic() < drained:
            time.sleep(0.5)
        if queue():
            raise RuntimeError(f"jobs left in the queue after attempt {attempt}:\n{queue()}")

    for kind, delay, pick in scheduler_faults(count, seed, max_delay_s):
        if proc is None or proc.poll() is not None:
            if proc is not None:
                ended()
            attempt += 1
            proc = start_attempt(wf, env, how, log)
        sleep_while(proc, delay)
        kill = Kill(attempt, round(delay, 2), "none")
        if kind == "scancel":
            jobs = first(proc, running)
            if jobs:
                job, batch = sorted(jobs.items())[int(pick * len(jobs))]
                cancel(job)
                kill = Kill(attempt, round(delay, 2), kind, f"job {job} (batch {batch})")
        elif kind == "job":
            batches = first(proc, lambda: campaign_processes(wf))
            if batches:
                pid, batch = sorted(batches.items())[int(pick * len(batches))]
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    kill = Kill(attempt, round(delay, 2), kind, f"testbed campaign --batch {batch} (pid {pid})")
        elif proc.poll() is None:
            if kind == "sigint":
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=180)
                except subprocess.TimeoutExpired:
                    raise RuntimeError(f"snakemake still runs 180 s after SIGINT: {log.read_text()[-3000:]}") from None
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            kill = Kill(attempt, round(delay, 2), kind, "snakemake")
        faults.kills.append(kill)
    try:
        proc.wait(timeout=900)
    finally:
        ended()
    return faults


def results(wf: Path) -> tuple[pd.DataFrame, str]:
    """The merged runs table without its wall times (the one column that differs from run to run),
    and the ANOVA table's text."""
    runs = pd.read_csv(wf / "results" / "fi" / "runs.csv")
    return runs.drop(columns=[c for c in runs.columns if c.startswith("wall")]), (wf / TARGET).read_text()
