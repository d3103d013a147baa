"""Fault injection: a small campaign killed with SIGKILL at seeded random points, of snakemake (its
whole process group) or of one of its batch jobs, several times in a row, then completed; its runs
table and ANOVA are those of an uninterrupted run (tests/support/faults.py). The long version,
50 kills and more: bench/fault_injection.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support import faults

from testbed.common import paths

pytestmark = pytest.mark.skipif(not paths.NUMASIM.exists(), reason="numasim not built (make build)")


def test_a_campaign_killed_three_times_then_completed_gives_the_uninterrupted_results(tmp_path: Path) -> None:
    t0 = time.monotonic()
    runs, anova = faults.completed(faults.workflow(tmp_path / "clean"))
    clean_s = time.monotonic() - t0
    assert len(runs) == 8 and runs["batch"].nunique() == 4 and "A" in anova

    hurt = faults.workflow(tmp_path / "killed")
    # Delays relative to this machine's uninterrupted run (a resumed attempt has less left to do),
    # so that the kills land while there is work, on a quiet machine as on a loaded one. Seed 10:
    # the process group after 0.18 of it, a batch job after 0.25 (or when the next starts), the
    # group after 0.16.
    report = faults.interrupted(hurt, kills=3, seed=10, max_delay_s=0.3 * clean_s)
    assert report.hits >= 2 and {k.target for k in report.kills} >= {"snakemake", "job"}, report.kills
    runs_k, anova_k = faults.completed(hurt)
    assert anova_k == anova, report.kills
    assert runs_k.equals(runs), report.kills
    # nothing half-written left beside the outputs
    assert not [p for p in (hurt / "results").rglob("*") if ".tmp" in p.name], report.kills
