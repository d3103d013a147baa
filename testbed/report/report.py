"""`testbed report`: one self-contained HTML report (figures embedded) and its Markdown twin.

Per experiment it reads what `testbed design`, `testbed campaign` and `testbed
analyze` wrote in results/<experiment>/, the platform (results/platforms/<cluster>/
if generated, else the cluster YAML), and the versions of the tools involved.
Each section is a list of blocks (Markdown text, tables, figures): joined as Markdown for
report.md; for report.html the page is the Jinja2 template templates/report.html.j2 (package
data), the Markdown rendered by markdown-it-py (CommonMark with pipe tables), so that the
Markdown other commands write (`compare-traces`, `diagnose`) shows as tables and headings.
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import logging
import math
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import jinja2
import pandas as pd
from markupsafe import Markup

from testbed import ROOT
from testbed.analyze.analyze import fmt, fmt_p, markdown_table, paper_table
from testbed.common.atomic import atomic_members, check_output_file
from testbed.common.errors import InputError
from testbed.common.outputs import Out, check_distinct
from testbed.common.yaml_input import load_yaml

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Figure:
    """A PNG figure: embedded in the HTML page, referred to by `path` (relative to the report) in Markdown."""

    alt: str
    png: bytes
    caption: str
    path: str


@dataclass(frozen=True)
class Table:
    """A table of strings, from a frame: a pipe table in Markdown, an HTML table in the page."""

    columns: list[str]
    rows: list[list[str]]

    @classmethod
    def of(cls, frame: pd.DataFrame) -> Table:
        return cls([str(c) for c in frame.columns], [[str(v) for v in row] for row in frame.itertuples(index=False)])


#: what a section is made of: Markdown text (rendered to HTML by markdown-it-py), a table, a figure
Block = str | Table | Figure


@dataclass
class Section:
    """One part of the report, of one experiment (None: the report's own, e.g. the versions)."""

    title: str
    blocks: list[Block]
    experiment: str | None = None

    @property
    def markdown(self) -> str:
        return "\n\n".join(_block_markdown(b).strip("\n") for b in self.blocks) + "\n"

    @property
    def html(self) -> str:
        return _environment().get_template("blocks.html.j2").render(blocks=self.blocks)


def _block_markdown(block: Block) -> str:
    if isinstance(block, Table):
        return markdown_table(pd.DataFrame(block.rows, columns=block.columns))
    if isinstance(block, Figure):
        return f"![{block.alt}]({block.path})\n\n{block.caption}"
    return block


def _figure(alt: str, png: Path | bytes, caption: str, path: str) -> Figure:
    return Figure(alt, png.read_bytes() if isinstance(png, Path) else png, caption, path)


# ------------------------------------------------------------------ HTML through Jinja2
def _markdown_html(text: str, heading_offset: int = 0) -> Markup:
    """Markdown (CommonMark and pipe tables; raw HTML in it escaped) as HTML; `heading_offset`
    moves its headings down (a `#` of another command's file under the report's own headings)."""
    from markdown_it import MarkdownIt

    parser = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = parser.parse(text)
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(6, int(token.tag[1]) + heading_offset)}"
    return Markup(parser.renderer.render(tokens, parser.options, {}))


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


