"""bench/gpu_device.sh, the one-call script of a GPU node, rehearsed on a machine without CUDA:
the same steps at tiny sizes with the CUDA steps skipped, the installed native StarPU reused
(STARPU_REUSE), and what it leaves in OUT checked as a device call would return it (at most 8
files, each at most 15 MiB, progress lines, JSON lines, FxT traces in the testbed's format)."""

from __future__ import annotations

import csv
import io
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from support.device_calls import assert_refused, jsonl, members
from support.device_calls import rehearse as rehearse_script

from testbed import ROOT
from testbed.common.paths import STARPU_NATIVE
from testbed.traces.fxt_trace import TASK_HEADER

SCRIPT = ROOT / "bench" / "gpu_device.sh"
PREPARE = ROOT / "bench" / "gpu_device_prepare.sh"
CONFIG_H = STARPU_NATIVE / "include" / "starpu" / "1.4" / "starpu_config.h"
HAS_FXT_STARPU = CONFIG_H.is_file() and "define STARPU_USE_FXT 1" in CONFIG_H.read_text()
needs_starpu = pytest.mark.skipif(
    not (HAS_FXT_STARPU and shutil.which("mpicc") and (STARPU_NATIVE / "bin" / "starpu_fxt_tool").is_file()),
    reason="needs the native StarPU built with FxT (envs/setup.sh) and mpicc")
MIB = 1 << 20


def rehearse(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, Path, Path]:
    return rehearse_script(SCRIPT, tmp_path, shutil.which("python3") or "python3", **env)


def check_out_limits(out: Path) -> list[str]:
    """What a device call brings back: at most 8 files, 15 MiB each (16 MiB is the call's limit)."""
    files = sorted(p.name for p in out.iterdir())
    assert all((out / f).is_file() for f in files)
    assert len(files) <= 8
    assert all((out / f).stat().st_size <= 15 * MIB for f in files)
    return files


@needs_starpu
def test_rehearsal_runs_every_cpu_step_and_skips_cuda_with_a_reason(tmp_path):
    proc, out, _ = rehearse(tmp_path, STARPU_REUSE=str(STARPU_NATIVE), NUMA_BENCH="force")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert check_out_limits(out) == ["fxt-1920.tar.xz", "fxt-960.tar.xz", "gpu_device.log", "results.tar.gz"]
    log = (out / "gpu_device.log").read_text()
    assert log.splitlines() == proc.stderr.splitlines()  # the progress lines, kept in OUT
    for reason in ("SKIP cudabench: rehearsal: no CUDA", "SKIP overhead: rehearsal: no CUDA",
                   "SKIP getrf-gpu: rehearsal: no CUDA", "SKIP starpu: STARPU_REUSE="):
        assert reason in proc.stderr and reason in log
    # a progress line per step, with the elapsed seconds
    assert "[gpu_device" in log and "step calibrate: ok (" in log
    # the summary: residual and makespans in the call's output
    assert "    check getrf-cpu n=1920: residual " in log
    assert "    timed n=1920 getrf-cpu: makespan mean " in log and "    trace n=960 getrf-cpu: makespan mean " in log

    res = members(out / "results.tar.gz")
    steps = {s["step"]: s for s in jsonl(res["results/steps.jsonl"])}
    ok = {"node", "check_starpu_reused", "microbench", "apps", "hostallocstall", "variability", "bus", "check",
          "calibrate", "trace-960",
          "trace-1920", "runs",
          "convert-960", "convert-1920", "numa", "summary"}
    assert {k for k, s in steps.items() if s["status"] == "ok"} == ok
    assert {k for k, s in steps.items() if s["status"] == "skipped"} == {"fxt", "starpu", "cudabench", "overhead",
                                                                         "getrf-gpu"}
    assert all(s["seconds"] <= s["limit_s"] for s in steps.values() if s["status"] == "ok")

    runs = jsonl(res["results/runs.jsonl"])
    assert {r["phase"] for r in runs} == {"check", "calibrate", "trace", "timed"}
    assert {r["variant"] for r in runs} == {"getrf-cpu"}
    assert all(r["b"] == 480 and r["build"] == "real" and 0 < r["makespan_s"] < r["process_s"] for r in runs)
    checks = [r for r in runs if r["phase"] == "check"]
    assert len(checks) == 1 and checks[0]["n"] == 1920 and checks[0]["residual"] < 1e-12
    # StarPU's models and bus files of the "node", under its STARPU_HOSTNAME
    assert "results/sampling/codelets/45/dgemm.gpunode" in res
    assert "results/sampling/bus/gpunode.bandwidth" in res
    node = res["results/node.txt"].decode()
    assert "== lscpu" in node and "== numactl -H" in node and "== nvidia-smi" in node
    assert b"dgemm" in res["results/numa_bench.csv"]
    # the dgemm's spread: one core alone, then every core (docs/kernel-variability.md)
    spread = list(csv.DictReader(io.StringIO(res["results/variability.csv"].decode())))
    assert [(r["kernel"], r["b"], r["load"]) for r in spread] == [("dgemm", "480", "alone"), ("dgemm", "480", "all")]
    assert all(float(r["rel_std"]) >= 0 and int(r["calls"]) >= 5 for r in spread)

    # FxT trace of the 1920 run converted into numasim's task table (testbed/traces/fxt_trace.py)
    table = list(csv.DictReader(io.StringIO(res["results/traces/1920-getrf-cpu/trace.csv"].decode())))
    assert list(table[0]) == TASK_HEADER
    trace_run = next(r for r in runs if r["phase"] == "trace" and r["n"] == 1920)
    assert len(table) == trace_run["tasks"] == 30
    assert {row["Value"] for row in table} == {"getrf", "trsm", "gemm"}
    assert sum(row["Value"] == "getrf" for row in table) == trace_run["tasks_by_kind"]["getrf"]
    assert all(row["ResourceId"].startswith("gpunode.CPU") for row in table)
    fxt = members(out / "fxt-1920.tar.xz")
    assert any(n.startswith("fxt-raw/1920-getrf-cpu/prof_file_") for n in fxt)
    assert {"traces/1920-getrf-cpu/fxt-tool/tasks.rec", "traces/1920-getrf-cpu/fxt-tool/paje.trace"} <= set(fxt)
    assert "traces/1920-getrf-cpu/fxt-tool/trace.rec" not in fxt  # derived, left out


