"""Calibration workflow on this machine: microbenchmarks, resumability, provenance."""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from testbed.calibrate import calibrate as cal
from testbed.calibrate import microbench
from testbed.common.errors import InputError
from testbed.common.paths import NUMASIM

# paired_runs=0: the validation's paired real runs are tested in test_calibration_validation.py.
# b=64 kernels take ~20 us and StarPU flushes a model entry once as many samples deviated more
# than STARPU_HISTORY_MAX_ERROR (50 %) from its mean as it holds (perfmodel_history.c): with times
# spread over more than 1.5x an entry can oscillate between 0 and 1 samples for all 40 rounds (seen
# on dtrsm in an OAR job); 1000 % keeps the samples. The calibration stops as soon as every entry
# has 10 samples (3 rounds when quiet), so the bound costs nothing.
SMALL = dict(tile_sizes=[64], reps=3, bw_mb=32, bw_reps=2, lu_nt=5, max_rounds=40, history_max_error=1000, lu_reps=2,
             paired_runs=0)


def quiet(_: str) -> None:
    pass


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cal") / "local"
    cal.calibrate(cal.Options(machine="local", out=out, **SMALL), log=quiet)
    return out


def test_microbench_builds_and_measures() -> None:
    exe = microbench.build_microbench()
    text = subprocess.run([str(exe), "kernel", "--kernel", "dgemm", "--b", "64", "--reps", "3"],
                          capture_output=True, text=True, check=True, env={"OPENBLAS_NUM_THREADS": "1"}).stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    nnuma = len(cal.numa_layout())
    assert len(rows) == nnuma * nnuma  # 1x1 on this one-NUMA machine
    assert all(float(r["gflops"]) > 0 and float(r["median_s"]) > 0 for r in rows)
    bad = subprocess.run([str(exe), "kernel", "--kernel", "dpotrf", "--b", "64", "--reps", "3"], capture_output=True)
    assert bad.returncode == 2