@functools.cache
def _environment() -> jinja2.Environment:
    """The templates in testbed/report/templates (package data), HTML-escaped by default."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("testbed.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["markdown"] = _markdown_html
    env.filters["data_uri"] = _data_uri
    env.tests["table"] = lambda block: isinstance(block, Table)
    env.tests["figure"] = lambda block: isinstance(block, Figure)
    return env


def anchor(title: str) -> str:
    """An HTML id for a heading: its words, lower case, joined by '-'."""
    return "-".join(re.findall(r"[a-z0-9]+", title.lower())) or "section"


# ------------------------------------------------------------------ facts gathering
def _cmd(*argv: str, env: dict | None = None) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, env=env, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def versions() -> dict[str, str]:
    """Versions of SimGrid, StarPU (both builds), the testbed commit, and the analysis stack."""
    import matplotlib
    import numpy
    import statsmodels

    found: dict[str, str] = {}
    found["SimGrid"] = _cmd("pkg-config", "--modversion", "simgrid") or "not found (pkg-config simgrid)"
    for build in ("starpu-simgrid", "starpu-native"):
        pcdir = ROOT / ".deps" / build / "lib" / "pkgconfig"
        env = {**os.environ, "PKG_CONFIG_PATH": str(pcdir)}
        found[f"StarPU ({build})"] = _cmd("pkg-config", "--modversion", "starpu-1.4", env=env) or "not built"
    commit = _cmd("git", "-C", str(ROOT), "rev-parse", "HEAD")
    if commit:
        dirty = _cmd("git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no")
        found["testbed commit"] = commit + (" (with uncommitted changes)" if dirty else "")
    else:
        found["testbed commit"] = "unknown (not a git checkout)"
    found["statsmodels"] = statsmodels.__version__
    found["pandas"] = pd.__version__
    found["numpy"] = numpy.__version__
    found["matplotlib"] = matplotlib.__version__
    return found


def platform_summary(cluster: str, platforms_dir: Path) -> str:
    """Markdown lines describing the cluster: from the generated platform if present, else its YAML."""
    generated = platforms_dir / cluster / "numasim.xml"
    if generated.exists():
        from lxml import etree

        root = etree.parse(str(generated)).getroot()
        lines = [f"Generated platform `{generated}`:", ""]
        by_machine: dict[str, dict[str, int]] = {}
        for zone in root.iter("zone"):
            props = {p.get("id"): p.get("value") for p in zone.findall("prop")}
            if "machine" not in props:
                continue
            counts = by_machine.setdefault(props["machine"], {"nodes": 0})
            counts["nodes"] += 1
            for host in zone.findall("host"):
                kind = {p.get("id"): p.get("value") for p in host.findall("prop")}.get("kind", "host")
                counts[kind] = counts.get(kind, 0) + 1
        for machine, counts in by_machine.items():
            nodes = counts.pop("nodes")
            per_node = ", ".join(f"{v // nodes} {k}" for k, v in sorted(counts.items()))
            lines.append(f"* {nodes} × `{machine}` ({per_node} per node)")
        return "\n".join(lines) + "\n"
    path = Path(cluster) if cluster.endswith((".yaml", ".yml")) else ROOT / "platforms" / "clusters" / f"{cluster}.yaml"
    if not path.exists():
        return f"Cluster `{cluster}`: no description found ({path} is missing).\n"
    desc = load_yaml(path) or {}
    lines = [f"Cluster description `{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}`:", ""]
    for group in desc.get("nodes", []) or []:
        if isinstance(group, dict):
            lines.append(f"* {group.get('count', '?')} × `{group.get('machine', '?')}`")
    network = desc.get("network")
    if isinstance(network, dict):
        parts = []
        for key, value in network.items():
            if isinstance(value, dict) and "value" in value:
                parts.append(f"{key} = {value['value']}")
            elif not isinstance(value, (dict, list)):
                parts.append(f"{key} = {value}")
        if parts:
            lines.append(f"* network: {', '.join(parts)}")
    return "\n".join(lines) + "\n"


def normalize_term(term: str) -> str:
    """'A:B', 'AB', 'A*B', 'A x B' -> 'A:B' (letters sorted)."""
    text = re.sub(r"\s+[x×]\s+", ":", str(term).strip(), flags=re.I)
    letters = sorted(set(re.findall(r"[A-Z]", text.upper())))
    return ":".join(letters)


def read_reference(path: str | Path) -> pd.DataFrame:
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, "an existing reference CSV (columns term, estimate[, ci_low, ci_high])")
    ref = pd.read_csv(path)
    for col in ("term", "estimate"):
        if col not in ref.columns:
            raise InputError(path, "header", "columns term and estimate (optional ci_low, ci_high)")
    for i, value in enumerate(ref["estimate"], 1):
        try:
            float(value)
        except (TypeError, ValueError):
            raise InputError(path, f"row {i}, column estimate", f"a number, got {value!r}") from None
    ref = ref.assign(term=ref["term"].map(normalize_term), estimate=ref["estimate"].astype(float))
    return ref


def comparison_table(anova: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    """Simulated and reference estimates side by side, for terms prominent in either."""
    sim = anova[anova["term"] != "Residuals"].assign(key=lambda d: d["term"].map(normalize_term)).set_index("key")
    ref = ref.set_index("term")
    keys = list(dict.fromkeys(list(sim.index[sim["prominent"]]) + list(ref.index)))
    rows = []
    for key in keys:
        s = sim.loc[key] if key in sim.index else None
        r = ref.loc[key] if key in ref.index else None
        sim_est = float(s["estimate"]) if s is not None else math.nan
        ref_est = float(r["estimate"]) if r is not None else math.nan
        ref_ci = (f"[{fmt(float(r['ci_low']))}, {fmt(float(r['ci_high']))}]"
                  if r is not None and "ci_low" in ref.columns and "ci_high" in ref.columns else "–")
        rows.append({
            "Term": key,
            "Simulated estimate (s)": fmt(sim_est),
            "Simulated 95% CI": f"[{fmt(float(s['ci_low']))}, {fmt(float(s['ci_high']))}]" if s is not None else "–",
            "Simulated % var.": f"{float(s['variance_pct']):.2f}" if s is not None else "–",
            "Reference estimate": fmt(ref_est),
            "Reference 95% CI": ref_ci,
            "Same sign": ("yes" if sim_est * ref_est > 0 else "no")
            if not (math.isnan(sim_est) or math.isnan(ref_est)) else "–",
        })
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ sections
def _design_section(name: str, design: pd.DataFrame, facts: dict, fixed: dict[str, int]) -> Section:
    first = design.iloc[0]
    dist = json.loads(first["distribution"]) if first["distribution"] else {}
    reps = int(design["repetition"].max())
    configs = design["config"].nunique()
    full = configs == 2 ** len(facts["factors"])
    design_md = "\n".join([
        f"* engine: `{first['engine']}`, cluster `{first['cluster']}`"
        + (", program: Chameleon's getrf_nopiv driver" if first.get("app") == "chameleon" else ""),
        f"* workload: LU without pivoting, N = {first['n']}, b = {first['b']} "
        f"({int(first['n']) // int(first['b'])} × {int(first['n']) // int(first['b'])} tiles), "
        f"distribution {dist.get('kind', '?')}",
        f"* factors crossed: {', '.join(facts['factors'])}"
        + (f"; held fixed: {', '.join(f'{k}={v:+d}' for k, v in fixed.items())}" if fixed else ""),
        f"* design: {'full factorial' if full else 'fractional factorial'} 2^{len(facts['factors'])}"
        + ("" if full else f"-{len(facts['factors']) - int(math.log2(configs))}")
        + f" = {configs} configurations × {reps} repetitions = {len(design)} runs, "
        f"randomized order, {design['batch'].nunique()} batches",
        f"* runs analysed: {facts['n_runs']}; model terms: {facts['terms']}; residual df: {facts['df_resid']}",
    ])
    if facts.get("aliases"):
        design_md += "\n* aliased terms (not estimable, carried by): " + ", ".join(
            f"{t} → {a}" for t, a in list(facts["aliases"].items())[:20]) + (" …" if len(facts["aliases"]) > 20 else "")
    return Section(f"{name}: design", [design_md], name)


def _best_section(name: str, best: dict, summary: pd.DataFrame) -> Section:
    b = best["best"]
    lines = [f"* best configuration found: `{b['config']}` "
             f"({' '.join(f'{f}{v:+d}' for f, v in b['levels'].items())}), mean makespan "
             f"{fmt(b['mean_s'])} s, 95% CI [{fmt(b['ci_low'])}, {fmt(b['ci_high'])}] over {b['runs']} runs"]
    if best.get("default"):
        d, g = best["default"], best["gain"]
        lines.append(f"* all-default configuration `{d['config']}`: mean {fmt(d['mean_s'])} s, "
                     f"95% CI [{fmt(d['ci_low'])}, {fmt(d['ci_high'])}] over {d['runs']} runs")
        lines.append(f"* gain of the best over the default: {fmt(g['seconds'])} s "
                     f"(95% CI [{fmt(g['ci_low'])}, {fmt(g['ci_high'])}]), i.e. {g['percent']:.1f}% "
                     f"(95% CI [{fmt(g['percent_ci_low'])}, {fmt(g['percent_ci_high'])}]%), Welch t, p = {fmt_p(g['p_value'])}")
    else:
        lines.append(f"* {best.get('gain_note', 'no default configuration')}")
    lines.append(f"* note: {best['note']}")
    top = summary.head(5)
    top_table = pd.DataFrame({"Configuration": top["config"], "Runs": top["runs"],
                              "Mean (s)": top["mean_s"].map(fmt),
                              "95% CI (s)": [f"[{fmt(lo)}, {fmt(hi)}]" for lo, hi in zip(top["ci_low"], top["ci_high"], strict=False)]})
    return Section(f"{name}: best configuration", ["\n".join(lines), "Fastest configurations:", Table.of(top_table)],
                   name)


#: the analysis' figures (testbed analyze --stage plots), in report order: file-name pattern ->
#: caption saying what the figure shows and how to read it
FIGURE_CAPTIONS = {
    "main_effects": "Main effects: mean makespan (95% CI) at each factor's low (−1) and high (+1) level, one "
                    "panel per factor on a shared axis; the steeper the line, the larger the factor's effect.",
    "interactions_*": "Interactions of {0} with each other factor: mean makespan against the other factor's "
                      "level, one line per level of {0}; non-parallel lines mean the pair interacts.",
    "interactions_pairs": "Interactions of the other factor pairs: mean makespan against the second factor's "
                          "level, one line per level of the first; non-parallel lines mean the pair interacts.",
    "boxplot_*": "Makespan of every run grouped by the levels of {0} (box: quartiles, whiskers: 1.5 IQR, "
                 "points: runs beyond them).",
    "residuals_fitted": "Residuals against fitted makespans of the linear model: they should scatter evenly "
                        "around 0; a funnel (spread growing with the makespan) or a curve means the model "
                        "(additive effects, constant variance) misses something, isolated points are outlying runs.",
    "residuals_qq": "Normal QQ plot: studentized residuals against normal quantiles; points on the line y = x "
                    "support the normality behind the F tests and CIs, bent tails mean heavy or skewed noise.",
    "halfnormal_effects": "Daniel's half-normal plot: |effect| (high minus low level mean, s) of every term, "
                          "sorted, against half-normal quantiles; inert terms follow the dashed line through 0 "
                          "(Lenth's pseudo standard error), the active ones stand above it, the largest named. "
                          "Useful without replicates, where the ANOVA has no residual.",
}


def figure_caption(stem: str) -> tuple[int, str]:
    """(rank in the report, caption) of an analysis figure, from its file name (a name matches
    itself before a pattern: interactions_pairs is not interactions_* of factor "pairs")."""
    ranked = list(enumerate(FIGURE_CAPTIONS.items()))
    for rank, (pattern, caption) in ranked:
        if stem == pattern:
            return rank, caption
    for rank, (pattern, caption) in ranked:
        prefix = pattern.removesuffix("*")
        if pattern.endswith("*") and stem.startswith(prefix):
            letters = stem.removeprefix(prefix)
            return rank, caption.format(", ".join(letters) if letters.isupper() else letters)
    return len(FIGURE_CAPTIONS), stem.replace("_", " ")


def _figures_section(name: str, exp_dir: Path, report_dir: Path) -> Section | None:
    figures = sorted((exp_dir / "figures").glob("*.png")) if (exp_dir / "figures").is_dir() else []
    if not figures:
        return None
    figures.sort(key=lambda f: (figure_caption(f.stem)[0], f.stem))
    return Section(f"{name}: figures", [_figure(fig.stem, fig, figure_caption(fig.stem)[1],
                                                os.path.relpath(fig, report_dir)) for fig in figures], name)


def experiment_sections(name: str, exp_dir: Path, platforms_dir: Path, report_dir: Path,
                        reference: pd.DataFrame | None) -> list[Section]:
    for needed in ("design.csv", "anova.csv", "model.json", "best.json", "summary.csv"):
        if not (exp_dir / needed).exists():
            raise InputError(exp_dir / needed, None, "an output of the experiment's design/analysis step")
    design = pd.read_csv(exp_dir / "design.csv", keep_default_na=False)
    anova = pd.read_csv(exp_dir / "anova.csv")
    anova["prominent"] = anova["prominent"].astype(str).str.lower() == "true"
    facts = json.loads((exp_dir / "model.json").read_text())
    best = json.loads((exp_dir / "best.json").read_text())
    summary = pd.read_csv(exp_dir / "summary.csv")
    first = design.iloc[0]
    factors_all = [c for c in design.columns if len(c) == 1 and c.isupper()]
    fixed = {f: int(design[f].iloc[0]) for f in factors_all if design[f].nunique() == 1}
    sections: list[Section] = []

    sections.append(Section(f"{name}: platform", [platform_summary(str(first["cluster"]), platforms_dir)], name))

    sections.append(_design_section(name, design, facts, fixed))

    table = paper_table(anova)
    head = (f"Linear model `makespan ~ {'*'.join(facts['factors'])}` (factors coded −1/+1), sequential ANOVA. "
            f"R² = {facts['r2']:.4f}, adjusted R² = {fmt(facts['adj_r2'], 4)}. "
            f"Shown: terms with p < {facts['p_max']} and at least {facts['min_variance_pct']}% of the variance "
            f"({len(table)} of {facts['terms']}); all terms are in `anova.csv`.")
    if facts.get("warning"):
        head += f" Warning: {facts['warning']}."
    sections.append(Section(f"{name}: analysis of variance",
                            [head, Table.of(table) if len(table) else "No term passes the thresholds."], name))

    sections.append(_best_section(name, best, summary))

    if reference is not None:
        comp = comparison_table(anova, reference)
        text = "Simulated estimates beside the reference table supplied by the user (terms prominent in either)."
        sections.append(Section(f"{name}: comparison with the reference", [text, Table.of(comp)], name))

    figures = _figures_section(name, exp_dir, report_dir)
    if figures is not None:
        sections.append(figures)
    traces = exp_dir / "traces"
    if (traces / "compare.md").is_file():
        sections.append(trace_section(name, traces, report_dir))
    ledger = exp_dir / "ledger"
    if (ledger / "ledger.csv").is_file():
        sections.append(ledger_section(name, ledger, report_dir))
    return sections


def ledger_section(name: str, ledger: Path, report_dir: Path) -> Section:
    """`testbed explain`'s mechanism ledger of the experiment's largest terms (testbed/study/explain.py)."""
    rows = pd.read_csv(ledger / "ledger.csv")
    intro = ("Why the largest terms act, by mechanism (`testbed explain`): each term's effect in coded units with "
             "every modelled mechanism on, then with each one switched off in turn (its contribution: the effect "
             "minus the effect without it, paired on seeds), with every one off (the base), and what no single "
             "mechanism explains (interactions between mechanisms); 95 % intervals over the seeds. Every run is "
             "in `ledger/runs.csv`.")
    blocks: list[Block] = [intro]
    for term, part in rows.groupby("term", sort=False):
        table = pd.DataFrame({
            "row": [m if isinstance(m, str) and m else r for r, m in zip(part["row"], part["mechanism"], strict=True)],
            "estimate (s)": [f"{x:+.4f}" for x in part["estimate_s"]],
            "95 % CI": [f"[{lo:+.4f}, {hi:+.4f}]" for lo, hi in zip(part["ci95_low_s"], part["ci95_high_s"],
                                                                      strict=True)],
            "share of the effect": [f"{100 * x:+.1f} %" for x in part["share_of_effect"]],
        })
        blocks += [f"Term {term}:", Table.of(table)]
        fig = ledger / f"ledger_{str(term).replace(':', '_')}.png"
        if fig.is_file():
            blocks.append(_figure(f"ledger {term}", fig, f"the ledger of {term}: one bar per row, its 95 % "
                                                         "interval as a whisker.", os.path.relpath(fig, report_dir)))
    return Section(f"{name}: mechanism ledger of the largest terms", blocks, name)


TRACE_CAPTIONS = {
    "durations-by-worker": "per-worker kernel durations (the most frequent kind), workers grouped by NUMA node and "
                           "coloured by it; red points: durations above Q3 + 1.5 IQR of their worker (StarVZ's "
                           "outlier rule). Top: the all-default configuration; bottom: the best one.",
    "space-time": "tasks per worker over time, coloured by kind (StarVZ's application-workers panel): idle gaps "
                  "and the critical path's pace, default above and best below.",
    "utilisation": "utilisation over time of the same two runs (default above, best below): per node, the "
                   "fraction of its CPU workers and of its GPUs busy in each time bin (heatmap, yellow = all "
                   "busy, dark = idle; only workers that ran a task are counted), and below it the bytes per "
                   "second in flight on each link class (network, inter-socket, PCIe, memory bus; a transfer "
                   "counts once per class it crosses, its bytes spread over its duration).",
}


def trace_section(name: str, traces: Path, report_dir: Path) -> Section:
    """`testbed trace-pair`'s output: the all-default and best configurations rerun with a trace."""
    intro = ("One run of the all-default configuration and one of the best configuration (design rows, their "
             "seeds), rerun with a task trace (`testbed trace-pair`): kernel durations per kind, worker type and "
             "NUMA node, idle fraction per node, makespan; then the space-time chart and the utilisation over time.")
    blocks: list[Block] = [intro, (traces / "compare.md").read_text()]
    digest = traces / "diagnostics" / "digest.md"
    if digest.is_file():  # testbed/traces/diagnostics.py; the numbers are in diagnostics/*.csv
        blocks.append("Diagnostics of the traced runs (`testbed diagnose`; every number in `traces/diagnostics/*.csv`): "
                      "the makespan against the area bound (each node's own tasks spread over its workers, every "
                      "worker busy, no dependency), kernel durations per NUMA node and per GPU with StarVZ's outlier "
                      "share, and what copies took against the scheduler's estimate, which STARPU_SCHED_BETA scales.")
        blocks.append(digest.read_text())
        fig = traces / "diagnostics" / "diagnostics.png"
        if fig.is_file():
            blocks.append(_figure("diagnostics", fig, (
                "the same, drawn: dgemm median and Q1–Q3 per machine type, CPU NUMA node (N0, N1) and GPU, "
                "one colour per run, labelled with the share StarVZ flags; copies' actual / estimated "
                "duration (median, 10–90 %; below 1: faster than the scheduler assumed); makespan over "
                "the area bound per machine type."), os.path.relpath(fig, report_dir)))
    for stem, caption in TRACE_CAPTIONS.items():
        fig = traces / f"{stem}.png"
        if fig.is_file():
            blocks.append(_figure(stem, fig, caption, os.path.relpath(fig, report_dir)))
    return Section(f"{name}: traces, default vs best", blocks, name)