@needs_starpu
def test_a_step_over_its_time_box_is_killed_and_the_next_steps_still_run(tmp_path):
    proc, out, work = rehearse(tmp_path, STARPU_REUSE=str(STARPU_NATIVE), SIZES="960", CAL_REPS="100000",
                               LIMIT_calibrate="3")
    assert proc.returncode == 1
    assert "step calibrate: timeout (rc 124" in proc.stderr
    steps = {s["step"]: s for s in jsonl(members(out / "results.tar.gz")["results/steps.jsonl"])}
    assert steps["calibrate"]["status"] == "timeout" and steps["calibrate"]["limit_s"] == 3
    assert steps["trace-960"]["status"] == "ok" and steps["runs"]["status"] == "ok"
    # no apps/lu of the killed step left running
    ps = subprocess.run(["pgrep", "-f", str(work / "build" / "lu-real" / "lu")], capture_output=True, text=True)
    assert ps.stdout == ""


@needs_starpu
def test_a_call_killed_midway_still_leaves_the_finished_steps_in_out(tmp_path):
    """SIGKILL to the whole process group (no trap runs) once the check step is done: OUT already
    holds the progress lines and results.tar.gz with that step's records."""
    out, work = tmp_path / "out", tmp_path / "work"
    env = {**os.environ, "REHEARSAL": "1", "WORK": str(work), "STARPU_REUSE": str(STARPU_NATIVE),
           "CAL_REPS": "100000"}
    proc = subprocess.Popen(["bash", str(SCRIPT), str(out)], stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        for line in proc.stderr:
            if "step calibrate (limit" in line:  # logged after the check step's snapshot
                break
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert "step check: ok" in (out / "gpu_device.log").read_text()
    res = members(out / "results.tar.gz")
    steps = {s["step"]: s["status"] for s in jsonl(res["results/steps.jsonl"])}
    assert steps["check"] == "ok" and "calibrate" not in steps
    assert [r["phase"] for r in jsonl(res["results/runs.jsonl"])] == ["check"]


def test_summary_reads_the_files_of_a_gpu_node(tmp_path):
    """The summary step on what a GPU node wrote (bench/data/gpu-node-h100: runs with --getrf-gpu,
    cuda_bench, starpu_task_overhead, whose CSV header the committed file lacks): the CUDA-only
    parts of the summary, which a rehearsal does not reach."""
    data = ROOT / "bench" / "data" / "gpu-node-h100"
    res = tmp_path / "work" / "results"
    (res / "logs").mkdir(parents=True)
    shutil.copy(data / "runs.jsonl", res / "runs.jsonl")
    shutil.copy(data / "cuda_bench.csv", res / "cuda_bench.csv")
    (res / "task_overhead.csv").write_text("pipeline,tasks,elapsed_s,per_task_s\n" + "".join(
        line + "\n" for line in (data / "task_overhead.csv").read_text().splitlines()[:4]))
    proc = subprocess.run(["bash", str(SCRIPT), "--step", "summary"], capture_output=True, text=True,
                          env={**os.environ, "WORK": str(tmp_path / "work")})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "check getrf-gpu n=3840: residual 2.095892e-16, 26 tasks on CUDA" in lines
    assert "timed n=9600 getrf-gpu: makespan mean 0.1223 s [0.1090, 0.1306] (5)" in lines
    assert ("cuda_bench 7372800 B (median us): malloc 63.7, h2d 143.5, d2h 142.3, free 57.5") in lines
    assert "task_overhead pipeline 1: 15.63 us per task" in lines


def test_summary_reads_hostalloc_stall(tmp_path):
    """The hostallocstall step's CSV (calibration/microbench/hostalloc_stall.c), one block per
    setting of the driver thread, with the share of the call the device is held."""
    res = tmp_path / "work" / "results"
    (res / "logs").mkdir(parents=True)
    (res / "hostalloc_stall.csv").write_text("what,bytes,depth,op_ms,reps,median_s,min_s,max_s\n"
                                             "alloc_busy,7372800,2,0.5,20,0.0042,0.004,0.005\n"
                                             "gpu_lost_alloc,7372800,2,0.5,20,0.0041,0,0.0002\n"
                                             "gpu_lost_base,7372800,2,0.5,20,0.0001,0,0.0002\n"
                                             "what,bytes,depth,op_ms,reps,median_s,min_s,max_s\n"
                                             "alloc_busy,7372800,2,5,20,0.004,0.004,0.005\n"
                                             "gpu_lost_alloc,7372800,2,5,20,0.0001,0,0.0002\n"
                                             "gpu_lost_base,7372800,2,5,20,0.0002,0,0.0002\n")
    proc = subprocess.run(["bash", str(SCRIPT), "--step", "summary"], capture_output=True, text=True,
                          env={**os.environ, "WORK": str(tmp_path / "work")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "hostalloc_stall 7372800 B, depth 2, 0.5 ms operations (median us): alloc_busy 4200.0, gpu_lost_alloc 4100.0, "
        "gpu_lost_base 100.0",
        "  device held during alloc: 0.95 of the call",
        "hostalloc_stall 7372800 B, depth 2, 5 ms operations (median us): alloc_busy 4000.0, gpu_lost_alloc 100.0, "
        "gpu_lost_base 200.0",
        "  device held during alloc: 0.00 of the call"]


def test_steps_runs_only_the_steps_named(tmp_path):
    """STEPS: a short call without StarPU (no STARPU_REUSE, no .device): the microbenchmarks alone;
    every other step is recorded as skipped with the reason."""
    proc, out, _ = rehearse(tmp_path, STEPS="node microbench hostallocstall variability summary")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert check_out_limits(out) == ["gpu_device.log", "results.tar.gz"]
    steps = {s["step"]: s for s in jsonl(members(out / "results.tar.gz")["results/steps.jsonl"])}
    assert {k for k, s in steps.items() if s["status"] == "ok"} == {"node", "microbench", "hostallocstall",
                                                                     "variability", "summary"}
    assert steps["starpu"] == {"step": "starpu", "status": "skipped",
                               "reason": "not in STEPS=node microbench hostallocstall variability summary"}
    assert steps["calibrate"]["status"] == "skipped" and "runs" in steps
    assert "variability dgemm b=480 load alone: median " in proc.stderr


def test_out_is_packed_when_the_budget_is_spent(tmp_path):
    """No StarPU needed: every step is refused for the budget, OUT still gets the log and results
    (and only this call's files: an earlier call's trace is removed)."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "fxt-960.tar.xz").write_bytes(b"an earlier call's")
    proc, out, _ = rehearse(tmp_path, BUDGET_S="4")
    assert proc.returncode == 1
    assert check_out_limits(out) == ["gpu_device.log", "results.tar.gz"]
    steps = jsonl(members(out / "results.tar.gz")["results/steps.jsonl"])
    assert {s["status"] for s in steps} == {"budget", "skipped"}
    assert "SKIP calibrate: budget of 4 s spent" in proc.stderr


@pytest.mark.parametrize(("env", "message"), [
    ({"REHEARSAL": "2"}, "error: REHEARSAL=2: expected 0 or 1"),
    ({"NUMA_BENCH": "yes"}, "error: NUMA_BENCH=yes: expected auto, force or no"),
    ({"STARPU_REUSE": "/nonexistent"}, "error: STARPU_REUSE=/nonexistent: expected an installed StarPU 1.4"),
    ({"SIZES": "1000"}, "error: SIZES/TRACE_SIZES: 1000: expected a multiple of B=480"),
    ({"BUDGET_S": "x"}, "error: BUDGET_S=x: expected a positive integer"),
    ({"LIMIT_check": "0"}, "error: LIMIT_check=0: expected a positive integer"),
    ({"WORK": "/"}, "error: WORK=/: expected a scratch folder (it is emptied first)"),
    ({"STEPS": "node cudabnch"}, "error: STEPS: cudabnch: expected all or steps among: node fxt starpu"),
    ({"HOSTALLOC_RUNS": "960:2"}, "error: HOSTALLOC_RUNS: 960:2: expected b:depth:op_ms (e.g. 960:2:0.5)"),
    ({"VAR_REPS": "-1"}, "error: VAR_REPS=-1: expected a positive integer"),
])
def test_bad_settings_stop_before_anything_is_written(tmp_path, env, message):
    assert_refused(*rehearse(tmp_path, **env), message)


@pytest.mark.skipif(not (ROOT / ".device" / "SHA256SUMS").is_file(),
                    reason="no .device folder (bench/gpu_device_prepare.sh fills it)")
def test_fxt_step_unpacks_debians_fxt_into_a_private_prefix(tmp_path):
    work = tmp_path / "work"
    (work / "results" / "logs").mkdir(parents=True)
    env = {**os.environ, "DEVICE_DIR": str(ROOT / ".device"), "WORK": str(work)}
    proc = subprocess.run(["bash", str(SCRIPT), "--step", "fxt"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    usr = work / "fxt" / "usr"
    (pc,) = usr.glob("lib/*-linux-gnu/pkgconfig/fxt.pc")
    assert f"prefix={usr}\n" in pc.read_text()
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "fxt"], capture_output=True, text=True,
                           env={**os.environ, "PKG_CONFIG_PATH": str(pc.parent)}).stdout.split()
    assert flags == [f"-I{usr}/include", f"-L{pc.parent.parent}", "-lfxt"]
    assert (usr / "include" / "fxt" / "fxt.h").is_file() and (pc.parent.parent / "libfxt.so.2").exists()


def test_fxt_step_refuses_files_whose_sha256_differs(tmp_path):
    device = tmp_path / "device"
    device.mkdir()
    (device / "libfxt2_0.3.13-2_amd64.deb").write_bytes(b"not the package")
    (device / "SHA256SUMS").write_text("0" * 64 + "  libfxt2_0.3.13-2_amd64.deb\n")
    env = {**os.environ, "DEVICE_DIR": str(device), "WORK": str(tmp_path / "work")}
    (tmp_path / "work" / "results" / "logs").mkdir(parents=True)
    proc = subprocess.run(["bash", str(SCRIPT), "--step", "fxt"], capture_output=True, text=True, env=env)
    assert proc.returncode == 2
    assert f"error: {device}: sha256 mismatch" in proc.stdout
    assert not (tmp_path / "work" / "fxt").exists()


def test_prepare_refuses_a_tarball_whose_sha256_differs(tmp_path):
    bad = tmp_path / "starpu_1.4.10+dfsg.orig.tar.gz"
    bad.write_bytes(b"not StarPU")
    proc = subprocess.run(["bash", str(PREPARE), str(tmp_path / "device")], capture_output=True, text=True,
                          env={**os.environ, "STARPU_SOURCE_TARBALL": str(bad)})
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"gpu_device_prepare: error: STARPU_SOURCE_TARBALL={bad}: expected sha256 ")
    assert not (tmp_path / "device").exists()
    assert list(tmp_path.iterdir()) == [bad]
