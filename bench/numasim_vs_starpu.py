#!/usr/bin/env python3
"""numasim vs StarPU-SimGrid: makespan agreement and speed on configurations both express.

Both engines simulate the same machine, from the same files:

* StarPU-SimGrid: build/lu-simgrid/lu under `starpu_smpirun -hostfile-platform`, with the
  machine's StarPU sampling directory (bus platform + codelet models); StarPU's defaults
  otherwise (dmdas, one RAM node, model means, STARPU_SIMGRID_* costs at their defaults).
* numasim: the platform converted from the same bus platform(s) by
  testbed/platform/starpu_bus_platform.py, the same models, variability off, and the SimGrid network
  configuration starpu_smpirun runs StarPU under (`--cfg=network/model:SMPI
  --cfg=surf/precision:1e-9`, /usr/bin/smpirun; starpu_smpirun drops the bus files'
  network/* settings).

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
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.common.paths import STARPU_SIMGRID, STARPU_SMPIRUN  # noqa: E402
from testbed.platform.starpu_bus_platform import NodeSource, build_platform, nodes_of_starpu_dir, write_platform  # noqa: E402
from testbed.starpu.lu_codelets import numasim_symbols  # noqa: E402

SHIPPED = ROOT / ".deps" / "src" / "starpu-1.4.10" / "tools" / "perfmodels" / "sampling"
SMPIRUN = STARPU_SIMGRID / STARPU_SMPIRUN  # STARPU_SIMGRID_PREFIX or .deps (testbed/common/paths.py)
LU_SIMGRID = ROOT / "build" / "lu-simgrid" / "lu"
NUMASIM = ROOT / "build" / "simulator" / "numasim"
#: SimGrid configuration of /usr/bin/smpirun (SIMOPTS), under which StarPU-SimGrid-MPI runs.
SMPI_CFG = ["--cfg=network/model:SMPI", "--cfg=surf/precision:1e-9"]
B = 960  # tile size of the shipped LU models' history entries (size column 1x, 2x, 3x 960*960*8)
STARPU_LU_SYMBOLS = numasim_symbols("starpu-lu")
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


def timed(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[str, float, float]:
    """Runs cmd; returns stdout, wall time and the children's user+sys CPU time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc.stdout, wall, cpu