def sensitivity_section(name: str, exp_dir: Path, sens_dir: Path, report_dir: Path,
                        figures: dict[str, bytes]) -> Section:
    """The experiment's sensitivity to the machine parameters (testbed sensitivity's summary),
    with the full-factorial estimates and run-to-run CIs of its analysis beside the bands."""
    import tempfile

    from testbed.study.sensitivity import plot_bands, read_summary, summary_blocks

    summary = read_summary(sens_dir)
    title = f"{name}: sensitivity to the machine parameters"
    design = pd.read_csv(exp_dir / "design.csv", keep_default_na=False)
    first = design.iloc[0]
    ran = {"cluster": str(first["cluster"]), "engine": str(first["engine"]), "n": int(first["n"]), "b": int(first["b"])}
    had = {"cluster": summary["cluster"], "engine": summary["engine"], "n": int(summary["workload"]["n"]),
           "b": int(summary["workload"]["b"])}
    if ran != had:
        text = (f"The sensitivity results in `{sens_dir}` were computed for {had}, not for this experiment's {ran}: "
                f"rerun `snakemake sensitivity`.")
        return Section(title, [text], name)
    anova = pd.read_csv(exp_dir / "anova.csv")
    anova["prominent"] = anova["prominent"].astype(str).str.lower() == "true"
    facts = json.loads((exp_dir / "model.json").read_text())
    # The grand mean (the model's intercept) is the full factorial's counterpart of "makespan".
    half = math.nan
    if facts.get("df_resid", 0) > 0 and not math.isnan(facts.get("sigma_s", math.nan)):
        from scipy import stats

        half = float(stats.t.ppf(0.975, facts["df_resid"])) * facts["sigma_s"] / math.sqrt(facts["n_runs"])
    mean = pd.DataFrame([{"term": "makespan", "order": 0, "estimate": facts["intercept"],
                          "ci_low": facts["intercept"] - half, "ci_high": facts["intercept"] + half, "prominent": False}])
    anova = pd.concat([anova, mean], ignore_index=True)
    blocks: list[Block] = []
    for block in summary_blocks(summary, anova):
        if isinstance(block, pd.DataFrame):
            blocks.append(Table.of(block))
        elif isinstance(block, list):
            blocks.append("\n".join(f"* {line}" for line in block))
        else:
            blocks.append(block)
    with tempfile.TemporaryDirectory() as tmp:
        png = plot_bands(summary, anova, Path(tmp) / "bands.png").read_bytes()
        pdf = (Path(tmp) / "bands.pdf").read_bytes()  # the vector twin (testbed/common/figures.py)
    figure = f"sensitivity_{name}.png"
    figures[figure] = png
    figures[f"sensitivity_{name}.pdf"] = pdf
    blocks.insert(3, _figure(f"{name} effects and parameter bands", png, "effects with their run-to-run CI and "
                             "their band over the parameter ranges", figure))
    return Section(title, blocks, name)


