"""`testbed compare-traces A.csv B.csv [--out DIR]`: two task traces side by side.

Kernel durations per kind x worker type (cpu/cuda) x worker NUMA node (count, median, p10,
p90, mean) with B's relative difference to A, the idle fraction of each node, the makespan;
printed as markdown and, with --out, written with the numbers as JSON and two plots:

* `durations-by-worker.png`: per-worker gemm durations as boxplots grouped by NUMA node (the
  study's Figure 2 view), tasks above Q3 + 1.5 IQR of their worker marked;
* `space-time.png`: tasks per worker over time coloured by kind (StarVZ's "application
  workers" panel), outliers marked as StarVZ marks them: Duration > Q3 + 1.5 IQR within
  their kind x worker type (R's default quantiles, the same as numpy's).

Traces are read by testbed/traces/traces.py (the one place where other engines' columns are mapped).
Times are seconds from the run's start, so the makespan is the last task's end.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from testbed.common.figures import save_figure
from testbed.common.palette import kernel_color
from testbed.traces.traces import read_tasks, worker_sort_key

GROUP = ["Value", "WorkerType", "WorkerNuma"]
STATS = ["count", "median", "p10", "p90", "mean"]
OUT_FILES = ["compare.md", "compare.json", "durations-by-worker.png", "space-time.png", "durations-by-worker.pdf",
             "space-time.pdf"]
#: written beside them when the transfers are traced too (testbed trace-pair)
UTILISATION_FILES = ["utilisation.csv", "utilisation.png", "utilisation.pdf"]


def kernel_stats(tasks):
    """Duration statistics (s) per kind x worker type x worker NUMA node."""
    g = tasks.groupby(GROUP)["Duration"]
    out = g.agg(count="count", median="median", mean="mean")
    out["p10"] = g.quantile(0.1)
    out["p90"] = g.quantile(0.9)
    return out[STATS]


def makespan(tasks) -> float:
    return float(tasks["End"].max())


def idle_fraction(tasks):
    """Per node: workers that ran a task, and the share of their time in [0, makespan] not
    spent in a task (workers that ran nothing are not in a trace, so they are not counted)."""
    span = makespan(tasks)
    g = tasks.groupby("NodeName")
    workers = g["ResourceId"].nunique()
    busy = g["Duration"].sum()
    idle = 1.0 - busy / (workers * span)
    import pandas as pd

    return pd.DataFrame({"workers": workers, "idle": idle})


def upper_outliers(durations):
    """Boolean mask of the durations above Q3 + 1.5 IQR (StarVZ's outlier_definition)."""
    import numpy as np

    q1, q3 = np.quantile(durations, [0.25, 0.75])
    return durations > q3 + 1.5 * (q3 - q1)


def rel_diff(a: float, b: float) -> float | None:
    """(b - a) / a, None where undefined (a group missing in one trace, a = 0)."""
    if a is None or b is None or not math.isfinite(a) or not math.isfinite(b) or a == 0:
        return None
    return (b - a) / a


def compare(a, b) -> dict:
    """The comparison as plain numbers (seconds, fractions)."""
    sa, sb = kernel_stats(a), kernel_stats(b)
    keys = sorted(set(sa.index) | set(sb.index), key=lambda k: (k[0], k[1], k[2]))
    kernels = []
    for key in keys:
        row = {"kind": key[0], "worker_type": key[1], "numa": int(key[2])}
        for tag, s in (("a", sa), ("b", sb)):
            for stat in STATS:
                v = s.loc[key, stat] if key in s.index else None
                row[f"{stat}_{tag}"] = None if v is None else (int(v) if stat == "count" else float(v))
        for stat in STATS[1:]:
            row[f"{stat}_rel"] = rel_diff(row[f"{stat}_a"], row[f"{stat}_b"])
        kernels.append(row)
    ia, ib = idle_fraction(a), idle_fraction(b)
    idle = []
    for node in sorted(set(ia.index) | set(ib.index), key=worker_sort_key):
        row = {"node": node}
        for tag, i in (("a", ia), ("b", ib)):
            row[f"workers_{tag}"] = int(i.loc[node, "workers"]) if node in i.index else None
            row[f"idle_{tag}"] = float(i.loc[node, "idle"]) if node in i.index else None
        idle.append(row)
    ma, mb = makespan(a), makespan(b)
    return {"makespan": {"a": ma, "b": mb, "rel": rel_diff(ma, mb)},
            "tasks": {"a": len(a), "b": len(b)}, "kernels": kernels, "idle": idle}


def _ms(v) -> str:
    return "–" if v is None else f"{v * 1e3:.3f}"


def _pct(v) -> str:
    return "–" if v is None else f"{v * 100:+.1f} %"


def markdown(result: dict, name_a: str, name_b: str) -> str:
    m = result["makespan"]
    lines = [f"# Trace comparison: A = {name_a}, B = {name_b}", "",
             "Δ = (B − A) / A. Durations in ms; times from the run's start.", "",
             "| | A | B | Δ |", "|---|---:|---:|---:|",
             f"| makespan (s) | {m['a']:.6f} | {m['b']:.6f} | {_pct(m['rel'])} |",
             f"| tasks | {result['tasks']['a']} | {result['tasks']['b']} | |", "",
             "## Kernel durations per kind × worker type × NUMA node of the worker", "",
             "| kind | worker | NUMA | n A | n B | median A | median B | Δ median | p10 A | p10 B | Δ p10 "
             "| p90 A | p90 B | Δ p90 | mean A | mean B | Δ mean |",
             "|---|---|---:|" + "---:|" * 14]
    for r in result["kernels"]:
        cells = [r["kind"], r["worker_type"], str(r["numa"]),
                 "–" if r["count_a"] is None else str(r["count_a"]),
                 "–" if r["count_b"] is None else str(r["count_b"])]
        for stat in STATS[1:]:
            cells += [_ms(r[f"{stat}_a"]), _ms(r[f"{stat}_b"]), _pct(r[f"{stat}_rel"])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Idle fraction per node (workers that ran a task, over [0, makespan])", "",
              "| node | workers A | idle A | workers B | idle B | Δ (points) |", "|---|---:|---:|---:|---:|---:|"]
    for r in result["idle"]:
        pts = (None if r["idle_a"] is None or r["idle_b"] is None else (r["idle_b"] - r["idle_a"]) * 100)
        lines.append("| " + " | ".join([
            r["node"], str(r["workers_a"] or "–"), "–" if r["idle_a"] is None else f"{r['idle_a'] * 100:.1f} %",
            str(r["workers_b"] or "–"), "–" if r["idle_b"] is None else f"{r['idle_b'] * 100:.1f} %",
            "–" if pts is None else f"{pts:+.1f}"]) + " |")
    return "\n".join(lines) + "\n"


def _workers_by_numa(tasks):
    """Workers ordered by NUMA node, then node, then name: the boxplots' x order."""
    w = tasks.groupby("ResourceId")[["WorkerNuma", "NodeName"]].first()
    return sorted(w.index, key=lambda r: (int(w.loc[r, "WorkerNuma"]), worker_sort_key(w.loc[r, "NodeName"]),
                                          worker_sort_key(r)))


def _boxplot_kind(traces) -> str:
    """The kind to plot: gemm (dgemm) where present, the most frequent kind otherwise."""
    kinds = set().union(*(set(t["Value"]) for t in traces))
    for k in ("gemm", "dgemm"):
        if k in kinds:
            return k
    return traces[0]["Value"].value_counts().index[0]


def plot_durations(traces: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    kind = _boxplot_kind(list(traces.values()))
    types = sorted(set().union(*(set(t.loc[t["Value"] == kind, "WorkerType"]) for t in traces.values()))) or ["cpu"]
    fig, axes = plt.subplots(len(traces), len(types), squeeze=False, sharey="col",
                             figsize=(max(6.0, 4.0 * len(types)), 3.2 * len(traces)))
    cmap = plt.get_cmap("tab10")
    numas: set[int] = set()
    for i, (label, t) in enumerate(traces.items()):
        for j, wtype in enumerate(types):
            ax = axes[i][j]
            sel = t[(t["Value"] == kind) & (t["WorkerType"] == wtype)]
            workers = _workers_by_numa(sel) if not sel.empty else []
            data = [sel.loc[sel["ResourceId"] == w, "Duration"].to_numpy() * 1e3 for w in workers]
            if workers:
                numa = [int(sel.loc[sel["ResourceId"] == w, "WorkerNuma"].iloc[0]) for w in workers]
                boxes = ax.boxplot(data, whis=1.5, showfliers=False, patch_artist=True)
                for box, k in zip(boxes["boxes"], numa, strict=False):
                    box.set_facecolor(cmap(k % 10))
                    box.set_alpha(0.6)
                for x, d in enumerate(data, start=1):
                    out = d[upper_outliers(d)] if len(d) else d
                    ax.plot(np.full(len(out), x), out, "r.", markersize=4)
                for x in range(1, len(numa)):  # a line between NUMA groups
                    if numa[x] != numa[x - 1]:
                        ax.axvline(x + 0.5, color="grey", linewidth=0.6, linestyle=":")
                numas |= set(numa)
                if len(workers) <= 48:
                    ax.set_xticks(range(1, len(workers) + 1), workers, rotation=90, fontsize=6)
                else:  # hundreds of workers: names would be unreadable
                    ax.set_xticks([])
            ax.set_title(f"{label}: {kind} on {wtype} workers", fontsize=9)
            ax.set_ylabel("duration (ms)")
    fig.suptitle(f"{kind} duration per worker, grouped by NUMA node (red: > Q3 + 1.5 IQR of the worker)",
                 fontsize=9)
    # one legend for the figure, below the panels: inside, it hid the upper whiskers
    handles = [plt.Line2D([], [], marker="s", linestyle="", color=cmap(k % 10), alpha=0.6) for k in sorted(numas)]
    fig.legend(handles, [f"NUMA {k}" for k in sorted(numas)], loc="lower center", ncol=max(1, len(numas)),
               fontsize=7)
    fig.tight_layout(rect=(0, 0.4 / fig.get_figheight(), 1, 1))  # ~0.4 in for the legend
    save_figure(fig, path, dpi=110)  # and PDF beside it
    plt.close(fig)


def plot_space_time(traces: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.collections import PolyCollection

    kinds = sorted(set().union(*(set(t["Value"]) for t in traces.values())))
    colors = {k: kernel_color(k) for k in kinds}  # StarVZ's palette (testbed/common/palette.py)
    nworkers = max(t["ResourceId"].nunique() for t in traces.values())
    fig, axes = plt.subplots(len(traces), 1, squeeze=False, sharex=True,
                             figsize=(10, min(12.0, 1.0 + 0.18 * nworkers) * len(traces)))
    for ax, (label, t) in zip(axes[:, 0], traces.items(), strict=False):
        t = t.copy()
        t["Outlier"] = False
        for _, idx in t.groupby(["Value", "WorkerType"]).groups.items():
            t.loc[idx, "Outlier"] = upper_outliers(t.loc[idx, "Duration"]).to_numpy()
        w = t.groupby("ResourceId")["NodeName"].first()
        workers = sorted(w.index, key=lambda r: (worker_sort_key(w[r]), worker_sort_key(r)))
        row = {r: i for i, r in enumerate(workers)}
        # One collection of rectangles per kind: a call per worker and kind (broken_barh) took
        # 8 s for the 434 workers of a 21-node run.
        for kind, g in t.groupby("Value"):
            x0, x1 = g["Start"].to_numpy(), g["End"].to_numpy()
            y = g["ResourceId"].map(row).to_numpy(dtype=float)
            verts = np.stack([np.column_stack([x0, y - 0.4]), np.column_stack([x0, y + 0.4]),
                              np.column_stack([x1, y + 0.4]), np.column_stack([x1, y - 0.4])], axis=1)
            ax.add_collection(PolyCollection(verts, facecolors=[colors[kind]], linewidths=0,
                                          rasterized=True))  # an image inside the PDF
        ax.set_ylim(-0.6, len(workers) - 0.4)
        out = t[t["Outlier"]]
        ax.plot(out["Start"] + out["Duration"] / 2, out["ResourceId"].map(row), "k.", markersize=2)
        ax.set_yticks(range(len(workers)), workers if len(workers) <= 60 else [""] * len(workers), fontsize=5)
        ax.invert_yaxis()
        ax.set_title(f"{label}: {len(t)} tasks, makespan {makespan(t):.4g} s", fontsize=9)
    handles = [plt.Line2D([], [], marker="s", linestyle="", color=colors[k]) for k in kinds]
    handles.append(plt.Line2D([], [], marker=".", linestyle="", color="k"))
    # below the panels: inside, the legend hid the first workers' tasks
    fig.legend(handles, [*kinds, "outlier (> Q3 + 1.5 IQR of its kind × worker type)"], loc="lower center",
               ncol=len(kinds) + 1, fontsize=7)
    axes[-1, 0].set_xlabel("time (s)")
    axes[0, 0].set_xlim(0, 1.01 * max(makespan(t) for t in traces.values()))  # shared by the panels
    fig.tight_layout(rect=(0, 0.45 / fig.get_figheight(), 1, 1))  # ~0.45 in for the legend
    save_figure(fig, path, dpi=110)  # and PDF beside it
    plt.close(fig)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="A.csv", help="task trace (testbed simulate --trace, any engine)")
    p.add_argument("b", metavar="B.csv", help="task trace compared with A")
    p.add_argument("--out", default=None,
                   help="directory for compare.md, compare.json and the two plots (other files left alone)")


def write_comparison(a, b, name_a: str, name_b: str, out: str | Path, labels: tuple[str, str] = ("A", "B"),
                     utilisation: dict | None = None) -> str:
    """compare.md, compare.json and the two plots of traces `a` and `b` into `out`; returns the table.
    `utilisation` (label -> testbed.traces.utilisation table) adds utilisation.csv and .png."""
    from testbed.common.atomic import atomic_members

    result = compare(a, b)
    text = markdown(result, name_a, name_b)
    names = OUT_FILES + (UTILISATION_FILES if utilisation else [])
    with atomic_members(out, names) as tmp:
        (tmp / "compare.md").write_text(text)
        (tmp / "compare.json").write_text(json.dumps({"a": name_a, "b": name_b, **result}, indent=1) + "\n")
        traces = {labels[0]: a, labels[1]: b}
        plot_durations(traces, tmp / "durations-by-worker.png")
        plot_space_time(traces, tmp / "space-time.png")
        if utilisation:
            from testbed.traces.utilisation import plot_utilisation, tidy_runs

            tidy_runs(utilisation).to_csv(tmp / "utilisation.csv", index=False)
            plot_utilisation(utilisation, tmp / "utilisation.png")
    return text


def run(args: argparse.Namespace) -> int:
    from testbed.common.outputs import Out, check_distinct

    check_distinct([("", args.a), ("", args.b)], [Out("--out", args.out, "members", tuple(OUT_FILES))])
    a, b = read_tasks(args.a), read_tasks(args.b)
    if args.out:
        print(write_comparison(a, b, args.a, args.b, args.out), end="")
    else:
        print(markdown(compare(a, b), args.a, args.b), end="")
    return 0
