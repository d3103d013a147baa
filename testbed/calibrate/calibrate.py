"""`testbed calibrate`: measure one machine into a calibration bundle.

Each step writes its own output atomically, then its record steps/<step>.json; it is skipped
when both are there (the record saying done), so an interrupted calibration resumes where it
stopped and ends with the bundle an uninterrupted one writes. Bundle layout (docs/interfaces.md §8):

  provenance.yaml          date, host, kernel, lscpu, versions, env, commands, git commit
  hwloc.xml                lstopo --of xml (hwloc's library where lstopo is missing)
  gpus.json                NVIDIA GPUs: nvidia-smi + sysfs NUMA affinity (testbed/describe/gpu_discovery.py)
  gpu/task_overhead.csv    host time of StarPU's CUDA worker per task (microbench/starpu_task_overhead.c)
  gpu/cuda_bench.csv       cudaMalloc, cudaFree, cudaHostAlloc of one tile per tile size (microbench/cuda_bench.c)
  sampling/bus/<m>.*       native StarPU bus calibration (STARPU_HOSTNAME=<m>)
  sampling/codelets/45/    LU codelet models, all cores (STARPU_CALIBRATE=1 runs of apps/lu)
  codelets-numa<k>/        the same with the workers on NUMA node k only
  codelets-<scope>-runs.json  makespans of the calibration runs
  numa/raw/*.csv           microbenchmark output (thread node x data node)
  numa/matrix-*.csv        matrices: median time, GF/s, factor vs local
  numa/bandwidth.csv       triad bandwidth per (thread node, data node) and machine
  numa/remote_penalty.csv  remote BLAS 3 penalty at the study's tile, every core busy, with and without
                           concurrent host<->GPU copies (numa_bench penalty; two NUMA nodes or more)
  numa/remote_penalty.log  what numa_bench said about it (e.g. copies skipped: no CUDA device)
  lu-reference.json        real LU makespans with the calibrated models (N = b * lu_nt)
  validation.json          numasim on the derived machine vs lu-reference (testbed/calibrate/validation.py)
  network/pingpong.{csv,json}  MPI ping-pong between --hosts A,B (loopback when both are this host)
  kernels.yaml             kernel times in the format machine descriptions cite
  summary.md, plots/*.png  what was measured, unstable timings, missing steps
  steps/<step>.json        status, commands, duration of every step
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as dt
import errno
import json
import logging
import os
import platform
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from testbed import ROOT
from testbed.calibrate.bundle import calibrated, codelet_table, numa_rows, write_kernels_yaml, write_matrices
from testbed.calibrate.microbench import (
    BENCH_ENV,
    CUDA_BENCH,
    MICROBENCH_SRC,
    TASK_OVERHEAD,
    build_microbench,
    build_pingpong,
    numa_layout,
)
from testbed.common.atomic import atomic_dir, atomic_file
from testbed.common.commands import mpi_singleton_env, repo_relative, run_cmd, shell_line, try_cmd
from testbed.common.errors import InputError
from testbed.common.paths import BUILD, LU_REAL, STARPU_NATIVE

_log = logging.getLogger(__name__)

KERNELS = ("dgemm", "dtrsm", "dgetrf_nopiv", "daxpy")
# Variables recorded in host.json (PATH and library paths say nothing about the measurement
# and name directories of the machine).
ENV_PREFIXES = ("STARPU_", "OPENBLAS_", "OMP_", "GOTO", "MKL_", "SLURM_", "OAR_", "HWLOC_", "OMPI_", "CUDA_")


@dataclass
class Options:
    machine: str
    out: Path
    tile_sizes: list[int]
    reps: int = 20
    bw_mb: int = 256
    bw_reps: int = 10
    lu_nt: int = 10
    max_rounds: int = 5
    # STARPU_HISTORY_MAX_ERROR of the codelet calibration runs (percent; None: StarPU's 50)
    history_max_error: int | None = None
    lu_reps: int = 3
    unstable: float = 0.10
    lu: Path = LU_REAL
    # The program whose codelets are calibrated and timed for the reference: apps/lu, or
    # Chameleon's LU on an installed Chameleon (apps/chameleon_lu, testbed/run/engines/chameleon_app.py)
    app: str = "lu"
    hosts: list[str] | None = None  # two hosts for the network ping-pong
    pingpong_reps: int = 100
    paired_runs: int = 2  # real runs per priority in the validation's paired check (0: none)
    # tile of the remote BLAS 3 penalty cells: the study's b (docs/references/study-case.md: 960)
    penalty_b: int = 960
    allow_other_machine: bool = False  # resume a bundle whose host.json names another machine


@dataclass
class Context:
    opts: Options
    ran: list[str] = field(default_factory=list)  # steps executed in this invocation
    log: Callable[[str], None] = field(default=lambda line: _log.info(line))  # progress on stderr


#: A disk full, a quota reached, a read-only file system: every later step would fail to write too.
FULL_OR_READ_ONLY = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}


class Step:
    """One resumable unit: done <=> `output` exists and the record steps/<name>.json says done.

    The output is renamed in first, the record second: a step stopped between the two (the disk
    full at the record, a kill) is not done, and the output it wrote in this invocation is
    removed (on a kill, the rerun replaces it)."""

    def __init__(self, name: str, output: Path, action: Callable[[Context, Path, list[str]], str], final: bool = False):
        self.name, self.output, self.action, self.final = name, output, action, final

    def record(self, ctx: Context) -> Path:
        return ctx.opts.out / "steps" / f"{self.name}.json"

    def done(self, ctx: Context) -> bool:
        if self.final and ctx.ran:  # summaries are redone whenever a measurement step ran
            return False
        return self.output.exists() and record_says_done(self.record(ctx))

    def run(self, ctx: Context) -> None:
        if self.done(ctx):
            ctx.log(f"[skip] {self.name}: {self.output.relative_to(ctx.opts.out)} exists")
            return
        ctx.log(f"[run ] {self.name}")
        before = _identity(self.output)
        finished = False
        try:
            info = self._execute(ctx)
            finished = info["status"] == "done"
        finally:
            if not finished and _identity(self.output) not in (before, None):
                _remove_output(self.output)  # written in this invocation, but the step did not finish
        if finished:
            ctx.ran.append(self.name)
        ctx.log(f"[{info['status'][:4]:4}] {self.name} ({info['duration_s']} s)")

    def _execute(self, ctx: Context) -> dict:
        """The action, then its record (returned)."""
        commands: list[str] = []
        t0 = time.time()
        try:
            status = self.action(ctx, self.output, commands)
        except OSError as exc:
            if exc.errno in FULL_OR_READ_ONLY:  # no step can write: the calibration stops (calibrate())
                raise
            status = f"failed: {str(exc).strip()[:1500]}"
        except (RuntimeError, subprocess.TimeoutExpired, ValueError, InputError) as exc:
            status = f"failed: {str(exc).strip()[:1500]}"
        info = {"step": self.name, "status": repo_relative(status), "commands": [repo_relative(c) for c in commands],
                "started": dt.datetime.fromtimestamp(t0, dt.timezone.utc).isoformat(timespec="seconds"),
                "duration_s": round(time.time() - t0, 3)}
        with atomic_file(self.record(ctx)) as fh:
            json.dump(info, fh, indent=1)
        return info


def record_says_done(record: Path) -> bool:
    """The step record `record` (steps/<step>.json) says done."""
    try:
        return json.loads(record.read_text()).get("status") == "done"
    except (OSError, ValueError, AttributeError, UnicodeDecodeError):
        return False


def _identity(path: Path) -> tuple[int, int, int] | None:
    """What changes when a step's output is written anew (renamed in: another inode), None when absent."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