def first_error_line(text: str) -> str:
    """The most telling line of a failed run's message (assertion or error), shortened."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for key in ("assert failure", "Assertion", "error:", "Error"):
        for ln in lines:
            if key in ln:
                return ln[-200:]
    return (lines[0] if lines else text)[-200:]


def last_json(out: str) -> dict:
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no JSON line in output: {out[-500:]}")


#: StarPU-SimGrid results, one file per case, reused while their inputs are unchanged (a 60x60
#: run takes minutes): see starpu_key.
STARPU_CACHE = ROOT / "bench" / "results" / "starpu_cache"
#: Set by main(): False with --no-cache; True with --starpu-only (fill the cache, no numasim).
USE_CACHE = True
STARPU_ONLY = False


def _digest(h: "hashlib._Hash", path: Path) -> None:
    """Feeds a file, or every file of a directory in sorted order, into h."""
    files = sorted(q for q in path.rglob("*") if q.is_file()) if path.is_dir() else [path]
    for f in files:
        h.update(str(f.relative_to(path) if path.is_dir() else f.name).encode() + b"\0")
        h.update(f.read_bytes())


def starpu_key(sampling: Path, hostname: str, cluster_xml: Path, hostfile: Path, nt: int, symbols: str) -> str:
    """Hash of everything a StarPU-SimGrid run depends on: the LU binary (StarPU is linked in
    statically), starpu_smpirun, the sampling directory (bus platforms and models), the SMPI
    platform and hostfile, and the arguments."""
    h = hashlib.sha256()
    for f in (LU_SIMGRID, SMPIRUN, sampling, cluster_xml, hostfile):
        _digest(h, f)
    h.update(f"{hostname} {nt} {B} {symbols} dmdas".encode())
    return h.hexdigest()


def run_starpu(sampling: Path, hostname: str, cluster_xml: Path, hostfile: Path, nt: int, symbols: str,
               work: Path, case: str) -> Run:
    key = starpu_key(sampling, hostname, cluster_xml, hostfile, nt, symbols)
    cache = STARPU_CACHE / f"{case}-{nt}.json"
    if USE_CACHE and cache.exists():
        rec = json.loads(cache.read_text())
        if rec.get("key") == key:
            run = Run(**rec["run"])
            run.extra["cached"] = rec.get("date")
            return run
    env = dict(os.environ)
    env.update({"STARPU_PERF_MODEL_DIR": str(sampling), "STARPU_HOSTNAME": hostname,
                "STARPU_HOME": str(work / "home"), "STARPU_SCHED": "dmdas", "STARPU_SILENT": "1"})
    cmd = [str(SMPIRUN), "-platform", str(cluster_xml), "-hostfile", str(hostfile), "-hostfile-platform",
           str(LU_SIMGRID), "--n", str(nt * B), "--b", str(B), "--symbols", symbols]
    out, wall, cpu = timed(cmd, env, work)
    res = last_json(out)
    run = Run(res["makespan_s"], wall, cpu, res["tasks"])
    if not USE_CACHE:
        return run
    from testbed.common.atomic import atomic_file

    with atomic_file(cache) as fh:
        json.dump({"key": key, "date": datetime.datetime.now().isoformat(timespec="seconds"),
                   "loadavg": os.getloadavg(), "run": asdict(run)}, fh, indent=1)
    return run


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


def run_numasim(platform_xml: Path, perfmodels: dict[str, str], nt: int, symbols: dict[str, str] | None,
                work: Path, distribution: dict | None = None, env: dict[str, str] | None = None) -> Run:
    desc = {"platform": str(platform_xml), "perfmodels": perfmodels,
            "workload": {"kind": "lu", "n": nt * B, "b": B, "distribution": distribution or {"kind": "block-cyclic"}},
            "env": {"STARPU_SCHED": "dmdas", **(env or {})}, "seed": 1, "variability": False}
    if symbols:
        desc["symbols"] = symbols
    run_file = work / f"numasim-{platform_xml.stem}-{nt}.json"
    run_file.write_text(json.dumps(desc, indent=1))
    out, wall, cpu = timed([str(NUMASIM), str(run_file), *SMPI_CFG])
    res = json.loads(out)
    return Run(res["makespan_s"], wall, cpu, res["tasks"],
               {"workers_by_type": res.get("workers_by_type"), "transfers": res.get("transfers")})


def shipped_case(host: str, nt: int, work: Path) -> Case:
    d = work / host
    d.mkdir(exist_ok=True)
    cluster_xml, hostfile, xml = d / "cluster.xml", d / "hostfile", d / "numasim.xml"
    if not xml.exists():
        # One SMPI host named like the machine: its bus platform is sampling/bus/<host>.platform.v4.xml.
        cluster_xml.write_text("<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM "
                               "'http://simgrid.gforge.inria.fr/simgrid/simgrid.dtd'>\n<platform version=\"4\">\n"
                               f" <AS id=\"{host}-cluster\" routing=\"Full\">\n  <host id=\"{host}\" speed=\"1Gf\"/>\n"
                               " </AS>\n</platform>\n")
        hostfile.write_text(host + "\n")
        write_platform(build_platform([NodeSource(host, host, SHIPPED / "bus" / f"{host}.platform.v4.xml")],
                                      name=host), xml)
    case = Case(host, nt)
    sampling = repaired_sampling(host, d)
    case.starpu = run_starpu(sampling, host, cluster_xml, hostfile, nt, "starpu-lu", d, host)
    if STARPU_ONLY:
        return case
    # As many GPUs as StarPU-SimGrid enables (idgraf has 8; the build may enable fewer).
    env = {}
    ngpus = xml.read_text().count('<prop id="kind" value="gpu"')
    maxdev = starpu_max_cuda_devices()
    if maxdev is not None and ngpus > maxdev:
        env["STARPU_NCUDA"] = str(maxdev)
        case.extra_note = f"STARPU_NCUDA={maxdev} (StarPU-SimGrid built with STARPU_MAXCUDADEVS={maxdev})"
    case.numasim = run_numasim(xml, {host: str(sampling)}, nt, STARPU_LU_SYMBOLS, d, env=env)
    return case


def cluster_case(cluster: str, nt: int, work: Path) -> Case:
    from testbed.describe.machines import load_cluster
    from testbed.platform.platform_cmd import generate
    from testbed.run.engines.starpu_simgrid import merged_sampling, read_hostfile

    d = work / cluster
    pdir = d / "platform"
    starpu_dir = pdir / "starpu"
    xml = d / "numasim-bus.xml"
    if not xml.exists():
        d.mkdir(exist_ok=True)
        generate(load_cluster(cluster), pdir, (B,))
        hosts = read_hostfile(starpu_dir)
        merged_sampling(starpu_dir, hosts, "chameleon", d / "sampling")
        write_platform(build_platform(nodes_of_starpu_dir(starpu_dir), starpu_dir / "cluster.xml", cluster), xml)
    hosts = read_hostfile(starpu_dir)
    machines = sorted({n.machine for n in nodes_of_starpu_dir(starpu_dir)})
    case = Case(cluster, nt)
    case.starpu = run_starpu(d / "sampling", hosts[0], starpu_dir / "cluster.xml", starpu_dir / "hostfile", nt,
                             "chameleon", d, cluster)
    if STARPU_ONLY:
        return case
    perfmodels = {m: str(starpu_dir / m / "sampling") for m in machines}
    case.numasim = run_numasim(xml, perfmodels, nt, None, d)
    # For information: numasim on the NUMA-detailed platform of `testbed platform` (one RAM node).
    case.numasim.extra["numa_platform_makespan_s"] = run_numasim(pdir / "numasim.xml", perfmodels, nt, None,
                                                                 d).makespan_s
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
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "numasim_vs_starpu.json")
    args = p.parse_args(argv)
    global USE_CACHE, STARPU_ONLY
    USE_CACHE, STARPU_ONLY = not args.no_cache, args.starpu_only
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
