"""Running commands: outputs, failures with their stderr, command lines as a user types them.

Shared by calibration (the microbenchmarks, apps/lu, StarPU's tools) and its validation.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from testbed import ROOT

#: Set by srun for the processes of a job step. An MPI program started there without mpirun
#: (one rank, a singleton) is taken by Open MPI for one launched by srun itself, and
#: without SLURM PMI support (Debian's Open MPI) it aborts in MPI_Init: "The application
#: appears to have been direct launched using srun". snakemake's SLURM executor runs
#: every job in such a step.
SRUN_STEP_VARIABLES = ("SLURM_STEP_ID", "SLURM_STEPID")


def mpi_singleton_env(env: dict[str, str]) -> dict[str, str]:
    """`env` for an MPI program started as a singleton (no mpirun), also inside a SLURM step."""
    return {k: v for k, v in env.items() if k not in SRUN_STEP_VARIABLES}


def run_cmd(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float | None = None) -> str:
    """Run a command, return stdout; a failure names the command and its stderr. apps/lu
    and the microbenchmarks run as MPI singletons, also in a SLURM job step."""
    full_env = mpi_singleton_env({**os.environ, **(env or {})})
    p = subprocess.run(cmd, env=full_env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p.stdout


def try_cmd(cmd: list[str], env: dict[str, str] | None = None) -> str:
    try:
        return run_cmd(cmd, env).strip()
    except (OSError, RuntimeError) as exc:
        return f"unavailable ({str(exc).splitlines()[0]})"


def repo_relative(text: str) -> str:
    """Paths inside the repository written relative to its root: a bundle records what was
    run, not where this checkout lives."""
    return text.replace(f"{ROOT}/", "").replace(str(ROOT), ".")


def shell_line(cmd: list[str], env: dict[str, str]) -> str:
    """A command as a user would type it, with the variables it sets (repository-relative)."""
    return repo_relative(" ".join([*(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())),
                                   *map(shlex.quote, map(str, cmd))]))
