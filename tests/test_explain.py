"""`testbed explain`: the mechanism ledger (testbed/study/explain.py, docs/interfaces.md §9.1).

The arithmetic on known makespans (weights of the contrast, paired contributions, the rows adding
up to the effect), then real numasim runs: the every-mechanism-on row is the plain two-level effect
of `testbed simulate` runs with the same seeds, and a mechanism without cost in the run contributes
exactly nothing.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from testbed import ROOT
from testbed.common import paths
from testbed.common.errors import InputError
from testbed.study import explain

needs_numasim = pytest.mark.skipif(not paths.NUMASIM.exists(), reason="numasim not built (make build)")
CLUSTER, N, B = "chifflet-1", 5760, 960


def test_contrast_weights_are_the_anovas_coded_estimates() -> None:
    assert explain.contrast(("A",)) == [({"A": -1}, -0.5), ({"A": 1}, 0.5)]
    ae = dict((tuple(lv.values()), w) for lv, w in explain.contrast(("A", "E")))
    assert ae == {(-1, -1): 0.25, (-1, 1): -0.25, (1, -1): -0.25, (1, 1): 0.25}


@pytest.mark.parametrize("text", ["Z", "A:A", "A:B:C", "", "AE"])
def test_a_term_is_a_factor_or_a_pair(text: str) -> None:
    with pytest.raises(InputError):
        explain.parse_term(text)


class FixedRunner:
    """Makespans from a formula of the levels, the mechanisms off and the seed."""

    def __init__(self, formula):
        self.formula = formula

    def run_all(self, jobs):
        return [self.formula(levels, seed, off) for levels, seed, off in jobs]


def test_contributions_are_paired_and_the_rows_add_up_to_the_effect() -> None:
    cost = {"pinned_alloc": 2.0, "memory_latency_stall": 0.5, "cuda_malloc": 0.0}

    def makespan(levels: dict, seed: int, off: tuple) -> float:
        a = levels["A"]
        y = 40 + 0.1 * seed + 0.2 * a  # the base model's effect of A: +0.2 coded
        for m, c in cost.items():
            if m not in off:
                y += c * (a + 1) / 2  # each mechanism costs c at A = +1 only
        if "pinned_alloc" not in off and "memory_latency_stall" not in off:
            y += 0.3 * (a + 1) / 2  # the two act through each other
        return y

    rows, runs = explain.ledger(("A",), list(cost), [1, 2, 3], FixedRunner(makespan))
    by = {(r["row"], r["mechanism"]): r for r in rows}
    assert by[("effect", "")]["estimate_s"] == pytest.approx(0.2 + (2.0 + 0.5 + 0.3) / 2)
    assert by[("contribution", "pinned_alloc")]["estimate_s"] == pytest.approx((2.0 + 0.3) / 2)
    assert by[("contribution", "memory_latency_stall")]["estimate_s"] == pytest.approx((0.5 + 0.3) / 2)
    assert by[("contribution", "cuda_malloc")]["estimate_s"] == pytest.approx(0.0)
    assert by[("base", "")]["estimate_s"] == pytest.approx(0.2)
    assert by[("interactions", "")]["estimate_s"] == pytest.approx(-0.3 / 2)
    # the seed shifts every run alike: paired differences have no spread
    assert by[("contribution", "pinned_alloc")]["ci95_high_s"] == pytest.approx(by[("contribution", "pinned_alloc")]
                                                                                ["ci95_low_s"])
    parts = sum(r["estimate_s"] for r in rows if r["row"] != "effect")
    assert parts == pytest.approx(by[("effect", "")]["estimate_s"])
    assert len(runs) == (len(cost) + 2) * 2 * 3


def _simulate(factors: str, seed: int, off: str | None = None) -> float:
    cmd = [sys.executable, "-m", "testbed", "simulate", "--engine", "numasim", "--cluster", CLUSTER, "--n", str(N),
           "--b", str(B), "--factors", factors, "--seed", str(seed)]
    if off:
        cmd += ["--mechanism-off", off]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["makespan_s"]


@pytest.fixture(scope="module")
def ledger_a(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("explain") / "ledger"
    subprocess.run([sys.executable, "-m", "testbed", "explain", "--factor", "A", "--cluster", CLUSTER, "--n", str(N),
                    "--b", str(B), "--seeds", "2", "--jobs", "2", "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True, text=True)
    return out


@needs_numasim
def test_the_all_on_row_is_the_plain_two_level_effect(ledger_a: Path) -> None:
    rows = pd.read_csv(ledger_a / "ledger.csv")
    effect = rows[rows["row"] == "effect"].iloc[0]
    plain = [(_simulate("A=1", s) - _simulate("A=-1", s)) / 2 for s in (1, 2)]
    assert effect["estimate_s"] == pytest.approx(sum(plain) / 2, rel=1e-9, abs=1e-12)
    lo, hi = effect["ci95_low_s"], effect["ci95_high_s"]
    assert lo <= sum(plain) / 2 <= hi
    # one contribution row per mechanism numasim lists, and the rows add up to the effect
    from testbed.run.engines.numasim import mechanism_names

    assert list(rows[rows["row"] == "contribution"]["mechanism"]) == mechanism_names()
    assert rows[rows["row"] != "effect"]["estimate_s"].sum() == pytest.approx(effect["estimate_s"], abs=1e-9)
    for name in ("ledger.md", "runs.csv", "ledger_A.png", "ledger_A.pdf"):
        assert (ledger_a / name).is_file(), name


@needs_numasim
def test_a_contribution_is_the_effect_without_the_mechanism(ledger_a: Path) -> None:
    rows = pd.read_csv(ledger_a / "ledger.csv").set_index("mechanism")
    pinned = rows.loc["pinned_alloc"]
    without = [(_simulate("A=1", s, "pinned_alloc") - _simulate("A=-1", s, "pinned_alloc")) / 2 for s in (1, 2)]
    assert pinned["effect_without_s"] == pytest.approx(sum(without) / 2, rel=1e-9, abs=1e-12)
    # chifflet-1 is one node: StarPU-MPI sends nothing, so its memory node cannot contribute
    assert rows.loc["mpi_main_ram", "estimate_s"] == 0
    runs = pd.read_csv(ledger_a / "runs.csv")
    assert set(runs["A"]) == {-1, 1} and not math.isnan(runs["makespan_s"].sum())


@needs_numasim
@pytest.mark.parametrize("args, key", [
    (["--factor", "Q"], "--factor Q"),
    (["--factor", "A", "--mechanism", "pinned"], "--mechanism-off pinned"),
    (["--factor", "A", "--seeds", "0"], "--seeds"),
    (["--factor", "A", "--at", "B=2"], "--at B"),
    (["--anova", "x.csv"], "--anova"),
    (["--factor", "A", "--distribution", "nowhere.txt"], "--distribution"),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path, args: list[str], key: str) -> None:
    p = subprocess.run([sys.executable, "-m", "testbed", "explain", "--cluster", CLUSTER, "--n", str(N), "--b", str(B),
                        *args, "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and key in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()


@needs_numasim
def test_a_ledger_runs_a_given_tile_mapping(tmp_path: Path) -> None:
    """--distribution FILE as in `testbed simulate`: the ledger's effect is the plain effect of
    runs with that file (hetero-3 with every tile on rank 1, a chetemi)."""
    nt = N // B
    mapping = tmp_path / "mapping.txt"
    mapping.write_text("\n".join(" ".join(["1"] * nt) for _ in range(nt)) + "\n")
    out = tmp_path / "ledger"
    common = ["--cluster", "hetero-3", "--n", str(N), "--b", str(B), "--distribution", str(mapping)]
    subprocess.run([sys.executable, "-m", "testbed", "explain", "--factor", "A", *common, "--seeds", "1",
                    "--mechanism", "pinned_alloc", "--jobs", "2", "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True, text=True)
    effect = pd.read_csv(out / "ledger.csv").query("row == 'effect'").iloc[0]["estimate_s"]

    def plain(a: int) -> float:
        cmd = [sys.executable, "-m", "testbed", "simulate", "--engine", "numasim", *common, "--factors", f"A={a}"]
        return json.loads(subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout)["makespan_s"]

    assert effect == pytest.approx((plain(1) - plain(-1)) / 2, rel=1e-9, abs=1e-10)  # as ledger.csv prints it
    assert "file mapping" in (out / "ledger.md").read_text()

