"""Residual diagnostics and Daniel's half-normal plot: the tables behind the figures."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from support.experiments import TRUE, synthetic_runs

from testbed.analyze.analyze import anova_table, fit_model, write_plots, write_tables
from testbed.analyze.diagnostics import blom_quantiles, halfnormal_table, lenth_pse, residual_table

FACTORS = list("ABCD")


def test_residuals_are_response_minus_fitted_and_look_normal():
    runs = synthetic_runs(reps=4, sigma=1.0, seed=3)
    model = fit_model(runs, FACTORS)[0]
    table = residual_table(model, runs)
    assert len(table) == len(runs) and list(table["run"]) == list(runs["run"])
    np.testing.assert_allclose(table["fitted_s"] + table["residual_s"], runs["makespan_s"], rtol=0, atol=1e-9)
    # OLS residuals sum to zero and are orthogonal to the fitted values (an intercept in the model)
    assert abs(table["residual_s"].sum()) < 1e-8
    assert abs(np.dot(table["residual_s"], table["fitted_s"] - table["fitted_s"].mean())) < 1e-6
    # N(0, 1) noise: the studentized residuals have unit scale, and sorted they follow the normal quantiles
    assert 0.8 < table["studentized"].std() < 1.2
    ordered = table.sort_values("normal_quantile")
    assert ordered["studentized"].is_monotonic_increasing
    assert stats.pearsonr(ordered["normal_quantile"], ordered["studentized"])[0] > 0.97
    # a residual's rank gives its quantile: the quantiles are exactly Blom's positions, each once
    np.testing.assert_allclose(np.sort(table["normal_quantile"]), blom_quantiles(len(runs)))


def test_saturated_model_has_zero_residuals_and_no_studentized_ones():
    runs = synthetic_runs(reps=1)
    table = residual_table(fit_model(runs, FACTORS)[0], runs)
    assert np.allclose(table["residual_s"], 0) and table["studentized"].isna().all()


def test_halfnormal_effects_are_twice_the_coefficients_and_single_out_the_true_terms():
    runs = synthetic_runs(reps=2, sigma=0.5, seed=7)
    anova, _ = anova_table(runs, FACTORS, 0.05, 0.5)
    half = halfnormal_table(anova)
    assert len(half) == 15 and half["abs_effect_s"].is_monotonic_increasing
    assert half["halfnormal_quantile"].is_monotonic_increasing and half["halfnormal_quantile"].iloc[0] > 0
    estimates = anova.set_index("term")["estimate"]
    for row in half.itertuples():
        assert row.effect_s == pytest.approx(2 * estimates[row.term])
    # the six terms of the true model are the six largest effects, far above Lenth's line
    assert set(half["term"].tail(len(TRUE))) == set(TRUE)
    pse = half["lenth_pse_s"].iloc[0]
    top = half.tail(len(TRUE))
    assert (top["abs_effect_s"] > 3 * pse * top["halfnormal_quantile"]).all()
    # the inert terms: their PSE estimates the effects' standard error 2 sigma / sqrt(n) = 0.125 s
    assert 0.03 < pse < 0.3


def test_lenth_pse_ignores_the_active_effects():
    inert = np.array([0.1, -0.2, 0.15, -0.05, 0.12, -0.18, 0.08])
    assert lenth_pse(inert) == pytest.approx(lenth_pse(np.concatenate([inert, [50.0, -40.0]])))
    assert lenth_pse(np.concatenate([inert, [50.0, -40.0]])) < 1.0


def test_plots_refuse_tables_without_residuals(tmp_path):
    synthetic_runs("AB", reps=2).to_csv(tmp_path / "runs.csv", index=False)
    write_tables(tmp_path / "runs.csv", tmp_path)
    (tmp_path / "residuals.csv").unlink()
    with pytest.raises(Exception, match="residuals.csv"):
        write_plots(tmp_path, tmp_path / "runs.csv", tmp_path / "figures", [["A"]])
    assert not (tmp_path / "figures").exists()


def test_diagnostic_figures_are_drawn_for_a_saturated_model(tmp_path):
    synthetic_runs("ABC", reps=1).to_csv(tmp_path / "runs.csv", index=False)
    write_tables(tmp_path / "runs.csv", tmp_path)
    assert pd.read_csv(tmp_path / "residuals.csv")["studentized"].isna().all()
    written = write_plots(tmp_path, tmp_path / "runs.csv", tmp_path / "figures", [["A"]])
    names = {p.name for p in written}
    assert {"residuals_fitted.png", "residuals_qq.png", "halfnormal_effects.png"} <= names
    for name in ("residuals_fitted.png", "residuals_qq.png", "halfnormal_effects.png"):
        assert (tmp_path / "figures" / name).stat().st_size > 5000
