"""numasim vs StarPU-SimGrid: makespan agreement and speed on configurations both express.

Both sides are the engines the experiments use (testbed/run/engines: `starpu-simgrid` and
`numasim`, called with a RunSpec on an explicit platform directory), so the table validates the
engines themselves. Both simulate the same machine, from the same files:

* starpu-simgrid: build/lu-simgrid/lu under `starpu_smpirun -hostfile-platform`, with the
  machine's StarPU sampling directory (bus platform + codelet models); StarPU's defaults
  otherwise (dmdas, one RAM node, model means, STARPU_SIMGRID_* costs at their defaults).
* numasim: the platform converted from the same bus platform(s) by
  testbed/platform/starpu_bus_platform.py, the same models, variability off, and the SimGrid network
  configuration starpu_smpirun runs StarPU under (`--cfg=network/model:SMPI
  --cfg=surf/precision:1e-9`, /usr/bin/smpirun; starpu_smpirun drops the bus files'
  network/* settings).

The platform directories: a shipped machine is laid out as `testbed platform --from-starpu`
does (testbed/platform/platform_from_starpu.py); a cluster is `testbed platform`'s output for
starpu-simgrid, and the same starpu/ directory with numasim.xml converted from its bus
platforms for numasim.

Cases: StarPU's shipped LU models (tools/perfmodels/sampling, starpu_dlu_lu_model_*, b=960,
the tile size their history entries were recorded with) for sirocco, mirage, attila,
idgraf at 20x20, 40x40, 60x60 tiles; the clusters chifflet-1 and hetero-3 of
platforms/clusters (via `testbed platform`, Chameleon symbols). Worker counts are StarPU's
defaults on both sides (one CPU worker per core left after the CUDA drivers and the MPI
thread: core/topology.c, mpi/src/starpu_mpi_init.c).

Usage: .venv/bin/python bench/numasim_vs_starpu.py [--quick] [--out bench/results/numasim_vs_starpu.json]
Prints a markdown table (the one recorded in bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.common.errors import InputError  # noqa: E402
from testbed.common.paths import STARPU_SIMGRID, STARPU_SMPIRUN  # noqa: E402
from testbed.platform.starpu_bus_platform import build_platform, nodes_of_starpu_dir, write_platform  # noqa: E402
from testbed.run.engines import ENGINES, RunSpec  # noqa: E402

SHIPPED = ROOT / ".deps" / "src" / "starpu-1.4.10" / "tools" / "perfmodels" / "sampling"
SMPIRUN = STARPU_SIMGRID / STARPU_SMPIRUN  # STARPU_SIMGRID_PREFIX or .deps (testbed/common/paths.py)
LU_SIMGRID = ROOT / "build" / "lu-simgrid" / "lu"
NUMASIM = ROOT / "build" / "simulator" / "numasim"
#: SimGrid configuration of /usr/bin/smpirun (SIMOPTS), under which StarPU-SimGrid-MPI runs
#: (given to the numasim engine as RunSpec.simgrid_cfg, i.e. --cfg=KEY:VALUE).
SMPI_CFG = ["network/model:SMPI", "surf/precision:1e-9"]
B = 960  # tile size of the shipped LU models' history entries (size column 1x, 2x, 3x 960*960*8)
SHIPPED_HOSTS = ("sirocco", "mirage", "attila", "idgraf")
CLUSTERS = ("chifflet-1", "hetero-3")


@dataclass
class Run:
    makespan_s: float
    wall_s: float
    cpu_s: float  # user + sys of the child processes
    tasks: int
    extra: dict = field(default_factory=dict)


@dataclass
class Case:
    platform: str
    nt: int
    starpu: Run | None = None
    numasim: Run | None = None
    error: str | None = None  # why the case could not be compared (e.g. StarPU-SimGrid aborted)
    extra_note: str | None = None  # configuration set to match what StarPU-SimGrid does

    @property
    def diff_pct(self) -> float:
        assert self.starpu and self.numasim
        return 100.0 * (self.numasim.makespan_s - self.starpu.makespan_s) / self.starpu.makespan_s


def engine_run(spec: RunSpec) -> tuple[dict, float, float]:
    """Runs spec through the engine the experiments use (testbed/run/engines: `numasim` or
    `starpu-simgrid`); returns its result, the wall time and the children's user+sys CPU time."""
    import importlib

    engine = importlib.import_module(ENGINES[spec.engine])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    try:
        res = engine.run(spec)
    except InputError as e:  # an engine refusing the case: recorded as the case's error
        raise RuntimeError(f"{spec.engine}: {e.message()}") from None
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return res, wall, cpu


