"""numasim predicts the real runs of the 16-core + H100 node from that node's calibration
(bench/real_node_replay.py; data in bench/data/real-node-16c-h100): each case inside the real
min–max or within 10 % of the real mean. The cases that miss are listed below with the
measured miss: they fail if they start passing (strict), so the list stays true."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from testbed import ROOT

_spec = importlib.util.spec_from_file_location("real_node_replay", ROOT / "bench" / "real_node_replay.py")
replay_mod = importlib.util.module_from_spec(_spec)
sys.modules["real_node_replay"] = replay_mod  # dataclasses look their module up
_spec.loader.exec_module(replay_mod)

#: Known misses (CHANGELOG.md's benchmark history, "Real-node replay"), with the numbers measured when listed.
KNOWN_MISSES = {
    "cpu-baseline-19200-960": "+16.8 % (real 7.45 s [6.80, 7.96], numasim 8.70 s): the study baseline's "
                              "14 workers at b=960 are slower in simulation than on the node",
}


@pytest.fixture(scope="module")
def replayed() -> dict:
    return {c.key: c for c in replay_mod.replay(seeds=5)}


@pytest.mark.parametrize("key", [c.key for c in replay_mod.cases()])
def test_real_case_predicted(replayed, key, request):
    if key in KNOWN_MISSES:
        request.applymarker(pytest.mark.xfail(reason=KNOWN_MISSES[key], strict=True))
    case = replayed[key]
    assert len(case.simulated) == 5 and len(case.real) >= 3
    assert case.ok, f"{key}: real {case.real}, numasim {case.simulated} ({case.diff_pct:+.1f} %)"


def test_every_recorded_case_is_replayed():
    keys = [c.key for c in replay_mod.cases()]
    assert len(keys) == 10 and set(KNOWN_MISSES) <= set(keys)