def test_remote_penalty_needs_two_numa_nodes() -> None:
    """numa_bench penalty on a one-node machine says why it cannot measure and exits 3 (its
    documented status); on two nodes or more the calibration schedules it at the study's b."""
    exe = microbench.build_microbench()
    p = subprocess.run([str(exe), "penalty", "--b", "64", "--reps", "2"], capture_output=True, text=True,
                       env={"OPENBLAS_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    if len(cal.numa_layout()) > 1:
        pytest.skip("this machine has several NUMA nodes: the penalty is measurable here")
    assert p.returncode == cal.PENALTY_NOT_MEASURABLE == 3
    assert "1 NUMA node" in p.stderr and "cannot be measured" in p.stderr and p.stdout == ""
    bad = subprocess.run([str(exe), "penalty", "--b", "64", "--reps", "2", "--copies", "maybe"], capture_output=True)
    assert bad.returncode == 2
    opts = cal.Options(machine="m", out=Path("/nonexistent"), tile_sizes=[192])
    assert "remote-penalty" not in [s.name for s in cal.steps_for(opts, 1)]
    step = next(s for s in cal.steps_for(opts, 2) if s.name == "remote-penalty")
    assert step.output == Path("/nonexistent/numa/remote_penalty.csv") and opts.penalty_b == 960


def test_summary_reports_the_remote_penalty(tmp_path: Path) -> None:
    """summary.md's section: one NUMA node says why there is nothing; two show the measured cells
    (with the copy rate of the gpu rows) and numa_bench's message about skipped copies."""
    from testbed.calibrate.summary import penalty_lines

    assert "Not measurable: one NUMA node (no memory on another socket)." in penalty_lines(tmp_path, 1)
    assert "Not available (see Steps)." in penalty_lines(tmp_path, 2)
    (tmp_path / "numa").mkdir()
    (tmp_path / "numa" / "remote_penalty.csv").write_text(
        "kernel,b,copies,thread_node,data_node,threads,calls,local_median_s,remote_median_s,penalty,"
        "local_rel_std,remote_rel_std,copy_gbps\n"
        "dgemm,960,none,1,0,14,280,0.0676,0.0703,1.04,0.02,0.03,0\n"
        "dgemm,960,gpu,1,0,14,280,0.0680,0.0748,1.1,0.02,0.05,19.5\n")
    (tmp_path / "numa" / "remote_penalty.log").write_text("numa_bench penalty: no CUDA device: skipped\n")
    text = "\n".join(penalty_lines(tmp_path, 2))
    assert "| dgemm | 960 | none | 1 | 0 | 67.6 | 70.3 | 1.04 | — |" in text
    assert "| dgemm | 960 | gpu | 1 | 0 | 68 | 74.8 | 1.1 | 19.5 |" in text
    assert "numa_bench: numa_bench penalty: no CUDA device: skipped" in text


def test_copies_without_a_cuda_device_are_skipped_with_a_message() -> None:
    exe = microbench.build_microbench()
    p = subprocess.run([str(exe), "copies", "--node", "0", "--seconds", "0.2"], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "NUMA_BENCH_CUDART": "libcudart-absent.so"})
    if p.returncode == 0:
        pytest.skip("a CUDA device is present")
    assert p.returncode == 3 and ("no CUDA runtime" in p.stderr or "no CUDA device" in p.stderr)


def test_bundle_contents(bundle: Path) -> None:
    for rel in ("provenance.yaml", "hwloc.xml", "summary.md", "numa/bandwidth.csv", "host.json"):
        assert (bundle / rel).is_file(), rel
    assert "<topology" in (bundle / "hwloc.xml").read_text()
    assert sorted(p.name for p in (bundle / "sampling" / "bus").iterdir())[:3] == [
        "local.affinity", "local.bandwidth", "local.config"]
    nnuma = len(cal.numa_layout())
    m = list(csv.reader((bundle / "numa" / "matrix-dgemm-b64-alone.csv").open()))
    assert len(m) == 1 + 3 * nnuma and len(m[0]) == 2 + nnuma
    gf = [r for r in m if r[0] == "gflops"]
    assert all(float(v) > 0 for r in gf for v in r[2:])
    summary = (bundle / "summary.md").read_text()
    if nnuma == 1:
        assert "One NUMA node" in summary
    bw = list(csv.DictReader((bundle / "numa" / "bandwidth.csv").open()))
    assert all(float(r["gbps"]) > 0 for r in bw)


@pytest.mark.skipif(not cal.LU_REAL.exists(), reason="apps/lu real build missing (make build)")
def test_codelet_models_calibrated(bundle: Path) -> None:
    models = bundle / "sampling" / "codelets" / "45"
    assert cal.calibrated(models, "local", 64), (bundle / "steps" / "codelets-all.json").read_text()[-2000:]
    k = yaml.safe_load((bundle / "kernels.yaml").read_text())
    assert k["reference_tile"] == 64 and k["kernels"]["dgemm"]["cpu"]["time_s"]["value"] > 0
    assert "source" in k["kernels"]["dgemm"]["cpu"]["time_s"]
    ref = json.loads((bundle / "lu-reference.json").read_text())
    assert ref["n"] == 64 * 5 and len(ref["makespans_s"]) == 2 and ref["mean_s"] > 0


@pytest.mark.skipif(not cal.LU_REAL.exists() or not NUMASIM.exists(), reason="apps/lu or numasim not built")
def test_validation_step_compares_numasim_with_the_reference(bundle: Path) -> None:
    rec = json.loads((bundle / "steps" / "validate.json").read_text())
    assert rec["status"] == "done", rec["status"]
    v = json.loads((bundle / "validation.json").read_text())
    ref = json.loads((bundle / "lu-reference.json").read_text())
    assert v["real"]["makespans_s"] == ref["makespans_s"] and v["simulated"]["mean_s"] > 0
    assert "paired" not in v  # paired_runs=0
    assert "## Validation: numasim vs the real LU" in (bundle / "summary.md").read_text()


def test_provenance_complete(bundle: Path) -> None:
    p = yaml.safe_load((bundle / "provenance.yaml").read_text())
    for key in ("date", "host", "kernel", "lscpu", "versions", "git", "steps"):
        assert p.get(key), key
    # The variables that shape a measurement (STARPU_*, OPENBLAS_*, ...), not the machine's PATH.
    assert isinstance(p["environment"], dict) and "PATH" not in p["environment"]
    from testbed import ROOT

    assert str(ROOT) not in (bundle / "provenance.yaml").read_text()  # repository-relative paths
    assert p["versions"]["starpu"].startswith("1.4")
    assert "gcc" in p["versions"]["compiler"].lower() or "cc" in p["versions"]["compiler"].lower()
    assert len(p["git"]["commit"]) == 40
    assert p["lscpu"]["CPU(s)"]
    done = {k: v for k, v in p["steps"].items() if v["status"] == "done" and k not in ("provenance", "summary")}
    assert "numa-dgemm-b64-alone" in done
    assert all(v["commands"] for v in done.values())
    assert "numa_bench kernel --kernel dgemm --b 64 --reps 3 --load alone" in done["numa-dgemm-b64-alone"]["commands"][0]
    assert "STARPU_HISTORY_MAX_ERROR=1000" in done["codelets-all"]["commands"][0]


def test_second_run_is_noop_and_resumes(bundle: Path) -> None:
    before = {p: p.stat().st_mtime_ns for p in bundle.rglob("*") if p.is_file()}
    ctx = cal.calibrate(cal.Options(machine="local", out=bundle, **SMALL), log=quiet)
    assert ctx.ran == []
    assert {p: p.stat().st_mtime_ns for p in bundle.rglob("*") if p.is_file()} == before
    # an interrupted calibration: one measurement missing -> only it (and the summaries) rerun
    (bundle / "numa" / "raw" / "daxpy-b64-all.csv").unlink()
    ctx = cal.calibrate(cal.Options(machine="local", out=bundle, **SMALL), log=quiet)
    assert ctx.ran[0] == "numa-daxpy-b64-all"
    assert set(ctx.ran) <= {"numa-daxpy-b64-all", "derived", "provenance", "summary"}
    assert (bundle / "numa" / "raw" / "daxpy-b64-all.csv").exists()


#: what differs between two calibrations of one machine: when they ran and how long each step took
TIMES = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[+-]\d\d:\d\d|Z)?")
DURATIONS = re.compile(r"(duration_s\"?: )[0-9.e-]+|(\| )[0-9.]+( \|)$", re.M)