def first_error_line(text: str) -> str:
    """The most telling line of a failed run's message (assertion or error), shortened."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for key in ("assert failure", "Assertion", "error:", "Error"):
        for ln in lines:
            if key in ln:
                return ln[-200:]
    return (lines[0] if lines else text)[-200:]


#: StarPU-SimGrid results, one file per case, reused while their inputs are unchanged (a 60x60
#: run takes minutes): see starpu_key.
STARPU_CACHE = ROOT / "bench" / "results" / "starpu_cache"
#: Set by main(): False with --no-cache; True with --starpu-only (fill the cache, no numasim).
USE_CACHE = True
STARPU_ONLY = False
#: --pinned-alloc-s-per-mib: numasim's GPU hosts of the cluster cases charge pinned allocations
PINNED_ALLOC_S_PER_MIB: float | None = None
#: What the starpu-simgrid engine runs besides the platform directory: its code and binaries.
STARPU_ENGINE_FILES = (ROOT / "testbed" / "run" / "engines" / "starpu_simgrid.py",
                       ROOT / "testbed" / "run" / "engines" / "lu_app.py")


def _digest(h: "hashlib._Hash", path: Path) -> None:
    """Feeds a file, or every file of a directory in sorted order, into h."""
    files = sorted(q for q in path.rglob("*") if q.is_file()) if path.is_dir() else [path]
    for f in files:
        h.update(str(f.relative_to(path) if path.is_dir() else f.name).encode() + b"\0")
        h.update(f.read_bytes())


def starpu_key(spec: RunSpec) -> str:
    """Hash of everything a starpu-simgrid engine run depends on: the LU binary (StarPU is linked
    in statically), starpu_smpirun, the engine's code, the platform directory's starpu/ inputs
    (bus platforms, models, SMPI platform, hostfile) and the run's settings."""
    from testbed.common.paths import binary

    h = hashlib.sha256()
    lu = binary(LU_SIMGRID, "apps/lu (SimGrid build)")  # the one the engine runs (TESTBED_LU overrides)
    for f in (lu, SMPIRUN, *STARPU_ENGINE_FILES, Path(spec.platform_dir) / "starpu"):
        _digest(h, f)
    settings = {"n": spec.n, "b": spec.b, "env": spec.env, "env_per_machine": spec.env_per_machine,
                "seed": spec.seed, "symbols": spec.symbols, "distribution": spec.distribution,
                "getrf_on_gpu": spec.getrf_on_gpu, "dag": spec.dag}
    h.update(json.dumps(settings, sort_keys=True).encode())
    return h.hexdigest()


def run_starpu(pdir: Path, nt: int, symbols: str, work: Path, case: str) -> Run:
    """The starpu-simgrid engine on platform directory pdir: StarPU's defaults, dmdas."""
    spec = RunSpec(engine="starpu-simgrid", cluster=case, n=nt * B, b=B, env={"STARPU_SCHED": "dmdas"},
                   symbols=symbols, platform_dir=pdir, workdir=work)
    key = starpu_key(spec)
    cache = STARPU_CACHE / f"{case}-{nt}.json"
    if USE_CACHE and cache.exists():
        rec = json.loads(cache.read_text())
        if rec.get("key") == key:
            run = Run(**rec["run"])
            run.extra["cached"] = rec.get("date")
            return run
    res, wall, cpu = engine_run(spec)
    run = Run(res["makespan_s"], wall, cpu, res["tasks"])
    if not USE_CACHE:
        return run
    from testbed.common.atomic import atomic_file

    with atomic_file(cache) as fh:
        json.dump({"key": key, "date": datetime.datetime.now().isoformat(timespec="seconds"),
                   "loadavg": os.getloadavg(), "run": asdict(run)}, fh, indent=1)
    return run


