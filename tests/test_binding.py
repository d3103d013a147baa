"""StarPU's thread binding replayed in Python (testbed/run/factors.py `starpu_placement`) against the
fixture shared with numasim's C++ replay (tests/data/binding_cases.json, read by
simulator/tests/test_binding.cpp): one replay of StarPU 1.4.10's topology.c in both languages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.run.factors import Layout, starpu_placement

CASES = json.loads((Path(__file__).parent / "data" / "binding_cases.json").read_text())["cases"]


@pytest.mark.parametrize("case", [pytest.param(c, id=c["name"]) for c in CASES])
def test_binding_case(case):
    layout = case["layout"]
    core_numa = tuple(k for k, n in enumerate(layout["cores_per_numa"]) for _ in range(n))
    p = starpu_placement(Layout(case["name"], core_numa, layout["threads_per_core"], tuple(layout["gpu_numa"])),
                         case["env"])
    got = {"main": p.main, "mpi": p.mpi, "gpu_drivers": p.gpu_drivers, "cpu_workers": p.cpu_workers}
    assert got == case["expected"], case["about"]


def test_fixture_covers_the_cases_issue_11_names():
    names = {c["name"] for c in CASES}
    assert {"default", "ncpu3_cpuids_0_1", "open_range", "main_thread_bind", "mpi_thread_cpuid",
            "hyperthreads_default", "chifflet_baseline"} <= names
    assert any(c["layout"]["threads_per_core"] == 2 and len(c["layout"]["gpu_numa"]) == 2 for c in CASES)
