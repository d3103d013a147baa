"""Regression: numasim runs that deadlocked (the lost-waiter deadlock).

A finished copy's record was put back on the free list before the tasks and MPI sends waiting for
it were woken; waking a worker yields to the other actors, and a copy requested meanwhile reused
the record, whose waiter list transfer_done then overwrote: that copy's waiter (a task, or an MPI
send) was never woken. It depends on which actors run at the same date, hence cases at model means
(no variability) on the 3-node cluster, with one memory node per NUMA node (factor A) and
heterogeneous tiles; both deadlocked before the fix (as did the study's g5k-lille-21 N=96000 A=1
case), with either link model. A run that still stalls ends with exit 1 and a one-line diagnosis
(simulator/tests/test_simulation.cpp StuckRun*).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.common import paths
from testbed.describe.machines import load_cluster
from testbed.platform.platform_cmd import generate
from testbed.run.engines import RunSpec
from testbed.run.resolve import resolve_run_env
from testbed.run.simulate import simulate

pytestmark = pytest.mark.skipif(not paths.NUMASIM.exists(), reason="numasim not built (make build)")


@pytest.fixture(scope="module")
def hetero3(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("deadlock") / "hetero-3"
    generate(load_cluster("hetero-3"), out, (960,))
    return out


def lu_tasks(nt: int) -> int:
    return nt + nt * (nt - 1) + sum((nt - 1 - k) ** 2 for k in range(nt))


@pytest.mark.parametrize("n, levels", [(19200, "ABCE"), (24000, "ABCEG")])
def test_lost_copy_waiter_no_longer_deadlocks(hetero3: Path, tmp_path: Path, n: int, levels: str) -> None:
    factors = {f: (1 if f in levels else -1) for f in "ABCDEFG"}
    spec = RunSpec(engine="numasim", cluster="hetero-3", n=n, b=960,
                   **resolve_run_env("hetero-3", factors, {}, None).spec_fields(),
                   factors=factors, seed=1, distribution={"kind": "heterogeneous"}, variability=False,
                   platform_dir=hetero3, workdir=tmp_path)
    out = simulate(spec)
    assert out["tasks"] == lu_tasks(n // 960)
