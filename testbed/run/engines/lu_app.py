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


def distribution_args(spec: RunSpec, ranks: int, workdir: Path, speeds: list[float] | None) -> list[str]:
    """apps/lu arguments for spec.distribution: block-cyclic, file or heterogeneous.

    `speeds` (one per rank) drive the heterogeneous generator; None means equal.
    """
    from testbed.run import distribution as dist

    nt = check_sizes(spec)
    kind = spec.distribution.get("kind", "block-cyclic")
    if kind == "block-cyclic":
        p, q = process_grid(spec, ranks)
        return ["--p", str(p), "--q", str(q)]
    if kind == "file":
        path = Path(spec.distribution["path"])
        dist.read_distribution(path, nt, ranks)  # fail early, with the Python error format
        return ["--dist", str(path.resolve())]
    if kind == "heterogeneous":
        path = dist.write_heterogeneous(workdir / "distribution.txt", nt, speeds or [1.0] * ranks)
        return ["--dist", str(path)]
    raise InputError(None, "distribution.kind", f"block-cyclic, file or heterogeneous, got {kind!r}")


_APP_ERROR = re.compile(r"^error: (.*?)(?:: expected (.*))?$", re.MULTILINE)


def parse_output(stdout: str, stderr: str, returncode: int, what: str) -> dict:
    """The JSON line of apps/lu; its `error: ...` (exit 2) becomes an InputError."""
    has_json = any(line.startswith("{") for line in stdout.splitlines())
    match = _APP_ERROR.search(stderr)
    # SMPI ignores main's return value: an `error:` line without output is bad input too
    if match and (returncode == 2 or (returncode == 0 and not has_json)):
        raise InputError(None, match.group(1), match.group(2) or "valid input")
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
