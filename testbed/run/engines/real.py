"""Engine `real`: runs apps/lu (native StarPU build) on this machine.

One MPI rank per node of the cluster (`mpirun -np R` when R > 1). The
heterogeneous distribution weighs nodes by their described speed
(testbed.run.distribution.described_node_speed). spec.env is
applied to the process environment (STARPU_SCHED defaults to dmdas, as for the
other engines). The app prints one JSON line; the result keeps makespan_s,
tasks, tasks_by_kind, gflops and, when checked, residual.

The apps/lu arguments and output parsing shared with the starpu-simgrid engine
are in testbed/run/engines/lu_app.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from testbed.common.commands import mpi_singleton_env
from testbed.common.errors import InputError
from testbed.common.paths import LU_REAL, binary
from testbed.run.engines import RunSpec
from testbed.run.engines.lu_app import check_sizes, distribution_args, kernel_args, parse_output, result_fields, run_env


def cluster_ranks(cluster: str) -> tuple[int, list[float]]:
    """Number of nodes (= MPI ranks) of a cluster and their described speeds."""
    from testbed.describe.machines import load_cluster
    from testbed.run.distribution import described_node_speed

    nodes = load_cluster(cluster).nodes
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
        args += kernel_args(spec, spec.symbols)
        env = run_env(spec)
        cmd = mpirun_prefix(ranks)
        if cmd:  # Open MPI forwards only the variables named with -x
            for var in sorted(k for k in env if k.startswith("STARPU_") or k == "OMP_NUM_THREADS"):
                cmd += ["-x", var]
        else:
            env = mpi_singleton_env(env)
        proc = subprocess.run(cmd + [str(lu)] + args, env=env, capture_output=True, text=True, cwd=workdir)
        out = parse_output(proc.stdout, proc.stderr, proc.returncode, "apps/lu (real)")
    result = result_fields(out)
    # Factor G is a kernel setting (sysctl kernel.numa_balancing), not a StarPU variable: the
    # real engine records what the node had, and says when it differs from what was asked.
    node = node_numa_balancing()
    result["node_numa_balancing"] = node
    asked = spec.env.get("TESTBED_NUMA_BALANCING")
    if node is not None and asked is not None and int(asked) != node:
        print(f"warning: factor G asks kernel.numa_balancing={asked}, this node has {node} "
              "(the real engine does not change sysctls; the run used the node's value)", file=sys.stderr)
    return result


def node_numa_balancing() -> int | None:
    try:
        return int(Path("/proc/sys/kernel/numa_balancing").read_text().strip())
    except (OSError, ValueError):
        return None
