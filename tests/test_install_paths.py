"""Reruns anywhere: the user-space install path. With apt off (TESTBED_APT=0) and the two
StarPU flavours given as installed prefixes (STARPU_NATIVE_PREFIX, STARPU_SIMGRID_PREFIX), envs/setup.sh
builds nothing of StarPU, apps/lu builds against the prefixes and both StarPU engines run a tiny LU,
all in a copy of the repository's tracked files. The prefixes are this checkout's own StarPU builds
(testbed/common/paths.py: the variables when set, else .deps/, which `make test` installs first).
A wrong prefix is one clear error naming the variable (setup, apps/lu's Makefile, the testbed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import ROOT
from testbed.common.paths import BUILD, STARPU_NATIVE, STARPU_PC, STARPU_SIMGRID, STARPU_SMPIRUN

pytestmark = pytest.mark.skipif(
    not ((STARPU_NATIVE / STARPU_PC).exists() and (STARPU_SIMGRID / STARPU_SMPIRUN).exists()
         and shutil.which("git")),
    reason="the native and SimGrid StarPU prefixes are not installed (run `make setup`)")


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's tracked files (as a fresh clone has them, with this checkout's edits)."""
    dest = tmp_path_factory.mktemp("repo")
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def user_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("STARPU_SOURCE_TARBALL", "TESTBED_LU")}
    env.update(TESTBED_APT="0", TESTBED_PYTHON="0", STARPU_NATIVE_PREFIX=str(STARPU_NATIVE),
               STARPU_SIMGRID_PREFIX=str(STARPU_SIMGRID), STARPU_HOME=str(BUILD / "test-starpu-home"))
    env.update(overrides)
    return env


def run(cmd: list[str], cwd: Path, **overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=user_env(**overrides), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def built(copy: Path) -> Path:
    """envs/setup.sh then apps/lu in the copy, against the prefixes."""
    t0 = time.monotonic()
    setup = run(["bash", "envs/setup.sh"], copy)
    assert setup.returncode == 0, setup.stderr
    assert time.monotonic() - t0 < 30, "setup with installed prefixes only checks them"
    assert "building StarPU" not in setup.stdout and "StarPU source: not fetched" in setup.stdout
    assert "using STARPU_NATIVE_PREFIX" in setup.stdout and "using STARPU_SIMGRID_PREFIX" in setup.stdout
    assert not list((copy / ".deps").glob("starpu-*")) and not (copy / ".venv").exists()
    lu = run(["make", "-s", "-C", "apps/lu", f"BUILD={copy / 'build'}"], copy)
    assert lu.returncode == 0, lu.stderr
    return copy


def simulate(repo: Path, *argv: str, **overrides: str) -> subprocess.CompletedProcess:
    # `python -m` from the copy: its testbed package (and so its build/ and results/) is the one imported
    return run([sys.executable, "-m", "testbed", "simulate", *argv], repo, **overrides)


def test_lu_runs_on_both_starpu_engines_from_the_prefixes(built: Path) -> None:
    for engine, cluster, n, b in (("real", "local-1", "960", "192"), ("starpu-simgrid", "chifflet-1", "1920", "960")):
        proc = simulate(built, "--engine", engine, "--cluster", cluster, "--n", n, "--b", b)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["engine"] == engine and out["makespan_s"] > 0
    assert (built / "build" / "lu-real" / "lu").exists() and (built / "build" / "lu-simgrid" / "lu").exists()


def test_wrong_prefix_is_one_clear_error(built: Path, tmp_path: Path) -> None:
    # the native build given as the SimGrid one: setup refuses it before doing anything
    setup = run(["bash", "envs/setup.sh"], built, STARPU_SIMGRID_PREFIX=str(STARPU_NATIVE))
    assert setup.returncode == 2 and "STARPU_SIMGRID_PREFIX=" in setup.stderr and "starpu_smpirun" in setup.stderr
    assert len(setup.stderr.strip().splitlines()) == 1
    missing = tmp_path / "no-starpu"
    setup = run(["bash", "envs/setup.sh"], built, STARPU_NATIVE_PREFIX=str(missing))
    assert setup.returncode == 2 and f"STARPU_NATIVE_PREFIX={missing}: no such directory" in setup.stderr
    make = run(["make", "-s", "-C", "apps/lu", f"BUILD={tmp_path}"], built, STARPU_NATIVE_PREFIX=str(missing))
    assert make.returncode == 2 and f"STARPU_NATIVE_PREFIX={missing}: expected" in make.stderr
    missing.mkdir()
    sim = simulate(built, "--engine", "starpu-simgrid", "--cluster", "chifflet-1", "--n", "1920", "--b", "960",
                   STARPU_SIMGRID_PREFIX=str(missing))
    assert sim.returncode == 2 and sim.stderr.startswith(f"error: STARPU_SIMGRID_PREFIX={missing}: expected")
    assert len(sim.stderr.strip().splitlines()) == 1
