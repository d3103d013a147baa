"""Residual diagnostics of the linear model and Daniel's half-normal plot of the effects.

Tables (tidy, tested) and figures (drawn from the tables only), as the rest of `testbed analyze`:

* `residual_table(model, runs)` -> residuals.csv: per run its fitted makespan, residual, internally
  studentized residual and the normal quantile of its rank (Blom's plotting positions), the
  inputs of the residuals-vs-fitted and normal QQ plots;
* `halfnormal_table(anova)`: per estimable term its effect (the ±1 coding makes the effect, high
  minus low level, twice the coefficient), sorted by |effect|, with the half-normal quantile of its
  rank and Lenth's pseudo standard error (PSE), the slope of the line inert effects follow.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from testbed.common.figures import save_figure

RESIDUAL_COLUMNS = ["run", "config", "fitted_s", "residual_s", "studentized", "normal_quantile"]


def blom_quantiles(n: int) -> np.ndarray:
    """Expected standard normal order statistics of n values, Φ⁻¹((i − 3/8) / (n + 1/4)), i = 1..n."""
    return stats.norm.ppf((np.arange(1, n + 1) - 0.375) / (n + 0.25))


def residual_table(model, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run (runs' order): fitted value, residual, studentized residual (NaN where the
    model is saturated or a run has leverage 1) and the normal quantile of its studentized rank."""
    fitted = np.asarray(model.fittedvalues, dtype=float)
    resid = np.asarray(model.resid, dtype=float)
    if model.df_resid > 0:
        with np.errstate(invalid="ignore", divide="ignore"):
            student = np.asarray(model.get_influence().resid_studentized_internal, dtype=float)
        student[~np.isfinite(student)] = np.nan
    else:
        student = np.full(len(resid), np.nan)
    table = pd.DataFrame({"run": runs["run"].to_numpy(), "config": runs["config"].astype(str).to_numpy(),
                          "fitted_s": fitted, "residual_s": resid, "studentized": student})
    key = np.where(np.isnan(student), resid, student)  # rank by what the QQ plot shows
    quantile = np.empty(len(key))
    quantile[np.argsort(key, kind="stable")] = blom_quantiles(len(key))
    table["normal_quantile"] = quantile
    return table


def lenth_pse(effects: np.ndarray) -> float:
    """Lenth's pseudo standard error: 1.5 × median of the |effects| below 2.5 × s0, s0 = 1.5 × median |effect|."""
    a = np.abs(np.asarray(effects, dtype=float))
    if not len(a):
        return math.nan
    s0 = 1.5 * float(np.median(a))
    inert = a[a < 2.5 * s0]
    return 1.5 * float(np.median(inert)) if len(inert) else s0


def halfnormal_table(anova: pd.DataFrame) -> pd.DataFrame:
    """Terms sorted by |effect| (ascending) with their half-normal quantile Φ⁻¹(0.5 + 0.5 (i − 0.5)/m),
    `effect_s` = 2 × estimate and `lenth_pse_s` (the same on every row)."""
    terms = anova[anova["term"] != "Residuals"]
    out = pd.DataFrame({"term": terms["term"].astype(str).to_numpy(),
                        "effect_s": 2.0 * terms["estimate"].to_numpy(dtype=float)})
    out["abs_effect_s"] = out["effect_s"].abs()
    out = out.sort_values("abs_effect_s", kind="stable").reset_index(drop=True)
    m = len(out)
    out["halfnormal_quantile"] = stats.norm.ppf(0.5 + 0.5 * (np.arange(1, m + 1) - 0.5) / m) if m else []
    out["lenth_pse_s"] = lenth_pse(out["effect_s"].to_numpy())
    return out


# ------------------------------------------------------------------ figures
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=9, color="#444",
            wrap=True)


def plot_residuals_fitted(resid: pd.DataFrame, path: Path) -> Path:
    """Residual against fitted makespan, a zero line; a funnel or a curve means the model misses something."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    ax.scatter(resid["fitted_s"], resid["residual_s"], s=14, alpha=0.7, color="tab:blue", edgecolors="none")
    ax.axhline(0.0, color="grey", linewidth=0.8)
    if np.allclose(resid["residual_s"], 0.0):
        _note(ax, "saturated model (one run per configuration): every residual is 0")
    ax.set_xlabel("fitted makespan (s)")
    ax.set_ylabel("residual (s)")
    ax.set_title(f"Residuals vs fitted ({len(resid)} runs)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)  # and PDF beside it
    plt.close(fig)
    return path


def plot_residuals_qq(resid: pd.DataFrame, path: Path) -> Path:
    """Studentized residuals against normal quantiles, with the line y = x they follow if normal."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.6, 4.2))
    ok = resid["studentized"].notna()
    if ok.any():
        x, y = resid.loc[ok, "normal_quantile"], resid.loc[ok, "studentized"]
        ax.scatter(x, y, s=14, alpha=0.7, color="tab:blue", edgecolors="none")
        lim = float(max(np.abs(x).max(), np.abs(y).max())) * 1.05
        ax.plot([-lim, lim], [-lim, lim], color="grey", linewidth=0.8, label="y = x (normal residuals)")
        ax.legend(fontsize=8, loc="upper left")
    else:
        _note(ax, "no residual degrees of freedom:\nno studentized residual")
    ax.set_xlabel("normal quantile (Blom)")
    ax.set_ylabel("studentized residual")
    ax.set_title("Normal QQ plot of the residuals")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)  # and PDF beside it
    plt.close(fig)
    return path


def plot_halfnormal(half: pd.DataFrame, path: Path, label_top: int = 6) -> Path:
    """Daniel's plot: |effect| against half-normal quantiles, the `label_top` largest named, and
    the line |effect| = PSE × quantile that inert effects follow (Lenth)."""
    plt = _pyplot()
    label_top = min(label_top, max(1, len(half) // 2))  # the larger half at most: small ones crowd the origin
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ax.scatter(half["halfnormal_quantile"], half["abs_effect_s"], s=16, color="tab:blue", edgecolors="none")
    if len(half):
        pse = float(half["lenth_pse_s"].iloc[0])
        qmax = float(half["halfnormal_quantile"].max()) * 1.05
        if math.isfinite(pse):
            ax.plot([0, qmax], [0, pse * qmax], color="grey", linestyle="--", linewidth=0.8,
                    label=f"inert effects: |effect| = PSE × q (Lenth's PSE = {pse:.3g} s)")
            ax.legend(fontsize=8, loc="upper left")
        for row in half.tail(label_top).itertuples():
            ax.annotate(row.term, (row.halfnormal_quantile, row.abs_effect_s), xytext=(-4, 0),
                        textcoords="offset points", ha="right", va="center", fontsize=8)
    ax.set_xlabel("half-normal quantile")
    ax.set_ylabel("|effect| = |mean(+1) − mean(−1)| (s)")
    ax.set_title(f"Half-normal plot of the {len(half)} effects (largest {min(label_top, len(half))} named)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)  # and PDF beside it
    plt.close(fig)
    return path
