"""Engine `starpu-simgrid`: the real StarPU, SimGrid build, running apps/lu under SMPI (or, with
`app: chameleon`, a Chameleon built in simulation mode: testbed/run/engines/chameleon_app.py).

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

Per-machine StarPU variables (spec.env_per_machine: factors B, C, D on a mixed
cluster) reach each rank although SMPI runs all ranks in one process: what
differs between machine types goes into a rank settings file that apps/lu
applies through its rank's starpu_conf (PER_RANK_VARIABLES says how, variable
by variable). StarPU-SimGrid does not simulate thread binding
(src/core/topology.c _starpu_bind_thread_on_cpu binds nothing under
STARPU_SIMGRID): STARPU_MAIN_THREAD_CPUID and STARPU_MPI_THREAD_CPUID only
change the bind ids StarPU reports, and the worker count where
STARPU_MPI_THREAD_CPUID stops the MPI core reservation. The result's
`workers_by_rank` lists each rank's CPU worker bind ids and CUDA devices.

Before running, every model the run needs is checked for a history entry of
the run's tile size (StarPU-SimGrid would otherwise stop with "does not have a
perfmodel"); the symbol set is the one the sampling directory holds
(Chameleon's dgetrf_nopiv/dtrsm/dgemm, else StarPU's LU example models).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from testbed.common.errors import InputError
from testbed.common.paths import LU_SIMGRID, STARPU_SMPIRUN, binary, starpu_file
from testbed.common.simgrid_xml import check_simgrid_platform
from testbed.run.distribution import node_gemm_speed
from testbed.run.engines import RunSpec, chameleon_app, model_dirs, platform_dir_for
from testbed.run.engines.lu_app import (
    check_distribution,
    check_run,
    distribution_args,
    kernel_args,
    parse_output,
    result_fields,
    run_env,
)
from testbed.starpu.bus_files import BUS_SUFFIXES, check_bus_files, read_bus_config
from testbed.starpu.lu_codelets import SYMBOL_SETS
from testbed.starpu.perfmodel_files import HistoryEntry, read_model, square_tiles_footprint
from testbed.starpu.sampling import detect_symbols
from testbed.starpu.sampling_dir import ModelDir


def read_hostfile(starpu_dir: Path) -> list[str]:
    hostfile = starpu_dir / "hostfile"
    if not hostfile.is_file():
        raise InputError(hostfile, "file", "the hostfile written by `testbed platform` (one rank per line)")
    try:
        hosts = [ln.strip() for ln in hostfile.read_text().splitlines() if ln.strip()]
    except UnicodeDecodeError as e:
        raise InputError(hostfile, f"byte {e.start}", "UTF-8 text, one host per line") from None
    if not hosts:
        raise InputError(hostfile, "lines", "at least one host")
    for k, host in enumerate(hosts, start=1):
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", host):
            raise InputError(hostfile, f"entry {k}", f"a host name (letters, digits, '.', '_', '-'), got {host!r}")
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


def bus_dir(starpu_dir: Path, machine: str, models: ModelDir) -> ModelDir:
    """Where a machine type's bus files are: beside its models when that directory has them (a
    real machine's raw sampling directory), else the ones `testbed platform` generated."""
    if models.bus_platform.is_file():
        return models
    return ModelDir(starpu_dir / machine / "sampling", machine)


def check_models(models: ModelDir, bus: ModelDir, symbols: str, b: int, use_cuda: bool,
                 getrf_on_gpu: bool = False) -> None:
    """The bus files are sound and every worker that may run a task has a history entry for b x b
    tiles under the footprint StarPU gives apps/lu's task (StarPU-SimGrid aborts on a damaged bus
    file or a missing entry: the files are checked before it runs; models read by the strict
    reader, testbed/starpu/perfmodel_files.py read_model)."""
    devices = check_bus_files(bus.dir, bus.host)
    for kind, (sym, nbuffers, cuda) in SYMBOL_SETS[symbols].items():
        cuda = cuda or (kind == "getrf" and getrf_on_gpu)
        model = models.model(sym)
        if not model.is_file():
            raise InputError(model, "file", f"the perf model of {sym} for host {models.host}")
        entries = {f"{c.device}{c.devid}_impl0": c.entries for c in read_model(model)}
        archs = [a for a in entries if a.startswith("cpu")][:1]
        if cuda and use_cuda:
            archs += [f"cuda{j}_impl0" for j in range(devices["cuda"])]
        for arch in archs or ["cpu0_impl0"]:
            check_entry(model, arch, entries.get(arch, []), nbuffers, b)


