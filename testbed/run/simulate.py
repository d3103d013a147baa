"""`testbed simulate`: one LU run with one engine; prints one JSON object."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import time
from pathlib import Path

from testbed.common.errors import InputError
from testbed.run.engines import APPS, ENGINES, RunSpec, given_platform_dir
from testbed.run.workload import limits_problem, size_problem
from testbed.starpu.variables import check_env

log = logging.getLogger(__name__)


def check_cfg(items: list[str], engine: str) -> list[str]:
    """SimGrid --cfg options (KEY:VALUE) for numasim; other engines take their own."""
    for item in items:
        if ":" not in item or item.startswith(":"):
            raise InputError(None, "--cfg", f"KEY:VALUE (a SimGrid option), got {item!r}")
    if items and engine != "numasim":
        raise InputError(None, "--cfg", "the numasim engine (SimGrid options of numasim's run)")
    return list(items)


def parse_assignments(items: list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        for part in filter(None, item.split(",")):
            if "=" not in part:
                raise InputError(None, what, f"NAME=VALUE, got {part!r}")
            k, v = part.split("=", 1)
            name = k.strip().upper() if what == "--factors" else k.strip()
            if name in out:
                raise InputError(None, f"{what} {name}", f"one value, got {out[name]!r} and {v.strip()!r}")
            out[name] = v.strip()
    return out


def distribution_option(value: str, n: int, b: int) -> dict:
    """`--distribution` (block-cyclic | heterogeneous | FILE) as a run's distribution; a file is
    read before anything is generated or cached, and its errors name it as typed."""
    if value in ("block-cyclic", "heterogeneous"):
        return {"kind": value}
    from testbed.run.distribution import read_distribution

    read_distribution(value, n // b if b > 0 and n % b == 0 else None, key="--distribution")
    return {"kind": "file", "path": value}


def parse_levels(text: str, option: str) -> dict[str, int]:
    """`A=1,E=-1` -> {"A": 1, "E": -1}: factor letters (upper-cased) and their levels -1 or 1."""
    levels: dict[str, int] = {}
    for k, v in parse_assignments([text], option).items():
        if v not in ("1", "-1", "+1"):
            raise InputError(None, f"{option} {k}", f"level -1 or 1, got {v!r}")
        levels[k.upper()] = int(v)
    return levels


def check_spec(spec: RunSpec) -> None:
    if spec.engine not in ENGINES:
        raise InputError(None, "--engine", f"one of {', '.join(ENGINES)}, got {spec.engine!r}")
    if spec.app not in APPS:
        raise InputError(None, "--app", f"one of {', '.join(APPS)}, got {spec.app!r}")
    if spec.app == "chameleon" and spec.engine == "numasim":
        raise InputError(None, "--app", "lu with the numasim engine (it simulates apps/lu's graph, which is Chameleon's; "
                                        "read Chameleon's models with --perfmodel-dir); app chameleon runs with the real "
                                        "or starpu-simgrid engine")
    if spec.mechanisms_off and spec.engine != "numasim":
        raise InputError(None, "--mechanism-off", "the numasim engine (the mechanisms are numasim's models)")
    if spec.topology is not None and spec.engine != "real":
        raise InputError(None, "--topology", "the real engine (the topology the real StarPU loads; numasim reads "
                                             "the machine description)")
    if spec.generate_on_main_ram and spec.engine != "real":
        raise InputError(None, "--generate-on-main-ram", "the real engine (numasim does not simulate the generation)")
    if spec.memory_counts is not None:
        if spec.engine not in ("real", "numasim"):
            raise InputError(None, "--memory-counts", "the real or numasim engine (StarPU-SimGrid is built without "
                                                      "FxT for MPI runs, as --trace says)")
        if spec.engine == "numasim" and (spec.transfers is None or spec.events is None):
            raise InputError(None, "--memory-counts", "--transfers and --events with the numasim engine "
                                                      "(the counts are read from them)")
    if spec.events is not None and spec.engine == "starpu-simgrid":
        raise InputError(None, "--events", "the numasim or real engine (StarPU-SimGrid is built without FxT "
                                           "for MPI runs, as --trace says)")
    problem = size_problem(spec.n, spec.b) or limits_problem(spec.n, spec.b)
    if problem:
        raise InputError(None, "--n/--b", problem)
    given_platform_dir(None if spec.platform_dir is None else str(spec.platform_dir))
    if spec.distribution.get("kind") == "file":  # before a platform is generated for the run
        from testbed.run.distribution import read_distribution

        read_distribution(spec.distribution.get("path", ""), spec.n // spec.b, key="distribution.path")
    # StarPU's variables as StarPU parses them, the same for every engine (numasim included).
    check_env(spec.env)
    for machine, env in spec.env_per_machine.items():
        check_env(env, f"env_per_machine.{machine}")


def header(spec: RunSpec) -> dict:
    """The fields every engine's output starts with; `env_per_machine` (what differs between the
    machine types, testbed/run/resolve.py) when there is any."""
    out = {"engine": spec.engine, "cluster": spec.cluster, "n": spec.n, "b": spec.b,
           "factors": spec.factors, "env": spec.env, "seed": spec.seed}
    if any(spec.env_per_machine.values()):
        out["env_per_machine"] = spec.env_per_machine
    return out


def simulate(spec: RunSpec) -> dict:
    check_spec(spec)
    engine = importlib.import_module(ENGINES[spec.engine])
    t0 = time.perf_counter()
    result = engine.run(spec)
    wall = time.perf_counter() - t0
    if spec.memory_counts is not None:
        write_memory_counts(spec, result)
    out = {**header(spec), **result}
    out.setdefault("wall_s", wall)
    return out


def write_memory_counts(spec: RunSpec, result: dict) -> None:
    """--memory-counts: the real engine's counts (from StarPU's FxT trace) or numasim's (from its
    transfer log and events), testbed/traces/memory_counts.py; the result keeps each rank's
    memory nodes."""
    from testbed.common.atomic import atomic_file
    from testbed.traces import memory_counts as mc

    if spec.engine == "real":
        counts = result.pop("memory_counts")
    else:
        counts = {"engine": "numasim", "ranks": mc.numasim_counts(spec.transfers, spec.events)}
    counts.update({"cluster": spec.cluster, "n": spec.n, "b": spec.b, "env": spec.env, "seed": spec.seed})
    with atomic_file(spec.memory_counts, option="--memory-counts") as fh:
        json.dump(counts, fh, indent=1, sort_keys=True)
        fh.write("\n")
    result["ram_memory_nodes_by_rank"] = [r["ram_memory_nodes"] for r in counts["ranks"]]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", required=True, choices=sorted(ENGINES))
    p.add_argument("--app", choices=list(APPS), default="lu",
                   help="program of the real and starpu-simgrid engines: apps/lu, or Chameleon's LU on an installed "
                        "Chameleon (apps/chameleon_lu; CHAMELEON_PREFIX / CHAMELEON_SIMGRID_PREFIX), any "
                        "--distribution")
    p.add_argument("--cluster", default=None,
                   help="cluster name (platforms/clusters/NAME.yaml) or path; optional with a --platform-dir")
    p.add_argument("--n", type=int, required=True, help="matrix order N")
    p.add_argument("--b", type=int, required=True, help="tile size b (N must be a multiple)")
    p.add_argument("--factors", nargs="?", const="", default="",
                   help="factor levels, e.g. A=1,E=1; letters not given are at -1 (`--factors` alone: all default)")
    p.add_argument("--env", action="append", default=[], metavar="VAR=VALUE", help="raw STARPU_* variable")
    p.add_argument("--sched", default=None, help="StarPU scheduler (STARPU_SCHED), default dmdas")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-variability", action="store_true", help="use model means (as StarPU-SimGrid)")
    p.add_argument("--distribution", default="block-cyclic",
                   help="block-cyclic | heterogeneous | FILE (owner rank per tile)")
    p.add_argument("--platform-dir", default=None, help="output of `testbed platform` to reuse")
    p.add_argument("--perfmodel-dir", action="append", default=[], metavar="MACHINE=DIR[:HOSTNAME]",
                   help="numasim, starpu-simgrid: read machine type MACHINE's codelet models (and, starpu-simgrid, "
                        "its bus files when there) from DIR, a real machine's raw StarPU sampling directory "
                        "(~/.starpu/sampling: codelets/45/<symbol>.<host>, bus/<host>.*), files of host HOSTNAME "
                        "(default: the one host name DIR holds) instead of the generated models; repeatable; "
                        "overrides the machine YAML's `perfmodels:`")
    p.add_argument("--trace", default=None,
                   help="per-task trace CSV (real, starpu-simgrid: from StarPU's FxT trace, testbed/traces/fxt_trace.py)")
    p.add_argument("--transfers", default=None,
                   help="per-transfer CSV (numasim: every copy and message; real, starpu-simgrid: MPI messages)")
    p.add_argument("--events", default=None,
                   help="runtime events CSV (every worker, scheduler pushes and pops; numasim: also thread "
                        "states, allocations, GPU memory used; testbed trace-starvz --events)")
    p.add_argument("--paje", default=None,
                   help="also write the run's trace as a Paje file (pj_dump, ViTE; testbed trace-paje)")
    p.add_argument("--check", action="store_true", help="real engine: also compute the residual ||A-LU||/||A||")
    p.add_argument("--topology", default=None, metavar="FILE|described",
                   help="real engine: the hwloc XML topology StarPU loads instead of this machine's (HWLOC_XMLFILE, "
                        "HWLOC_THISSYSTEM=1: its PUs must be this machine's), or `described`: the cluster's machine "
                        "descriptions written as hwloc XML (docs/numa-split.md)")
    p.add_argument("--memory-counts", default=None, metavar="FILE",
                   help="real, numasim: write the run's RAM memory nodes, replicas allocated per node, copies per "
                        "node pair and the thread that ran each, as JSON (real: from StarPU's FxT trace; numasim: "
                        "from --transfers and --events, which it needs); docs/numa-split.md")
    p.add_argument("--generate-on-main-ram", action="store_true",
                   help="real engine: generate the matrix on a CPU worker of memory node 0, so that every tile starts "
                        "the LU on its home node alone, as numasim's run does")
    p.add_argument("--symbols", choices=["chameleon", "starpu-lu"], default=None,
                   help="perf-model symbols: Chameleon's (dgemm, ...) or StarPU's LU example (auto-detected)")
    p.add_argument("--cfg", action="append", default=[], metavar="KEY:VALUE",
                   help="SimGrid option passed to numasim (e.g. tracing:yes; repeatable)")
    p.add_argument("--dag", choices=["chameleon", "starpu-lu-example"], default="chameleon",
                   help="submission order and priorities: Chameleon's pzgetrf_nopiv or StarPU's examples/lu")
    p.add_argument("--starpu-defaults", action="store_true",
                   help="StarPU's own defaults (plus --env) instead of the study's baseline and factor rules")
    p.add_argument("--getrf-gpu", action="store_true",
                   help="getrf_nopiv may also run on GPUs (cuSOLVER in the real build); default CPU only")
    p.add_argument("--mechanism-off", action="append", default=[], metavar="NAME[,NAME...]",
                   help="numasim: switch a modelled mechanism off (`numasim --mechanisms` lists them; "
                        "docs/interfaces.md §4); repeatable")
    p.add_argument("--mpi-memory-node", choices=["main_ram", "choose_node"], default="main_ram",
                   help="numasim: StarPU-MPI's memory node for sends: STARPU_MAIN_RAM (the study's StarPU-MPI, "
                        "default) or StarPU 1.4.10's _starpu_mpi_choose_node")
    p.add_argument("--mpi-backend", choices=["nmad", "mpi"], default="nmad",
                   help="numasim: StarPU-MPI's backend: nmad (NewMadeleine's multicast along a tree, the study's; "
                        "default) or mpi (StarPU's MPI backend, as StarPU-SimGrid runs: the owner sends every copy)")


def spec_from_args(args: argparse.Namespace) -> RunSpec:
    from pathlib import Path

    raw_factors = parse_assignments([args.factors], "--factors")
    factors = parse_levels(args.factors, "--factors")
    env = parse_assignments(args.env, "--env")
    dist = distribution_option(args.distribution, args.n, args.b)
    from testbed.platform.platform_from_starpu import is_starpu_sampling, summary_of
    from testbed.run.factors import check_factors
    from testbed.run.resolve import RunEnv, resolve_run_env

    factors = check_factors(factors)
    given_platform_dir(args.platform_dir)  # before its summary names the cluster
    platform_dir = Path(args.platform_dir) if args.platform_dir else None
    cluster = args.cluster or (summary_of(platform_dir).get("cluster") if platform_dir else None)
    if not cluster:
        raise InputError(None, "--cluster", "a cluster name (or a --platform-dir written by `testbed platform`)")
    from_sampling = is_starpu_sampling(platform_dir)
    if from_sampling or args.starpu_defaults:
        # StarPU's defaults and the user's variables, no factor rules (none apply without a
        # machine description, or the user asked for StarPU's defaults).
        if raw_factors:
            raise InputError(platform_dir / "summary.json" if from_sampling else None, "--factors",
                             "no --starpu-defaults and a platform generated from a machine description "
                             "(`testbed platform --cluster`)")
        run_env = RunEnv({**({"STARPU_SCHED": args.sched} if args.sched else {}), **env})
        factors = {}
    else:
        run_env = resolve_run_env(cluster, factors, env, args.sched)
    return RunSpec(
        engine=args.engine,
        app=args.app,
        cluster=cluster,
        n=args.n,
        b=args.b,
        env=run_env.common,
        env_per_machine=run_env.per_machine,
        factors=factors,
        seed=args.seed,
        distribution=dist,
        variability=not args.no_variability,
        check=args.check,
        symbols=args.symbols,
        getrf_on_gpu=args.getrf_gpu,
        dag=args.dag,
        mpi_memory_node=args.mpi_memory_node,
        mechanisms_off=mechanisms_off(args.mechanism_off),
        mpi_backend=args.mpi_backend,
        simgrid_cfg=check_cfg(args.cfg, args.engine),
        trace=Path(args.trace) if args.trace else None,
        transfers=Path(args.transfers) if args.transfers else None,
        events=Path(args.events) if getattr(args, "events", None) else None,
        topology=getattr(args, "topology", None),
        memory_counts=Path(args.memory_counts) if getattr(args, "memory_counts", None) else None,
        generate_on_main_ram=getattr(args, "generate_on_main_ram", False),
        platform_dir=platform_dir,
        perfmodel_dirs=perfmodel_dirs(args),
    )


def mechanisms_off(items: list[str]) -> tuple[str, ...]:
    """`--mechanism-off` values, comma lists allowed, each once, checked against numasim's list."""
    from testbed.run.engines.numasim import mechanism_names

    names = [n.strip() for item in items for n in item.split(",") if n.strip()]
    if not names:
        return ()
    known = mechanism_names()
    for name in names:
        if name not in known:
            raise InputError(None, f"--mechanism-off {name}", f"a mechanism of numasim ({', '.join(known)})")
    return tuple(dict.fromkeys(names))


