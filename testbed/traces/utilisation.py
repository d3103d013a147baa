"""Utilisation over time of a traced run: busy CPU workers and GPUs per node, transfers per link class.

`utilisation(tasks, transfers, bins)` is the tidy table (one row per time bin x node x resource x
metric; times in seconds from the run's start), `plot_utilisation` draws it:

* workers (`resource` cpu or gpu, per node): `busy_fraction`, the share of the bin the node's
  workers of that type spent in tasks (1 = all of them busy all the bin). Only workers that ran a
  task are in a trace, so they are the ones counted;
* links (`resource` a link class, `node` "cluster"): `active_transfers`, the mean number of
  transfers in flight that cross a link of the class, and `bytes_per_s`, their bytes spread evenly
  over each transfer's duration. A transfer counts once per class it crosses (a GPU <- remote RAM copy
  crosses the memory bus, the inter-socket link and PCIe).

Link classes come from numasim's link names (testbed/platform/platform_xml.py): `<node>.membusK`,
`<node>.qpi[K]`, `<node>.pcieK` and `<node>.xdma_*`, `<node>.nicpcieK`, `<node>.eth`, `<node>.coreK`
(a core's own bandwidth cap, crossed by what the core sends or receives, MPI messages included),
`<cluster>.switchI` (the switch's port of the I-th node), split-duplex ones with a direction suffix (`_UP`, `_DOWN`); the real engine's
MPI messages cross `mpi`.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from testbed.common.figures import save_figure
from testbed.traces.traces import worker_sort_key

COLUMNS = ["time_s", "bin_s", "node", "resource", "metric", "value"]
#: link class of a link name's last dotted part (first match wins), in plotting order
LINK_CLASSES = [
    ("network (Ethernet, NIC)", r"eth|switch\d*|nicpcie\d*|mpi"),
    ("inter-socket", r"qpi\d*|upi\d*"),
    ("PCIe (GPU)", r"pcie\d*|xdma.*"),
    ("memory bus", r"membus\d*"),
    ("core links", r"core\d*"),
]


def link_class(link: str) -> str:
    """The class of a link name; a split-duplex link's direction (`_UP`, `_DOWN`) is left out."""
    local = re.sub(r"_(UP|DOWN)$", "", link.rsplit(".", 1)[-1])
    for name, pattern in LINK_CLASSES:
        if re.fullmatch(pattern, local):
            return name
    return f"other ({re.sub(r'[0-9]+$', '', local)})"


def busy_time(start: np.ndarray, end: np.ndarray, edges: np.ndarray, weight: np.ndarray | None = None) -> np.ndarray:
    """Per bin of `edges`: Σ weight × overlap of [start, end) with the bin (seconds when weight = 1).

    Exact, in O((n + bins) log n): W(t) = Σ w (min(t, end) − start)⁺ = Σ_{start < t} w (t − start)
    − Σ_{end < t} w (t − end), evaluated at the edges and differenced."""
    w = np.ones(len(start)) if weight is None else np.asarray(weight, dtype=float)

    def cumulative(points: np.ndarray) -> np.ndarray:
        order = np.argsort(points)
        p, pw = points[order], w[order]
        k = np.searchsorted(p, edges, side="left")
        sum_w = np.concatenate([[0.0], np.cumsum(pw)])
        sum_wp = np.concatenate([[0.0], np.cumsum(pw * p)])
        return edges * sum_w[k] - sum_wp[k]

    total = cumulative(np.asarray(start, dtype=float)) - cumulative(np.asarray(end, dtype=float))
    return np.maximum(np.diff(total), 0.0)  # rounding left -1e-13 where nothing ran


def _rows(edges: np.ndarray, node: str, resource: str, metric: str, values: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"time_s": edges[:-1], "bin_s": np.diff(edges), "node": node, "resource": resource,
                         "metric": metric, "value": values})


def _transfer_rows(transfers: pd.DataFrame, edges: np.ndarray) -> list[pd.DataFrame]:
    links = transfers["Links"].fillna("").astype(str) if "Links" in transfers.columns else pd.Series(
        ["mpi"] * len(transfers), index=transfers.index)
    classes = links.map(lambda s: sorted({link_class(x) for x in s.split()}))
    order = [name for name, _ in LINK_CLASSES]
    found = sorted(set().union(set(), *classes), key=lambda c: (order.index(c) if c in order else len(order), c))
    width = np.diff(edges)
    out = []
    for cls in found:
        sel = transfers[classes.map(lambda cs, cls=cls: cls in cs).to_numpy()]
        s, e, b = (sel[c].to_numpy(dtype=float) for c in ("Start", "End", "Bytes"))
        dur = e - s
        timed = dur > 0
        active = busy_time(s[timed], e[timed], edges) / width
        rate = busy_time(s[timed], e[timed], edges, b[timed] / dur[timed])
        # zero-length transfers: their bytes in the bin of their start
        rate += np.histogram(np.clip(s[~timed], edges[0], edges[-1]), bins=edges, weights=b[~timed])[0]
        out += [_rows(edges, "cluster", cls, "active_transfers", active),
                _rows(edges, "cluster", cls, "bytes_per_s", rate / width)]
    return out


