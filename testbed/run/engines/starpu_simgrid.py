"""Engine `starpu-simgrid`: the real StarPU, SimGrid build, running apps/lu under SMPI.

Inputs (docs/interfaces.md §3), from spec.platform_dir (the output of
`testbed platform`; generated into the work directory when None):
``starpu/cluster.xml``, ``starpu/hostfile`` (one line per MPI rank) and
``starpu/<machine>/sampling/{bus,codelets/45}`` per machine type, whose files
are named by machine type (STARPU_HOSTNAME=<machine>).

`starpu_smpirun -hostfile-platform` takes every rank's StarPU platform and
perf models from ONE directory (STARPU_PERF_MODEL_DIR), named by the rank's
hostfile entry (it sets STARPU_MPI_HOSTNAMES from the hostfile). So the engine
builds a merged sampling directory of symbolic links: for each hostfile entry
h of machine type M, ``bus/h.*`` -> M's bus files and ``codelets/45/<sym>.h``
-> M's models. An entry is a machine type if ``starpu/<entry>/sampling``
exists, else a node name ``<machine>-<i>``.

Before running, every model the run needs is checked for a history entry of
the run's tile size (StarPU-SimGrid would otherwise stop with "does not have a
perfmodel"); the symbol set is the one the sampling directory holds
(Chameleon's dgetrf_nopiv/dtrsm/dgemm, else StarPU's LU example models).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from testbed.common.errors import InputError
from testbed.common.paths import LU_SIMGRID, STARPU_SMPIRUN, binary, starpu_file
from testbed.run.distribution import node_gemm_speed
from testbed.run.engines import RunSpec, platform_dir_for
from testbed.run.engines.lu_app import check_sizes, distribution_args, kernel_args, parse_output, result_fields, run_env
from testbed.starpu.bus_files import BUS_SUFFIXES, read_bus_config
from testbed.starpu.lu_codelets import SYMBOL_SETS
from testbed.starpu.perfmodel_files import history_means
from testbed.starpu.sampling import detect_symbols


def read_hostfile(starpu_dir: Path) -> list[str]:
    hostfile = starpu_dir / "hostfile"
    if not hostfile.is_file():
        raise InputError(hostfile, "file", "the hostfile written by `testbed platform` (one rank per line)")
    hosts = [ln.strip() for ln in hostfile.read_text().splitlines() if ln.strip()]
    if not hosts:
        raise InputError(hostfile, "lines", "at least one host")
    return hosts


def machine_of(starpu_dir: Path, host: str) -> str:
    if (starpu_dir / host / "sampling").is_dir():
        return host
    base = re.sub(r"-\d+$", "", host)
    if base != host and (starpu_dir / base / "sampling").is_dir():
        return base
    raise InputError(starpu_dir / base / "sampling", "sampling",
                     f"the StarPU sampling directory of machine {base!r} (hostfile entry {host!r}; "
                     "generate it with `testbed platform`)")


def check_models(sampling: Path, machine: str, symbols: str, b: int, use_cuda: bool,
                 getrf_on_gpu: bool = False) -> None:
    """Every worker that may run a task has a history entry for b x b tiles."""
    devices = read_bus_config(sampling, machine)
    for kind, (sym, nbuffers, cuda) in SYMBOL_SETS[symbols].items():
        cuda = cuda or (kind == "getrf" and getrf_on_gpu)
        model = sampling / "codelets" / "45" / f"{sym}.{machine}"
        if not model.is_file():
            raise InputError(model, "file", f"the perf model of {sym} for machine {machine}")
        size = nbuffers * b * b * 8
        means = history_means(model)
        archs = [a for a in means if a.startswith("cpu")][:1]
        if cuda and use_cuda:
            archs += [f"cuda{j}_impl0" for j in range(devices["cuda"])]
        for arch in archs or ["cpu0_impl0"]:
            if size not in means.get(arch, {}):
                raise InputError(model, f"{arch} entry of size {size}",
                                 f"a calibrated duration for b={b} tiles ({nbuffers} x {b}x{b} doubles); "
                                 f"sizes present: {sorted(means.get(arch, {})) or 'none'}")


def merged_sampling(starpu_dir: Path, hosts: list[str], symbols: str, out: Path) -> dict[str, str]:
    """Links every hostfile entry's bus files and models into `out`; returns host -> machine."""
    machines: dict[str, str] = {}
    (out / "bus").mkdir(parents=True)
    (out / "codelets" / "45").mkdir(parents=True)
    for host in dict.fromkeys(hosts):
        machine = machine_of(starpu_dir, host)
        machines[host] = machine
        sampling = (starpu_dir / machine / "sampling").resolve()
        for suffix in BUS_SUFFIXES:
            src = sampling / "bus" / f"{machine}.{suffix}"
            if src.exists():
                (out / "bus" / f"{host}.{suffix}").symlink_to(src)
        if not (sampling / "bus" / f"{machine}.platform.v4.xml").exists():
            raise InputError(sampling / "bus" / f"{machine}.platform.v4.xml", "file",
                             "the StarPU-SimGrid platform of the machine (bus calibration output)")
        for sym, _, _ in SYMBOL_SETS[symbols].values():
            (out / "codelets" / "45" / f"{sym}.{host}").symlink_to(sampling / "codelets" / "45" / f"{sym}.{machine}")
    return machines


