"""Fixtures shared by several test modules (plain helpers and synthetic data are in tests/support/;
no test module imports another)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from support.experiments import SPEC, synthetic_runs

from testbed import ROOT


@pytest.fixture(scope="module")
def experiment_dir(tmp_path_factory) -> Path:
    """A synthetic campaign analysed as the workflow does: design and runs tables (support.experiments:
    a known model plus noise), `testbed analyze`'s tables and the figures with boxplots of A and of
    A, B. One per module: a module's tests may write into it."""
    from testbed.analyze.analyze import write_plots, write_tables
    from testbed.study.design import design_table

    out = tmp_path_factory.mktemp("results") / "syn"
    out.mkdir()
    design_table(SPEC).to_csv(out / "design.csv", index=False)
    synthetic_runs().to_csv(out / "runs.csv", index=False)
    write_tables(out / "runs.csv", out)
    write_plots(out, out / "runs.csv", out / "figures", [["A"], ["A", "B"]])
    return out


@pytest.fixture(scope="session")
def simulator_tool() -> Callable[[Path], Path]:
    """`simulator_tool(paths.FLOW_TIMES)`: a tool of simulator/ (its CMake target is the file's
    name), built in build/simulator when `make build` has not built it yet."""

    def build(tool: Path) -> Path:
        if not tool.exists():
            subprocess.run(["cmake", "-S", "simulator", "-B", "build/simulator", "-G", "Ninja"], cwd=ROOT, check=True,
                           capture_output=True)
            subprocess.run(["cmake", "--build", "build/simulator", "--target", tool.name], cwd=ROOT, check=True,
                           capture_output=True)
        return tool

    return build


@pytest.fixture(scope="session")
def starpu_home() -> Path:
    """A STARPU_HOME kept in build/: StarPU's first start on a fresh home calibrates
    the bus (seconds on an idle machine, minutes on a loaded 2-core one), so do it
    once per checkout. Only scheduling hints live there, no result depends on it."""
    home = ROOT / "build" / "test-starpu-home"
    home.mkdir(parents=True, exist_ok=True)
    return home


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch) -> Path:
    """Platform and run caches in the test's directory, not results/cache (TESTBED_CACHE)."""
    monkeypatch.setenv("TESTBED_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def small_fs(tmp_path: Path):
    """Factory: a tmpfs of `size` mounted in tmp_path (skips, saying why, where mount fails)."""
    mounted: list[Path] = []

    def make(size: str, name: str = "fs") -> Path:
        d = tmp_path / name
        d.mkdir()
        if shutil.which("mount") is None:
            pytest.skip("no `mount` here: cannot make a small file system to fill")
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {p.stderr.strip() or p.returncode}")
        mounted.append(d)
        return d

    yield make
    for d in mounted:
        subprocess.run(["umount", "-l", str(d)], check=False)