def check_entry(model: Path, arch: str, entries: list[HistoryEntry], nbuffers: int, b: int) -> None:
    """An entry of the task's size and footprint. StarPU looks a history entry up by footprint
    only (src/core/perfmodel/perfmodel_history.c __starpu_history_based_job_expected_perf: no
    fallback on the size for a STARPU_HISTORY_BASED model, which apps/lu's are); under SimGrid a
    missing one is taken as 0 ("not calibrated at all ... Assuming it can not work there") and
    the run stops when a task is given to that worker (src/core/simgrid.c
    _starpu_simgrid_submit_job: "does not have a perfmodel"). apps/lu's tasks have the footprint
    of their b x b matrix-interface tiles (perfmodel_files.square_tiles_footprint)."""
    size = nbuffers * b * b * 8
    of_size = sorted({e.footprint for e in entries if e.size == size})
    if not of_size:
        raise InputError(model, f"{arch} entry of size {size}",
                         f"a calibrated duration for b={b} tiles ({nbuffers} x {b}x{b} doubles); "
                         f"sizes present: {sorted({e.size for e in entries}) or 'none'}")
    footprint = square_tiles_footprint(b, nbuffers)
    if footprint not in {e.footprint for e in entries}:
        raise InputError(model, f"{arch} entry of footprint {footprint:08x}",
                         f"the footprint StarPU gives apps/lu's task ({nbuffers} {b}x{b} matrix-interface tiles); "
                         f"the entries of size {size} have footprint {', '.join(f'{f:08x}' for f in of_size)} "
                         "(written with another data interface or footprint function). StarPU 1.4.10 finds history "
                         "entries by footprint only and StarPU-SimGrid stops on a missing one "
                         "(perfmodel_history.c, simgrid.c); the numasim engine falls back on the size")


def merged_sampling(starpu_dir: Path, hosts: list[str], symbols: str, out: Path,
                    dirs: dict[str, ModelDir] | None = None) -> dict[str, str]:
    """Links every hostfile entry's bus files and models into `out`, from its machine type's
    directories (`dirs`: model_dirs; default the generated ones); returns host -> machine."""
    machines: dict[str, str] = {}
    (out / "bus").mkdir(parents=True)
    (out / "codelets" / "45").mkdir(parents=True)
    for host in dict.fromkeys(hosts):
        machine = machine_of(starpu_dir, host)
        machines[host] = machine
        models = (dirs or {}).get(machine) or ModelDir(starpu_dir / machine / "sampling", machine)
        bus = bus_dir(starpu_dir, machine, models)
        for suffix in BUS_SUFFIXES:
            src = bus.dir.resolve() / "bus" / f"{bus.host}.{suffix}"
            if src.exists():
                (out / "bus" / f"{host}.{suffix}").symlink_to(src)
        if not bus.bus_platform.exists():
            raise InputError(bus.bus_platform, "file", "the StarPU-SimGrid platform of the machine (bus calibration output)")
        for sym, _, _ in SYMBOL_SETS[symbols].values():
            (out / "codelets" / "45" / f"{sym}.{host}").symlink_to(models.model(sym).resolve())
    return machines


#: Variables StarPU reads only where the machine has the device they name: set for some machine types
#: only, they can be given to every rank (STARPU_WORKERS_CUDAID: the CUDA worker count comes from
#: the devices found, 0 on a CPU-only node, src/core/topology.c _starpu_init_machine_config).
DEVICE_ONLY_VARIABLES = ("STARPU_WORKERS_CUDAID",)

