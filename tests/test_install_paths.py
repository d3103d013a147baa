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
    env = {k: v for k, v in os.environ.items()
           if k not in ("STARPU_SOURCE_TARBALL", "TESTBED_LU", "CHAMELEON_SOURCE_TARBALL", "CHAMELEON_PREFIX",
                        "CHAMELEON_SIMGRID_PREFIX", "TESTBED_STARVZ", "TESTBED_STARVZ_VENDOR")}
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
    # TESTBED_STARVZ=auto: no ../shared/vendor/r beside the copy, no StarVZ (its test says so)
    assert "StarVZ: not installed (no " in setup.stdout and not (copy / ".deps" / "R").exists()
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


def chameleon_tree(root: Path, major: int, minor: int, submodules: bool = True) -> Path:
    """A directory shaped like a Chameleon source tree of version major.minor (what setup.sh
    checks before building: the project, the version, the submodules a release tarball has)."""
    src = root / f"chameleon-{major}.{minor}.0"
    src.mkdir(parents=True)
    (src / "CMakeLists.txt").write_text(f"project(CHAMELEON C CXX Fortran)\nset(CHAMELEON_VERSION_MAJOR {major})\n"
                                        f"set(CHAMELEON_VERSION_MINOR {minor})\n")
    if submodules:
        for sub in ("hqr/CMakeLists.txt", "cmake_modules/morse_cmake/modules/MorseInit.cmake"):
            (src / sub).parent.mkdir(parents=True)
            (src / sub).write_text("# submodule\n")
    return src


@pytest.mark.parametrize("make,words", [
    (lambda d: d / "nope.tar.gz", "no such file"),
    (lambda d: (d / "notes.txt").write_text("not a tarball\n") and d / "notes.txt", "a tar archive"),
    (lambda d: chameleon_tree(d, 1, 1), "Chameleon 1.2 or later"),
    (lambda d: chameleon_tree(d, 1, 2, submodules=False), "submodules"),
], ids=["missing", "not a tarball", "chameleon 1.1", "git archive without submodules"])
def test_wrong_chameleon_tarball_is_one_clear_error(built: Path, tmp_path: Path, make, words: str) -> None:
    """CHAMELEON_SOURCE_TARBALL is checked before anything is built: one line naming it, exit 2,
    nothing of it left under .deps."""
    given = make(tmp_path)
    if given.is_dir():
        tarball = tmp_path / f"{given.name}.tar.gz"
        subprocess.run(["tar", "-czf", str(tarball), "-C", str(tmp_path), given.name], check=True)
        given = tarball
    setup = run(["bash", "envs/setup.sh"], built, CHAMELEON_SOURCE_TARBALL=str(given))
    errors = setup.stderr.strip().splitlines()
    assert setup.returncode == 2 and len(errors) == 1, setup.stderr
    assert f"CHAMELEON_SOURCE_TARBALL={given}" in errors[0] and words in errors[0]
    assert not list((built / ".deps" / "src").glob("chameleon-*")) and not list((built / ".deps").glob("chameleon-*"))


def test_the_chameleon_build_says_it_is_alive_and_keeps_its_whole_output(built: Path, tmp_path: Path) -> None:
    """A Chameleon-shaped CMake project whose build takes a few seconds: setup.sh prints a
    "still building" line with the log's last line every TESTBED_PROGRESS_S (60 by default),
    keeps both make passes' output in .deps/build-chameleon-<flavour>.log, and installs it."""
    src = chameleon_tree(tmp_path, 1, 2)
    (src / "slow.sh").write_text("for i in 1 2 3; do echo compiling-step-$i; sleep 1; done\n")
    (src / "CMakeLists.txt").write_text(
        (src / "CMakeLists.txt").read_text().replace("C CXX Fortran", "C") + "cmake_minimum_required(VERSION 3.13)\n"
        "add_custom_target(slow ALL COMMAND sh ${CMAKE_SOURCE_DIR}/slow.sh)\n"
        "install(FILES CMakeLists.txt DESTINATION share/fake)\n")
    tarball = tmp_path / "chameleon-1.2.0.tar.gz"
    subprocess.run(["tar", "-czf", str(tarball), "-C", str(tmp_path), src.name], check=True)
    setup = run(["bash", "envs/setup.sh"], built, CHAMELEON_SOURCE_TARBALL=str(tarball), TESTBED_PROGRESS_S="1")
    try:
        assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
        for flavour in ("native", "simgrid"):
            assert f"still building Chameleon ({flavour})" in setup.stdout, setup.stdout
            assert f"Chameleon ({flavour} build) installed" in setup.stdout
            log = (built / ".deps" / f"build-chameleon-{flavour}.log").read_text()
            assert log.count("compiling-step-3") == 2, log[-3000:]  # both passes
            assert (built / ".deps" / f"chameleon-{flavour}" / "share" / "fake" / "CMakeLists.txt").exists()
            # no CMake package in this stand-in: the project's driver is not built against it, and says so
            assert f"Chameleon's LU driver ({flavour}): not built, " in setup.stdout, setup.stdout
        assert "; last: " in setup.stdout
    finally:
        for d in [*(built / ".deps" / "src").glob("chameleon-*"), *(built / ".deps").glob("chameleon-*")]:
            shutil.rmtree(d, ignore_errors=True)


def test_a_chameleon_prefix_without_its_cmake_package_is_one_clear_error(built: Path, tmp_path: Path) -> None:
    """CHAMELEON_PREFIX names what apps/chameleon_lu is built against (CMake's find_package): a
    directory without Chameleon's CMake package is one line naming the variable, exit 2."""
    setup = run(["bash", "envs/setup.sh"], built, CHAMELEON_PREFIX=str(tmp_path))
    errors = setup.stderr.strip().splitlines()
    assert setup.returncode == 2 and len(errors) == 1, setup.stderr
    assert f"CHAMELEON_PREFIX={tmp_path}: expected an installed Chameleon 1.2 or later" in errors[0]
    assert not (built / "build" / "chameleon-lu-native").exists()


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
