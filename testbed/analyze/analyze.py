"""`testbed analyze`: linear model with all interactions, sequential ANOVA, plots.

Two steps, as in StarVZ: `tables` reads runs.csv once and writes tidy tables
(anova.csv, summary.csv per configuration, effects.csv of level means,
residuals.csv, model.json, best.json, anova.md/html); `plots` reads only those tables (and
runs.csv for boxplots) and draws the figures, the model's residual diagnostics and Daniel's
half-normal plot of the effects among them (testbed/analyze/diagnostics.py). The analysis is
engine-agnostic.

Model: makespan_s ~ A*B*...*G with factors coded -1/+1, fitted by OLS; the
ANOVA is sequential (type I), as R's ``anova(lm(...))``. In a fractional
design, a term aliased with an earlier one is not estimable: it is dropped
from the model and listed as an alias of the term that carries its effect.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from testbed.analyze.diagnostics import (
    halfnormal_table,
    plot_halfnormal,
    plot_residuals_fitted,
    plot_residuals_qq,
    residual_table,
)
from testbed.analyze.runs_table import check_one_design, factor_columns, read_runs
from testbed.common.atomic import atomic_dir, atomic_members, check_output_dir, check_output_file
from testbed.common.errors import InputError
from testbed.common.figures import save_figure
from testbed.common.outputs import Out, check_distinct

log = logging.getLogger(__name__)

RESPONSE = "makespan_s"
#: Figures of the plots step (a figure directory written before markers existed holds only these).
FIGURE_NAMES = ("main_effects.png", "interactions_*.png", "boxplot_*.png")
TABLE_FILES = ["anova.csv", "anova.md", "anova.html", "summary.csv", "effects.csv", "residuals.csv", "model.json",
               "best.json"]
#: the plots step's inputs among the tables
PLOT_INPUTS = ("anova.csv", "effects.csv", "residuals.csv", "model.json")


# ------------------------------------------------------------------ model
def all_terms(factors: list[str]) -> list[str]:
    """Every term of A*B*...: main effects, then 2-factor interactions, ... (combination order)."""
    return [":".join(c) for k in range(1, len(factors) + 1) for c in itertools.combinations(factors, k)]


def term_column(data: pd.DataFrame, term: str) -> np.ndarray:
    return np.prod([data[f].to_numpy(dtype=float) for f in term.split(":")], axis=0)


def estimable_terms(data: pd.DataFrame, factors: list[str]) -> tuple[list[str], dict[str, str]]:
    """Terms kept in the model, and dropped term -> term it is aliased with (fractional designs)."""
    kept: list[str] = []
    aliases: dict[str, str] = {}
    columns = [np.ones(len(data))]
    for term in all_terms(factors):
        col = term_column(data, term)
        for prev, prev_col in zip(["(Intercept)"] + kept, columns, strict=False):
            if np.array_equal(col, prev_col) or np.array_equal(col, -prev_col):
                aliases[term] = prev
                break
        else:
            candidate = np.column_stack(columns + [col])
            if np.linalg.matrix_rank(candidate) == candidate.shape[1]:
                kept.append(term)
                columns.append(col)
            else:
                aliases[term] = "(linear combination)"
    return kept, aliases


def _var(f: str) -> str:
    return f"x_{f}"  # formula-safe name: a bare C or I means something else in formulas


def fit_model(runs: pd.DataFrame, factors: list[str]):
    """OLS of makespan on all estimable terms; returns (fitted model, terms, aliases)."""
    import statsmodels.formula.api as smf

    terms, aliases = estimable_terms(runs, factors)
    data = pd.DataFrame({_var(f): runs[f].astype(float) for f in factors})
    data[RESPONSE] = runs[RESPONSE].astype(float)
    rhs = " + ".join(":".join(_var(f) for f in t.split(":")) for t in terms)
    model = smf.ols(f"{RESPONSE} ~ {rhs}", data=data).fit()
    return model, terms, aliases


def _name(statsmodels_term: str) -> str:
    return statsmodels_term.replace("x_", "")


def anova_table(runs: pd.DataFrame, factors: list[str], p_max: float, min_variance_pct: float) -> tuple[pd.DataFrame, dict]:
    """Term table (estimate, 95% CI, SS, F, p, % variance, prominent) and model facts."""
    from statsmodels.stats.anova import anova_lm

    model, terms, aliases = fit_model(runs, factors)
    df_resid = int(round(model.df_resid))
    with np.errstate(invalid="ignore", divide="ignore"):
        aov = anova_lm(model, typ=1)
    aov.index = [_name(i) for i in aov.index]
    params = model.params.rename(index=_name)
    if df_resid > 0:
        ci = model.conf_int(alpha=0.05).rename(index=_name)
    else:
        ci = pd.DataFrame(np.nan, index=params.index, columns=[0, 1])
    total_ss = float(((runs[RESPONSE] - runs[RESPONSE].mean()) ** 2).sum())
    rows = []
    for term in terms:
        ss = float(aov.loc[term, "sum_sq"])
        rows.append({
            "term": term,
            "order": term.count(":") + 1,
            "estimate": float(params[term]),
            "ci_low": float(ci.loc[term, 0]),
            "ci_high": float(ci.loc[term, 1]),
            "df": int(aov.loc[term, "df"]),
            "sum_sq": ss,
            "mean_sq": float(aov.loc[term, "mean_sq"]),
            "F": float(aov.loc[term, "F"]) if df_resid > 0 else math.nan,
            "p_value": float(aov.loc[term, "PR(>F)"]) if df_resid > 0 else math.nan,
            "variance_pct": 100.0 * ss / total_ss if total_ss > 0 else math.nan,
            "aliases": " ".join(t for t, a in aliases.items() if a == term),
        })
    resid_ss = float(aov.loc["Residual", "sum_sq"]) if "Residual" in aov.index else 0.0
    rows.append({"term": "Residuals", "order": 0, "estimate": math.nan, "ci_low": math.nan, "ci_high": math.nan,
                 "df": df_resid, "sum_sq": resid_ss, "mean_sq": resid_ss / df_resid if df_resid else math.nan,
                 "F": math.nan, "p_value": math.nan,
                 "variance_pct": 100.0 * resid_ss / total_ss if total_ss > 0 else math.nan, "aliases": ""})
    table = pd.DataFrame(rows)
    significant = table["p_value"] < p_max if df_resid > 0 else True
    table["prominent"] = (table["term"] != "Residuals") & significant & (table["variance_pct"] >= min_variance_pct)
    facts = {
        "n_runs": int(len(runs)),
        "n_configurations": int(runs.groupby(factors).ngroups),
        "factors": factors,
        "terms": len(terms),
        "df_resid": df_resid,
        "r2": float(model.rsquared),
        "adj_r2": float(model.rsquared_adj) if df_resid > 0 else math.nan,
        "sigma_s": float(math.sqrt(model.scale)) if df_resid > 0 else math.nan,
        "intercept": float(params["Intercept"]),
        "total_ss": total_ss,
        "aliases": aliases,
        "p_max": p_max,
        "min_variance_pct": min_variance_pct,
        "engines": sorted(runs["engine"].unique().tolist()),
        "clusters": sorted(runs["cluster"].unique().tolist()),
        "experiments": sorted(runs["experiment"].unique().tolist()),
        "workloads": sorted({f"N={n} b={b}" for n, b in zip(runs["n"], runs["b"], strict=False)}),
    }
    if df_resid == 0:
        facts["warning"] = "no residual degrees of freedom (one run per configuration): no F, p or CI"
    return table, facts


# ------------------------------------------------------------------ tidy tables
def t_interval(values: np.ndarray) -> tuple[float, float, float, float]:
    """(mean, sd, 95% CI low, high) with Student's t; CI is NaN for a single value."""
    n = len(values)
    mean = float(np.mean(values))
    if n < 2:
        return mean, math.nan, math.nan, math.nan
    sd = float(np.std(values, ddof=1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return mean, sd, mean - half, mean + half


def summary_table(runs: pd.DataFrame, factors: list[str]) -> pd.DataFrame:
    rows = []
    for key, group in runs.groupby(["config"] + factors, sort=False):
        values = group[RESPONSE].to_numpy()
        mean, sd, lo, hi = t_interval(values)
        rows.append({"config": key[0], **dict(zip(factors, key[1:], strict=False)), "runs": len(values), "mean_s": mean,
                     "sd_s": sd, "ci_low": lo, "ci_high": hi, "median_s": float(np.median(values)),
                     "min_s": float(values.min()), "max_s": float(values.max())})
    return pd.DataFrame(rows).sort_values("mean_s").reset_index(drop=True)


def effects_table(runs: pd.DataFrame, factors: list[str]) -> pd.DataFrame:
    """Mean makespan per level of each factor and per level pair of each factor pair."""
    rows = []
    for f in factors:
        for level, group in runs.groupby(f):
            mean, sd, lo, hi = t_interval(group[RESPONSE].to_numpy())
            rows.append({"kind": "main", "factor": f, "level": int(level), "factor2": "", "level2": 0,
                         "runs": len(group), "mean_s": mean, "sd_s": sd, "ci_low": lo, "ci_high": hi})
    for f, g in itertools.combinations(factors, 2):
        for (lf, lg), group in runs.groupby([f, g]):
            mean, sd, lo, hi = t_interval(group[RESPONSE].to_numpy())
            rows.append({"kind": "interaction", "factor": f, "level": int(lf), "factor2": g, "level2": int(lg),
                         "runs": len(group), "mean_s": mean, "sd_s": sd, "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows)


def best_configuration(runs: pd.DataFrame, factors: list[str], summary: pd.DataFrame) -> dict:
    """Lowest mean makespan, and its gain over the all-default (all -1) configuration (Welch t)."""
    best = summary.iloc[0]
    best_values = runs.loc[runs["config"] == best["config"], RESPONSE].to_numpy()
    out: dict = {
        "best": {"config": best["config"], "levels": {f: int(best[f]) for f in factors}, "runs": int(best["runs"]),
                 "mean_s": float(best["mean_s"]), "ci_low": float(best["ci_low"]), "ci_high": float(best["ci_high"])},
        "note": "the best of many configurations is selected on the same data: its CI ignores that selection",
    }
    default_mask = np.all([runs[f] == -1 for f in factors], axis=0)
    if not default_mask.any():
        out["default"] = None
        out["gain"] = None
        out["gain_note"] = "the all-default configuration (all factors at -1) is not in the design"
        return out
    default_values = runs.loc[default_mask, RESPONSE].to_numpy()
    d_mean, _, d_lo, d_hi = t_interval(default_values)
    out["default"] = {"config": str(runs.loc[default_mask, "config"].iloc[0]), "runs": int(len(default_values)),
                      "mean_s": d_mean, "ci_low": d_lo, "ci_high": d_hi}
    gain = d_mean - float(np.mean(best_values))
    n1, n2 = len(default_values), len(best_values)
    if n1 >= 2 and n2 >= 2:
        v1, v2 = np.var(default_values, ddof=1) / n1, np.var(best_values, ddof=1) / n2
        se = math.sqrt(v1 + v2)
        if se > 0:
            dof = (v1 + v2) ** 2 / (v1**2 / (n1 - 1) + v2**2 / (n2 - 1))
            half = float(stats.t.ppf(0.975, dof)) * se
            p = float(2 * stats.t.sf(abs(gain) / se, dof))
        else:
            dof, half, p = math.inf, 0.0, 0.0 if gain else 1.0
    else:
        dof, half, p = math.nan, math.nan, math.nan
    out["gain"] = {"seconds": gain, "ci_low": gain - half, "ci_high": gain + half,
                   "percent": 100 * gain / d_mean, "percent_ci_low": 100 * (gain - half) / d_mean,
                   "percent_ci_high": 100 * (gain + half) / d_mean, "welch_df": dof, "p_value": p,
                   "method": "Welch two-sample t interval (95%) on default minus best; percent relative to the default mean"}
    return out


# ------------------------------------------------------------------ formatting
def fmt(x: float, digits: int = 4) -> str:
    """A number with `digits` significant digits; an en dash for a missing value."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}g}"


def fmt_p(p: float) -> str:
    if isinstance(p, float) and math.isnan(p):
        return "–"
    return "< 1e-16" if p < 1e-16 else f"{p:.2e}" if p < 1e-3 else f"{p:.3f}"


def paper_table(anova: pd.DataFrame) -> pd.DataFrame:
    """The prominent terms as display strings (the table of the paper)."""
    shown = anova[anova["prominent"]].sort_values("variance_pct", ascending=False)
    return pd.DataFrame({
        "Term": shown["term"],
        "Estimate (s)": shown["estimate"].map(fmt),
        "95% CI (s)": [f"[{fmt(lo)}, {fmt(hi)}]" for lo, hi in zip(shown["ci_low"], shown["ci_high"], strict=False)],
        "Sum Sq": shown["sum_sq"].map(fmt),
        "F": shown["F"].map(fmt),
        "p value": shown["p_value"].map(fmt_p),
        "% variance": shown["variance_pct"].map(lambda v: f"{v:.2f}"),
    })


def markdown_table(table: pd.DataFrame) -> str:
    cols = list(table.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in table.itertuples(index=False):
        lines.append("| " + " | ".join(str(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def anova_markdown(anova: pd.DataFrame, facts: dict) -> str:
    table = paper_table(anova)
    head = (f"Terms with p < {facts['p_max']} explaining at least {facts['min_variance_pct']}% of the variance "
            f"({len(table)} of {facts['terms']}); R² = {facts['r2']:.4f}, adjusted R² = {fmt(facts['adj_r2'], 4)}, "
            f"{facts['n_runs']} runs, residual df = {facts['df_resid']}.\n\n")
    if table.empty:
        return head + "No term passes the thresholds.\n"
    return head + markdown_table(table)


def anova_html(anova: pd.DataFrame, facts: dict) -> str:
    import html

    table = paper_table(anova)
    caption = html.escape(anova_markdown(anova, facts).split("\n\n")[0])
    if table.empty:
        return f"<p>{caption}</p>\n<p>No term passes the thresholds.</p>\n"
    body = table.to_html(index=False, classes="anova", border=0, escape=True)
    return f"<p class=\"caption\">{caption}</p>\n{body}\n"


# ------------------------------------------------------------------ figures
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _grid(count: int) -> tuple[int, int]:
    cols = min(count, 4) if count > 1 else 1
    return (count + cols - 1) // cols, cols


def plot_main_effects(effects: pd.DataFrame, factors: list[str], path: Path) -> Path:
    """One panel per factor: mean makespan (95% CI) at -1 and +1, shared y axis."""
    plt = _pyplot()
    rows, cols = _grid(len(factors))
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 2.4 * rows), sharey=True, squeeze=False)
    main = effects[effects["kind"] == "main"]
    for ax, f in zip(axes.flat, factors, strict=False):
        d = main[main["factor"] == f].sort_values("level")
        yerr = [d["mean_s"] - d["ci_low"], d["ci_high"] - d["mean_s"]]
        ax.errorbar(d["level"], d["mean_s"], yerr=None if d["ci_low"].isna().any() else yerr,
                    marker="o", capsize=3, color="tab:blue")
        ax.set_xticks([-1, 1])
        ax.set_xlim(-1.5, 1.5)
        ax.set_title(f)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(factors):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("mean makespan (s)")
    fig.suptitle("Main effects (mean, 95% CI)")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)  # and PDF beside it
    plt.close(fig)
    return path


def plot_interactions(effects: pd.DataFrame, pairs: list[tuple[str, str]], path: Path, title: str) -> Path:
    """One panel per pair (f, g): mean makespan against g's level, one line per level of f."""
    plt = _pyplot()
    rows, cols = _grid(len(pairs))
    fig, axes = plt.subplots(rows, cols, figsize=(2.8 * cols, 2.5 * rows), sharey=True, squeeze=False)
    inter = effects[effects["kind"] == "interaction"]
    for ax, (f, g) in zip(axes.flat, pairs, strict=False):
        d = inter[(inter["factor"] == f) & (inter["factor2"] == g)]
        for level, style in ((-1, "o--"), (1, "s-")):
            line = d[d["level"] == level].sort_values("level2")
            ax.plot(line["level2"], line["mean_s"], style, label=f"{f}={level:+d}")
        ax.set_xticks([-1, 1])
        ax.set_xlim(-1.5, 1.5)
        ax.set_xlabel(g)
        ax.set_title(f"{f} × {g}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small")
    for ax in list(axes.flat)[len(pairs):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("mean makespan (s)")
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)  # and PDF beside it
    plt.close(fig)
    return path


def plot_boxplot(runs: pd.DataFrame, subset: list[str], path: Path) -> Path:
    """Makespan of all runs grouped by the levels of a factor subset."""
    plt = _pyplot()
    groups = list(runs.groupby(subset))
    labels = [" ".join(f"{f}{'+' if lv == 1 else '-'}" for f, lv in zip(subset, key if isinstance(key, tuple) else (key,), strict=False))
              for key, _ in groups]
    fig, ax = plt.subplots(figsize=(max(3.5, 1.1 * len(groups) + 1.5), 3.4))
    ax.boxplot([g[RESPONSE].to_numpy() for _, g in groups], tick_labels=labels)
    ax.set_ylabel("makespan (s)")
    ax.set_title(f"Makespan by {', '.join(subset)}")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)  # and PDF beside it
    plt.close(fig)
    return path


# ------------------------------------------------------------------ steps
def analysis_factors(runs: pd.DataFrame) -> list[str]:
    """Factor columns that take both levels (a factor held fixed is not in the model)."""
    return [f for f in factor_columns(list(runs.columns)) if runs[f].nunique() == 2]


def write_tables(runs_path: str | Path, out: str | Path, p_max: float = 0.05, min_variance_pct: float = 0.5,
                 pool: bool = False) -> dict:
    """The expensive step: runs.csv -> tidy tables in `out` (each file replaced atomically)."""
    # All files written in a scratch dir, then moved in: a failure leaves no partial set,
    # and the other files of `out` (runs.csv, batches/, ...) are never touched.
    with atomic_members(out, TABLE_FILES) as t:
        return tables_into(t, runs_path, p_max, min_variance_pct, pool)


def tables_into(t: Path, runs_path: str | Path, p_max: float = 0.05, min_variance_pct: float = 0.5,
                pool: bool = False) -> dict:
    """The tidy tables of runs.csv written into the scratch directory `t`; returns the model's facts."""
    runs = read_runs(runs_path)
    if not pool:
        check_one_design(runs, runs_path)
    factors = analysis_factors(runs)
    if not factors:
        raise InputError(runs_path, "factor columns", "at least one factor taking both levels -1 and 1")
    if runs.groupby(factors).ngroups < 2 ** len(factors) and len(runs) < 2:
        raise InputError(runs_path, "rows", "at least two runs")
    makespans = runs["makespan_s"].to_numpy(dtype=float)
    if (makespans == makespans[0]).all():
        # nothing to analyse: F tests would divide sums of squares of rounding noise (1e-28)
        raise InputError(runs_path, "makespan_s", f"makespans that differ between runs, all {len(runs)} are "
                                                  f"{makespans[0]:.6g} s (did the factors reach the engine?)")
    anova, facts = anova_table(runs, factors, p_max, min_variance_pct)
    summary = summary_table(runs, factors)
    effects = effects_table(runs, factors)
    best = best_configuration(runs, factors, summary)
    residuals = residual_table(fit_model(runs, factors)[0], runs)
    anova.to_csv(t / "anova.csv", index=False)
    (t / "anova.md").write_text(anova_markdown(anova, facts))
    (t / "anova.html").write_text(anova_html(anova, facts))
    summary.to_csv(t / "summary.csv", index=False)
    effects.to_csv(t / "effects.csv", index=False)
    residuals.to_csv(t / "residuals.csv", index=False)
    (t / "model.json").write_text(json.dumps(facts, indent=1, allow_nan=True) + "\n")
    (t / "best.json").write_text(json.dumps(best, indent=1, allow_nan=True) + "\n")
    return facts


def write_plots(tables: str | Path, runs_path: str | Path, out: str | Path, boxplots: list[list[str]],
                option: str = "--figures") -> list[Path]:
    """The cheap step: tidy tables (+ runs for boxplots) -> PNG figures in `out`.

    `out` is this step's own directory (atomic_dir: replaced whole by a rerun, refused if
    it holds anything else)."""
    check_output_dir(out, "analyze", option, legacy=FIGURE_NAMES)
    tables = Path(tables)
    for name in PLOT_INPUTS:
        if not (tables / name).exists():
            raise InputError(tables / name, None, "a table written by `testbed analyze --stage tables`")
    effects = pd.read_csv(tables / "effects.csv", keep_default_na=False, na_values=[""])
    anova = pd.read_csv(tables / "anova.csv")
    residuals = pd.read_csv(tables / "residuals.csv")
    facts = json.loads((tables / "model.json").read_text())
    runs = read_runs(runs_path)
    factors = facts["factors"]
    for subset in boxplots:
        unknown = [f for f in subset if f not in factors]
        if unknown:
            raise InputError("analysis.boxplots", ",".join(subset), f"factors among {factors}, not {unknown}")
    written: list[Path] = []
    with atomic_dir(out, "analyze", option, legacy=FIGURE_NAMES) as tmp:
        written.append(plot_main_effects(effects, factors, tmp / "main_effects.png"))
        if len(factors) >= 2:
            written.append(plot_interactions(effects, [(factors[0], g) for g in factors[1:]],
                                              tmp / f"interactions_{factors[0]}.png",
                                              f"Interactions of {factors[0]} with each other factor"))
        others = list(itertools.combinations(factors[1:], 2))
        if others:
            written.append(plot_interactions(effects, others, tmp / "interactions_pairs.png",
                                              "Interactions of the other factor pairs"))
        for subset in boxplots:
            written.append(plot_boxplot(runs, subset, tmp / f"boxplot_{''.join(subset)}.png"))
        written.append(plot_residuals_fitted(residuals, tmp / "residuals_fitted.png"))
        written.append(plot_residuals_qq(residuals, tmp / "residuals_qq.png"))
        written.append(plot_halfnormal(halfnormal_table(anova), tmp / "halfnormal_effects.png"))
    return [Path(out) / p.name for p in written]


# ------------------------------------------------------------------ CLI
def parse_subsets(items: list[str]) -> list[list[str]]:
    subsets = []
    for item in items:
        letters = [x.strip().upper() for x in item.replace(",", " ").split() if x.strip()]
        if not letters:
            raise InputError(None, "--boxplot", "factor letters, e.g. A,D")
        subsets.append(letters)
    return subsets


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", help="runs table (results/<experiment>/runs.csv)")
    p.add_argument("--out", required=True, help="directory of the tables; figures go to OUT/figures")
    p.add_argument("--stage", choices=["all", "tables", "plots"], default="all",
                   help="tables: runs -> tidy tables; plots: tidy tables -> figures; all: both")
    p.add_argument("--p-max", type=float, default=0.05, help="paper table: p value below this")
    p.add_argument("--min-variance", type=float, default=0.5, help="paper table: at least this %% of variance")
    p.add_argument("--boxplot", action="append", default=[], metavar="A,D",
                   help="factor subset for a boxplot of makespan (repeatable; default: the first factor)")
    p.add_argument("--figures", default=None, help="figure directory (default OUT/figures)")
    p.add_argument("--pool", action="store_true",
                   help="analyse runs of different experiments, engines, clusters or sizes as one table")


def run(args: argparse.Namespace) -> int:
    if not 0 < args.p_max <= 1:
        raise InputError(None, "--p-max", f"a p value in (0, 1], got {args.p_max}")
    if not 0 <= args.min_variance <= 100:
        raise InputError(None, "--min-variance", f"a percentage in [0, 100], got {args.min_variance}")
    out = Path(args.out)
    figures_dir = Path(args.figures) if args.figures else out / "figures"
    figures_option = "--figures" if args.figures else "--out"
    tables_out = [Out("--out", out, "members", tuple(TABLE_FILES))] if args.stage in ("all", "tables") else []
    plot_inputs = [("--out", out / n) for n in PLOT_INPUTS] if args.stage == "plots" else []
    check_distinct([("", args.runs), *plot_inputs],
                   [*tables_out, *([Out(figures_option, figures_dir, "dir")] if args.stage != "tables" else [])])
    subsets = parse_subsets(args.boxplot)
    if args.stage in ("all", "plots"):  # refused before the (expensive) tables are written
        check_output_dir(figures_dir, "analyze", figures_option, legacy=FIGURE_NAMES)
    if args.stage in ("all", "tables"):
        for name in TABLE_FILES:  # refused before the tables are computed
            check_output_file(out / name, "--out")
    if args.stage == "tables":
        facts = write_tables(args.runs, out, args.p_max, args.min_variance, args.pool)
        log.info(f"analyze: {facts['n_runs']} runs, {len(facts['factors'])} factors, R² = {facts['r2']:.4f} -> {out}")
        return 0
    if args.stage == "plots":
        facts = json.loads((out / "model.json").read_text()) if (out / "model.json").exists() else {"factors": []}
        figures = write_plots(out, args.runs, figures_dir, subsets or [facts["factors"][:1] or ["A"]], figures_option)
        log.info(f"analyze: {len(figures)} figures -> {figures_dir}")
        return 0
    # all: the tables and the figures appear together or not at all (a failure leaves the
    # previous analysis as it was, not new tables beside old figures). The figures go in
    # first; a failure (a signal) before the tables are in removes a figure folder that did
    # not exist before, and the folders made for it.
    absent = [d for d in (figures_dir, *figures_dir.parents) if not (d.exists() or d.is_symlink())]
    try:
        with atomic_members(out, TABLE_FILES) as t:
            facts = tables_into(t, args.runs, args.p_max, args.min_variance, args.pool)
            figures = write_plots(t, args.runs, figures_dir, subsets or [facts["factors"][:1] or ["A"]],
                                  figures_option)
    except BaseException:
        if absent:
            shutil.rmtree(figures_dir, ignore_errors=True)
            for d in absent[1:]:
                with contextlib.suppress(OSError):
                    d.rmdir()
        raise
    log.info(f"analyze: {facts['n_runs']} runs, {len(facts['factors'])} factors, R² = {facts['r2']:.4f} -> {out}")
    log.info(f"analyze: {len(figures)} figures -> {figures_dir}")
    return 0