#: Variables that may differ between machine types (factors B, C, D on a mixed cluster). SMPI runs
#: every rank in the one starpu_smpirun process and StarPU reads its variables with getenv
#: (src/common/utils.c starpu_getenv); setenv per rank is unsafe (ranks interleave at every
#: simcall). So the engine writes each rank's values into a file that apps/lu (SimGrid build,
#: LU_RANK_ENV) reads before starpu_mpi_init_conf:
#:
#: * STARPU_WORKERS_CPUID, STARPU_WORKERS_CUDAID: the rank's starpu_conf workers_bindid /
#:   workers_cuda_gpuid, which StarPU uses when the variable is unset (src/core/topology.c
#:   _starpu_initialize_workers_bindid, _starpu_initialize_workers_deviceid). The engine expands
#:   StarPU's syntax first (cpuid_list, cudaid_list), so each rank gets the ids the variable gives.
#: * STARPU_MPI_THREAD_CPUID: its one effect on the simulation, no core reserved for the MPI
#:   thread (mpi/src/starpu_mpi_init.c starpu_mpi_init_conf; an explicit STARPU_RESERVE_NCPU
#:   overrides it, src/core/workers.c _starpu_conf_check_environment), through the rank's
#:   starpu_conf reserve_ncpus.
#: * STARPU_MAIN_THREAD_CPUID and the thread placement of the MPI thread: recorded only.
#:   StarPU-SimGrid does not simulate thread binding (src/core/topology.c _starpu_bind_thread_on_cpu
#:   binds nothing under STARPU_SIMGRID; mpi/src/mpi/starpu_mpi_mpi.c binds the MPI thread only
#:   outside it); the core they reserve only changes which bind ids StarPU reports for the other
#:   threads, which no simulated cost reads.
#:
#: Any other variable with different values on two machine types is refused.
PER_RANK_VARIABLES = ("STARPU_WORKERS_CPUID", "STARPU_WORKERS_CUDAID", "STARPU_MPI_THREAD_CPUID",
                      "STARPU_MAIN_THREAD_CPUID")
#: The environment variable naming the rank settings file (read by apps/lu, lu_rank_env.c).
RANK_ENV_VARIABLE = "LU_RANK_ENV"

_NUMBER = re.compile(r"\s*([+-]?\d+)")


def cpuid_list(var: str, text: str, nhwpus: int) -> list[int]:
    """The logical PU ids StarPU takes from STARPU_WORKERS_CPUID on a node of `nhwpus` PUs
    (src/core/topology.c _starpu_initialize_workers_bindid): ids separated by spaces or commas,
    `a-b` and `a-` (to the last PU) ranges, each id modulo nhwpus (StarPU-SimGrid counts the
    CPU hosts of the node's bus platform; hyperthreaded PU ids wrap around)."""
    ids: list[int] = []
    pos = 0
    while (m := _NUMBER.match(text, pos)) is not None:
        val, pos = int(m.group(1)), m.end()
        if val < 0:
            break
        ids.append(val % nhwpus)
        if text.startswith("-", pos):
            pos += 1
            if pos < len(text) and text[pos] not in " ,":
                end = _NUMBER.match(text, pos)
                if end is None:
                    break  # not a range: the rest is reported below
                last, pos = int(end.group(1)), end.end()
            else:  # `a-`: up to the last PU
                last, pos = nhwpus - 1, pos + (1 if pos < len(text) else 0)
            ids += [v % nhwpus for v in range(val + 1, last + 1)]
        if text.startswith(",", pos):
            pos += 1
    if not ids or text[pos:].strip():
        raise InputError(None, var, f"StarPU's id list (non-negative ids, `a-b` or `a-` ranges), got {text!r}")
    return ids


def cudaid_list(var: str, text: str) -> list[int]:
    """The CUDA device ids StarPU takes from STARPU_WORKERS_CUDAID (src/core/topology.c
    _starpu_initialize_workers_deviceid: integers separated by spaces, no ranges)."""
    ids: list[int] = []
    pos = 0
    while (m := _NUMBER.match(text, pos)) is not None and int(m.group(1)) >= 0:
        ids.append(int(m.group(1)))
        pos = m.end()
    if not ids or text[pos:].strip():
        raise InputError(None, var, f"CUDA device ids separated by spaces, got {text!r}")
    return ids


