"""bench/gpu_numa_split.sh, the one-call script of factor A on the real StarPU with a GPU on one NUMA
node, rehearsed on a machine without CUDA: every CPU step runs here (the installed native StarPU
reused, apps/lu built, StarPU calibrated and counted on this machine's split description,
local_numa2-1, numasim on the same description), the CUDA step is skipped with its reason, and OUT
holds what a device call would bring back (docs/numa-split.md, "With a GPU on one NUMA node")."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.device_calls import assert_refused, jsonl, members
from support.device_calls import rehearse as rehearse_script

from testbed import ROOT
from testbed.common.paths import NUMASIM, STARPU_NATIVE

SCRIPT = ROOT / "bench" / "gpu_numa_split.sh"
CONFIG_H = STARPU_NATIVE / "include" / "starpu" / "1.4" / "starpu_config.h"
HAS_FXT_STARPU = CONFIG_H.is_file() and "define STARPU_USE_FXT 1" in CONFIG_H.read_text()
needs_starpu = pytest.mark.skipif(
    not (HAS_FXT_STARPU and shutil.which("mpicc") and (STARPU_NATIVE / "bin" / "starpu_fxt_tool").is_file()
         and NUMASIM.exists() and {0, 1} <= os.sched_getaffinity(0)),
    reason="needs the native StarPU built with FxT (envs/setup.sh), mpicc, numasim (make build) and PUs 0 and 1")


def rehearse(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, Path, Path]:
    return rehearse_script(SCRIPT, tmp_path, sys.executable, **env)


@needs_starpu
def test_rehearsal_runs_every_cpu_step_and_skips_cuda_with_a_reason(tmp_path):
    proc, out, _ = rehearse(tmp_path, STARPU_REUSE=str(STARPU_NATIVE))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["gpu_numa_split.log", "results.tar.gz"]
    log = (out / "gpu_numa_split.log").read_text()
    assert log.splitlines() == proc.stderr.splitlines()  # the progress lines, kept in OUT
    assert "SKIP gpu: rehearsal: no CUDA (the GPU of the split description needs a CUDA device)" in log
    assert "SKIP starpu: STARPU_REUSE=" in log

    res = members(out / "results.tar.gz")
    steps = {s["step"]: s for s in jsonl(res["results/steps.jsonl"])}
    assert {k for k, s in steps.items() if s["status"] == "ok"} == {
        "node", "check_starpu_reused", "apps", "wheels", "describe", "calibrate", "real", "numasim", "summary"}
    assert {k for k, s in steps.items() if s["status"] == "skipped"} == {"fxt", "starpu", "gpu"}
    # StarPU calibrated on the split topology, at both levels of A
    assert [r["factors"]["A"] for r in jsonl(res["results/calibrate.jsonl"])] == [-1, 1]
    assert b'type="NUMANode"' in res["results/hwloc-local_numa2.xml"]
    assert "results/sampling/bus/gpunode-numa2.bandwidth" in res

    # both engines' counts in one table: RAM memory nodes, allocations per thread, makespans
    counts = json.loads(res["results/numa-split/counts.json"])
    assert counts["cluster"] == "local_numa2-1" and counts["runs"] == 2
    assert sorted(counts["results"]) == ["StarPU A=+1", "StarPU A=-1", "numasim A=+1", "numasim A=-1"]
    for name, runs in counts["results"].items():
        assert len(runs) == 2 and all(r["makespan_s"] > 0 for r in runs), name
        assert {len(r["ram_memory_nodes"]) for r in runs} == ({2} if "A=+1" in name else {1}), name
    starpu = counts["results"]["StarPU A=+1"]
    assert all(r["lu"]["allocations_by_thread"].get("cpu worker of node 1 on node 1", 0) > 0 for r in starpu)
    table = res["results/numa-split/table.md"].decode()
    assert table.splitlines()[0] == "| count (LU phase) | StarPU A=-1 | numasim A=-1 | StarPU A=+1 | numasim A=+1 |"
    assert "| makespan (s) |" in table and "| buffers allocated by the cpu worker of RAM 1 on RAM 1 |" in table
    # the summary: the table and the allocations per thread kind, in the call's output
    assert "    | copies RAM 0 -> RAM 1 |" in log
    assert "    | buffers allocated by the cpu worker of RAM 1 on RAM 1 |" in log


def test_numasim_that_does_not_run_is_skipped_with_the_command_that_does_it_elsewhere(tmp_path):
    """No StarPU needed: only the numasim step is named, and numasim cannot start (as where its
    libraries are missing); its skip line says why and how to get its counts anywhere."""
    fake = tmp_path / "numasim"
    fake.write_text("#!/bin/sh\necho 'numasim: error while loading shared libraries: libsimgrid.so' >&2\nexit 127\n")
    fake.chmod(0o755)
    proc, out, _ = rehearse(tmp_path, STEPS="numasim", NUMASIM=str(fake))
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = {s["step"]: s for s in jsonl(members(out / "results.tar.gz")["results/steps.jsonl"])}
    reason = steps["numasim"]["reason"]
    assert steps["numasim"]["status"] == "skipped"
    assert reason.startswith("numasim does not run here (numasim: error while loading shared libraries")
    assert ("bench/numa_split_counts.py --cluster local_numa2-1 --n 1920 --b 192 --runs 2 --engines numasim "
            "--merge results/numa-split/counts.json") in reason


# The settings both scripts share (REHEARSAL, STARPU_REUSE, WORK, BUDGET_S, LIMIT_*: bench/device_steps.sh
# check_settings) are tried in tests/test_gpu_device_rehearsal.py; these are this script's.
@pytest.mark.parametrize(("env", "message"), [
    ({"CLUSTER": "nowhere-1"}, "error: CLUSTER=nowhere-1: expected a cluster of platforms/clusters/"),
    ({"N": "1000"}, "error: N=1000: expected a multiple of B=192"),
    ({"RUNS": "0"}, "error: RUNS=0: expected a positive integer"),
    ({"STEPS": "real gpus"}, "error: STEPS: gpus: expected all or steps among: node fxt starpu"),
])
def test_bad_settings_stop_before_anything_is_written(tmp_path, env, message):
    assert_refused(*rehearse(tmp_path, **env), message)
