"""The H100 device call's runs against numasim (bench/gpu_device_replay.py) and the CUDA worker
costs that a platform converted from StarPU's files takes (`testbed platform --from-starpu
--gpu-cost`): a kernel's first-call extra and the gap between back-to-back tasks."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import ROOT
from testbed.platform.platform_from_starpu import write_platform_dir
from testbed.run.engines import RunSpec
from testbed.run.simulate import simulate

_spec = importlib.util.spec_from_file_location("gpu_device_replay", ROOT / "bench" / "gpu_device_replay.py")
replay = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(replay)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return replay.extract(replay.DATA, tmp_path_factory.mktemp("device"))


def makespan(pdir: Path, n: int = 4800, gpu: bool = True) -> float:
    spec = RunSpec(engine="numasim", cluster=replay.HOST, n=n, b=960, env={"STARPU_SCHED": "dmdas", "STARPU_NCPU": "15"},
                   env_per_machine={}, seed=1, variability=False, getrf_on_gpu=gpu, platform_dir=pdir)
    return simulate(spec)["makespan_s"]


def test_replay_smallest_case(tmp_path: Path, capsys) -> None:
    """N = 4800: both variants replayed; with the measured CUDA worker costs numasim is within
    15 % of the real mean (StarPU's files alone: -39 % and -91 %)."""
    out = tmp_path / "r.json"
    assert replay.main(["--sizes", "4800", "--seeds", "2", "--no-starpu", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| 4800 | GPU |" in printed and "| 4800 | CPU |" in printed
    data = json.loads(out.read_text())
    assert {c["variant"] for c in data["cases"]} == {"getrf-cpu", "getrf-gpu"}
    for case in data["cases"]:
        real = sum(case["real"]) / len(case["real"])
        measured = sum(case["numasim_measured"]) / len(case["numasim_measured"])
        files = sum(case["numasim_files"]) / len(case["numasim_files"])
        assert abs(measured / real - 1) <= 0.15, case["variant"]
        assert files < measured
    costs = data["gpu_costs"]
    # the first cuBLAS trsm of each traced process costs 59-66 ms more than the next ones
    assert 0.05 < costs["first_call_trsm_s"] < 0.07
    assert 10e-6 < costs["task_gap_s"] < 40e-6


def test_first_call_charged_once_per_kernel(results: Path, tmp_path: Path) -> None:
    base = makespan(write_platform_dir(results / "sampling", replay.HOST, tmp_path / "a") and tmp_path / "a")
    first = makespan(write_platform_dir(results / "sampling", replay.HOST, tmp_path / "b",
                                        {"first_call_trsm_s": 0.05}) and tmp_path / "b")
    # every task on the CUDA worker: its first trsm holds it 50 ms longer, the others do not
    assert first - base == pytest.approx(0.05, abs=2e-3)


def test_gap_between_back_to_back_tasks(results: Path, tmp_path: Path) -> None:
    base = makespan(write_platform_dir(results / "sampling", replay.HOST, tmp_path / "a") and tmp_path / "a")
    gap = makespan(write_platform_dir(results / "sampling", replay.HOST, tmp_path / "b",
                                      {"task_gap_s": 1e-4}) and tmp_path / "b")
    # 55 tasks on the CUDA worker, nearly all back to back: about 54 gaps of 100 us
    assert 0.003 < gap - base < 0.0056


def test_gpu_costs_in_platform_xml(results: Path, tmp_path: Path) -> None:
    summary = write_platform_dir(results / "sampling", replay.HOST, tmp_path / "p",
                                 {"task_overhead_s": 1.5e-5, "first_call_getrf_s": 0.0124})
    xml = (tmp_path / "p" / "numasim.xml").read_text()
    assert "id=\"first_call_getrf_s\" value=\"0.0124\"" in xml and "id=\"task_overhead_s\"" in xml
    assert summary["gpu_costs"] == {"task_overhead_s": 1.5e-5, "first_call_getrf_s": 0.0124}


@pytest.mark.parametrize("item", ["first_call_foo_s=0.1", "task_gap_s=2", "task_gap_s=x", "task_gap_s"])
def test_bad_gpu_cost_one_line_nothing_written(results: Path, tmp_path: Path, item: str) -> None:
    out = tmp_path / "p"
    proc = subprocess.run([sys.executable, "-m", "testbed", "platform", "--from-starpu", str(results / "sampling"),
                           "--host", replay.HOST, "--gpu-cost", item, "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "--gpu-cost" in proc.stderr
    assert not out.exists()


def test_allocation_cost_is_the_traced_path_not_the_bare_call(results: Path, tmp_path: Path) -> None:
    """malloc_s is StarPU's Allocating state as the FxT traces measured it (the whole path: lock,
    cudaMemGetInfo, cudaMalloc), longer than cuda_bench's bare cudaMalloc; free and pinned costs
    come from cuda_bench at the runs' tile size."""
    bare = replay.allocation_costs(results / "cuda_bench.csv", 8 * replay.B * replay.B)
    traced = replay.traced_allocation_s(replay.DATA, tmp_path)
    costs, _ = replay.measured_costs(results, replay.DATA)
    assert traced is not None and 80e-6 < traced < 130e-6  # 93-122 us medians per trace
    assert costs["malloc_s"] == traced > bare["malloc_s"]
    assert costs["free_s"] == bare["free_s"] and costs["pinned_alloc_s_per_mib"] == bare["pinned_alloc_s_per_mib"]
    assert replay.measured_costs(results)[0]["malloc_s"] == bare["malloc_s"]  # without traces: cuda_bench