def rank_value(var: str, text: str, nhwpus: int) -> str:
    """A per-rank value as apps/lu reads it: explicit ids, or one non-negative integer."""
    if var == "STARPU_WORKERS_CPUID":
        return " ".join(map(str, cpuid_list(var, text, nhwpus)))
    if var == "STARPU_WORKERS_CUDAID":
        return " ".join(map(str, cudaid_list(var, text)))
    if not re.fullmatch(r"\s*\+?\d+", text):  # src/common/utils.c starpu_getenv_number
        raise InputError(None, var, f"a non-negative integer, got {text!r}")
    return str(int(text))


def cpu_count(bus: ModelDir) -> int:
    """CPU hosts of the machine's StarPU bus platform: StarPU-SimGrid's PU count (nhwpus,
    src/core/topology.c _starpu_init_topology under STARPU_SIMGRID)."""
    import xml.etree.ElementTree as ET

    return sum(1 for h in ET.parse(bus.bus_platform).getroot().iter("host") if h.get("id", "").startswith("CPU"))


def rank_envs(spec: RunSpec, starpu_dir: Path, ranks: list[str],
              bus: dict[str, ModelDir] | None = None) -> tuple[dict[str, str], list[dict[str, str]]]:
    """(the starpu_smpirun process environment, each rank's own variables) for ranks on machine
    types `ranks` (bus files: `bus`, default the generated ones): spec.env plus the per-machine
    variables equal on every machine type go to the process; those that differ go to the ranks
    (PER_RANK_VARIABLES), others are refused."""
    bus = bus or {m: ModelDir(starpu_dir / m / "sampling", m) for m in ranks}
    per = {m: spec.env_per_machine.get(m, {}) for m in dict.fromkeys(ranks)}
    env = dict(spec.env)
    own: list[dict[str, str]] = [{} for _ in ranks]
    for var in sorted({k for e in per.values() for k in e}):
        values = {m: e[var] for m, e in per.items() if var in e}
        if len(set(values.values())) == 1 and (len(values) == len(per) or var in DEVICE_ONLY_VARIABLES):
            env[var] = next(iter(values.values()))
            continue
        if var not in PER_RANK_VARIABLES:
            shown = ", ".join(f"{m}: {values.get(m, '(unset)')!r}" for m in per)
            raise InputError(None, f"env_per_machine.{var}",
                             f"one value on every machine type for the starpu-simgrid engine (its ranks share one "
                             f"process environment; per rank it gives only {', '.join(PER_RANK_VARIABLES)}); "
                             f"got {shown}. Use the numasim or real engine for this setting")
        counts = {m: cpu_count(bus[m]) for m in values} if var == "STARPU_WORKERS_CPUID" else {}
        for r, m in enumerate(ranks):
            if m in values:
                own[r][var] = rank_value(var, values[m], counts.get(m, 1))
    return env, own


def write_rank_env(path: Path, own: list[dict[str, str]]) -> Path:
    """The rank settings file apps/lu reads (apps/lu/lu_rank_env.c): one line per rank,
    `<rank>` then tab-separated `VAR=VALUE` fields."""
    lines = ["# rank, then its StarPU variables (testbed starpu-simgrid engine, per machine type)"]
    lines += ["\t".join([str(r), *(f"{k}={v}" for k, v in sorted(e.items()))]) for r, e in enumerate(own)]
    path.write_text("\n".join(lines) + "\n")
    return path


def process_env(spec: RunSpec, starpu_dir: Path, ranks: list[str], workdir: Path,
                bus: dict[str, ModelDir] | None = None) -> dict[str, str]:
    """The environment of the starpu_smpirun process, with LU_RANK_ENV when ranks differ."""
    common, own = rank_envs(spec, starpu_dir, ranks, bus)
    env = run_env(spec, common)
    given = {k for e in own for k in e}
    for var in given:  # never from the caller's environment: StarPU would prefer it on every rank
        env.pop(var, None)
    env.pop(RANK_ENV_VARIABLE, None)
    if given:
        env[RANK_ENV_VARIABLE] = str(write_rank_env(workdir / "rank-env.txt", own))
    return env