def build(experiments: list[tuple[str, Path]], out: Path, title: str, platforms_dir: Path,
          reference_path: str | None, sensitivity: dict[str, Path] | None = None,
          figures: dict[str, bytes] | None = None) -> tuple[str, str]:
    """The report; `sensitivity` maps experiment names to `testbed sensitivity` directories
    (their section follows the experiment's), `figures` receives the files to write beside it."""
    reference = read_reference(reference_path) if reference_path else None
    sensitivity = sensitivity or {}
    figures = figures if figures is not None else {}
    names = [n for n, _ in experiments]
    for name in sensitivity:
        if name not in names:
            raise InputError(None, "--sensitivity", f"the name of a reported experiment ({', '.join(names)}), got {name!r}")
    sections: list[Section] = []
    for name, exp_dir in experiments:
        sections.extend(experiment_sections(name, exp_dir, platforms_dir, out, reference))
        if name in sensitivity:
            sections.append(sensitivity_section(name, exp_dir, sensitivity[name], out, figures))
    vers_md = "\n".join(f"* {k}: `{v}`" for k, v in versions().items())
    sections.append(Section("Engine and versions", [vers_md]))
    md = [f"# {title}", ""]
    for s in sections:
        md += [f"## {s.title}", "", s.markdown.rstrip(), ""]
    return "\n".join(md), page(title, sections)