def utilisation(tasks: pd.DataFrame, transfers: pd.DataFrame | None = None, bins: int = 100) -> pd.DataFrame:
    """The tidy utilisation table of a run (read_tasks' and read_transfers' tables) over `bins` equal
    bins of [0, end of the last task or transfer]."""
    span = float(tasks["End"].max())
    if transfers is not None and len(transfers):
        span = max(span, float(transfers["End"].max()))
    edges = np.linspace(0.0, span if span > 0 else 1.0, bins + 1)
    width = np.diff(edges)
    parts = []
    for (node, wtype), g in sorted(tasks.groupby(["NodeName", "WorkerType"]),
                                   key=lambda kv: (worker_sort_key(kv[0][0]), kv[0][1])):
        workers = g["ResourceId"].nunique()
        busy = busy_time(g["Start"].to_numpy(dtype=float), g["End"].to_numpy(dtype=float), edges)
        parts.append(_rows(edges, node, "gpu" if wtype == "cuda" else "cpu", "busy_fraction",
                           busy / (workers * width)))
    if transfers is not None and len(transfers):
        parts += _transfer_rows(transfers, edges)
    return pd.concat(parts, ignore_index=True)[COLUMNS]


def tidy_runs(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The tables of several runs as one, a `run` column first (utilisation.csv)."""
    return pd.concat([t.assign(run=label) for label, t in tables.items()], ignore_index=True)[["run", *COLUMNS]]


# ------------------------------------------------------------------ figure
def _heatmap(ax, cax, table: pd.DataFrame, span: float, fig) -> None:
    busy = table[table["metric"] == "busy_fraction"]
    rows = list(dict.fromkeys(zip(busy["node"], busy["resource"], strict=False)))
    grid = np.vstack([busy.loc[(busy["node"] == n) & (busy["resource"] == r), "value"].to_numpy() for n, r in rows])
    image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis", vmin=0, vmax=1,
                      extent=(0, span, len(rows) - 0.5, -0.5))
    labels = [f"{n} {r.upper()}" for n, r in rows]
    ax.set_yticks(range(len(rows)), labels if len(rows) <= 48 else [""] * len(rows), fontsize=6)
    ax.set_ylabel("node, worker type")
    fig.colorbar(image, cax=cax, label="busy fraction")


def plot_utilisation(tables: dict[str, pd.DataFrame], path: Path) -> Path:
    """Per run: a heatmap of the busy fraction of each node's CPU workers and GPUs, and the bytes/s
    in flight per link class (GB/s), sharing the time axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nrows = max(len(t.loc[t["metric"] == "busy_fraction", ["node", "resource"]].drop_duplicates())
                for t in tables.values())
    heat_h = min(6.0, max(1.6, 0.8 + 0.13 * nrows))
    fig = plt.figure(figsize=(10, (heat_h + 2.0) * len(tables)))
    # the colour bars in a narrow column of their own, so that every panel has the same time axis
    grid = fig.add_gridspec(2 * len(tables), 2, height_ratios=[heat_h, 2.0] * len(tables), width_ratios=[60, 1])
    first = fig.add_subplot(grid[0, 0])
    axes = [[first]] + [[fig.add_subplot(grid[r, 0], sharex=first)] for r in range(1, 2 * len(tables))]
    span = max(float((t["time_s"] + t["bin_s"]).max()) for t in tables.values())
    # one GB/s scale and one colour per link class in every run, to compare them at a glance
    rates = [t.loc[t["metric"] == "bytes_per_s", "value"] for t in tables.values()]
    top = max((float(r.max()) for r in rates if len(r)), default=0.0) / 1e9
    classes = list(dict.fromkeys(c for t in tables.values() for c in t.loc[t["metric"] == "bytes_per_s", "resource"]))
    colours = {c: plt.get_cmap("tab10")(k % 10) for k, c in enumerate(classes)}
    for i, (label, t) in enumerate(tables.items()):
        heat, links = axes[2 * i][0], axes[2 * i + 1][0]
        _heatmap(heat, fig.add_subplot(grid[2 * i, 1]), t, span, fig)
        heat.set_title(f"{label}: busy fraction of each node's CPU workers and GPUs", fontsize=9)
        rate = t[t["metric"] == "bytes_per_s"]
        for cls, g in rate.groupby("resource", sort=False):
            k = classes.index(cls)  # the first classes (network first) drawn on top of the others
            links.step(g["time_s"] + g["bin_s"], g["value"] / 1e9, where="pre", label=cls, color=colours[cls],
                       linewidth=1.6 if k == 0 else 1.0, zorder=3 + len(classes) - k)
        links.set_ylabel("transfers (GB/s)")
        links.set_title(f"{label}: bytes in flight per link class", fontsize=9)
        links.grid(alpha=0.3)
        if len(rate):
            links.legend(fontsize=7, loc="upper right", ncol=2)
        else:
            links.text(0.5, 0.5, "no transfer in the trace", transform=links.transAxes, ha="center")
        links.set_ylim(0, 1.45 * top if top > 0 else 1.0)  # headroom for the legend
        heat.tick_params(labelbottom=False)
        if i < len(tables) - 1:
            links.tick_params(labelbottom=False)
    axes[-1][0].set_xlabel("time (s)")
    axes[-1][0].set_xlim(0, span)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)  # and PDF beside it
    plt.close(fig)
    return path