def _remove_output(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


# --------------------------------------------------------------------------- steps: machine


def git_commit() -> dict[str, str]:
    head = try_cmd(["git", "-C", str(ROOT), "rev-parse", "HEAD"])
    dirty = try_cmd(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"])
    return {"commit": head, "dirty": "yes" if dirty and not dirty.startswith("unavailable") else "no"}


def starpu_version() -> str:
    pc = STARPU_NATIVE / "lib" / "pkgconfig"
    return try_cmd(["pkg-config", "--modversion", "starpu-1.4"], {"PKG_CONFIG_PATH": str(pc)})


def step_host(ctx: Context, out: Path, commands: list[str]) -> str:
    info = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "machine": ctx.opts.machine,
        "kernel": " ".join(platform.uname()),
        "lscpu": lscpu_facts(),
        "numa_balancing": _read_text("/proc/sys/kernel/numa_balancing"),
        "meminfo_memtotal": memtotal_line(),
        "gpus": gpu_names(),
        "versions": {
            "starpu": starpu_version(),
            "starpu_prefix": repo_relative(str(STARPU_NATIVE)),
            "openblas": try_cmd(["dpkg-query", "-W", "-f", "${Version}", "libopenblas0-pthread"]),
            "compiler": try_cmd(["cc", "--version"]).splitlines()[0],
            "mpi": try_cmd(["mpirun", "--version"]).splitlines()[0],
            "hwloc": try_cmd(["lstopo", "--version"]),
            "python": platform.python_version(),
        },
        "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "git": git_commit(),
        "options": {k: (repo_relative(str(v)) if isinstance(v, Path) else v) for k, v in vars(ctx.opts).items()},
    }
    commands += ["lscpu", "uname -a", "git rev-parse HEAD"]
    with atomic_file(out) as fh:
        json.dump(info, fh, indent=1)
    return "done"


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return "unavailable"


def step_hwloc(ctx: Context, out: Path, commands: list[str]) -> str:
    if shutil.which("lstopo"):
        cmd = ["lstopo", "--of", "xml", "-f", "-"]
    else:  # hwloc's library without its tools: the same export through the library
        run_cmd(["make", "-s", "-C", str(MICROBENCH_SRC), f"BUILD={BUILD}", "hwloc_export"])
        cmd = [str(BUILD / "microbench" / "hwloc_export")]
    commands.append(" ".join(cmd) + " > hwloc.xml")
    xml = run_cmd(cmd)
    with atomic_file(out) as fh:
        fh.write(xml)
    return "done"


def step_gpus(ctx: Context, out: Path, commands: list[str]) -> str:
    """NVIDIA GPUs from nvidia-smi and sysfs (testbed/describe/gpu_discovery.py): hwloc lists them only
    with its CUDA plugin. An empty list on a machine without GPUs."""
    from testbed.describe.gpu_discovery import QUERY, discover_gpus

    commands.append(f"nvidia-smi --query-gpu={QUERY} --format=csv,noheader,nounits")
    with atomic_file(out) as fh:
        json.dump(discover_gpus(), fh, indent=1)
    return "done"


def step_cuda_task_overhead(ctx: Context, out: Path, commands: list[str]) -> str:
    """Host time of StarPU's CUDA worker per task (calibration/microbench/starpu_task_overhead.c),
    with STARPU_CUDA_PIPELINE=1 (host time + a one-element kernel per task) and =2 (host time
    overlapping the previous kernel), three runs each, all tasks on the GPU (STARPU_NCPU=0)."""
    run_cmd(["make", "-s", "-C", str(MICROBENCH_SRC), f"BUILD={BUILD}", "starpu_task_overhead"])
    rows = ["pipeline,tasks,elapsed_s,per_task_s"]
    with tempfile.TemporaryDirectory(prefix="task-overhead-") as home:
        env = {"STARPU_HOME": home, "STARPU_NCPU": "0", "STARPU_NCUDA": "1", "STARPU_SCHED": "dmdas", "STARPU_SILENT": "1",
               "CUDA_MODULE_LOADING": "EAGER"}
        for _ in range(3):
            for pipeline in ("1", "2"):
                cmd = [str(TASK_OVERHEAD), "--tasks", "20000"]
                commands.append(shell_line(cmd, {**env, "STARPU_HOME": "<tmp>", "STARPU_CUDA_PIPELINE": pipeline}))
                rows.append(run_cmd(cmd, {**env, "STARPU_CUDA_PIPELINE": pipeline}).strip().splitlines()[-1])
    with atomic_file(out) as fh:
        fh.write("\n".join(rows) + "\n")
    return "done"



def step_cuda_alloc(ctx: Context, out: Path, commands: list[str]) -> str:
    """StarPU's allocation calls on GPU 0 (calibration/microbench/cuda_bench.c): cudaMalloc, cudaFree
    and cudaHostAlloc(Portable) of one tile of each calibrated size, 200 live buffers each."""
    run_cmd(["make", "-s", "-C", str(MICROBENCH_SRC), f"BUILD={BUILD}", "cuda_bench"])
    rows = ["what,bytes,reps,median_s,min_s,max_s"]
    for b in ctx.opts.tile_sizes:
        cmd = [str(CUDA_BENCH), "--bytes", str(8 * b * b), "--reps", "200"]
        commands.append(shell_line(cmd, {}))
        rows += run_cmd(cmd).strip().splitlines()[1:]
    with atomic_file(out) as fh:
        fh.write("\n".join(rows) + "\n")
    return "done"


# --------------------------------------------------------------------------- steps: microbenchmarks



def step_kernel(kernel: str, b: int, load: str) -> Callable[[Context, Path, list[str]], str]:
    def action(ctx: Context, out: Path, commands: list[str]) -> str:
        cmd = [str(build_microbench()), "kernel", "--kernel", kernel, "--b", str(b), "--reps", str(ctx.opts.reps),
               "--load", load]
        commands.append(shell_line(cmd, BENCH_ENV))
        text = run_cmd(cmd, BENCH_ENV)
        with atomic_file(out) as fh:
            fh.write(text)
        return "done"

    return action


#: numa_bench penalty's exit status when the machine has one NUMA node (no remote memory).
PENALTY_NOT_MEASURABLE = 3


def step_remote_penalty(ctx: Context, out: Path, commands: list[str]) -> str:
    """The remote BLAS 3 penalty at the study's tile (docs/blas3-remote-penalty.md): dgemm, dtrsm
    and dgetrf_nopiv with every core busy, the threads of one socket on data of the other, against
    the same threads on their own node's data; again with every GPU copying to and from a pinned
    buffer on the data's node when a CUDA device is there (numa_bench skips those cells with a
    message otherwise, kept in numa/remote_penalty.log)."""
    cmd = [str(build_microbench()), "penalty", "--b", str(ctx.opts.penalty_b), "--reps", str(ctx.opts.reps)]
    commands.append(shell_line(cmd, BENCH_ENV))
    p = subprocess.run(cmd, env=mpi_singleton_env({**os.environ, **BENCH_ENV}), capture_output=True, text=True)
    if p.returncode == PENALTY_NOT_MEASURABLE:
        return f"not measurable: {p.stderr.strip()}"
    if p.returncode != 0:
        raise RuntimeError(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    with atomic_file(out.with_suffix(".log")) as fh:
        fh.write(p.stderr)
    with atomic_file(out) as fh:
        fh.write(p.stdout)
    return "done"


def step_bandwidth(ctx: Context, out: Path, commands: list[str]) -> str:
    cmd = [str(build_microbench()), "bandwidth", "--mb", str(ctx.opts.bw_mb), "--reps", str(ctx.opts.bw_reps)]
    commands.append(shell_line(cmd, BENCH_ENV))
    text = run_cmd(cmd, BENCH_ENV)
    with atomic_file(out) as fh:
        fh.write(text)
    return "done"


# --------------------------------------------------------------------------- steps: StarPU


def starpu_env(ctx: Context, home: Path) -> dict[str, str]:
    return {"STARPU_HOME": str(home), "STARPU_HOSTNAME": ctx.opts.machine, "STARPU_SILENT": "1", **BENCH_ENV}


def step_bus(ctx: Context, out: Path, commands: list[str]) -> str:
    tool = STARPU_NATIVE / "bin" / "starpu_calibrate_bus"
    if not tool.exists():
        return f"not available yet: {tool} missing (envs/setup.sh builds the native StarPU)"
    with atomic_dir(out, None) as tmp:
        home = tmp / "home"
        env = {**starpu_env(ctx, home), "STARPU_BUS_CALIBRATE": "1"}
        commands.append(shell_line([str(tool)], {**env, "STARPU_HOME": "<tmp>"}))
        run_cmd([str(tool)], env, timeout=1800)
        bus = home / ".starpu" / "sampling" / "bus"
        files = sorted(bus.glob(f"{ctx.opts.machine}.*"))
        if not files:
            raise RuntimeError(f"starpu_calibrate_bus wrote no {bus}/{ctx.opts.machine}.* files")
        for f in files:
            shutil.move(str(f), tmp / f.name)
        shutil.rmtree(home)
    return "done"



def lu_has_cuda() -> bool:
    """The native StarPU (hence apps/lu's real build) has CUDA and cuSOLVER: the GPUs run
    gemm, trsm and, with --getrf-gpu, getrf_nopiv (apps/lu/lu_codelets.c)."""
    for h in (STARPU_NATIVE / "include").rglob("starpu_config.h"):
        text = h.read_text()
        return "#define STARPU_USE_CUDA 1" in text and "#define STARPU_HAVE_LIBCUSOLVER 1" in text
    return False


#: Kernels with a CUDA implementation in apps/lu (getrf_nopiv with --getrf-gpu).

def pu_logical_ids(hwloc_xml: Path) -> dict[int, int]:
    """OS CPU id -> hwloc logical PU id (order of PUs in the topology tree), which
    is what StarPU's *_CPUID variables take (src/core/topology.c:792-885)."""
    import xml.etree.ElementTree as ET

    pus = [o for o in ET.parse(hwloc_xml).iter("object") if o.get("type") == "PU"]
    return {int(o.get("os_index")): i for i, o in enumerate(pus)}


def scope_env(ctx: Context, scope: str, layout: dict[int, list[int]]) -> dict[str, str]:
    """Workers of a calibration scope: `all` = StarPU's defaults for an MPI program;
    `numa<k>` = CPU workers on NUMA k's cores only, the MPI thread on another
    node's core (listed first so that StarPU reserves it: topology.c:1367-1381)."""
    if scope == "all":
        return {}
    k = int(scope.removeprefix("numa"))
    logical = pu_logical_ids(ctx.opts.out / "hwloc.xml")
    others = [logical[c] for n, cpus in layout.items() if n != k for c in cpus]
    cpus = [logical[c] for c in layout[k]]
    return {"STARPU_WORKERS_CPUID": " ".join(map(str, [others[0], *cpus])), "STARPU_NCPU": str(len(cpus)),
            "STARPU_MPI_THREAD_CPUID": str(others[0])}


def lu_program(opts: Options) -> Path:
    """The LU program calibration runs: apps/lu's real build, or Chameleon's LU (apps/chameleon_lu)."""
    if opts.app == "chameleon":
        from testbed.run.engines.chameleon_app import driver

        return driver("native")
    return opts.lu


def program_env(opts: Options) -> dict[str, str]:
    """What the calibrated program needs in its environment: Chameleon's library path."""
    if opts.app == "chameleon":
        from testbed.run.engines.chameleon_app import library_path

        return {"LD_LIBRARY_PATH": library_path("native")}
    return {}


def lu_command(opts: Options, program: Path, n: int, b: int, getrf_gpu: bool = False) -> list[str]:
    """One LU of order n in tiles of b on this node, by the calibrated program."""
    if opts.app == "chameleon":  # StarPU counts the workers (CHAMELEON_Init(-1, -1)); one rank, P = Q = 1
        return [str(program), "--n", str(n), "--b", str(b)]
    return [str(program), "--n", str(n), "--b", str(b), *(["--getrf-gpu"] if getrf_gpu else [])]


def lu_result(opts: Options, stdout: str) -> dict:
    """makespan_s and gflops of one LU's output (apps/lu's JSON line, Chameleon's `;` line)."""
    if opts.app == "chameleon":
        from testbed.run.engines.chameleon_app import parse_output

        return parse_output(stdout, "", 0, "apps/chameleon_lu")
    return json.loads(stdout.strip().splitlines()[-1])


def step_codelets(scope: str) -> Callable[[Context, Path, list[str]], str]:
    def action(ctx: Context, out: Path, commands: list[str]) -> str:
        lu = lu_program(ctx.opts)
        if not lu.exists():
            return f"not available yet: {lu} is not built (apps/lu, `make build`)"
        layout = numa_layout()
        # The work directory survives an interruption: StarPU keeps adding samples.
        work = ctx.opts.out / ".work" / f"codelets-{scope}"
        bus_src = ctx.opts.out / "sampling" / "bus"
        bus_dst = work / ".starpu" / "sampling" / "bus"
        if bus_src.is_dir() and not bus_dst.exists():
            shutil.copytree(bus_src, bus_dst)  # same bus model, no second bus calibration
        models = work / ".starpu" / "sampling" / "codelets" / "45"
        env = {**starpu_env(ctx, work), **scope_env(ctx, scope, layout), "STARPU_CALIBRATE": "1",
               "STARPU_SCHED": "dmdas", **program_env(ctx.opts)}
        if ctx.opts.history_max_error is not None:
            # StarPU flushes a history entry once as many samples deviated from its mean by more than
            # this percentage as it holds (src/core/perfmodel/perfmodel_history.c): a kernel of a few
            # tens of us whose times spread over more than 1.5x never keeps 10 samples at StarPU's 50 %.
            env["STARPU_HISTORY_MAX_ERROR"] = str(ctx.opts.history_max_error)
        # With GPUs, getrf_nopiv gets a CUDA model too; in calibration mode dmda gives tasks to
        # the workers whose model is not calibrated yet, so the CPU entries fill as well
        # (sched_policies/deque_modeling_policy_data_aware.c, "we need to calibrate").
        cuda = lu_has_cuda()
        app = ctx.opts.app
        work.mkdir(parents=True, exist_ok=True)
        log = work / "commands.json"  # commands of earlier, interrupted invocations
        commands += json.loads(log.read_text()) if log.exists() else []
        runs = []
        for b in ctx.opts.tile_sizes:
            n = b * ctx.opts.lu_nt
            for rnd in range(ctx.opts.max_rounds):
                if calibrated(models, ctx.opts.machine, b, cuda, app):
                    break
                cmd = lu_command(ctx.opts, lu, n, b, getrf_gpu=cuda)
                commands.append(shell_line(cmd, {**env, "STARPU_HOME": "<work>"}))
                log.write_text(json.dumps(commands))
                result = lu_result(ctx.opts, run_cmd(cmd, env, timeout=3600))
                runs.append({"app": app, "b": b, "round": rnd, "makespan_s": result.get("makespan_s"), "gflops": result.get("gflops")})
            if not calibrated(models, ctx.opts.machine, b, cuda, app):
                return f"failed: b={b} not calibrated after {ctx.opts.max_rounds} rounds (raise --max-rounds)"
        with atomic_dir(out, None) as tmp:
            shutil.copytree(models, tmp, dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
        with atomic_file(ctx.opts.out / f"codelets-{scope}-runs.json") as fh:
            json.dump(runs, fh, indent=1)
        return "done"

    return action


def step_lu_reference(ctx: Context, out: Path, commands: list[str]) -> str:
    """Real makespans of the LU with the calibrated models: what simulations of
    this machine are compared against (N = b * lu_nt for the smallest b)."""
    lu = lu_program(ctx.opts)
    models = ctx.opts.out / "sampling" / "codelets" / "45"
    if not lu.exists() or not models.is_dir():
        return "not available yet: needs the apps/lu real build and the codelet models"
    b = ctx.opts.tile_sizes[0]
    n = b * ctx.opts.lu_nt
    results = []

    with tempfile.TemporaryDirectory(prefix="lu-reference-") as home:
        shutil.copytree(ctx.opts.out / "sampling", Path(home) / ".starpu" / "sampling")
        env = {**starpu_env(ctx, Path(home)), "STARPU_SCHED": "dmdas", "STARPU_CALIBRATE": "0", **program_env(ctx.opts)}
        cmd = lu_command(ctx.opts, lu, n, b)
        loads = []  # other processes' load: a shared node slows the run between its tasks
        for _ in range(ctx.opts.lu_reps):
            commands.append(shell_line(cmd, {**env, "STARPU_HOME": "<copy of the bundle's sampling>"}))
            loads.append(os.getloadavg()[0])
            results.append(lu_result(ctx.opts, run_cmd(cmd, env, timeout=3600)))
    spans = [float(r["makespan_s"]) for r in results]
    mean = sum(spans) / len(spans)
    sd = (sum((x - mean) ** 2 for x in spans) / (len(spans) - 1)) ** 0.5 if len(spans) > 1 else 0.0
    doc = {"n": n, "b": b, "env": env | {"STARPU_HOME": "<copy>"}, "makespans_s": spans, "mean_s": mean,
           "rel_std": sd / mean if mean else 0.0, "load_average_1min": loads, "cpus": os.cpu_count(), "runs": results}
    with atomic_file(out) as fh:
        json.dump(doc, fh, indent=1)
    return "done"


# --------------------------------------------------------------------------- steps: network, validation


LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


def step_network(ctx: Context, out: Path, commands: list[str]) -> str:
    """MPI ping-pong between the two --hosts (calibration/microbench/pingpong.c): one-way
    latency (1-byte median) and bandwidth (best bytes/median over the sizes)."""
    hosts = ctx.opts.hosts or []
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        return "not available yet: mpirun not found (Open MPI, envs/setup.sh)"
    exe = build_pingpong()
    cmd = [mpirun, "-np", "2", "--host", ",".join(hosts), "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")  # containers and CI run as root
    cmd += [str(exe), "--reps", str(ctx.opts.pingpong_reps)]
    commands.append(shell_line(cmd, {}))
    text = run_cmd(cmd, timeout=600)
    head = next(line for line in text.splitlines() if line.startswith("# host0="))
    names = dict(kv.split("=", 1) for kv in head[2:].split())
    rows = list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))
    if not rows:
        raise RuntimeError(f"pingpong printed no measurements:\n{text[-1000:]}")
    loopback = names.get("same_host") == "1" or len(set(hosts)) == 1 or all(h in LOCAL_NAMES for h in hosts)
    small = min(rows, key=lambda r: int(r["bytes"]))
    best = max(rows, key=lambda r: float(r["bandwidth_Bps"]))
    doc = {
        "hosts": hosts, "processors": [names.get("host0"), names.get("host1")], "loopback": loopback,
        "note": ("LOOPBACK: both ranks ran on the same host, so this measures shared-memory/loopback MPI, "
                 "not the network; it is not used as a NIC figure") if loopback else
                "two hosts: MPI ping-pong through the network",
        "latency_s": float(small["median_s"]),
        "latency_note": f"median one-way time (half round trip) of {small['bytes']}-byte messages",
        "bandwidth_Bps": float(best["bandwidth_Bps"]),
        "bandwidth_note": f"{best['bytes']} bytes / median one-way time (the best over the sizes)",
        "csv": "network/pingpong.csv", "command": commands[-1],
    }
    with atomic_dir(out.parent, None) as tmp:
        (tmp / "pingpong.csv").write_text(text)
        (tmp / "pingpong.json").write_text(json.dumps(doc, indent=1) + "\n")
    return "done"


def step_validate(ctx: Context, out: Path, commands: list[str]) -> str:
    """numasim on the machine derived from this bundle vs the real LU (lu-reference.json)."""
    from testbed.calibrate.validation import validate
    from testbed.common.paths import NUMASIM

    o = ctx.opts.out
    if not (o / "lu-reference.json").exists() or not (o / "kernels.yaml").exists():
        return "not available yet: needs lu-reference.json and kernels.yaml (codelets and lu-reference steps)"
    if not NUMASIM.exists():
        return f"not available yet: {NUMASIM} is not built (`make build`)"
    doc = validate(o, ctx.opts.machine, ctx.opts.lu, commands, ctx.opts.paired_runs)
    with atomic_file(out) as fh:
        json.dump(doc, fh, indent=1)
    return "done"


# --------------------------------------------------------------------------- summary


def step_provenance(ctx: Context, out: Path, commands: list[str]) -> str:
    facts = ctx.opts.out / "host.json"
    host = json.loads(facts.read_text()) if facts.exists() else {}
    steps = {}
    for rec in sorted((ctx.opts.out / "steps").glob("*.json")):
        info = json.loads(rec.read_text())
        steps[info["step"]] = {k: info[k] for k in ("status", "started", "duration_s", "commands")}
    doc = {**host, "generated_by": repo_relative(f"testbed calibrate --machine {ctx.opts.machine} --out {ctx.opts.out}"),
           "steps": steps}
    with atomic_file(out) as fh:
        yaml.safe_dump(doc, fh, sort_keys=False, width=120)
    return "done"


def step_summary(ctx: Context, out: Path, commands: list[str]) -> str:
    from testbed.calibrate.summary import write_summary

    write_summary(ctx, out)
    return "done"


# --------------------------------------------------------------------------- driver


def steps_for(opts: Options, nnuma: int) -> list[Step]:
    o = opts.out
    steps = [Step("host", o / "host.json", step_host), Step("hwloc", o / "hwloc.xml", step_hwloc),
             Step("gpus", o / "gpus.json", step_gpus), Step("bus", o / "sampling" / "bus", step_bus)]
    if lu_has_cuda():  # a GPU node: StarPU built with CUDA
        steps.append(Step("cuda-task-overhead", o / "gpu" / "task_overhead.csv", step_cuda_task_overhead))
        steps.append(Step("cuda-alloc", o / "gpu" / "cuda_bench.csv", step_cuda_alloc))
    for b in opts.tile_sizes:
        for kernel in KERNELS:
            for load in ("alone", "all"):
                steps.append(Step(f"numa-{kernel}-b{b}-{load}", o / "numa" / "raw" / f"{kernel}-b{b}-{load}.csv",
                                  step_kernel(kernel, b, load)))
    steps.append(Step("bandwidth", o / "numa" / "bandwidth.csv", step_bandwidth))
    if nnuma > 1:  # one NUMA node has no remote memory: numa_bench penalty would exit 3
        steps.append(Step("remote-penalty", o / "numa" / "remote_penalty.csv", step_remote_penalty))
    steps.append(Step("codelets-all", o / "sampling" / "codelets" / "45", step_codelets("all")))
    if nnuma > 1:  # on one NUMA node the per-node models are the `all` models
        for k in range(nnuma):
            steps.append(Step(f"codelets-numa{k}", o / f"codelets-numa{k}" / "45", step_codelets(f"numa{k}")))
    steps.append(Step("lu-reference", o / "lu-reference.json", step_lu_reference))
    if opts.hosts:
        steps.append(Step("network", o / "network" / "pingpong.json", step_network))
    steps.append(Step("provenance", o / "provenance.yaml", step_provenance, final=True))
    steps.append(Step("summary", o / "summary.md", step_summary, final=True))
    return steps


#: A directory holding one of these is a (partial) bundle that `calibrate` may resume into.
BUNDLE_NAMES = {"steps", ".work", "host.json", "hwloc.xml", "kernels.yaml", "provenance.yaml"}


def check_bundle_dir(out: Path) -> None:
    """The bundle is written inside --out: refuse a file, or a directory that is not a bundle
    (calibrate would take its files for measurements and write beside them)."""
    if (out.exists() or out.is_symlink()) and not out.is_dir():
        raise InputError(out, "--out", "a calibration bundle directory, found a file (not replaced)")
    names = sorted(e.name for e in out.iterdir()) if out.is_dir() else []
    if names and not BUNDLE_NAMES & set(names):
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        raise InputError(out, "--out", f"a new or empty directory or a calibration bundle (steps/, kernels.yaml, ...); "
                                       f"it holds {shown} (nothing written; choose another path)")


def lscpu_facts() -> dict[str, str]:
    return dict((k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in try_cmd(["lscpu"]).splitlines()) if v)


def memtotal_line() -> str:
    return _read_text("/proc/meminfo").splitlines()[0] if Path("/proc/meminfo").exists() else ""


def gpu_names() -> str:
    """`nvidia-smi -L` without the UUIDs (one line per GPU), empty without an NVIDIA driver."""
    text = try_cmd(["nvidia-smi", "-L"])
    return "" if text.startswith("unavailable") else "\n".join(ln.split(" (UUID")[0] for ln in text.splitlines())


def machine_identity(host: dict) -> dict[str, str]:
    """What makes a bundle this machine's: host name, CPU model, CPU count, memory (GiB, from
    MemTotal) and GPUs. A fact a bundle did not record (older bundles: memory, GPUs) is not compared."""
    lscpu = host.get("lscpu", {}) if isinstance(host.get("lscpu"), dict) else {}
    kb = re.search(r"(\d+)\s*kB", str(host.get("meminfo_memtotal", "")))
    return {"host": str(host.get("host", "")), "CPU model": str(lscpu.get("Model name", "")),
            "CPUs": str(lscpu.get("CPU(s)", "")), "memory (GiB)": str(round(int(kb.group(1)) / 2**20)) if kb else "",
            "GPUs": str(host.get("gpus", "") or ("none" if "gpus" in host else ""))}


def check_same_machine(out: Path, allow_other: bool) -> None:
    """A bundle measured on another machine is not resumed here (its steps would be skipped as
    done and its numbers reported as this machine's): refused unless explicitly allowed."""
    facts = out / "host.json"
    if allow_other or not facts.is_file():
        return
    try:
        recorded = machine_identity(json.loads(facts.read_text()))
    except (ValueError, UnicodeDecodeError):
        raise InputError(facts, "host", "the JSON host facts written by `testbed calibrate`") from None
    here = machine_identity({"host": socket.gethostname(), "lscpu": lscpu_facts(), "meminfo_memtotal": memtotal_line(),
                             "gpus": gpu_names()})
    differ = [k for k in recorded if recorded[k] and here[k] and recorded[k] != here[k]]
    if differ:
        k = differ[0]
        raise InputError(facts, k, f"this machine's ({here[k]!r}), the bundle was measured on {recorded[k]!r}: "
                                   "calibrate into another --out, or pass --allow-other-machine to resume it here")


def finished_steps(out: Path) -> list[str]:
    """The steps of the bundle in `out` whose record says done."""
    return [record.stem for record in sorted((out / "steps").glob("*.json")) if record_says_done(record)]


def stopped_on_environment(out: Path, created: bool, exc: OSError) -> OSError:
    """The error of a calibration the disk stopped (ENOSPC, EDQUOT, EROFS), saying what is left:
    nothing (a bundle directory this run created, with no finished step, is removed), or the
    finished steps, from which the same command resumes (each step's output is atomic)."""
    done = finished_steps(out)
    if created and not done:
        shutil.rmtree(out, ignore_errors=True)
        note = f"testbed calibrate: nothing kept, {out} removed"
    else:
        shown = ", ".join(done[:3]) + (f" and {len(done) - 3} more" if len(done) > 3 else "")
        note = (f"testbed calibrate: {len(done)} finished step{'s' if len(done) != 1 else ''} kept in {out}"
                + (f" ({shown})" if done else "") + "; free space and rerun the same command: it resumes after them")
    return OSError(exc.errno, f"{exc.strerror or os.strerror(exc.errno)} ({note})", exc.filename)


def calibrate(opts: Options, log: Callable[[str], None] | None = None) -> Context:
    ctx = Context(opts, log=log) if log is not None else Context(opts)
    check_bundle_dir(opts.out)
    check_same_machine(opts.out, opts.allow_other_machine)
    created = not opts.out.exists()
    opts.out.mkdir(parents=True, exist_ok=True)
    try:
        return _calibrate(ctx)
    except OSError as exc:
        if exc.errno not in FULL_OR_READ_ONLY:
            raise
        raise stopped_on_environment(opts.out, created, exc) from None


def _calibrate(ctx: Context) -> Context:
    opts = ctx.opts
    nnuma = len(numa_layout())
    steps = steps_for(opts, nnuma)
    final = [s for s in steps if s.final]
    for s in steps:
        if s.final:
            continue
        s.run(ctx)
    # Steps whose outputs enter the validation (the NUMA kernel factors do not yet: the
    # platform generation does not read the machine's `numa:` matrices).
    measured = any(r in ("hwloc", "bus", "bandwidth", "lu-reference") or r.startswith("codelets-") for r in ctx.ran)
    if ctx.ran or not all(s.output.exists() for s in final):
        ctx.ran.append("derived")
        write_matrices(opts.out, numa_rows(opts.out))
        write_kernels_yaml(opts.out, opts.machine, codelet_table(opts.out, opts.machine))
    # After kernels.yaml (the machine description it checks is derived from it); redone
    # when a measurement it depends on was redone in this invocation.
    validation = opts.out / "validation.json"
    if measured and validation.exists():
        validation.unlink()
    Step("validate", validation, step_validate).run(ctx)
    for s in final:
        s.run(ctx)
    work = opts.out / ".work"
    if work.is_dir() and not any(work.iterdir()):
        work.rmdir()
    return ctx


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--machine", required=True, help="machine type name (files are named after it)")
    p.add_argument("--out", default=None, help="bundle directory (default calibration/MACHINE)")
    p.add_argument("--b", action="append", type=int, default=None, help="tile size (repeatable; default 192)")
    p.add_argument("--reps", type=int, default=20, help="kernel calls per NUMA cell and thread")
    p.add_argument("--bw-mb", type=int, default=256, help="total triad array size in MB")
    p.add_argument("--bw-reps", type=int, default=10)
    p.add_argument("--penalty-b", type=int, default=960,
                   help="tile size of the remote BLAS 3 penalty cells (default 960, the study's; two NUMA nodes or more)")
    p.add_argument("--lu-nt", type=int, default=10, help="tiles per dimension of the calibration LU runs")
    p.add_argument("--max-rounds", type=int, default=5, help="LU runs per tile size before giving up")
    p.add_argument("--history-max-error", type=int, default=None, metavar="PCT",
                   help="STARPU_HISTORY_MAX_ERROR of the codelet calibration runs (default: StarPU's, 50): raise it "
                        "where tiny kernels' times spread so much that StarPU keeps flushing their history")
    p.add_argument("--lu-reps", type=int, default=3, help="reference LU runs with the calibrated models")
    p.add_argument("--unstable", type=float, default=0.10, help="relative stddev above which a timing is unstable")
    p.add_argument("--lu", default=str(LU_REAL), help="real build of apps/lu")
    p.add_argument("--app", choices=["lu", "chameleon"], default="lu",
                   help="the program whose codelets are calibrated: apps/lu, or Chameleon's LU on an installed "
                        "Chameleon (apps/chameleon_lu, CHAMELEON_PREFIX; its models are read as they are by numasim "
                        "and StarPU-SimGrid)")
    p.add_argument("--hosts", default=None, metavar="A,B",
                   help="two hosts for the MPI network ping-pong (A,A or localhost,localhost measures loopback)")
    p.add_argument("--pingpong-reps", type=int, default=100, help="timed round trips per message size")
    p.add_argument("--allow-other-machine", action="store_true",
                   help="resume a bundle measured on another machine (its measured steps are kept as they are)")
    p.add_argument("--paired-runs", type=int, default=2,
                   help="validation: real runs (per priority) simulated with the models they recorded; 0 = none")


def options_from_args(args: argparse.Namespace) -> Options:
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", args.machine):
        raise InputError(None, "--machine", f"a name of letters, digits, _ or - (used in file names), got {args.machine!r}")
    sizes = args.b or [192]
    for name, v in (("--b", min(sizes)), ("--reps", args.reps), ("--bw-mb", args.bw_mb), ("--bw-reps", args.bw_reps), ("--penalty-b", args.penalty_b),
                    ("--lu-nt", args.lu_nt), ("--max-rounds", args.max_rounds), ("--lu-reps", args.lu_reps)):
        if v <= 0:
            raise InputError(None, name, f"a positive integer, got {v}")
    hosts = [h.strip() for h in args.hosts.split(",")] if args.hosts else None
    if hosts is not None and (len(hosts) != 2 or not all(hosts)):
        raise InputError(None, "--hosts", f"two host names separated by a comma, got {args.hosts!r}")
    if args.history_max_error is not None and args.history_max_error <= 0:
        raise InputError(None, "--history-max-error", f"a positive percentage, got {args.history_max_error}")
    if args.paired_runs < 0:
        raise InputError(None, "--paired-runs", f"a non-negative integer, got {args.paired_runs}")
    if args.pingpong_reps <= 0:
        raise InputError(None, "--pingpong-reps", f"a positive integer, got {args.pingpong_reps}")
    if not 0 < args.unstable < 10:
        raise InputError(None, "--unstable", f"a relative standard deviation in (0, 10), got {args.unstable}")
    return Options(machine=args.machine, out=Path(args.out or ROOT / "calibration" / args.machine),
                   tile_sizes=sorted(set(sizes)), reps=args.reps, bw_mb=args.bw_mb, bw_reps=args.bw_reps,
                   lu_nt=args.lu_nt, max_rounds=args.max_rounds, history_max_error=args.history_max_error,
                   lu_reps=args.lu_reps, unstable=args.unstable, lu=Path(args.lu), app=args.app,
                   hosts=hosts, pingpong_reps=args.pingpong_reps, paired_runs=args.paired_runs,
                   allow_other_machine=args.allow_other_machine, penalty_b=args.penalty_b)


def run(args: argparse.Namespace) -> int:
    from testbed.common.outputs import Out, check_distinct

    opts = options_from_args(args)
    if opts.app == "chameleon":
        lu_program(opts)  # an installed Chameleon, checked before any step
    check_distinct([("--lu", args.lu)], [Out("--out", opts.out, "dir")])
    ctx = calibrate(opts)
    statuses = {json.loads(p.read_text())["status"] for p in (ctx.opts.out / "steps").glob("*.json")}
    failed = [s for s in statuses if s.startswith("failed")]
    return 1 if failed else 0