def bundle_files(out: Path) -> dict[str, str]:
    """Every file of a bundle, its text with times and durations blanked."""
    return {str(p.relative_to(out)): DURATIONS.sub(r"\1\2<s>\3", TIMES.sub("<time>", p.read_text()))
            for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("stop", ["full disk at the step's record", "killed between the output and its record"])
def test_a_resumed_calibration_equals_an_uninterrupted_one(stop: str, tmp_path: Path, monkeypatch, capsys) -> None:
    """The gpus step stops after renaming gpus.json in, before its record steps/gpus.json is
    written: the disk fills there (one line, exit 1, host and hwloc kept), or the process is killed
    there (left: a gpus.json, here a partial one, without its record). The rerun redoes the step:
    the bundle has the same files, with the same contents but for times, as an uninterrupted
    calibration's. The machine steps (host, hwloc, gpus) and the summaries keep it to a second."""
    import errno
    import os

    from testbed.cli import main

    every_step = cal.steps_for
    monkeypatch.setattr(cal, "steps_for", lambda opts, nnuma: [
        s for s in every_step(opts, nnuma) if s.name in ("host", "hwloc", "gpus", "provenance", "summary")])
    real_atomic_file = cal.atomic_file
    disk = {"full": False}

    def atomic_file(path, *args, **kwargs):
        if disk["full"] and Path(path).parts[-2:] == ("steps", "gpus.json"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_atomic_file(path, *args, **kwargs)

    monkeypatch.setattr(cal, "atomic_file", atomic_file)
    argv = ["calibrate", "--machine", "m", "--out", "cal"]
    (tmp_path / "whole").mkdir()
    monkeypatch.chdir(tmp_path / "whole")
    assert main(argv) == 0
    (tmp_path / "resumed").mkdir()
    monkeypatch.chdir(tmp_path / "resumed")
    disk["full"] = True
    capsys.readouterr()
    assert main(argv) == 1
    disk["full"] = False
    errors = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "2 finished steps kept in cal (host, hwloc)" in errors[0], errors
    resumed = tmp_path / "resumed" / "cal"
    assert cal.finished_steps(resumed) == ["host", "hwloc"]
    assert not (resumed / "gpus.json").exists()  # the step did not finish: its output is not there
    if stop.startswith("killed"):
        (resumed / "gpus.json").write_text('[\n {\n  "index": 0,\n')
    assert main(argv) == 0
    whole = bundle_files(tmp_path / "whole" / "cal")
    again = bundle_files(resumed)
    assert sorted(again) == sorted(whole)
    assert again == whole


def test_unstable_timings_are_reported(bundle: Path) -> None:
    (bundle / "summary.md").unlink()
    opts = cal.Options(machine="local", out=bundle, unstable=1e-9, **SMALL)
    cal.calibrate(opts, log=quiet)
    text = (bundle / "summary.md").read_text()
    section = text.split("## Unstable timings", 1)[1]
    assert "microbenchmark dgemm b=64 alone" in section and "UNSTABLE" in text


def test_missing_lu_build_is_reported_not_faked(tmp_path: Path) -> None:
    out = tmp_path / "nolu"
    opts = cal.Options(machine="local", out=out, lu=tmp_path / "no-such-lu", **SMALL)
    # the codelet step alone: it must record why it did nothing and leave no output
    step = cal.Step("codelets-all", out / "sampling" / "codelets" / "45", cal.step_codelets("all"))
    ctx = cal.Context(opts, log=quiet)
    step.run(ctx)
    rec = json.loads((out / "steps" / "codelets-all.json").read_text())
    assert rec["status"].startswith("not available yet")
    assert not (out / "sampling" / "codelets").exists() and ctx.ran == []


@pytest.mark.parametrize("argv", [["--machine", "bad name"], ["--machine", "x", "--reps", "0"],
                                  ["--machine", "x", "--b", "-4"], ["--machine", "x", "--unstable", "0"],
                                  ["--machine", "x", "--paired-runs", "-1"], ["--machine", "x", "--hosts", "a"],
                                  ["--machine", "x", "--penalty-b", "0"]])
def test_bad_options(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    cal.add_arguments(p)
    with pytest.raises(InputError):
        cal.options_from_args(p.parse_args(argv))


def test_pu_logical_ids_follow_hwloc_order(bundle: Path) -> None:
    ids = cal.pu_logical_ids(bundle / "hwloc.xml")
    cpus = sorted(c for v in cal.numa_layout().values() for c in v)
    assert all(c in ids for c in cpus)
    assert sorted(ids.values()) == list(range(len(ids)))


@pytest.mark.skipif(shutil.which("mpirun") is None or shutil.which("mpicc") is None, reason="Open MPI missing")
def test_loopback_pingpong_is_recorded_as_loopback(tmp_path: Path) -> None:
    opts = cal.Options(machine="local", out=tmp_path / "b", hosts=["localhost", "localhost"], pingpong_reps=5, **SMALL)
    ctx = cal.Context(opts, log=quiet)
    cal.Step("network", opts.out / "network" / "pingpong.json", cal.step_network).run(ctx)
    assert ctx.ran == ["network"], (opts.out / "steps" / "network.json").read_text()
    doc = json.loads((opts.out / "network" / "pingpong.json").read_text())
    assert doc["loopback"] is True and "LOOPBACK" in doc["note"]
    assert 0 < doc["latency_s"] < 1e-3 and doc["bandwidth_Bps"] > 1e6
    rows = list(csv.DictReader(ln for ln in (opts.out / "network" / "pingpong.csv").open() if not ln.startswith("#")))
    assert [int(r["bytes"]) for r in rows][:3] == [1, 4, 16] and all(int(r["reps"]) == 5 for r in rows)
    # the binary rejects bad options with exit 2 (one rank suffices to see it)
    bad = subprocess.run(["mpirun", "-np", "2", "--oversubscribe", "--allow-run-as-root", str(microbench.PINGPONG),
                          "--reps", "0"], capture_output=True, text=True)
    assert bad.returncode != 0 and "--reps" in bad.stderr


def test_another_machines_bundle_is_not_resumed(tmp_path: Path) -> None:
    """A bundle measured elsewhere (calibration/gpunode: a Xeon + H100 VM) is refused here unless
    --allow-other-machine; this machine's own bundle resumes."""
    import json
    import socket
    import subprocess

    from testbed import ROOT
    from testbed.calibrate.calibrate import check_same_machine
    from testbed.common.errors import InputError

    other = tmp_path / "other"
    other.mkdir()
    facts = json.loads((ROOT / "calibration" / "gpunode" / "host.json").read_text())
    facts["host"], facts["lscpu"]["CPU(s)"] = "elsewhere", "4096"
    (other / "host.json").write_text(json.dumps(facts))
    with pytest.raises(InputError, match="allow-other-machine"):
        check_same_machine(other, allow_other=False)
    check_same_machine(other, allow_other=True)
    mine = tmp_path / "mine"
    mine.mkdir()
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    here = {"host": socket.gethostname(), "lscpu": dict(
        (k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in lscpu.splitlines()) if v)}
    (mine / "host.json").write_text(json.dumps(here))
    check_same_machine(mine, allow_other=False)
    # Same host name and CPU, other memory or GPUs (a node rebuilt, a GPU added): another machine.
    memtotal = open("/proc/meminfo").readline()
    kb = int(memtotal.split()[1])
    for changed in ({"meminfo_memtotal": f"MemTotal:       {kb * 4} kB"},
                    {"gpus": "GPU 0: NVIDIA H100 80GB HBM3", "meminfo_memtotal": memtotal}):
        (mine / "host.json").write_text(json.dumps(here | changed))
        with pytest.raises(InputError, match="allow-other-machine"):
            check_same_machine(mine, allow_other=False)
    (mine / "host.json").write_text(json.dumps(here | {"meminfo_memtotal": memtotal, "gpus": ""}))
    check_same_machine(mine, allow_other=False)