def perfmodel_dirs(args: argparse.Namespace) -> dict:
    """`--perfmodel-dir` (testbed/starpu/sampling_dir.py); only the simulating engines read it."""
    from testbed.starpu.sampling_dir import parse_option

    items = getattr(args, "perfmodel_dir", None) or []
    if items and args.engine not in ("numasim", "starpu-simgrid"):
        raise InputError(None, "--perfmodel-dir", "the numasim or starpu-simgrid engine (the real engine runs "
                         "the machines themselves)")
    return parse_option(items)


def resolve_cached(args: argparse.Namespace):
    """numasim: (run description file, header) from testbed/run/run_cache.py, resolved and stored
    on a miss; None when this command cannot be cached (its inputs are not all files)."""
    from testbed.run import run_cache

    if not run_cache.cacheable(args):
        return None
    hit = run_cache.lookup(args)
    if hit is not None:
        return hit
    from testbed.describe.machines import cluster_source_files
    from testbed.run.engines import platform_dir_for
    from testbed.run.engines.numasim import checked_platform, run_description
    from testbed.run.factors import FACTORS_FILE

    spec = spec_from_args(args)
    check_spec(spec)
    try:
        deps = cluster_source_files(spec.cluster)
    except InputError:  # e.g. a platform converted from StarPU's files: no cluster YAML
        return None
    pdir = checked_platform(platform_dir_for(spec, None))
    desc = run_description(spec, pdir)
    deps += [FACTORS_FILE, pdir / "numasim.xml", pdir / "summary.json"]
    # A raw directory's models (--perfmodel-dir, machine YAML perfmodels:) are read in place.
    deps += [Path(m["dir"]) / "codelets" / "45" / f"{s}.{m['host']}" for m in desc["perfmodels"].values()
             if isinstance(m, dict) for s in desc["symbols"].values()]
    return run_cache.store(args, desc, header(spec), deps), header(spec)