def run_numasim(pdir: Path, nt: int, symbols: str | None, work: Path, env: dict[str, str] | None = None) -> Run:
    """The numasim engine on platform directory pdir: model means (variability off), seed 1,
    dmdas, under the SimGrid network configuration of starpu_smpirun (SMPI_CFG), with StarPU's MPI
    backend (the one StarPU-SimGrid runs: SMPI's MPI, cooperative sends sent by the owner)."""
    spec = RunSpec(engine="numasim", cluster=pdir.name, n=nt * B, b=B, env={"STARPU_SCHED": "dmdas", **(env or {})},
                   seed=1, variability=False, symbols=symbols, simgrid_cfg=SMPI_CFG, platform_dir=pdir,
                   mpi_backend="mpi", workdir=work)
    res, wall, cpu = engine_run(spec)
    return Run(res["makespan_s"], wall, cpu, res["tasks"],
               {"workers_by_type": res.get("workers_by_type"), "transfers": res.get("transfers")})


def starpu_max_cuda_devices() -> int | None:
    """STARPU_MAXCUDADEVS of the StarPU-SimGrid build (--enable-maxcudadev): StarPU enables at
    most that many GPUs ("N CUDA devices available. Only M enabled")."""
    for h in (STARPU_SIMGRID / "include").rglob("starpu_config.h"):
        for line in h.read_text().splitlines():
            if line.startswith("#define STARPU_MAXCUDADEVS "):
                return int(line.split()[2])
    return None


def _misordered(lines: list[str], i: int) -> bool:
    """Line i is "# a b c" but the regression values come after the multiple-regression block."""
    return (lines[i].startswith("# a\t") and i + 3 < len(lines) and lines[i + 1].startswith("# not multiple")
            and lines[i + 2].strip() == "0" and len(lines[i + 3].split()) == 3)


def repaired_sampling(host: str, work: Path) -> Path:
    """The shipped sampling directory, or, for a host whose model files have the non-linear
    regression values ("a b c") after the "not multiple-regression-base" block instead of before
    it (idgraf's starpu_dlu_lu_model_gemm: StarPU 1.4.10 itself rejects that file in
    perfmodel_history.c scan_reg_model), a copy with those lines in the order StarPU reads.
    No value is changed."""
    import shutil

    broken = [f for f in sorted((SHIPPED / "codelets" / "45").glob(f"*.{host}"))
              if any(_misordered(ls, i) for ls in [f.read_text().splitlines(keepends=True)] for i in range(len(ls)))]
    if not broken:
        return SHIPPED
    out = work / "sampling-repaired"
    if not out.exists():
        shutil.copytree(SHIPPED, out)
        for f in broken:
            lines = f.read_text().splitlines(keepends=True)
            for i in range(len(lines)):
                if _misordered(lines, i):
                    lines[i + 1:i + 4] = [lines[i + 3], lines[i + 1], lines[i + 2]]
            (out / "codelets" / "45" / f.name).write_text("".join(lines))
    return out


