"""Fixtures shared by several test modules (plain helpers and synthetic data are in tests/support/;
no test module imports another)."""

from __future__ import annotations

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


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch) -> Path:
    """Platform and run caches in the test's directory, not results/cache (TESTBED_CACHE)."""
    monkeypatch.setenv("TESTBED_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"