def page(title: str, sections: list[Section]) -> str:
    """The HTML page (templates/report.html.j2): the sections grouped by experiment, each
    experiment with its table of contents, every heading with an anchor."""
    groups: list[dict] = []
    for section in sections:
        if not groups or groups[-1]["name"] != section.experiment:
            name = section.experiment
            groups.append({"name": name, "id": anchor(f"experiment {name}") if name else None, "sections": []})
        short = section.title.removeprefix(f"{section.experiment}: ") if section.experiment else section.title
        groups[-1]["sections"].append({"section": section, "short": short, "id": anchor(section.title)})
    return _environment().get_template("report.html.j2").render(title=title, groups=groups)


# ------------------------------------------------------------------ CLI
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--experiment", action="append", required=True, metavar="NAME=DIR",
                   help="experiment name and its results directory (repeatable)")
    p.add_argument("--out", required=True, help="report directory: report.html and report.md are written in it, its other files kept")
    p.add_argument("--title", default="Simulated factorial study")
    p.add_argument("--reference", default=None, help="CSV of terms and estimates to show beside the simulated ones")
    p.add_argument("--platforms-dir", default="results/platforms", help="where `testbed platform` outputs live")
    p.add_argument("--sensitivity", action="append", default=[], metavar="NAME=DIR",
                   help="experiment name and its `testbed sensitivity` directory (adds its section; repeatable)")