_UNCALIBRATED = re.compile(r"Codelet (\S+) does not have a perfmodel")


@dataclass
class Inputs:
    """A run's checked inputs: hostfile entries, their machine types, each machine type's model
    and bus directories (model_dirs, bus_dir), the symbol set, the merged sampling directory."""

    hosts: list[str]
    machines: dict[str, str]
    models: dict[str, ModelDir]
    bus: dict[str, ModelDir]
    symbols: str
    merged: Path


def prepare(spec: RunSpec, starpu_dir: Path, workdir: Path) -> Inputs:
    """Reads and checks the platform's StarPU inputs and links the merged sampling directory."""
    cluster_xml = starpu_dir / "cluster.xml"
    if not cluster_xml.is_file():
        raise InputError(cluster_xml, "file", "the SMPI cluster platform written by `testbed platform`")
    hosts = read_hostfile(starpu_dir)
    machines = {h: machine_of(starpu_dir, h) for h in dict.fromkeys(hosts)}
    check_simgrid_platform(cluster_xml, set(hosts))  # SMPI aborts on a damaged one
    models = model_dirs(spec, starpu_dir.parent, list(machines.values()))
    bus = {m: bus_dir(starpu_dir, m, d) for m, d in models.items()}
    first = models[machines[hosts[0]]]
    symbols = spec.symbols or detect_symbols(first.dir, first.host)
    if symbols not in SYMBOL_SETS:
        raise InputError(None, "symbols", f"one of {', '.join(SYMBOL_SETS)}, got {symbols!r}")
    use_cuda = spec.env.get("STARPU_NCUDA", "") != "0"
    for machine, d in models.items():
        check_models(d, bus[machine], symbols, spec.b, use_cuda, spec.getrf_on_gpu)
    merged = workdir / "sampling"
    merged_sampling(starpu_dir, hosts, symbols, merged, models)
    return Inputs(hosts, machines, models, bus, symbols, merged)


#: Chameleon's generation codelet (CHAMELEON_dplgtr_Tile -> pzplgsy -> dplgsy) and the model it
#: is simulated with where the machine's models have none: apps/lu's generation, the same work
#: (b x b random values in one tile), outside the timed factorization in both programs.
CHAMELEON_GENERATION = ("dplgsy", "dplrnt")


def link_chameleon_generation(inp: Inputs) -> None:
    """StarPU-SimGrid stops on a codelet without a history entry (src/core/simgrid.c): Chameleon's
    generation tasks get the machine's dplgsy model (a calibration of Chameleon's codelets), else
    its dplrnt one."""
    sym, fallback = CHAMELEON_GENERATION
    for host, machine in inp.machines.items():
        models = inp.models[machine]
        source = models.model(sym) if models.model(sym).is_file() else models.model(fallback)
        if not source.is_file():
            raise InputError(source, "file", f"a model of Chameleon's generation codelet ({sym}, or {fallback}) for "
                             f"host {models.host}")
        (inp.merged / "codelets" / "45" / f"{sym}.{host}").symlink_to(source.resolve())


