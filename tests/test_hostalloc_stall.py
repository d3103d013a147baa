"""calibration/microbench/hostalloc_stall.c: whether a pinned allocation in one thread holds a GPU
that another thread keeps busy (docs/pinned-allocations.md). It opens the CUDA runtime with dlopen,
so it builds here; tests/data/fake_cudart.c stands in for the runtime on the CPU, with a device
that is held during cudaHostAlloc / cudaFreeHost (FAKE_CUDA_STALL=1) or keeps running, and the
benchmark must tell the two apart."""

from __future__ import annotations

import csv
import ctypes.util
import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TILE = 960 * 960 * 8  # one b = 960 tile, 7.03 MiB

pytestmark = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None,
                                reason="needs a C compiler and make")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    build = tmp_path_factory.mktemp("microbench")
    subprocess.run(["make", "-s", "-C", str(ROOT / "calibration" / "microbench"), f"BUILD={build}", "hostalloc_stall"],
                   check=True, capture_output=True)
    fake = build / "fake_cudart.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(fake), str(ROOT / "tests" / "data" / "fake_cudart.c"),
                    "-lpthread"], check=True, capture_output=True)
    return build / "microbench" / "hostalloc_stall", fake


def _rows(text: str) -> dict[str, float]:
    return {r["what"]: float(r["median_s"]) for r in csv.DictReader(io.StringIO(text))}


def test_arguments_and_missing_runtime(built) -> None:
    exe, _ = built
    assert subprocess.run([str(exe), "--bytes", "0", "--reps", "3"], capture_output=True).returncode == 2
    assert subprocess.run([str(exe), "--bytes", str(TILE), "--reps", "3", "--depth", "0"],
                          capture_output=True).returncode == 2
    if ctypes.util.find_library("cudart"):
        pytest.skip("a CUDA runtime is installed here")
    p = subprocess.run([str(exe), "--bytes", str(TILE), "--reps", "3"], capture_output=True, text=True,
                       env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                            "HOSTALLOC_STALL_CUDART": "/nonexistent/libcudart.so"})
    assert p.returncode == 3 and "no CUDA runtime" in p.stderr and p.stdout == ""


@pytest.mark.parametrize("stall", [True, False])
def test_a_held_device_is_told_from_a_running_one(built, stall: bool) -> None:
    """40 ms allocations beside 3 ms operations kept four ahead: a held device loses about the
    call's time in its window (and not in the window before); a running one loses none."""
    exe, fake = built
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOSTALLOC_STALL_CUDART": str(fake),
           "FAKE_CUDA_OP_US": "3000", "FAKE_CUDA_ALLOC_US": "40000", "FAKE_CUDA_STALL": "1" if stall else "0"}
    p = subprocess.run([str(exe), "--bytes", str(TILE), "--reps", "5", "--op-ms", "3", "--depth", "4"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    r = _rows(p.stdout)
    # every row names the driver thread's settings (runs of several settings share one file)
    assert {(row["depth"], row["op_ms"]) for row in csv.DictReader(io.StringIO(p.stdout))} == {("4", "3")}
    assert {"alloc_idle", "free_idle", "alloc_busy", "free_busy", "gpu_lost_alloc", "gpu_lost_free", "gpu_lost_base",
            "launch_alloc", "copy_submit_alloc", "copy_submit_base"} <= r.keys()
    assert r["alloc_busy"] >= 0.04 and r["free_busy"] >= 0.04
    if stall:
        assert r["gpu_lost_alloc"] >= 0.5 * r["alloc_busy"]
        assert r["gpu_lost_free"] >= 0.5 * r["free_busy"]
        assert r["gpu_lost_alloc"] - r["gpu_lost_base"] >= 0.25 * r["alloc_busy"]
    else:
        assert r["gpu_lost_alloc"] <= 0.5 * r["alloc_busy"]
        assert r["gpu_lost_free"] <= 0.5 * r["free_busy"]