#: Variables StarPU reads only where the machine has the device they name: set for some machine types
#: only, they can be given to every rank (STARPU_WORKERS_CUDAID: the CUDA worker count comes from
#: the devices found, 0 on a CPU-only node, src/core/topology.c _starpu_init_machine_config).
DEVICE_ONLY_VARIABLES = ("STARPU_WORKERS_CUDAID",)


def one_process_env(spec: RunSpec, machines: list[str]) -> dict[str, str]:
    """The environment of the one starpu_smpirun process: SMPI runs every rank in it, and StarPU
    reads its variables with getenv (src/common/utils.c starpu_getenv), so ranks cannot differ.
    spec.env plus the per-machine variables that are not in conflict; a variable with different
    values on two machine types of the run (factors B, C, D on a mixed cluster) is refused."""
    per = {m: spec.env_per_machine.get(m, {}) for m in dict.fromkeys(machines)}
    env = dict(spec.env)
    for var in sorted({k for e in per.values() for k in e}):
        values = {m: e[var] for m, e in per.items() if var in e}
        if len(set(values.values())) == 1 and (len(values) == len(per) or var in DEVICE_ONLY_VARIABLES):
            env[var] = next(iter(values.values()))
            continue
        shown = ", ".join(f"{m}: {values.get(m, '(unset)')!r}" for m in per)
        raise InputError(None, f"env_per_machine.{var}",
                         f"one value on every machine type for the starpu-simgrid engine (its ranks share one "
                         f"process environment); got {shown}. Use the numasim or real engine for per-machine "
                         "settings (factors B, C, D on a mixed cluster)")
    return env


_UNCALIBRATED = re.compile(r"Codelet (\S+) does not have a perfmodel")


def run(spec: RunSpec) -> dict:
    if spec.trace is not None or spec.transfers is not None:
        raise InputError(None, "--trace/--transfers", "the numasim or real engine (StarPU-SimGrid is built without "
                         "FxT: SMPI links the app as a shared object and needs a PIC libfxt.a, which Debian "
                         "does not ship; envs/setup.sh)")
    check_sizes(spec)
    lu = binary(LU_SIMGRID, "apps/lu (SimGrid build)")
    smpirun = starpu_file("simgrid", STARPU_SMPIRUN, "StarPU-SimGrid")
    with tempfile.TemporaryDirectory(prefix="lu-simgrid-", dir=spec.workdir) as tmp:
        workdir = Path(tmp)
        starpu_dir = platform_dir_for(spec, workdir) / "starpu"
        cluster_xml = starpu_dir / "cluster.xml"
        if not cluster_xml.is_file():
            raise InputError(cluster_xml, "file", "the SMPI cluster platform written by `testbed platform`")
        hosts = read_hostfile(starpu_dir)
        machines = {h: machine_of(starpu_dir, h) for h in dict.fromkeys(hosts)}
        first = starpu_dir / machines[hosts[0]] / "sampling"
        symbols = spec.symbols or detect_symbols(first, machines[hosts[0]])
        if symbols not in SYMBOL_SETS:
            raise InputError(None, "symbols", f"one of {', '.join(SYMBOL_SETS)}, got {symbols!r}")
        use_cuda = spec.env.get("STARPU_NCUDA", "") != "0"
        for machine in dict.fromkeys(machines.values()):
            check_models(starpu_dir / machine / "sampling", machine, symbols, spec.b, use_cuda, spec.getrf_on_gpu)
        merged = workdir / "sampling"
        merged_sampling(starpu_dir, hosts, symbols, merged)

        speeds = None
        if spec.distribution.get("kind") == "heterogeneous":
            gemm = SYMBOL_SETS[symbols]["gemm"][0]
            speeds = [node_gemm_speed(starpu_dir / machines[h] / "sampling", machines[h], spec.b, gemm)
                      for h in hosts]
        args = ["--n", str(spec.n), "--b", str(spec.b), "--seed", str(spec.seed), *kernel_args(spec, symbols)]
        args += distribution_args(spec, len(hosts), workdir, speeds)

        env = run_env(spec, one_process_env(spec, [machines[h] for h in hosts]))
        env.update({"STARPU_PERF_MODEL_DIR": str(merged), "STARPU_HOSTNAME": hosts[0],
                    "STARPU_HOME": str(workdir / "home")})
        env.pop("STARPU_CALIBRATE", None)  # simulation cannot calibrate
        cmd = [str(smpirun), "-platform", str(cluster_xml), "-hostfile", str(starpu_dir / "hostfile"),
               "-hostfile-platform", str(lu), *args]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=workdir)
        missing = _UNCALIBRATED.search(proc.stderr)
        if missing:
            sym = missing.group(1)
            files = sorted({str(starpu_dir / m / "sampling" / "codelets" / "45" / f"{sym}.{m}")
                            for m in machines.values()})
            raise InputError(" or ".join(files), sym,
                             f"a calibrated history entry for b={spec.b} on every worker type (StarPU-SimGrid "
                             "found none and cannot calibrate in simulation)")
        out = parse_output(proc.stdout, proc.stderr + proc.stdout, proc.returncode, "apps/lu (StarPU-SimGrid)")
    result = result_fields(out)
    result["tasks_by_kind"].pop("plrnt", None)  # generation is not simulated
    result["hosts"] = hosts
    return result

