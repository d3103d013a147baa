"""Engine `numasim`: writes the run description (docs/interfaces.md §4), runs the binary."""

from __future__ import annotations

import functools
import json
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from testbed.common import paths
from testbed.common.errors import InputError
from testbed.run.engines import RunSpec, model_dirs, platform_dir_for
from testbed.starpu.sampling_dir import ModelDir

#: Variables numasim interprets or knows to be inert (simulator/src/config.cpp parse_starpu_env;
#: tests/test_config_early.py checks both lists agree). Any other name stops numasim (exit 2), so
#: the workflow checks experiments against it before submitting a single batch.
ENV_VARIABLES = frozenset({
    "STARPU_SCHED", "STARPU_SCHED_ALPHA", "STARPU_SCHED_BETA", "STARPU_SCHED_GAMMA", "STARPU_PREFETCH",
    "STARPU_CUDA_PIPELINE", "STARPU_USE_NUMA", "STARPU_NCPU", "STARPU_NCPUS", "STARPU_NCUDA", "STARPU_RESERVE_NCPU",
    "STARPU_WORKERS_CPUID", "STARPU_WORKERS_CUDAID", "STARPU_MAIN_THREAD_CPUID", "STARPU_MAIN_THREAD_BIND",
    "STARPU_MPI_THREAD_CPUID", "STARPU_PERF_MODEL_HOMOGENEOUS_CUDA", "STARPU_PERF_MODEL_HOMOGENEOUS_CPU",
    "STARPU_CUDA_ONLY_FAST_ALLOC_OTHER_MEMNODES", "TESTBED_NUMA_BALANCING",
    # inert in a simulated run (output, calibration, tracing)
    "STARPU_SILENT", "STARPU_HOSTNAME", "STARPU_CALIBRATE", "STARPU_FXT_PREFIX", "STARPU_FXT_TRACE",
    "STARPU_GENERATE_TRACE", "STARPU_WORKER_STATS", "STARPU_BUS_STATS", "STARPU_MEMORY_STATS", "STARPU_PROFILING",
    "STARPU_MALLOC_SIMULATION_FOLD", "STARPU_SIMGRID_CUDA_MALLOC_COST", "STARPU_PERF_MODEL_DIR", "STARPU_HOME",
    "STARPU_LOGFILENAME", "STARPU_MPI_STATS", "STARPU_COMM_STATS", "STARPU_DISPLAY_BINDINGS", "STARPU_ENABLE_STATS",
})


def _stamp(path: Path) -> tuple:
    st = Path(path).stat()
    return str(Path(path).resolve()), st.st_mtime_ns, st.st_size


def machines_by_rank(platform_xml: Path) -> list[str]:
    """Machine type of each rank, from the node zones (zone props `machine`, `rank`)."""
    # Parsed once per file version: a campaign batch asks for every run, and parsing the
    # study cluster's XML took ~0.15 s (testbed/run/run_cache.py; CHANGELOG.md's benchmark
    # history, "Speed").
    return list(_machines_by_rank(_stamp(platform_xml)))


@functools.lru_cache(maxsize=16)
def _machines_by_rank(stamp: tuple) -> tuple[str, ...]:
    ranked: dict[int, str] = {}
    for zone in ET.parse(stamp[0]).getroot().iter("zone"):
        props = {p.get("id"): p.get("value", "") for p in zone.findall("prop")}
        if "machine" in props and "rank" in props:
            ranked[int(props["rank"])] = props["machine"]
    return tuple(ranked[r] for r in sorted(ranked))


def machine_types(platform_xml: Path) -> list[str]:
    """Machine types named by the node zones (zone prop `machine`)."""
    return sorted(set(machines_by_rank(platform_xml)))