def shipped_case(host: str, nt: int, work: Path) -> Case:
    """A shipped StarPU machine as `testbed platform --from-starpu` lays it out
    (testbed/platform/platform_from_starpu.py): numasim.xml converted from the host's bus
    platform, its bus files and models under starpu/<host>/sampling, one SMPI host."""
    from testbed.platform.platform_from_starpu import write_platform_dir

    d = work / host
    d.mkdir(exist_ok=True)
    pdir = d / "platform"
    if not pdir.exists():
        write_platform_dir(repaired_sampling(host, d), host, pdir)
    case = Case(host, nt)
    case.starpu = run_starpu(pdir, nt, "starpu-lu", d, host)
    if STARPU_ONLY:
        return case
    # As many GPUs as StarPU-SimGrid enables (idgraf has 8; the build may enable fewer).
    env = {}
    ngpus = (pdir / "numasim.xml").read_text().count('<prop id="kind" value="gpu"')
    maxdev = starpu_max_cuda_devices()
    if maxdev is not None and ngpus > maxdev:
        env["STARPU_NCUDA"] = str(maxdev)
        case.extra_note = f"STARPU_NCUDA={maxdev} (StarPU-SimGrid built with STARPU_MAXCUDADEVS={maxdev})"
    case.numasim = run_numasim(pdir, nt, "starpu-lu", d, env=env)
    return case


def bus_platform_dir(pdir: Path, out: Path, name: str) -> None:
    """A platform directory like pdir (`testbed platform` output) whose numasim.xml is converted
    from the StarPU bus platforms of its starpu/ directory (testbed/platform/starpu_bus_platform.py):
    the links StarPU-SimGrid simulates, one RAM node; starpu/ is pdir's."""
    out.mkdir(parents=True)
    (out / "starpu").symlink_to((pdir / "starpu").resolve())
    tree = build_platform(nodes_of_starpu_dir(pdir / "starpu"), pdir / "starpu" / "cluster.xml", name)
    if PINNED_ALLOC_S_PER_MIB is not None:  # StarPU-SimGrid's own charge, on numasim's GPU hosts too
        import xml.etree.ElementTree as ET

        for host in tree.iter("host"):
            if any(q.get("id") == "kind" and q.get("value") == "gpu" for q in host.findall("prop")):
                ET.SubElement(host, "prop", id="pinned_alloc_s_per_mib", value=repr(PINNED_ALLOC_S_PER_MIB))
    write_platform(tree, out / "numasim.xml")


def cluster_case(cluster: str, nt: int, work: Path) -> Case:
    from testbed.describe.machines import load_cluster
    from testbed.platform.platform_cmd import generate

    d = work / cluster
    pdir, bus_pdir = d / "platform", d / "platform-bus"
    if not bus_pdir.exists():
        d.mkdir(exist_ok=True)
        generate(load_cluster(cluster), pdir, (B,))
        bus_platform_dir(pdir, bus_pdir, cluster)
    case = Case(cluster, nt)
    case.starpu = run_starpu(pdir, nt, "chameleon", d, cluster)
    if STARPU_ONLY:
        return case
    case.numasim = run_numasim(bus_pdir, nt, None, d)
    # For information: numasim on the NUMA-detailed platform of `testbed platform` (one RAM node).
    case.numasim.extra["numa_platform_makespan_s"] = run_numasim(pdir, nt, None, d).makespan_s
    return case


def markdown(cases: list[Case]) -> str:
    lines = ["| platform | tiles | starpu-simgrid makespan (s) | numasim makespan (s) | diff % |"
             " starpu-simgrid wall (s) | numasim wall (s) | speed-up |",
             "|---|---|---|---|---|---|---|---|"]
    for c in cases:
        if c.error or not (c.starpu and c.numasim):
            lines.append(f"| {c.platform} | {c.nt}×{c.nt} | — | — | — | — | — | not compared: {c.error} |")
            continue
        lines.append(f"| {c.platform} | {c.nt}×{c.nt} | {c.starpu.makespan_s:.4f} | {c.numasim.makespan_s:.4f} | "
                     f"{c.diff_pct:+.2f} | {c.starpu.wall_s:.2f} | {c.numasim.wall_s:.2f} | "
                     f"{c.starpu.wall_s / c.numasim.wall_s:.0f}× |")
    diffs = [abs(c.diff_pct) for c in cases if c.starpu and c.numasim and not c.error]
    lines.append("")
    if diffs:
        lines.append(f"median |diff| = {statistics.median(diffs):.2f} %, max |diff| = {max(diffs):.2f} % "
                     f"over {len(diffs)} compared cases of {len(cases)} (target: median ≤ 5 %, max ≤ 10 %)")
    return "\n".join(lines)



