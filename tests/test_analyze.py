"""Analysis: known coefficients recovered, hand-computed sums of squares, tables, plots, best config."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from support.experiments import TRUE, synthetic_runs

from testbed.analyze.analyze import (
    all_terms,
    anova_table,
    best_configuration,
    fit_model,
    summary_table,
    write_plots,
    write_tables,
)
from testbed.cli import main


def test_known_coefficients_are_within_their_confidence_intervals():
    runs = synthetic_runs()
    table, facts = anova_table(runs, list("ABCD"), 0.05, 0.5)
    terms = table[table["term"] != "Residuals"].set_index("term")
    assert list(terms.index) == all_terms(list("ABCD"))
    model, _, _ = fit_model(runs, list("ABCD"))
    df = facts["df_resid"]
    for term in terms.index:
        true, row = TRUE.get(term, 0.0), terms.loc[term]
        # the reported 95% CI is estimate +- t(0.975, df) * standard error ...
        se = float(model.bse["x_" + term.replace(":", ":x_")])
        assert row["ci_high"] - row["estimate"] == pytest.approx(stats.t.ppf(0.975, df) * se, rel=1e-9)
        # ... and every true coefficient (zeros included) lies in its CI; the CIs are widened
        # (Bonferroni over the 15 terms) so that the family of checks holds with 95% probability.
        half = (row["ci_high"] - row["ci_low"]) / 2 * stats.t.ppf(1 - 0.025 / len(terms), df) / stats.t.ppf(0.975, df)
        assert abs(row["estimate"] - true) <= half, (term, true, row["estimate"], half)
    for term in TRUE:
        assert terms.loc[term, "prominent"], term  # clearly significant and >= 0.5% of the variance
    assert facts["intercept"] == pytest.approx(100, abs=0.5)
    assert facts["df_resid"] == 16 * 3 - 16
    # the terms that are not in the true model are not prominent
    assert not terms.loc[[t for t in terms.index if t not in TRUE], "prominent"].any()


def test_confidence_intervals_have_their_nominal_coverage():
    """Over many synthetic data sets, 95% CIs hold the true coefficient about 95% of the time."""
    truth = {"A": 2.0, "B": -1.0, "A:B": 0.5, "A:B:C": -0.7}
    covered = total = 0
    for seed in range(150):
        runs = synthetic_runs("ABC", reps=2, seed=seed, coefficients=truth)
        model, terms, _ = fit_model(runs, list("ABC"))
        ci = model.conf_int(0.05).rename(index=lambda t: t.replace("x_", ""))
        for term in terms:
            true = truth.get(term, 0.0)
            covered += ci.loc[term, 0] <= true <= ci.loc[term, 1]
            total += 1
    assert 0.93 <= covered / total <= 0.97, covered / total


def test_sums_of_squares_match_hand_computation():
    """Balanced 2^3 x 2: beta = mean(y * x_term), SS_term = N * beta^2, residual from cell means."""
    runs = synthetic_runs("ABC", reps=2, sigma=2.0, seed=5)
    y = runs["makespan_s"].to_numpy()
    n = len(y)
    table, facts = anova_table(runs, list("ABC"), 0.05, 0.0)
    terms = table.set_index("term")
    ss_terms = 0.0
    for term in all_terms(list("ABC")):
        x = np.prod([runs[f].to_numpy() for f in term.split(":")], axis=0)
        beta = float(np.mean(y * x))
        assert terms.loc[term, "estimate"] == pytest.approx(beta, rel=1e-9)
        assert terms.loc[term, "sum_sq"] == pytest.approx(n * beta**2, rel=1e-9)
        ss_terms += n * beta**2
    cell_means = runs.groupby(["A", "B", "C"])["makespan_s"].transform("mean").to_numpy()
    ss_resid = float(((y - cell_means) ** 2).sum())
    ss_total = float(((y - y.mean()) ** 2).sum())
    assert ss_terms + ss_resid == pytest.approx(ss_total, rel=1e-9)
    assert terms.loc["Residuals", "sum_sq"] == pytest.approx(ss_resid, rel=1e-9)
    mse = ss_resid / (n - 8)
    assert terms.loc["A", "F"] == pytest.approx(terms.loc["A", "sum_sq"] / mse, rel=1e-9)
    assert terms.loc["A", "p_value"] == pytest.approx(stats.f.sf(terms.loc["A", "F"], 1, n - 8), rel=1e-9)
    assert terms.loc["A", "variance_pct"] == pytest.approx(100 * n * np.mean(y * runs["A"]) ** 2 / ss_total)
    assert facts["r2"] == pytest.approx(ss_terms / ss_total, rel=1e-9)


def test_paper_table_filter_uses_both_thresholds(tmp_path: Path):
    runs = synthetic_runs()
    runs.to_csv(tmp_path / "runs.csv", index=False)
    write_tables(tmp_path / "runs.csv", tmp_path, p_max=0.01, min_variance_pct=2.0)
    table = pd.read_csv(tmp_path / "anova.csv")
    shown = table[table["prominent"]]
    assert ((shown["p_value"] < 0.01) & (shown["variance_pct"] >= 2.0)).all()
    hidden = table[~table["prominent"] & (table["term"] != "Residuals")]
    assert ((hidden["p_value"] >= 0.01) | (hidden["variance_pct"] < 2.0)).all()
    markdown = (tmp_path / "anova.md").read_text()
    for term in shown["term"]:
        assert f"| {term} |" in markdown
    assert "| B:C |" not in markdown
    assert "<table" in (tmp_path / "anova.html").read_text()
    assert "R² = " in markdown


def test_fractional_design_drops_aliased_terms():
    runs = synthetic_runs("ABC", reps=4, coefficients={"A": 3.0, "B": 1.0})
    runs["D"] = runs["A"] * runs["B"] * runs["C"]  # 2^(4-1), D = ABC
    table, facts = anova_table(runs, list("ABCD"), 0.05, 0.5)
    assert facts["terms"] == 7
    assert facts["aliases"]["A:B:C"] == "D"
    assert facts["aliases"]["A:B:C:D"] == "(Intercept)"
    assert facts["aliases"]["C:D"] == "A:B"
    a = table.set_index("term").loc["A"]
    assert abs(a["estimate"] - 3.0) <= 2 * (a["ci_high"] - a["ci_low"])  # about 4 standard errors


def test_best_configuration_and_gain_over_default():
    runs = synthetic_runs("AB", reps=5, sigma=0.5, coefficients={"A": -4.0, "B": -1.0})
    summary = summary_table(runs, ["A", "B"])
    best = best_configuration(runs, ["A", "B"], summary)
    assert best["best"]["levels"] == {"A": 1, "B": 1}
    default = runs[(runs["A"] == -1) & (runs["B"] == -1)]["makespan_s"]
    fastest = runs[(runs["A"] == 1) & (runs["B"] == 1)]["makespan_s"]
    gain = best["gain"]
    assert gain["seconds"] == pytest.approx(default.mean() - fastest.mean())
    assert gain["ci_low"] <= 10.0 <= gain["ci_high"]  # true gain: 2 * (4 + 1)
    welch = stats.ttest_ind(default, fastest, equal_var=False)
    assert gain["p_value"] == pytest.approx(welch.pvalue, rel=1e-6)
    assert gain["percent"] == pytest.approx(100 * gain["seconds"] / default.mean())
    lo, hi = best["best"]["ci_low"], best["best"]["ci_high"]
    assert lo < fastest.mean() < hi


def test_no_default_configuration_is_reported():
    runs = synthetic_runs("AB", reps=2)
    runs = runs[~((runs["A"] == -1) & (runs["B"] == -1))]
    best = best_configuration(runs, ["A", "B"], summary_table(runs, ["A", "B"]))
    assert best["gain"] is None and "not in the design" in best["gain_note"]


def test_cli_tables_then_plots_from_tidy_tables(tmp_path: Path):
    runs = synthetic_runs()
    runs.to_csv(tmp_path / "runs.csv", index=False)
    out = tmp_path / "analysis"
    assert main(["analyze", str(tmp_path / "runs.csv"), "--out", str(out), "--stage", "tables"]) == 0
    for name in ("anova.csv", "summary.csv", "effects.csv", "residuals.csv", "model.json", "best.json", "anova.md",
                 "anova.html"):
        assert (out / name).exists(), name
    assert not (out / "figures").exists()
    effects = pd.read_csv(out / "effects.csv")
    main_a = effects[(effects["kind"] == "main") & (effects["factor"] == "A")].set_index("level")["mean_s"]
    assert main_a[1] - main_a[-1] == pytest.approx(2 * 5.0, abs=0.6)
    assert main(["analyze", str(tmp_path / "runs.csv"), "--out", str(out), "--stage", "plots",
                 "--boxplot", "A", "--boxplot", "A,D"]) == 0
    names = {p.name for p in (out / "figures").iterdir() if p.name != ".testbed-output"}  # the marker
    figures = sorted(n for n in names if n.endswith(".png"))
    assert figures == ["boxplot_A.png", "boxplot_AD.png", "halfnormal_effects.png", "interactions_A.png",
                       "interactions_pairs.png", "main_effects.png", "residuals_fitted.png", "residuals_qq.png"]
    for name in figures:
        assert (out / "figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / "figures" / name.replace(".png", ".pdf")).read_bytes()[:5] == b"%PDF-"  # the vector twin
    assert names == set(figures) | {n.replace(".png", ".pdf") for n in figures}
    facts = json.loads((out / "model.json").read_text())
    assert facts["factors"] == list("ABCD") and 0.9 < facts["r2"] <= 1


def test_boxplot_of_unknown_factor_is_an_input_error(tmp_path: Path):
    synthetic_runs("AB", reps=2).to_csv(tmp_path / "runs.csv", index=False)
    assert main(["analyze", str(tmp_path / "runs.csv"), "--out", str(tmp_path), "--stage", "tables"]) == 0
    with pytest.raises(Exception, match="factors among"):
        write_plots(tmp_path, tmp_path / "runs.csv", tmp_path / "figures", [["A", "G"]])
    assert not (tmp_path / "figures").exists()