def check_outputs(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """The files this run writes (--trace, --transfers, --paje): none of them an input or
    another of them, none a file the testbed did not write (testbed/common/outputs.py)."""
    from testbed.common.atomic import check_output_file
    from testbed.common.outputs import Out, check_distinct

    outputs = [(opt, getattr(args, dest, None)) for opt, dest in (("--trace", "trace"), ("--transfers", "transfers"),
                                                                    ("--events", "events"), ("--paje", "paje"),
                                                                    ("--memory-counts", "memory_counts"))]
    inputs = [("--cluster", args.cluster if args.cluster and Path(args.cluster).exists() else None),
              ("--distribution", args.distribution if Path(args.distribution).exists() else None),
              ("--platform-dir", args.platform_dir),
              ("--topology", getattr(args, "topology", None) if getattr(args, "topology", None) != "described" else None)]
    check_distinct(inputs, [Out(opt, path) for opt, path in outputs])
    given = [(opt, Path(path)) for opt, path in outputs if path]
    for opt, path in given:
        check_output_file(path, opt)
    return given


def register_outputs(outputs: list[tuple[str, Path]]) -> None:
    """Mark the trace files an engine wrote (numasim writes them itself) as the testbed's."""
    from testbed.common.atomic import register, stamp

    for _, path in outputs:
        if path.is_file() and not path.is_symlink():
            register(path.parent, {path.name: stamp(path)})


def run(args: argparse.Namespace) -> int:
    outputs = check_outputs(args)
    if getattr(args, "paje", None):
        status = run_with_paje(args)
    else:
        status = run_once(args)
    register_outputs(outputs)
    return status


def run_once(args: argparse.Namespace) -> int:
    cached = resolve_cached(args)
    if cached is not None:
        from testbed.run.engines.numasim import run_file_binary

        log.debug(f"simulate: numasim on the cached run description {cached[0]}")
        t0 = time.perf_counter()
        result = run_file_binary(cached[0], check_cfg(args.cfg, args.engine))
        out = {**cached[1], **result}
        out.setdefault("wall_s", time.perf_counter() - t0)
    else:
        spec = spec_from_args(args)
        log.debug(f"simulate: engine {spec.engine}, cluster {spec.cluster}, variables {spec.env}")
        out = simulate(spec)
    print(json.dumps(out, sort_keys=True))
    return 0


def run_with_paje(args: argparse.Namespace) -> int:
    """`--paje FILE`: the run with its task and transfer CSVs (the user's, or temporary ones),
    then testbed/traces/paje.py's export of them."""
    import tempfile
    from pathlib import Path

    from testbed.traces.paje import export_paje

    paje = Path(args.paje)
    with tempfile.TemporaryDirectory(prefix="testbed-paje-") as tmp:
        # Traced runs are never taken from the run cache (testbed/run/run_cache.py), so the
        # temporary CSV names cost nothing there.
        args.trace = args.trace or str(Path(tmp) / "tasks.csv")
        args.transfers = args.transfers or str(Path(tmp) / "transfers.csv")
        args.paje = None
        status = run_once(args)
        if status == 0:
            export_paje(args.trace, args.transfers, paje, "--paje")
    return status