def run(spec: RunSpec) -> dict:
    if spec.trace is not None or spec.transfers is not None:
        raise InputError(None, "--trace/--transfers", "the numasim or real engine (StarPU-SimGrid is built without "
                         "FxT: SMPI links the app as a shared object and needs a PIC libfxt.a, which Debian "
                         "does not ship; envs/setup.sh)")
    nt = check_run(spec)
    chameleon = spec.app == "chameleon"
    if chameleon:
        chameleon_app.check_app_spec(spec)
    smpirun = starpu_file("simgrid", STARPU_SMPIRUN, "StarPU-SimGrid")
    with tempfile.TemporaryDirectory(prefix="lu-simgrid-", dir=spec.workdir) as tmp:
        workdir = Path(tmp)
        starpu_dir = platform_dir_for(spec, workdir) / "starpu"
        inp = prepare(spec, starpu_dir, workdir)
        hosts = inp.hosts
        check_distribution(spec, len(hosts))  # the user's mapping before the program is looked for
        program = chameleon_app.driver("simgrid") if chameleon else binary(LU_SIMGRID, "apps/lu (SimGrid build)")
        env = process_env(spec, starpu_dir, [inp.machines[h] for h in hosts], workdir, inp.bus)
        if chameleon:
            if inp.symbols != "chameleon":
                raise InputError(None, "symbols", f"Chameleon's models (dgetrf_nopiv, dtrsm, dgemm) for app chameleon, "
                                 f"the sampling directory has {inp.symbols}'s")
            if RANK_ENV_VARIABLE in env:
                raise InputError(None, "env_per_machine", "one value per StarPU variable on every machine type for app "
                                 "chameleon under starpu-simgrid (per-rank values are applied by apps/lu's "
                                 f"{RANK_ENV_VARIABLE} file); use app lu")
            gpus = sum(read_bus_config(inp.bus[m].dir, inp.bus[m].host)["cuda"] for m in set(inp.machines.values()))
            if gpus and spec.env.get("STARPU_NCUDA", "") != "0" and not chameleon_app.has_cuda_codelets("simgrid"):
                raise InputError(None, "STARPU_NCUDA", "0 for app chameleon on machines with GPUs: this Chameleon "
                                 "(SimGrid flavour) has CPU codelets only, built without CHAMELEON_USE_CUDA, so its "
                                 "CUDA workers would idle; compare CPU-only runs with --env STARPU_NCUDA=0")
        speeds = None
        if spec.distribution.get("kind") == "heterogeneous":
            gemm = SYMBOL_SETS[inp.symbols]["gemm"][0]
            speeds = [node_gemm_speed(inp.models[inp.machines[h]].dir, inp.models[inp.machines[h]].host, spec.b,
                                      gemm) for h in hosts]
        if chameleon:
            link_chameleon_generation(inp)
            env["LD_LIBRARY_PATH"] = chameleon_app.library_path("simgrid")
            args = chameleon_app.command(program, spec, len(hosts), workdir, speeds)[1:]
        else:
            args = ["--n", str(spec.n), "--b", str(spec.b), "--seed", str(spec.seed), "--report-workers",
                    *kernel_args(spec, inp.symbols)]
            args += distribution_args(spec, len(hosts), workdir, speeds)
        env.update({"STARPU_PERF_MODEL_DIR": str(inp.merged), "STARPU_HOSTNAME": hosts[0],
                    "STARPU_HOME": str(workdir / "home")})
        env.pop("STARPU_CALIBRATE", None)  # simulation cannot calibrate
        cmd = [str(smpirun), "-platform", str(starpu_dir / "cluster.xml"), "-hostfile", str(starpu_dir / "hostfile"),
               "-hostfile-platform", str(program), *args]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=workdir)
        missing = _UNCALIBRATED.search(proc.stderr)
        if missing:
            sym = missing.group(1)
            files = sorted({str(inp.models[m].model(sym)) for m in inp.machines.values()})
            raise InputError(" or ".join(files), sym,
                             f"a calibrated history entry for b={spec.b} on every worker type (StarPU-SimGrid "
                             "found none and cannot calibrate in simulation)")
        if chameleon:
            result = chameleon_app.result_fields(chameleon_app.parse_output(
                proc.stdout, proc.stderr, proc.returncode, "apps/chameleon_lu (StarPU-SimGrid)"), nt)
            result["hosts"] = hosts
            return result
        out = parse_output(proc.stdout, proc.stderr + proc.stdout, proc.returncode, "apps/lu (StarPU-SimGrid)")
    result = result_fields(out)
    result["tasks_by_kind"].pop("plrnt", None)  # generation is not simulated
    result["hosts"] = hosts
    # Each rank's workers as its StarPU set them up (CPU bind ids, CUDA devices), in rank order.
    result["workers_by_rank"] = out.get("workers_by_rank")
    return result
