"""Engine `real`: runs apps/lu (native StarPU build) on this machine, or with `app: chameleon`
Chameleon's LU, apps/chameleon_lu built against an installed Chameleon
(testbed/run/engines/chameleon_app.py), on the same tile mapping.

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
from testbed.run.engines.lu_app import (
    check_distribution,
    check_run,
    distribution_args,
    kernel_args,
    parse_output,
    result_fields,
    run_env,
)

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


def launch(spec: RunSpec, machines: list[str], app: list[str], extra: dict[str, str] | None = None,
           extra_per_machine: dict[str, dict[str, str]] | None = None) -> tuple[list[str], dict[str, str]]:
    """The command and process environment that start `app` once per node; each rank gets its
    machine type's whole environment, {**spec.env, **spec.env_per_machine[machine]}, plus `extra`
    (the trace variables) and `extra_per_machine[machine]` (the topology StarPU loads)."""
    env = {**run_env(spec), **(extra or {})}
    mine = extra_per_machine or {}
    prefix = mpirun_prefix(len(machines))
    if not prefix:
        return app, mpi_singleton_env({**env, **spec.env_per_machine.get(machines[0], {}), **(extra or {}),
                                       **mine.get(machines[0], {})})
    # Open MPI forwards only the variables named with -x; one app context per run of ranks of one
    # machine type, each with its variables (contexts number the ranks in the order given).
    cmd = list(prefix)
    if mine:
        # StarPU binds its own threads to the topology's PUs; Open MPI's default binding of one or two
        # ranks (each to one core) would leave each StarPU one PU, hence one NUMA node
        cmd += ["--bind-to", "none"]
    for i, (machine, count) in enumerate(rank_groups(machines)):
        rank_env = {**env, **spec.env_per_machine.get(machine, {}), **(extra or {}), **mine.get(machine, {})}
        cmd += ([":"] if i else []) + ["-np", str(count)]
        for var in sorted(k for k in rank_env if k.startswith(("STARPU_", "HWLOC_"))
                          or k in ("OMP_NUM_THREADS", "LD_LIBRARY_PATH")):
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


def topology_env(spec: RunSpec, machines: list[str], workdir: Path) -> tuple[dict[str, dict[str, str]], dict]:
    """`--topology`: per machine type, the variables that make StarPU load an hwloc XML topology in
    place of this machine's (hwloc reads HWLOC_XMLFILE when a topology is loaded, and with
    HWLOC_THISSYSTEM=1 takes it for this machine: its binding hooks stay on, so StarPU's thread and
    memory bindings act here; StarPU's bus calibration loads its own topology, the same way,
    core/perfmodel/perfmodel_bus.c `benchmark_all_memory_nodes`, which StarPU's own
    STARPU_HWLOC_INPUT, core/topology.c `_starpu_init_topology`, would not reach), and what the
    result records: {"topology": the file or "described", "numa_nodes": {machine: count}}."""
    if spec.topology is None:
        return {}, {}
    from testbed.common.inputs import XML_BYTES, read_input_bytes
    from testbed.describe.hwloc_xml import check_topology, write_topology
    from testbed.describe.machines import load_machine

    files: dict[str, Path] = {}
    numa: dict[str, int] = {}
    if spec.topology == "described":
        for m in dict.fromkeys(machines):
            machine = load_machine(m)
            path = workdir / f"hwloc-{m}.xml"
            write_topology(machine, path)
            numa[m] = check_topology(path.read_bytes(), machine.path, "numa_nodes[].cores (as --topology described)")
            files[m] = path
    else:
        given = Path(spec.topology)
        count = check_topology(read_input_bytes(given, "--topology", "an hwloc XML topology (lstopo --of xml)",
                                                XML_BYTES), given, "--topology")
        files = {m: given.absolute() for m in machines}
        numa = {m: count for m in machines}
    env = {m: {"HWLOC_XMLFILE": str(path), "HWLOC_THISSYSTEM": "1"} for m, path in files.items()}
    return env, {"topology": spec.topology if spec.topology == "described" else str(Path(spec.topology)),
                 "topology_numa_nodes": numa}


def rank_fxt_files(fxt_dir: Path) -> list[Path]:
    """The ranks' FxT files (prof_file_<user>_<rank>, src/common/fxt.c), in rank order."""
    def rank(p: Path) -> int:
        tail = p.name.rsplit("_", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    return sorted(fxt_dir.glob("prof_file_*"), key=rank)


def memory_counts(spec: RunSpec, fxt_dir: Path) -> dict:
    """--memory-counts: each rank's memory nodes, allocations and copies, from its FxT file
    (testbed/traces/memory_counts.py)."""
    from testbed.common.paths import FXT_EVENTS
    from testbed.starpu.lu_codelets import SYMBOL_SETS
    from testbed.traces import memory_counts as mc

    tool = binary(FXT_EVENTS, "apps/lu's FxT event reader (fxt_events)")
    models = {symbol for symbols in SYMBOL_SETS.values() for kind, (symbol, _, _) in symbols.items()
              if kind != "plrnt"}
    ranks = []
    for path in rank_fxt_files(fxt_dir):
        ranks.append(mc.starpu_counts(mc.read_events(tool, [path]), models))
    if not ranks:
        raise RuntimeError(f"apps/lu (real) wrote no FxT file into {fxt_dir}")
    return {"engine": "real", "ranks": ranks}


def run(spec: RunSpec) -> dict:
    nt = check_run(spec)
    machines, speeds = cluster_ranks(spec.cluster)
    ranks = len(machines)
    traced = spec.trace is not None or spec.transfers is not None or spec.events is not None
    counted = spec.memory_counts is not None
    check_distribution(spec, ranks)  # the user's mapping before the program is looked for
    if spec.app == "chameleon":
        if traced:
            raise InputError(None, "--trace/--transfers", "app lu (the FxT conversion reads apps/lu's codelets)")
        if counted or spec.generate_on_main_ram:
            raise InputError(None, "--memory-counts/--generate-on-main-ram", "app lu (apps/lu's codelets and options)")
        program = chameleon_app.driver("native")
    else:
        program = binary(LU_REAL, "apps/lu (real build)")
    with tempfile.TemporaryDirectory(prefix="lu-real-", dir=spec.workdir) as tmp:
        workdir = Path(tmp)
        if spec.app == "chameleon":
            app = chameleon_app.command(program, spec, ranks, workdir, speeds)
        else:
            app = [str(program)]
            app += ["--n", str(spec.n), "--b", str(spec.b), "--seed", str(spec.seed)]
            app += distribution_args(spec, ranks, workdir, speeds)
            if spec.check:
                app.append("--check")
            if spec.generate_on_main_ram:
                app.append("--generate-on-main-ram")
            app += kernel_args(spec, spec.symbols)
        topo_env, topo_fields = topology_env(spec, machines, workdir)
        fxt_dir = workdir / "fxt"
        from testbed.traces.fxt_trace import trace_env

        if traced or counted:
            fxt_dir.mkdir()
        extra = trace_env(fxt_dir) if traced or counted else {}
        if spec.app == "chameleon":
            extra["LD_LIBRARY_PATH"] = chameleon_app.library_path("native")
        if topo_env and ranks == 1:
            # A split topology gives every core a CPU worker, and StarPU-MPI initializes MPI in its
            # progression thread once the workers spin (mpi/src/mpi/starpu_mpi_mpi.c
            # `_starpu_mpi_progress_thread_func`); Open MPI's singleton then forks its daemon and
            # waits for it, which took 45 to 618 s on this 2-core machine against 0.4 s without the
            # daemon (docs/numa-split.md). A one-rank run needs no daemon.
            extra["OMPI_MCA_ess_singleton_isolated"] = "1"
        cmd, env = launch(spec, machines, app, extra, topo_env)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=workdir)
        if spec.app == "chameleon":
            result = chameleon_app.result_fields(
                chameleon_app.parse_output(proc.stdout, proc.stderr, proc.returncode, "apps/chameleon_lu (real)"), nt)
        else:
            result = result_fields(parse_output(proc.stdout, proc.stderr, proc.returncode, "apps/lu (real)"))
        if traced:
            write_trace(spec, fxt_dir, workdir)
        result.update(topo_fields)
        if counted:
            result["memory_counts"] = memory_counts(spec, fxt_dir)
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
