"""The apps/lu command line and output, shared by the `real` and `starpu-simgrid` engines."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from testbed.common.errors import InputError
from testbed.run.engines import RunSpec
from testbed.run.workload import size_problem
from testbed.starpu.variables import check_env


def check_sizes(spec: RunSpec) -> int:
    """NT = N / b, or InputError when N is not a positive multiple of b."""
    problem = size_problem(spec.n, spec.b)
    if problem:
        raise InputError(None, "--n/--b", problem)
    return spec.n // spec.b


def check_run(spec: RunSpec) -> int:
    """What apps/lu and the real StarPU would abort on, refused first: the sizes (returns NT) and
    every StarPU variable of the run, common and per machine (testbed/starpu/variables.py)."""
    nt = check_sizes(spec)
    check_env(spec.env)
    for machine, env in spec.env_per_machine.items():
        check_env(env, f"env_per_machine.{machine}")
    return nt


def process_grid(spec: RunSpec, ranks: int) -> tuple[int, int]:
    """The P x Q grid of a block-cyclic spec.distribution: its p and q, else as square as the
    ranks allow; InputError when p * q is not the number of ranks."""
    from testbed.run import distribution as dist

    p = int(spec.distribution.get("p") or 0)
    q = int(spec.distribution.get("q") or 0)
    if not (p and q):
        p, q = dist.near_square_grid(ranks)
    if p * q != ranks:
        raise InputError(None, "distribution p x q", f"p * q = {ranks} ranks, got {p} x {q}")
    return p, q


def check_distribution(spec: RunSpec, ranks: int) -> str:
    """spec.distribution's kind, checked for `ranks` ranks before the program runs (a file: every
    owner a rank of the cluster, with the Python error format: file, line and column, exit 2)."""
    from testbed.run import distribution as dist

    nt = check_sizes(spec)
    kind = spec.distribution.get("kind", "block-cyclic")
    if kind == "block-cyclic":
        process_grid(spec, ranks)
    elif kind == "file":
        dist.read_distribution(Path(spec.distribution["path"]), nt, ranks)
    elif kind != "heterogeneous":
        raise InputError(None, "distribution.kind", f"block-cyclic, file or heterogeneous, got {kind!r}")
    return kind


def distribution_args(spec: RunSpec, ranks: int, workdir: Path, speeds: list[float] | None) -> list[str]:
    """apps/lu's (and apps/chameleon_lu's) arguments for spec.distribution: block-cyclic, file or
    heterogeneous.

    `speeds` (one per rank) drive the heterogeneous generator; None means equal.
    """
    from testbed.run import distribution as dist

    kind = check_distribution(spec, ranks)
    if kind == "block-cyclic":
        p, q = process_grid(spec, ranks)
        return ["--p", str(p), "--q", str(q)]
    if kind == "file":
        return ["--dist", str(Path(spec.distribution["path"]).resolve())]
    path = dist.write_heterogeneous(workdir / "distribution.txt", spec.n // spec.b, speeds or [1.0] * ranks)
    return ["--dist", str(path)]


_APP_ERROR = re.compile(r"^error: (.*?)(?:: expected (.*))?$", re.MULTILINE)


def check_app_error(stderr: str, returncode: int, has_result: bool) -> None:
    """An app's `error: KEY: expected ...` line (apps/lu, apps/chameleon_lu: bad input, exit 2)
    as an InputError. SMPI ignores main's return value: an `error:` line without a result is bad
    input too."""
    match = _APP_ERROR.search(stderr)
    if match and (returncode == 2 or (returncode == 0 and not has_result)):
        raise InputError(None, match.group(1), match.group(2) or "valid input")


def parse_output(stdout: str, stderr: str, returncode: int, what: str) -> dict:
    """The JSON line of apps/lu; its `error: ...` (exit 2) becomes an InputError."""
    check_app_error(stderr, returncode, any(line.startswith("{") for line in stdout.splitlines()))
    if returncode != 0:
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"{what} failed with exit status {returncode}:\n{tail}")
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{what} printed no JSON line; stdout was:\n{stdout[-2000:]}")


def kernel_args(spec: RunSpec, symbols: str | None) -> list[str]:
    """apps/lu arguments choosing the kernels and the task graph: perf-model symbols, getrf on
    GPUs, submission order and priorities."""
    args = ["--symbols", symbols] if symbols else []
    if spec.getrf_on_gpu:
        args.append("--getrf-gpu")
    if spec.dag != "chameleon":
        args += ["--dag", spec.dag]
    return args


def result_fields(out: dict) -> dict:
    """Engine result: makespan_s, tasks, tasks_by_kind, gflops (+ residual, layout, CUDA use)."""
    keep = ("makespan_s", "tasks", "tasks_by_kind", "gflops", "residual", "ranks", "symbols", "nt", "p", "q",
            "cuda_workers", "tasks_on_cuda", "getrf_on_gpu")
    return {k: out[k] for k in keep if k in out}


def run_env(spec: RunSpec, starpu_env: dict[str, str] | None = None) -> dict[str, str]:
    """The process environment: this one, then `starpu_env` (default spec.env)."""
    env = dict(os.environ)
    env.update(spec.env if starpu_env is None else starpu_env)
    env.setdefault("STARPU_SCHED", "dmdas")
    env["STARPU_SILENT"] = "1"
    return env
