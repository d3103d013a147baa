"""Engine `real`: runs apps/lu (native StarPU build) on this machine, or with `app: chameleon`
an installed Chameleon's getrf_nopiv driver (testbed/run/engines/chameleon_app.py).

One MPI rank per node of the cluster (`mpirun` when R > 1, one MPMD app context per run of
nodes of one machine type, each with `{**spec.env, **spec.env_per_machine[machine]}`). The
heterogeneous distribution weighs nodes by their described speed
(testbed.run.distribution.described_node_speed). STARPU_SCHED defaults to dmdas, as for the
other engines. The app prints one JSON line; the result keeps makespan_s,
tasks, tasks_by_kind, gflops and, when checked, residual.

The apps/lu arguments and output parsing shared with the starpu-simgrid engine
are in testbed/run/engines/lu_app.py.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from testbed.common.commands import mpi_singleton_env
from testbed.common.errors import InputError
from testbed.common.paths import LU_REAL, binary
from testbed.run.engines import RunSpec, chameleon_app
from testbed.run.engines.lu_app import check_run, distribution_args, kernel_args, parse_output, result_fields, run_env

log = logging.getLogger(__name__)


def cluster_ranks(cluster: str) -> tuple[list[str], list[float]]:
    """The machine type of each node (= MPI rank) of a cluster, and the nodes' described speeds."""
    from testbed.describe.machines import load_cluster
    from testbed.run.distribution import described_node_speed

    nodes = load_cluster(cluster).nodes
    return [n.machine.name for n in nodes], [described_node_speed(n.machine) for n in nodes]


def write_trace(spec: RunSpec, fxt_dir: Path, workdir: Path) -> None:
    """--trace/--transfers/--events: the ranks' FxT files as numasim's tidy tables (testbed/traces/fxt_trace.py)."""
    from testbed.common.paths import starpu_file
    from testbed.describe.machines import load_cluster
    from testbed.run.factors import layout_of
    from testbed.traces import fxt_trace

    nodes = load_cluster(spec.cluster).nodes
    out = fxt_trace.convert(starpu_file("native", "bin/starpu_fxt_tool", "StarPU's FxT converter"), fxt_dir, workdir)
    fxt_trace.write_tables(out, [n.name for n in nodes], [layout_of(n.machine) for n in nodes], spec.trace,
                           spec.transfers, spec.events)


def rank_groups(machines: list[str]) -> list[tuple[str, int]]:
    """Consecutive ranks of one machine type as (machine, count): mpirun's MPMD app contexts, which
    number ranks in the order given, so each context can carry its machine's variables."""
    groups: list[tuple[str, int]] = []
    for m in machines:
        if groups and groups[-1][0] == m:
            groups[-1] = (m, groups[-1][1] + 1)
        else:
            groups.append((m, 1))
    return groups


def launch(spec: RunSpec, machines: list[str], app: list[str], extra: dict[str, str] | None = None
           ) -> tuple[list[str], dict[str, str]]:
    """The command and process environment that start `app` once per node; each rank gets its
    machine type's whole environment, {**spec.env, **spec.env_per_machine[machine]}, plus `extra`
    (the trace variables)."""
    env = {**run_env(spec), **(extra or {})}
    prefix = mpirun_prefix(len(machines))
    if not prefix:
        return app, mpi_singleton_env({**env, **spec.env_per_machine.get(machines[0], {}), **(extra or {})})
    # Open MPI forwards only the variables named with -x; one app context per run of ranks of one
    # machine type, each with its variables (contexts number the ranks in the order given).
    cmd = list(prefix)
    for i, (machine, count) in enumerate(rank_groups(machines)):
        rank_env = {**env, **spec.env_per_machine.get(machine, {}), **(extra or {})}
        cmd += ([":"] if i else []) + ["-np", str(count)]
        for var in sorted(k for k in rank_env if k.startswith("STARPU_") or k in ("OMP_NUM_THREADS", "LD_LIBRARY_PATH")):
            cmd += ["-x", f"{var}={rank_env[var]}"]
        cmd += app
    return cmd, env


def mpirun_prefix(ranks: int) -> list[str]:
    if ranks == 1:
        return []
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise FileNotFoundError("mpirun not found: install openmpi-bin (envs/setup.sh)")
    cmd = [mpirun, "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")  # containers and CI run as root
    return cmd


def run(spec: RunSpec) -> dict:
    nt = check_run(spec)
    machines, speeds = cluster_ranks(spec.cluster)
    ranks = len(machines)
    traced = spec.trace is not None or spec.transfers is not None or spec.events is not None
    if spec.app == "chameleon":
        if traced:
            raise InputError(None, "--trace/--transfers", "app lu (the FxT conversion reads apps/lu's codelets)")
        app = chameleon_app.command(chameleon_app.installed_chameleon("native"), spec, ranks)
    else:
        app = [str(binary(LU_REAL, "apps/lu (real build)"))]
    with tempfile.TemporaryDirectory(prefix="lu-real-", dir=spec.workdir) as tmp:
        workdir = Path(tmp)
        if spec.app != "chameleon":
            app += ["--n", str(spec.n), "--b", str(spec.b), "--seed", str(spec.seed)]
            app += distribution_args(spec, ranks, workdir, speeds)
            if spec.check:
                app.append("--check")
            app += kernel_args(spec, spec.symbols)
        fxt_dir = workdir / "fxt"
        if traced:
            from testbed.traces.fxt_trace import trace_env

            fxt_dir.mkdir()
        extra = trace_env(fxt_dir) if traced else {}
        if spec.app == "chameleon":
            extra["LD_LIBRARY_PATH"] = chameleon_app.library_path("native")
        cmd, env = launch(spec, machines, app, extra)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=workdir)
        if spec.app == "chameleon":
            result = chameleon_app.result_fields(
                chameleon_app.parse_output(proc.stdout, proc.stderr, proc.returncode, "chameleon_dtesting (real)"), nt)
        else:
            result = result_fields(parse_output(proc.stdout, proc.stderr, proc.returncode, "apps/lu (real)"))
        if traced:
            write_trace(spec, fxt_dir, workdir)
    # Factor G is a kernel setting (sysctl kernel.numa_balancing), not a StarPU variable: the
    # real engine records what the node had, and says when it differs from what was asked.
    node = node_numa_balancing()
    result["node_numa_balancing"] = node
    asked = spec.env.get("TESTBED_NUMA_BALANCING")
    if node is not None and asked is not None and int(asked) != node:
        log.warning(f"factor G asks kernel.numa_balancing={asked}, this node has {node} "
                    "(the real engine does not change sysctls; the run used the node's value)")
    return result


def node_numa_balancing() -> int | None:
    try:
        return int(Path("/proc/sys/kernel/numa_balancing").read_text().strip())
    except (OSError, ValueError):
        return None
