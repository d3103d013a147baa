"""Engine `real`: runs apps/lu (native StarPU build) on this machine.

One MPI rank per node of the cluster (`mpirun -np R` when R > 1; a cluster
`local-<R>` that has no YAML file means R ranks on this machine). The
heterogeneous distribution weighs nodes by their described speed
(testbed.distribution.described_node_speed). spec.env is
applied to the process environment (STARPU_SCHED defaults to dmdas, as for the
other engines). The app prints one JSON line; the result keeps makespan_s,
tasks, tasks_by_kind, gflops and, when checked, residual.

The helpers shared with the starpu-simgrid engine (argument building, output
parsing) live here too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from testbed.engines import RunSpec
from testbed.errors import InputError
from testbed.paths import LU_REAL, binary

# ---------------------------------------------------------------- shared with starpu_simgrid


def check_sizes(spec: RunSpec) -> int:
    """NT = N / b, or InputError when N is not a positive multiple of b."""
    if spec.n <= 0 or spec.b <= 0 or spec.n % spec.b:
        raise InputError(None, "--n/--b", f"positive N that is a multiple of b, got N={spec.n} b={spec.b}")
    return spec.n // spec.b


def distribution_args(spec: RunSpec, ranks: int, workdir: Path, speeds: list[float] | None) -> list[str]:
    """apps/lu arguments for spec.distribution: block-cyclic, file or heterogeneous.

    `speeds` (one per rank) drive the heterogeneous generator; None means equal.
    """
    from testbed import distribution as dist

    nt = check_sizes(spec)
    kind = spec.distribution.get("kind", "block-cyclic")
    if kind == "block-cyclic":
        p = int(spec.distribution.get("p") or 0)
        q = int(spec.distribution.get("q") or 0)
        if not (p and q):
            p, q = dist.near_square_grid(ranks)
        if p * q != ranks:
            raise InputError(None, "distribution p x q", f"p * q = {ranks} ranks, got {p} x {q}")
        return ["--p", str(p), "--q", str(q)]
    if kind == "file":
        path = Path(spec.distribution["path"])
        dist.read_distribution(path, nt, ranks)  # fail early, with the Python error format
        return ["--dist", str(path.resolve())]
    if kind == "heterogeneous":
        speeds = speeds or [1.0] * ranks
        path = dist.write_distribution(
            workdir / "distribution.txt",
            dist.heterogeneous(nt, speeds),
            comment=f"heterogeneous, NT={nt}, node speeds (flop/s): {' '.join(f'{s:.4g}' for s in speeds)}",
        )
        return ["--dist", str(path)]
    raise InputError(None, "distribution.kind", f"block-cyclic, file or heterogeneous, got {kind!r}")


_APP_ERROR = re.compile(r"^error: (.*?)(?:: expected (.*))?$", re.MULTILINE)


def parse_output(stdout: str, stderr: str, returncode: int, what: str) -> dict:
    """The JSON line of apps/lu; its `error: ...` (exit 2) becomes an InputError."""
    import json

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


def result_fields(out: dict) -> dict:
    """Engine result: makespan_s, tasks, tasks_by_kind, gflops (+ residual, layout)."""
    keep = ("makespan_s", "tasks", "tasks_by_kind", "gflops", "residual", "ranks", "symbols", "nt", "p", "q")
    return {k: out[k] for k in keep if k in out}


def run_env(spec: RunSpec) -> dict[str, str]:
    env = dict(os.environ)
    env.update(spec.env)
    env.setdefault("STARPU_SCHED", "dmdas")
    env["STARPU_SILENT"] = "1"
    return env


# ---------------------------------------------------------------- the real engine


def cluster_ranks(cluster: str) -> tuple[int, list[float] | None]:
    """Number of nodes (= MPI ranks) of a cluster and their described speeds;
    `local-<R>` without a file is R ranks of unknown (equal) speed."""
    from testbed.distribution import described_node_speed
    from testbed.machines import load_cluster

    try:
        nodes = load_cluster(cluster).nodes
    except InputError:
        match = re.fullmatch(r"local-(\d+)", cluster)
        if match and int(match.group(1)) > 0:
            return int(match.group(1)), None
        raise
    return len(nodes), [described_node_speed(n.machine) for n in nodes]


def mpirun_prefix(ranks: int) -> list[str]:
    if ranks == 1:
        return []
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise FileNotFoundError("mpirun not found: install openmpi-bin (envs/setup.sh)")
    cmd = [mpirun, "-np", str(ranks), "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")  # containers and CI run as root
    return cmd


def run(spec: RunSpec) -> dict:
    if spec.trace is not None or spec.transfers is not None:
        raise InputError(None, "--trace/--transfers", "the numasim engine (apps/lu writes no trace)")
    check_sizes(spec)
    lu = binary(LU_REAL, "apps/lu (real build)")
    ranks, speeds = cluster_ranks(spec.cluster)
    with tempfile.TemporaryDirectory(prefix="lu-real-", dir=spec.workdir) as tmp:
        workdir = Path(tmp)
        args = ["--n", str(spec.n), "--b", str(spec.b), "--seed", str(spec.seed)]
        args += distribution_args(spec, ranks, workdir, speeds)
        if spec.check:
            args.append("--check")
        symbols = spec.symbols
        if symbols:
            args += ["--symbols", symbols]
        env = run_env(spec)
        cmd = mpirun_prefix(ranks)
        if cmd:  # Open MPI forwards only the variables named with -x
            for var in sorted(k for k in env if k.startswith("STARPU_") or k == "OMP_NUM_THREADS"):
                cmd += ["-x", var]
        proc = subprocess.run(cmd + [str(lu)] + args, env=env, capture_output=True, text=True, cwd=workdir)
        out = parse_output(proc.stdout, proc.stderr, proc.returncode, "apps/lu (real)")
    return result_fields(out)