def heterogeneous_distribution(spec: RunSpec, pdir: Path, workdir: Path,
                               dirs: dict[str, ModelDir] | None = None) -> dict:
    """Writes the speed-balanced tile distribution (testbed/run/distribution.py) for this cluster,
    from each machine type's models (`dirs`: model_dirs; default the generated ones)."""
    from testbed.run import distribution as dist

    xml = pdir / "numasim.xml"
    owners, comment = _heterogeneous(_stamp(xml), _where(spec, pdir, dirs), spec.n // spec.b, spec.b)
    path = dist.write_distribution(workdir / "distribution.txt", owners, comment)
    return {"kind": "file", "path": str(path)}


def node_speeds(spec: RunSpec, pdir: Path, dirs: dict[str, ModelDir] | None = None) -> list[float]:
    """Each rank's gemm speed (flop/s) as the speed-balanced distribution weighs it."""
    return list(_speeds(_stamp(pdir / "numasim.xml"), _where(spec, pdir, dirs), spec.b))


def _where(spec: RunSpec, pdir: Path, dirs: dict[str, ModelDir] | None) -> tuple:
    dirs = dirs or model_dirs(spec, pdir, machine_types(pdir / "numasim.xml"))
    return tuple(sorted((m, str(d.dir), d.host) for m, d in dirs.items()))


@functools.lru_cache(maxsize=16)
def _speeds(xml_stamp: tuple, where: tuple, b: int) -> tuple[float, ...]:
    from testbed.run import distribution as dist

    dirs = {m: (d, host) for m, d, host in where}
    return tuple(dist.node_gemm_speed(*dirs[m], b) for m in _machines_by_rank(xml_stamp))


@functools.lru_cache(maxsize=16)
def _heterogeneous(xml_stamp: tuple, where: tuple, nt: int, b: int):
    """(owners, comment) of the speed-balanced distribution, once per platform version, model
    directories (`where`: (machine, directory, host) triples) and size (a campaign batch runs the
    same size 30 times; computing it took ~0.3 s per run)."""
    from testbed.run import distribution as dist

    return dist.heterogeneous_with_comment(nt, list(_speeds(xml_stamp, where, b)))


def checked_platform(pdir: Path) -> Path:
    if not (pdir / "numasim.xml").exists():
        raise InputError(pdir / "numasim.xml", "platform", "a numasim platform written by `testbed platform`")
    return pdir


def check_raw_models(dirs: dict[str, ModelDir], symbols: str) -> None:
    """A raw directory's models (host name other than the machine type) are read by the strict
    reader (testbed/starpu/perfmodel_files.py read_model) before numasim runs: a missing or damaged
    file names the file and how it was given; numasim names a missing size or architecture."""
    from testbed.starpu.lu_codelets import SYMBOL_SETS
    from testbed.starpu.perfmodel_files import read_model

    for machine, d in dirs.items():
        if d.host == machine:
            continue
        for sym, _, _ in SYMBOL_SETS[symbols].values():
            if not d.model(sym).is_file():
                raise InputError(d.model(sym), "file", f"the perf model of {sym} on host {d.host!r}, read for machine "
                                 f"type {machine!r} (--perfmodel-dir / machine YAML perfmodels:; --symbols)")
            read_model(d.model(sym))


def run_description(spec: RunSpec, pdir: Path, workdir: Path | None = None) -> dict:
    """The run description (docs/interfaces.md §4); `workdir` holds generated inputs."""
    from testbed.starpu.lu_codelets import SYMBOL_SETS, numasim_symbols
    from testbed.starpu.sampling import detect_symbols

    xml = pdir / "numasim.xml"
    machines = machine_types(xml)
    unknown = sorted(set(spec.env_per_machine) - set(machines))
    if unknown:
        raise InputError(None, f"env_per_machine.{unknown[0]}", f"a machine type of the cluster ({', '.join(machines)})")
    dirs = model_dirs(spec, pdir, machines)
    # A raw directory's files carry its host name: numasim is told which (docs/interfaces.md §4).
    perfmodels = {m: str(d.dir) if d.host == m else d.as_json() for m, d in dirs.items()}
    # The symbol set as the apps/lu engines choose it: given, else the one the models hold.
    first = dirs[machines[0]]
    symbols = spec.symbols or detect_symbols(first.dir, first.host, default="chameleon")
    if symbols not in SYMBOL_SETS:
        raise InputError(None, "symbols", f"one of {', '.join(SYMBOL_SETS)}, got {symbols!r}")
    check_raw_models(dirs, symbols)
    dist = dict(spec.distribution)
    if dist.get("kind") == "heterogeneous":
        if workdir is None:
            raise InputError(None, "distribution", "a work directory for the generated heterogeneous distribution")
        dist = heterogeneous_distribution(spec, pdir, workdir, dirs)
    if dist.get("kind") == "file":  # its ranks against the platform's nodes, the path as given
        from testbed.run.distribution import read_distribution

        read_distribution(dist["path"], spec.n // spec.b, nodes=len(machines_by_rank(xml)), key="distribution.path")
        dist["path"] = str(Path(dist["path"]).absolute())
    desc: dict = {
        "platform": str(xml.resolve()),
        "perfmodels": perfmodels,
        "workload": {"kind": "lu", "n": spec.n, "b": spec.b, "distribution": dist},
        "env": dict(spec.env),
        # Variables that differ between machine types (factors B, C, D on a mixed cluster).
        "env_per_machine": spec.env_per_machine,
        "seed": spec.seed,
        "variability": spec.variability,
        "symbols": numasim_symbols(symbols),
        "getrf_on_cuda": spec.getrf_on_gpu,
        "dag": spec.dag,
    }
    # The backend is always written: a run description says which StarPU-MPI it simulates.
    desc["mpi"] = {"backend": spec.mpi_backend}
    if spec.mpi_memory_node != "main_ram":  # numasim's default is the study's
        desc["mpi"]["memory_node"] = spec.mpi_memory_node
    if spec.mechanisms_off:  # every mechanism is on by default
        desc["mechanisms"] = dict.fromkeys(spec.mechanisms_off, False)
    if spec.trace:
        desc["trace"] = str(Path(spec.trace).resolve())
    if spec.transfers:
        desc["transfers"] = str(Path(spec.transfers).resolve())
    if spec.events:
        desc["events"] = str(Path(spec.events).resolve())
    return desc


def mechanisms() -> list[dict]:
    """numasim's mechanisms that a run may switch off: [{name, home, what}] (`numasim --mechanisms`)."""
    binary = paths.binary(paths.NUMASIM, "numasim")
    proc = subprocess.run([str(binary), "--mechanisms"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"numasim --mechanisms failed ({proc.returncode}): {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def mechanism_names() -> list[str]:
    return [m["name"] for m in mechanisms()]


def run_binary(desc: dict, workdir: Path | None = None, simgrid_cfg: list[str] | None = None) -> dict:
    """Runs numasim on a run description (plus SimGrid `--cfg=KEY:VALUE` options); bad input
    surfaces as InputError."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        run_file = Path(tmp) / "run.json"
        run_file.write_text(json.dumps(desc, indent=1, sort_keys=True))
        return run_file_binary(run_file, simgrid_cfg)


def run_file_binary(run_file: Path, simgrid_cfg: list[str] | None = None) -> dict:
    """Runs numasim on a run description file (testbed/run/run_cache.py keeps resolved ones)."""
    binary = paths.binary(paths.NUMASIM, "numasim")
    cfg = [f"--cfg={c}" for c in simgrid_cfg or []]
    # In the caller's directory: relative paths of SimGrid options (tracing/filename) are the user's.
    # errors="replace": numasim's message may quote bytes of a damaged input file that are not UTF-8.
    proc = subprocess.run([str(binary), str(run_file), *cfg], capture_output=True, text=True, errors="replace")
    if proc.returncode == 2:
        # numasim says "error: <file>: <key>: expected <what>"; the file is our temporary run
        # description, so the user is shown the key (e.g. env.STARPU_SCHED) and the expectation.
        msg = proc.stderr.strip().splitlines()[-1].removeprefix("error: ")
        where, _, expected = msg.partition(": expected ")
        if not expected:
            raise InputError(None, "numasim", msg) from None
        parts = where.split(": ")
        file = parts[0] if len(parts) > 1 and parts[0] != str(run_file) else None
        raise InputError(file, parts[-1] if len(parts) > 1 else where, expected) from None
    if proc.returncode != 0:
        raise RuntimeError(f"numasim failed ({proc.returncode}): {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def run(spec: RunSpec) -> dict:
    with tempfile.TemporaryDirectory(dir=spec.workdir) as tmp:
        pdir = checked_platform(platform_dir_for(spec, Path(tmp)))
        return run_binary(run_description(spec, pdir, Path(tmp)), Path(tmp), spec.simgrid_cfg)
