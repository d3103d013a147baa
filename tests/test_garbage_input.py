"""Garbage that used to be accepted as data: damaged perf models, negative
scheduler weights and worker counts, duplicate factor letters, sizes beyond the simulator's
limits. Each is refused at the boundary: exit 2, one line naming the file/key, no traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.common.errors import InputError
from testbed.starpu.perfmodel_files import read_model

GOOD = "24c84a50\t22118400       \t0.000000e+00   \t3.937073e+04   \t5.865581e+03   \t4.724488e+05   \t1.901352e+10   \t12"


def run_testbed(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def platform(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("garbage") / "pc"
    assert run_testbed("platform", "--cluster", "chifflet-1", "--out", str(out), "--tile-sizes", "960").returncode == 0
    return out


def damaged(platform: Path, tmp_path: Path, field: int, value: str) -> Path:
    """A copy of the platform whose dgemm model has `value` in field `field` of its first entry."""
    copy = tmp_path / "pc"
    shutil.copytree(platform, copy)
    model = copy / "starpu" / "chifflet" / "sampling" / "codelets" / "45" / "dgemm.chifflet"
    lines = model.read_text().splitlines()
    i = next(k for k, ln in enumerate(lines) if ln[:8].isalnum() and len(ln.split()) == 8 and not ln.startswith("#"))
    f = lines[i].split()
    f[field] = value
    lines[i] = "\t".join(f)
    model.write_text("\n".join(lines) + "\n")
    return copy


@pytest.mark.parametrize("field,value", [(3, "abc"), (3, "-5"), (3, "0"), (4, "nan"), (4, "-1"), (7, "-3"),
                                         (7, "1.5"), (0, "zz"), (1, "0")])
def test_damaged_model_entry_refused_by_both_readers(platform, tmp_path, field, value):
    pdir = damaged(platform, tmp_path, field, value)
    model = pdir / "starpu" / "chifflet" / "sampling" / "codelets" / "45" / "dgemm.chifflet"
    with pytest.raises(InputError, match="history entry"):
        read_model(model)
    proc = run_testbed("simulate", "--engine", "numasim", "--cluster", "chifflet-1", "--n", "1920", "--b", "960",
                       "--platform-dir", str(pdir))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "dgemm.chifflet" in proc.stderr and "history entry" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_intact_model_still_reads(platform):
    combs = read_model(platform / "starpu" / "chifflet" / "sampling" / "codelets" / "45" / "dgemm.chifflet")
    assert combs and all(e.mean_us > 0 for c in combs for e in c.entries)


@pytest.mark.parametrize("env,ok", [("STARPU_SCHED_BETA=-1", False), ("STARPU_SCHED_ALPHA=-0.5", False),
                                    ("STARPU_NCPU=-2", False), ("STARPU_NCUDA=-7", False),
                                    ("STARPU_NCPU=-1", False), ("STARPU_SCHED_BETA=0", True)])
def test_scheduler_and_worker_settings_range(platform, env, ok):
    proc = run_testbed("simulate", "--engine", "numasim", "--cluster", "chifflet-1", "--n", "1920", "--b", "960",
                       "--platform-dir", str(platform), "--env", env)
    if ok:
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["makespan_s"] > 0
    else:
        assert proc.returncode == 2 and env.split("=")[0] in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args,key", [(["--factors", "A=1,A=-1"], "--factors A"),
                                      (["--factors", "E=1,e=1"], "--factors E"),
                                      (["--n", "2147483648", "--b", "2147483648"], "--n/--b"),
                                      (["--n", "4097000", "--b", "1000"], "--n/--b")])
def test_cli_duplicates_and_sizes_refused_before_work(args, key):
    base = {"--n": "1920", "--b": "960"}
    for k in ("--n", "--b"):
        if k in args:
            base.pop(k)
    flat = [x for kv in base.items() for x in kv]
    proc = run_testbed("simulate", "--engine", "numasim", "--cluster", "chifflet-1", *flat, *args)
    assert proc.returncode == 2 and key in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_numasim_runs_under_a_batch_schedulers_address_space_limit(tmp_path):
    """434 actors with SimGrid's default 8 MiB stacks need > 4 GB of address space; numasim
    asks for 512 KiB stacks, so it runs under the `ulimit -v 4000000` clusters impose."""
    plat = tmp_path / "pl"
    assert run_testbed("platform", "--cluster", "g5k-lille-21", "--out", str(plat), "--tile-sizes", "960").returncode == 0
    cmd = (f"ulimit -v 4000000; {sys.executable} -m testbed simulate --engine numasim --cluster g5k-lille-21 "
           f"--platform-dir {plat} --n 9600 --b 960")
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert json.loads(proc.stdout)["workers"] == 434


def test_entry_without_samples_is_valid_and_ignored(platform, tmp_path):
    """StarPU writes `mean 0, n 0` for an entry whose samples were all left out (calibration in
    progress): both readers accept it and use no timing from it."""
    pdir = damaged(platform, tmp_path, 7, "0")
    model = pdir / "starpu" / "chifflet" / "sampling" / "codelets" / "45" / "dgemm.chifflet"
    lines = model.read_text().splitlines()
    i = next(k for k, ln in enumerate(lines) if len(ln.split()) == 8 and ln.split()[7] == "0")
    f = lines[i].split()
    f[3:7] = ["0.000000e+00"] * 4
    lines[i] = "\t".join(f)
    model.write_text("\n".join(lines) + "\n")
    assert all(e.nsample > 0 for c in read_model(model) for e in c.entries)
    proc = run_testbed("simulate", "--engine", "numasim", "--cluster", "chifflet-1", "--n", "1920", "--b", "960",
                       "--platform-dir", str(pdir))
    assert "Traceback" not in proc.stderr
    assert proc.returncode in (0, 2)  # runs, or says the tile size has no calibrated entry
    if proc.returncode == 2:
        assert "dgemm.chifflet" in proc.stderr
