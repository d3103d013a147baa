"""`testbed explain`: the mechanism ledger of a factor effect or of a two-factor interaction.

A term's effect (in coded units, as the ANOVA's estimate: half the difference of the two levels
for a factor, a quarter of the double difference for an interaction) is measured with every
mechanism of numasim on, with each mechanism switched off in turn, and with all of them off
(run description `mechanisms`, simulator/src/mechanisms.hpp). For each seed, a mechanism's
contribution is the effect with every mechanism on minus the effect without it; the runs of one
seed share the seed, so the contributions are paired differences. Every row is given with its
mean over the seeds and a 95 % Student interval:

* ``effect`` — every mechanism on: the plain two-level effect;
* ``contribution``, one row per mechanism — how much of the effect goes when it is switched off;
* ``base`` — every mechanism off: what the scheduler, the kernels' mean durations and the
  platform's links give without any modelled mechanism;
* ``interactions`` — effect − base − the contributions: the part no single mechanism explains
  (mechanisms that act through each other, e.g. pinned allocations placing the pages whose remote
  reads stall the kernels).

Outputs (``--out DIR``): ``ledger.csv`` (every term's rows), ``runs.csv`` (every run),
``ledger.md`` and ``ledger_<term>.png`` (+ .pdf), one bar per row with its interval.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import logging
import math
import statistics
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from testbed.common.errors import InputError

log = logging.getLogger(__name__)

ALL_ON = "every mechanism on"
ALL_OFF = "every mechanism off"
LEDGER_COLUMNS = ["term", "row", "mechanism", "estimate_s", "ci95_low_s", "ci95_high_s", "share_of_effect",
                  "effect_without_s", "seeds"]


@dataclass(frozen=True)
class Setup:
    """What every run of a ledger shares: a design row (testbed design's columns) whose factor
    columns `letters` are set per run, the other factors staying at the row's levels."""

    row: dict
    letters: tuple[str, ...]

    @property
    def label(self) -> str:
        r = self.row
        return f"{r['cluster']}, N = {r['n']}, b = {r['b']}, {json.loads(r['distribution'])['kind']} mapping"


def setup_from_options(cluster: str, n: int, b: int, distribution: dict, at: dict[str, int], env: dict[str, str]
                       ) -> Setup:
    from testbed.run.factors import LETTERS

    row = {"engine": "numasim", "app": "lu", "cluster": cluster, "n": n, "b": b, "seed": 1,
           "env": json.dumps(env, sort_keys=True), "factor_env": "", "variability": "true",
           "distribution": json.dumps(distribution), **{f: at.get(f, -1) for f in LETTERS}}
    return Setup(row, tuple(LETTERS))


def setup_from_design(design_path: str) -> Setup:
    """The all-default row of a design table (every factor at -1)."""
    from testbed.analyze.runs_table import factor_columns
    from testbed.run.campaign import read_design

    design = read_design(design_path)
    letters = tuple(factor_columns(list(design.columns)))
    rows = [r for r in design.to_dict("records") if all(int(r[f]) == -1 for f in letters)]
    if not rows:
        raise InputError(design_path, "factor columns", "a design with the all-default configuration (every factor at -1)")
    if rows[0]["engine"] != "numasim":
        raise InputError(design_path, "engine", f"numasim (the mechanisms are numasim's), got {rows[0]['engine']!r}")
    return Setup(rows[0], letters)


def largest_terms(anova_path: str, letters: tuple[str, ...], top: int) -> list[tuple[str, ...]]:
    """The `top` factors and two-factor interactions with the largest share of the variance."""
    import pandas as pd

    try:
        table = pd.read_csv(anova_path)
        terms = table[(table["term"] != "Residuals") & (table["order"] <= 2)].sort_values("variance_pct",
                                                                                           ascending=False)
    except (OSError, ValueError, KeyError) as err:
        raise InputError(anova_path, "term/order/variance_pct", f"an ANOVA table of testbed analyze ({err})") from None
    out = [tuple(str(t).split(":")) for t in terms["term"].head(top)]
    if any(f not in letters for t in out for f in t):
        raise InputError(anova_path, "term", f"terms of the design's factors ({', '.join(letters)})")
    return out


def parse_term(text: str) -> tuple[str, ...]:
    """'A' or 'A:E' -> ('A',) or ('A', 'E'); letters among the factors, distinct."""
    from testbed.run.factors import LETTERS

    letters = tuple(p.strip().upper() for p in text.split(":"))
    if not 1 <= len(letters) <= 2 or any(x not in LETTERS for x in letters) or len(set(letters)) != len(letters):
        raise InputError(None, f"--factor {text}", f"a factor letter ({', '.join(LETTERS)}) or two joined by ':' "
                                                   "(an interaction, e.g. A:E)")
    return letters


def contrast(term: tuple[str, ...]) -> list[tuple[dict[str, int], float]]:
    """The term's level combinations and their weights: effect = sum(weight * makespan) (coded units)."""
    combos = []
    for levels in itertools.product((-1, 1), repeat=len(term)):
        combos.append((dict(zip(term, levels, strict=True)), math.prod(levels) / 2 ** len(term)))
    return combos


def ci95(xs: list[float]) -> tuple[float, float, float]:
    """Mean and 95 % Student interval (the mean twice with one value)."""
    from scipy.stats import t

    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, m, m
    h = float(t.ppf(0.975, len(xs) - 1)) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - h, m + h


def variants(mechanisms: list[str]) -> dict[str, tuple[str, ...]]:
    """Variant name -> mechanisms switched off."""
    return {ALL_ON: (), **{m: (m,) for m in mechanisms}, ALL_OFF: tuple(mechanisms)}


class Runner:
    """Runs numasim on the ledger's run descriptions, each distinct description once."""

    def __init__(self, setup: Setup, workdir: Path, jobs: int):
        from testbed.describe.machines import load_cluster
        from testbed.platform.platform_cmd import generate

        self.setup = setup
        self.workdir = workdir
        self.jobs = jobs
        self.pdir = workdir / "platform"
        self.cluster = load_cluster(setup.row["cluster"])
        generate(self.cluster, self.pdir, (int(setup.row["b"]),))
        self._lock = threading.Lock()
        self._done = 0
        self._total = 0

    def spec(self, levels: dict[str, int], seed: int, off: tuple[str, ...]):
        from testbed.run.campaign import spec_for

        spec = spec_for({**self.setup.row, **levels, "seed": seed}, list(self.setup.letters), self.pdir,
                        self.workdir, self.cluster)
        spec.mechanisms_off = off
        return spec

    def run_all(self, jobs: list[tuple[dict[str, int], int, tuple[str, ...]]]) -> list[float]:
        """Makespans of (levels, seed, mechanisms off), in order; runs without variability are
        the same for every seed and run once."""
        from testbed.run.engines.numasim import run_description

        def key(job: tuple[dict[str, int], int, tuple[str, ...]]) -> str:
            levels, seed, off = job
            return json.dumps([sorted(levels.items()), 0 if "kernel_variability" in off else seed, sorted(off)])

        keys = [key(j) for j in jobs]
        unique: dict[str, dict] = {}
        for k, (levels, seed, off) in zip(keys, jobs, strict=True):
            if k not in unique:
                d = self.workdir / f"run{len(unique)}"
                d.mkdir()
                unique[k] = run_description(self.spec(levels, seed, off), self.pdir, d)
        self._done, self._total = 0, len(unique)
        log.info(f"explain: {len(jobs)} runs, {len(unique)} distinct, {self.jobs} at a time")
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            results = dict(zip(unique, pool.map(self._one, unique.values()), strict=True))
        return [results[k] for k in keys]

    def _one(self, desc: dict) -> float:
        from testbed.run.engines.numasim import run_binary

        out = run_binary(desc, self.workdir)
        with self._lock:
            self._done += 1
            if self._done % max(1, self._total // 20) == 0 or self._done == self._total:
                log.info(f"explain: {self._done}/{self._total} runs done")
        return float(out["makespan_s"])


def ledger(term: tuple[str, ...], mechanisms: list[str], seeds: list[int], runner: Runner
           ) -> tuple[list[dict], list[dict]]:
    """(ledger rows, run rows) of one term."""
    vs = variants(mechanisms)
    combos = contrast(term)
    jobs = [(levels, seed, off) for off in vs.values() for levels, _ in combos for seed in seeds]
    makespans = iter(runner.run_all(jobs))
    runs: list[dict] = []
    effect: dict[str, list[float]] = {}  # variant -> per-seed effect
    name = ":".join(term)
    for variant, off in vs.items():
        per_seed = {s: 0.0 for s in seeds}
        for levels, weight in combos:
            for seed in seeds:
                y = next(makespans)
                per_seed[seed] += weight * y
                runs.append({"term": name, "variant": variant, "mechanisms_off": " ".join(off),
                             **{f: levels[f] for f in term}, "seed": seed, "makespan_s": y})
        effect[variant] = [per_seed[s] for s in seeds]
    rows = []
    all_on = effect[ALL_ON]
    total = statistics.fmean(all_on)

    def row(kind: str, mechanism: str, xs: list[float], without: list[float] | None = None) -> dict:
        m, lo, hi = ci95(xs)
        return {"term": name, "row": kind, "mechanism": mechanism, "estimate_s": m, "ci95_low_s": lo,
                "ci95_high_s": hi, "share_of_effect": m / total if total else float("nan"),
                "effect_without_s": statistics.fmean(without) if without is not None else float("nan"),
                "seeds": len(xs)}

    rows.append(row("effect", "", all_on))
    contributions = {}
    for m in mechanisms:
        contributions[m] = [a - b for a, b in zip(all_on, effect[m], strict=True)]
        rows.append(row("contribution", m, contributions[m], effect[m]))
    base = effect[ALL_OFF]
    rows.append(row("base", "", base))
    rest = [a - b - sum(c[i] for c in contributions.values()) for i, (a, b) in enumerate(zip(all_on, base, strict=True))]
    rows.append(row("interactions", "", rest))
    return rows, runs


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from testbed.common.figures import save_figure

    label = {"effect": "effect (every mechanism on)", "base": "base (every mechanism off)",
             "interactions": "interactions between mechanisms"}
    shown = [r for r in rows if r["row"] != "contribution"][:1] + \
        sorted((r for r in rows if r["row"] == "contribution"), key=lambda r: -abs(r["estimate_s"])) + \
        [r for r in rows if r["row"] in ("base", "interactions")]
    names = [label.get(r["row"], r["mechanism"]) for r in shown]
    est = [r["estimate_s"] for r in shown]
    err = [[r["estimate_s"] - r["ci95_low_s"] for r in shown], [r["ci95_high_s"] - r["estimate_s"] for r in shown]]
    colors = ["#333333" if r["row"] == "effect" else "#999999" if r["row"] != "contribution"
              else "#d62728" if r["estimate_s"] > 0 else "#1f77b4" for r in shown]
    fig, ax = plt.subplots(figsize=(7.5, 0.32 * len(shown) + 1.2))
    y = range(len(shown))
    ax.barh(list(y), est, xerr=err, color=colors, capsize=2)
    ax.set_yticks(list(y), names, fontsize=8)
    ax.invert_yaxis()
    ax.axvline(0, color="black", linewidth=0.6)
    ax.set_xlabel("s of the effect, coded units (+: the high level is slower)")
    ax.set_title(f"Mechanism ledger of {shown[0]['term']} (95 % intervals over {shown[0]['seeds']} seeds)",
                 fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def markdown(rows: list[dict], setup: Setup, seeds: list[int]) -> str:
    at = ",".join(f"{f}={int(setup.row[f]):+d}" for f in setup.letters)
    out = [f"# Mechanism ledger\n\n{setup.label}, factors outside the term at {at}, seeds {seeds[0]}..{seeds[-1]}. "
           "Effects in coded units (the ANOVA's estimates); "
           "a contribution is the effect with every mechanism on minus the effect with that one off, paired on "
           "seeds (testbed/study/explain.py).\n"]
    for term in dict.fromkeys(r["term"] for r in rows):
        out.append(f"\n## {term}\n\n| row | estimate (s) | 95 % CI | share of the effect | effect without it (s) |\n"
                   "|---|---|---|---|---|")
        for r in (r for r in rows if r["term"] == term):
            name = r["mechanism"] or r["row"]
            without = "" if math.isnan(r["effect_without_s"]) else f"{r['effect_without_s']:+.4f}"
            out.append(f"| {name} | {r['estimate_s']:+.4f} | [{r['ci95_low_s']:+.4f}, {r['ci95_high_s']:+.4f}] | "
                       f"{100 * r['share_of_effect']:+.1f} % | {without} |")
    return "\n".join(out) + "\n"


def write_csv(path: Path, rows: list[dict], columns: list[str]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.9g}" if isinstance(v, float) else v) for k, v in r.items()})


def explain(terms: list[tuple[str, ...]], setup: Setup, seeds: list[int], mechanisms: list[str], out: Path,
            jobs: int) -> list[dict]:
    from testbed.common.atomic import atomic_dir

    all_rows: list[dict] = []
    all_runs: list[dict] = []
    with atomic_dir(out, "explain") as tmp, tempfile.TemporaryDirectory(prefix="testbed-explain-") as scratch:
        runner = Runner(setup, Path(scratch), jobs)
        for term in terms:
            work = Path(scratch) / ":".join(term)
            work.mkdir()
            runner.workdir = work
            rows, runs = ledger(term, mechanisms, seeds, runner)
            all_rows += rows
            all_runs += runs
            plot(rows, tmp / f"ledger_{'_'.join(term)}.png")
        write_csv(tmp / "ledger.csv", all_rows, LEDGER_COLUMNS)
        letters = sorted({f for t in terms for f in t})
        write_csv(tmp / "runs.csv", [{**{f: r.get(f, "") for f in letters}, **r} for r in all_runs],
                  ["term", "variant", "mechanisms_off", *letters, "seed", "makespan_s"])
        (tmp / "ledger.md").write_text(markdown(all_rows, setup, seeds))
    return all_rows


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--factor", action="append", default=[], metavar="TERM",
                   help="a factor (A) or a two-factor interaction (A:E); repeatable")
    p.add_argument("--design", default=None,
                   help="a design table (testbed design): its all-default row gives the cluster, size, mapping "
                        "and variables, instead of --cluster/--n/--b/--distribution/--env")
    p.add_argument("--anova", default=None,
                   help="with --design: the experiment's anova.csv; explain its --top largest terms")
    p.add_argument("--top", type=int, default=2, help="with --anova: how many terms (factors or two-factor "
                                                       "interactions, by share of the variance)")
    p.add_argument("--cluster", default=None, help="cluster name (platforms/clusters/NAME.yaml) or path")
    p.add_argument("--n", type=int, default=None, help="matrix order N")
    p.add_argument("--b", type=int, default=None, help="tile size b (N must be a multiple)")
    p.add_argument("--distribution", default="block-cyclic",
                   help="tile mapping: block-cyclic | heterogeneous (the study's speed-balanced one) | FILE "
                        "(owner rank per tile)")
    p.add_argument("--at", default="", metavar="X=1,...",
                   help="levels of the factors outside the term (default: all at -1, the study's baseline)")
    p.add_argument("--seeds", type=int, default=3, help="seeds 1..SEEDS, each a paired replicate")
    p.add_argument("--mechanism", action="append", default=[], metavar="NAME[,NAME...]",
                   help="only these mechanisms (default: every one `numasim --mechanisms` lists)")
    p.add_argument("--env", action="append", default=[], metavar="VAR=VALUE", help="raw STARPU_* variable")
    p.add_argument("--sched", default=None, help="StarPU scheduler (STARPU_SCHED), default dmdas")
    p.add_argument("--jobs", type=int, default=0, help="numasim runs at a time (0: one per core)")
    p.add_argument("--out", required=True, help="output directory (ledger.csv, runs.csv, ledger.md, figures)")


def _levels(text: str, option: str) -> dict[str, int]:
    from testbed.run.factors import check_factors
    from testbed.run.simulate import parse_levels

    levels = parse_levels(text, option)
    return {k: v for k, v in check_factors(levels, option).items() if k in levels}


def _setup(args: argparse.Namespace) -> tuple[Setup, list[tuple[str, ...]]]:
    from testbed.run.simulate import distribution_option, parse_assignments
    from testbed.run.workload import limits_problem, size_problem
    from testbed.starpu.variables import check_env

    terms = [parse_term(t) for t in args.factor]
    if args.design:
        for opt, value in (("--cluster", args.cluster), ("--n", args.n), ("--b", args.b), ("--env", args.env),
                           ("--sched", args.sched)):
            if value:
                raise InputError(None, opt, f"no {opt} with --design (the design's all-default row gives it)")
        setup = setup_from_design(args.design)
        if args.anova:
            if args.top < 1:
                raise InputError(None, "--top", f"a number of terms >= 1, got {args.top}")
            terms += largest_terms(args.anova, setup.letters, args.top)
    else:
        if args.anova:
            raise InputError(None, "--anova", "a --design too (the experiment the ANOVA analysed)")
        missing = [o for o, v in (("--cluster", args.cluster), ("--n", args.n), ("--b", args.b)) if v is None]
        if missing:
            raise InputError(None, missing[0], "a value (or a --design)")
        problem = size_problem(args.n, args.b) or limits_problem(args.n, args.b)
        if problem:
            raise InputError(None, "--n/--b", problem)
        env = parse_assignments(args.env, "--env")
        if args.sched:
            env["STARPU_SCHED"] = args.sched
        check_env(env)
        distribution = distribution_option(args.distribution, args.n, args.b)
        if distribution["kind"] == "file":  # the runs happen in scratch directories
            distribution["path"] = str(Path(distribution["path"]).absolute())
        setup = setup_from_options(args.cluster, args.n, args.b, distribution, _levels(args.at, "--at"), env)
    if not terms:
        raise InputError(None, "--factor", "a term to explain (or --design with --anova)")
    for t in terms:
        if any(f not in setup.letters for f in t):
            raise InputError(args.design, "--factor", f"factors of the design ({', '.join(setup.letters)})")
    return setup, list(dict.fromkeys(terms))


def run(args: argparse.Namespace) -> int:
    import os

    from testbed.run.simulate import mechanisms_off

    if args.seeds < 1:
        raise InputError(None, "--seeds", f"a number of seeds >= 1, got {args.seeds}")
    if args.jobs < 0:
        raise InputError(None, "--jobs", f"a number of runs >= 0, got {args.jobs}")
    setup, terms = _setup(args)
    from testbed.run.engines.numasim import mechanism_names

    chosen = list(mechanisms_off(args.mechanism)) if args.mechanism else mechanism_names()
    seeds = list(range(1, args.seeds + 1))
    rows = explain(terms, setup, seeds, chosen, Path(args.out), args.jobs or os.cpu_count() or 1)
    print(markdown(rows, setup, seeds), end="")
    return 0
