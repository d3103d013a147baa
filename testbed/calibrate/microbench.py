"""The calibration's microbenchmarks (calibration/microbench/): where they are built, how.

numa_bench (NUMA kernels, triad bandwidth, the topology it sees), pingpong (MPI) and
starpu_task_overhead (StarPU's per-task CUDA cost) are built on demand into build/microbench/.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from testbed import ROOT
from testbed.common.commands import run_cmd
from testbed.common.paths import BUILD

MICROBENCH_SRC = ROOT / "calibration" / "microbench"
NUMA_BENCH = BUILD / "microbench" / "numa_bench"
TASK_OVERHEAD = BUILD / "microbench" / "starpu_task_overhead"
CUDA_BENCH = BUILD / "microbench" / "cuda_bench"
PINGPONG = BUILD / "microbench" / "pingpong"
#: One BLAS thread per benchmark thread.
BENCH_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def numa_layout() -> dict[int, list[int]]:
    """NUMA node -> CPUs, as the microbenchmark sees them (one PU per core)."""
    text = run_cmd([str(build_microbench()), "topology"])
    rows = list(csv.DictReader(io.StringIO(text)))
    return {int(r["node"]): [int(c) for c in r["cpus"].split()] for r in rows}


def build_microbench() -> Path:
    if not NUMA_BENCH.exists() or NUMA_BENCH.stat().st_mtime < (MICROBENCH_SRC / "numa_bench.c").stat().st_mtime:
        run_cmd(["make", "-s", "-C", str(MICROBENCH_SRC), f"BUILD={BUILD}"])
    return NUMA_BENCH



def build_pingpong() -> Path:
    if not PINGPONG.exists() or PINGPONG.stat().st_mtime < (MICROBENCH_SRC / "pingpong.c").stat().st_mtime:
        run_cmd(["make", "-s", "-C", str(MICROBENCH_SRC), f"BUILD={BUILD}", "pingpong"])
    return PINGPONG