def run(args: argparse.Namespace) -> int:
    experiments = []
    for item in args.experiment:
        name, sep, directory = item.partition("=")
        if not sep or not name or not directory:
            raise InputError(None, "--experiment", f"NAME=DIR, got {item!r}")
        experiments.append((name, Path(directory)))
    sensitivity: dict[str, Path] = {}
    for item in args.sensitivity:
        name, sep, directory = item.partition("=")
        if not sep or not name or not directory:
            raise InputError(None, "--sensitivity", f"NAME=DIR, got {item!r}")
        sensitivity[name] = Path(directory)
    out = Path(args.out)
    inputs = [("--reference", args.reference)]
    check_distinct(inputs, [Out("--out", out, "members", ("report.md", "report.html"))])
    for name in ("report.md", "report.html"):  # refused before the report is built
        check_output_file(out / name, "--out")
    figures: dict[str, bytes] = {}
    md, page = build(experiments, out, args.title, Path(args.platforms_dir), args.reference, sensitivity, figures)
    check_distinct(inputs, [Out("--out", out, "members", ("report.md", "report.html", *figures))])
    # Written inside `out`: its other files are left alone (`out` may be any directory).
    with atomic_members(out, ["report.md", "report.html", *figures]) as tmp:
        (tmp / "report.md").write_text(md)
        (tmp / "report.html").write_text(page)
        for figure, data in figures.items():
            (tmp / figure).write_bytes(data)
    log.info(f"report: {out / 'report.html'}, {out / 'report.md'}")
    return 0