def run_case(label: str, nt: int, make) -> Case:
    """One comparison; an engine failing on it is recorded as the case's error, and the bench goes on."""
    try:
        case = make()
    except RuntimeError as e:
        case = Case(label, nt, error=first_error_line(str(e)))
        print(f"{label} {nt}: {case.error}", file=sys.stderr, flush=True)
        return case
    if STARPU_ONLY:
        print(f"{label} {nt}: starpu {case.starpu.makespan_s:.4f}", file=sys.stderr, flush=True)
    else:
        print(f"{label} {nt}: starpu {case.starpu.makespan_s:.4f} numasim "
              f"{case.numasim.makespan_s:.4f} ({case.diff_pct:+.2f} %)", file=sys.stderr, flush=True)
    return case

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="sirocco 20x20 only (smoke run)")
    p.add_argument("--hosts", nargs="*", default=list(SHIPPED_HOSTS))
    p.add_argument("--tiles", nargs="*", type=int, default=[20, 40, 60])
    p.add_argument("--clusters", nargs="*", default=list(CLUSTERS))
    p.add_argument("--cluster-tiles", nargs="*", type=int, default=[20, 40, 60])
    p.add_argument("--no-cache", action="store_true", help="rerun StarPU-SimGrid even when results/starpu_cache "
                   "holds a result for the same inputs")
    p.add_argument("--starpu-only", action="store_true", help="only run (and cache) the StarPU-SimGrid side")
    p.add_argument("--pinned-alloc-s-per-mib", type=float, default=None,
                   help="the cluster cases' numasim platforms charge pinned allocations at this cost (StarPU-SimGrid's "
                        "own: 0.00065), so that StarPU-MPI's reception buffers are charged on both sides")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "numasim_vs_starpu.json")
    args = p.parse_args(argv)
    global USE_CACHE, STARPU_ONLY, PINNED_ALLOC_S_PER_MIB
    USE_CACHE, STARPU_ONLY = not args.no_cache, args.starpu_only
    if args.pinned_alloc_s_per_mib is not None and not 0 <= args.pinned_alloc_s_per_mib <= 1:
        p.error(f"--pinned-alloc-s-per-mib: expected seconds per MiB in [0, 1], got {args.pinned_alloc_s_per_mib}")
    PINNED_ALLOC_S_PER_MIB = args.pinned_alloc_s_per_mib
    for f in (SMPIRUN, LU_SIMGRID, NUMASIM):
        if not f.exists():
            print(f"error: {f} is missing (run `make build` / envs/setup.sh)", file=sys.stderr)
            return 2
    if args.quick:
        args.hosts, args.tiles, args.clusters = ["sirocco"], [20], []
    cases: list[Case] = []
    with tempfile.TemporaryDirectory(prefix="bench-numasim-") as tmp:
        work = Path(tmp)
        for host in args.hosts:
            for nt in args.tiles:
                cases.append(run_case(host, nt, lambda host=host, nt=nt: shipped_case(host, nt, work)))
        for cluster in args.clusters:
            for nt in args.cluster_tiles:
                cases.append(run_case(cluster, nt, lambda cluster=cluster, nt=nt: cluster_case(cluster, nt, work)))
    if STARPU_ONLY:
        return 0
    table = markdown(cases)
    print(table)
    record = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": platform.node(),
              "nproc": os.cpu_count(), "loadavg": os.getloadavg(), "smpi_cfg": SMPI_CFG,
              "cases": [dict(asdict(c), diff_pct=c.diff_pct if c.starpu and c.numasim else None) for c in cases],
              "table": table}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    from testbed.common.atomic import atomic_file

    with atomic_file(args.out) as fh:
        json.dump(record, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
