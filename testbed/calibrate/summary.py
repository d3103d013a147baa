"""summary.md and plots of a calibration bundle (written by `testbed calibrate`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from testbed.calibrate.bundle import codelet_table, numa_rows, read_csv
from testbed.calibrate.microbench import numa_layout
from testbed.common.atomic import atomic_file
from testbed.common.palette import kernel_color
from testbed.starpu.bus_files import read_bus_matrix


def _fmt(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}g}" if isinstance(x, (int, float)) and math.isfinite(x) else "—"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def _bus_matrix(path: Path) -> list[list[str]]:
    """The bandwidth or latency matrix of a StarPU bus file, as StarPU prints its numbers."""
    if not path.exists():
        return []
    return [[f"{v:e}" for v in row if not math.isnan(v)] for row in read_bus_matrix(path)[1]]


def plot_kernels(rows: list[dict[str, str]], path: Path) -> bool:
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kernels = sorted({(r["kernel"], r["b"]) for r in rows})
    fig, axes = plt.subplots(1, len(kernels), figsize=(3.2 * len(kernels), 3.2), squeeze=False)
    for ax, (k, b) in zip(axes[0], kernels, strict=False):
        cells = [r for r in rows if r["kernel"] == k and r["b"] == b]
        labels = sorted({f"T{r['thread_node']}/D{r['data_node']}" for r in cells})
        for i, load in enumerate(("alone", "all")):
            vals = []
            for lab in labels:
                match = [r for r in cells if r["load"] == load and f"T{r['thread_node']}/D{r['data_node']}" == lab]
                vals.append(float(match[0]["gflops"]) if match else 0.0)
            ax.bar([x + 0.4 * i for x in range(len(labels))], vals, width=0.4, label=load)
        ax.set_xticks([x + 0.2 for x in range(len(labels))], labels)
        ax.set_title(f"{k} b={b}")
        ax.set_ylabel("GF/s per thread (median)")
    axes[0][0].legend(fontsize="small")
    fig.tight_layout()
    with atomic_file(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=80)
    plt.close(fig)
    return True


def plot_codelets(table: list[dict[str, Any]], path: Path) -> bool:
    if not table:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    labels = [f"{r['symbol']} {r['arch']}\nb={r['b']} {r['scope']}" for r in table]
    ax.bar(range(len(table)), [r["mean_s"] * 1e3 for r in table], yerr=[r["dev_s"] * 1e3 for r in table],
           color=[kernel_color(r["symbol"]) for r in table])  # StarVZ's palette
    ax.set_xticks(range(len(table)), labels, fontsize="x-small")
    ax.set_ylabel("StarPU model mean (ms), ±1 sd")
    fig.tight_layout()
    with atomic_file(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=80)
    plt.close(fig)
    return True


def validation_lines(b: Path) -> list[str]:
    """Real vs simulated makespan (validation.json, testbed/calibrate/validation.py)."""
    path = b / "validation.json"
    lines = ["## Validation: numasim vs the real LU", ""]
    if not path.exists():
        return lines + ["Not available yet (see Steps).", ""]
    v = json.loads(path.read_text())
    w, real, sim = v["workload"], v["real"], v["simulated"]
    verdict = "within" if v["within_tolerance"] else "NOT within"
    lines += [f"N={w['n']} b={w['b']}: real {real['mean_s']:.4f} s (mean of {len(real['makespans_s'])} runs), "
              f"simulated {sim['mean_s']:.4f} s (numasim, {sim['workers']} worker(s), mean of seeds "
              f"{sim['seeds'][0]}..{sim['seeds'][-1]}; model means only: {sim['means_only_s']:.4f} s): "
              f"**{v['difference_pct']:+.1f}%**, {verdict} ±{v['tolerance_pct']:.0f}%.", ""]
    loads = real.get("load_average_1min")
    if not isinstance(loads, list):
        lines += ["The load of the machine during the real runs was not recorded (bundle made before "
                  "`lu-reference` recorded it).", ""]
    elif loads:
        busy = max(loads) > (real.get("cpus") or 1)
        lines += [f"Load average (1 min) when the real runs started: {', '.join(f'{x:.1f}' for x in loads)} on "
                  f"{real.get('cpus')} CPUs" + (" — **the node was shared**: other processes delay the LU between "
                                                "its tasks, which no codelet model records." if busy else "."), ""]
    d = v.get("diagnostics", {})
    if d:
        lines += [f"Sum of the model means over the LU tasks: {d['model_sum_s']:.4f} s (one worker's busy time "
                  f"without overhead); load average now {d['load_average_1min_now']:.1f} on {d['cpus']} CPUs.", ""]
    p = v.get("paired")
    if p:
        lines += ["Paired check (diagnostic; real runs at validation time, each simulated with the models StarPU "
                  "recorded during that same run):", ""]
        lines += _table(["priority", "real (s)", "simulated (s)", "difference", "load average",
                         "workers in tasks (s)", "models' sum (s)", "samples kept"],
                        [[label, f"{r['real_makespan_s']:.4f}", f"{r['simulated_makespan_s']:.4f}",
                          f"{r['difference_pct']:+.1f}%", f"{r['load_average_1min']:.1f}",
                          _num(r.get("worker_executing_s")), _num(r.get("model_sum_all_tasks_s")),
                          _kept(r.get("samples"))]
                         for label, runs in p["variants"].items() for r in runs])
        lines += [""]
    m = v.get("memory_microbenchmarks")
    if m:
        lines += [f"Memory microbenchmarks simulated with numasim's memory model (docs/memory-model.md): "
                  f"{m['reproduced']} of {m['total']} numa_bench quantities within ±{m['tolerance_pct']:.0f}%:", ""]
        lines += _table(["kernel", "b", "load", "thread node", "data node", "quantity", "measured", "simulated",
                         "error"],
                        [[c["kernel"], c["b"], c["load"], c["thread_node"], c["data_node"], c["quantity"],
                          f"{c['measured']:.3f}", f"{c['simulated']:.3f}", f"{c['error_pct']:+.1f}%"]
                         for c in m["cells"]])
        lines += [""]
    if v.get("diagnosis"):
        lines += ["Diagnosis (computed from the measurements above):", ""]
        lines += [f"* {note}" for note in v["diagnosis"]] + [""]
    lines += ["Details: `validation.json`.", ""]
    return lines


def _num(x: object) -> str:
    return f"{x:.4f}" if isinstance(x, float) else "-"


def _kept(samples: object) -> str:
    if not isinstance(samples, dict):
        return "-"
    return f"{sum(v['samples_kept'] for v in samples.values())}/{sum(v['tasks'] for v in samples.values())}"


def network_lines(b: Path) -> list[str]:
    path = b / "network" / "pingpong.json"
    if not path.exists():
        return []
    n = json.loads(path.read_text())
    lines = ["## Network (MPI ping-pong)", ""]
    if n.get("loopback"):
        lines += [f"> **{n['note']}.**", ""]
    lines += [f"Hosts {' <-> '.join(n['hosts'])}: latency {n['latency_s'] * 1e6:.2f} us ({n['latency_note']}), "
              f"bandwidth {n['bandwidth_Bps'] / 1e9:.3g} GB/s ({n['bandwidth_note']}). Rows: `network/pingpong.csv`.", ""]
    return lines


def write_summary(ctx: Any, out: Path) -> None:
    opts = ctx.opts
    b = opts.out
    rows = numa_rows(b)
    layout = numa_layout()
    codelets = codelet_table(b, opts.machine)
    unstable: list[str] = []
    lines = _header_lines(b, opts.machine)
    lines += _numa_lines(rows, layout, opts.unstable, unstable)
    lines += penalty_lines(b, len(layout))
    lines += _bandwidth_and_bus_lines(b, opts.machine)
    lines += _codelet_lines(codelets, layout, opts.unstable, unstable)
    lines += _reference_lines(b, opts.unstable, unstable)
    lines += validation_lines(b)
    lines += network_lines(b)
    lines += _unstable_lines(b, opts.unstable, unstable)
    plots = b / "plots"
    plot_kernels(rows, plots / "numa-kernels.png")
    plot_codelets(codelets, plots / "codelets.png")
    for p in sorted(plots.glob("*.png")) if plots.exists() else []:
        lines += [f"![{p.stem}](plots/{p.name})"]
    with atomic_file(out) as fh:
        fh.write("\n".join(lines) + "\n")


def _header_lines(b: Path, machine: str) -> list[str]:
    """Title, host facts and the status of every step."""
    host = json.loads((b / "host.json").read_text()) if (b / "host.json").exists() else {}
    steps = [json.loads(p.read_text()) for p in sorted((b / "steps").glob("*.json"))]
    lines = [f"# Calibration bundle `{b.name}` (machine type `{machine}`)", ""]
    lines += [f"* host `{host.get('host', '?')}`, {host.get('date', '?')}, kernel `{host.get('kernel', '?')}`",
              f"* StarPU {host.get('versions', {}).get('starpu', '?')}, OpenBLAS "
              f"{host.get('versions', {}).get('openblas', '?')}, testbed commit "
              f"`{host.get('git', {}).get('commit', '?')}` (dirty: {host.get('git', {}).get('dirty', '?')})",
              "* exact commands, environment and versions: `provenance.yaml`", ""]

    lines += ["## Steps", ""]
    lines += _table(["step", "status", "duration (s)"],
                    [[s["step"], s["status"].splitlines()[0], s["duration_s"]] for s in steps
                     if s["step"] not in ("summary", "provenance")])
    missing = [s for s in steps if not s["status"].startswith("done") and s["step"] not in ("summary", "provenance")]
    if missing:
        lines += ["", "**Incomplete:** " + "; ".join(f"`{s['step']}`: {s['status'].splitlines()[0]}" for s in missing)
                  + ". Run the same command again once the cause is fixed: finished steps are skipped."]
    return lines


def _numa_lines(rows: list[dict[str, str]], layout: dict[int, list[int]], threshold: float,
                unstable: list[str]) -> list[str]:
    """The NUMA microbenchmark table; unstable cells are added to `unstable`."""
    lines = ["", "## NUMA microbenchmarks", "",
              "Thread bound to a core of NUMA node T, data first-touched on node D (PaStiX method); tiles cycled "
              "through a pool of twice the last-level cache so every call reads memory. `alone`: one thread; "
              "`all`: every core runs the kernel, threads of T measured. GF/s from the median call; factor = "
              "median time / median time of the local cell (T=D).", ""]
    lines += [f"NUMA nodes seen: {len(layout)} ({'; '.join(f'node {k}: CPUs {v}' for k, v in layout.items())})."]
    if len(layout) == 1:
        lines += ["", "> **One NUMA node:** every matrix below is 1×1 (thread and data on node 0); remote-access "
                  "factors cannot be measured on this machine and are 1 by construction. Run the calibration on a "
                  "multi-socket node to obtain them."]
    lines += [""]
    local = {(r["kernel"], r["b"], r["load"], r["thread_node"]): float(r["median_s"]) for r in rows
             if r["thread_node"] == r["data_node"]}
    trows = []
    for r in rows:
        rel = float(r["rel_std"])
        flag = "UNSTABLE" if rel > threshold else ""
        if flag:
            unstable.append(f"microbenchmark {r['kernel']} b={r['b']} {r['load']} T{r['thread_node']}/D{r['data_node']}: "
                            f"rel. stddev {rel:.2f} over {r['calls']} calls (median {float(r['median_s'])*1e3:.3f} ms, "
                            f"mean {float(r['mean_s'])*1e3:.3f} ms)")
        loc = local.get((r["kernel"], r["b"], r["load"], r["thread_node"]))
        trows.append([r["kernel"], r["b"], r["load"], r["thread_node"], r["data_node"],
                      _fmt(float(r["median_s"]) * 1e3, 4), _fmt(float(r["gflops"])), _fmt(rel, 2),
                      _fmt(float(r["median_s"]) / loc, 4) if loc else "—", flag])
    lines += _table(["kernel", "b", "load", "T", "D", "median (ms)", "GF/s", "rel. sd", "factor", ""], trows)
    lines += ["", "Matrices: `numa/matrix-<kernel>-b<b>-<load>.csv`; plot: `plots/numa-kernels.png`.", ""]
    return lines


def penalty_lines(b: Path, nnuma: int) -> list[str]:
    """The remote BLAS 3 penalty cells (numa/remote_penalty.csv, docs/blas3-remote-penalty.md)."""
    lines = ["", "## Remote BLAS 3 penalty", "",
             "Every core busy; the threads of node T on data of node D against the same threads on data of T "
             "(median call time); `gpu`: every GPU copying to and from a pinned buffer on D meanwhile. "
             "`testbed platform --from-calibration` turns the penalty into `numa.stall_fraction_<kernel>`.", ""]
    path = b / "numa" / "remote_penalty.csv"
    if nnuma < 2:
        return lines + ["Not measurable: one NUMA node (no memory on another socket).", ""]
    if not path.is_file():
        return lines + ["Not available (see Steps).", ""]
    rows = read_csv(path)
    lines += _table(["kernel", "b", "copies", "T", "D", "local (ms)", "remote (ms)", "penalty", "copies GB/s"],
                    [[r["kernel"], r["b"], r["copies"], r["thread_node"], r["data_node"],
                      _fmt(float(r["local_median_s"]) * 1e3, 4), _fmt(float(r["remote_median_s"]) * 1e3, 4),
                      _fmt(float(r["penalty"]), 4), _fmt(float(r["copy_gbps"]), 3) if r["copies"] == "gpu" else "—"]
                     for r in rows])
    log = path.with_suffix(".log")
    if log.is_file() and log.read_text().strip():
        lines += ["", "numa_bench: " + " ".join(log.read_text().split())]
    return lines + [""]


def _bandwidth_and_bus_lines(b: Path, machine: str) -> list[str]:
    bw = read_csv(b / "numa" / "bandwidth.csv")
    lines = ["## Memory bandwidth (triad, best of reps)", ""]
    lines += _table(["scope", "T", "D", "threads", "GB/s", "rel. sd"],
                    [[r["scope"], r["thread_node"], r["data_node"], r["threads"], _fmt(float(r["gbps"])),
                      _fmt(float(r["rel_std"]), 2)] for r in bw])
    lines += [""]

    lines += ["## StarPU bus calibration", ""]
    bus = b / "sampling" / "bus"
    if bus.is_dir():
        lines += [f"Files: {', '.join(f'`{p.name}`' for p in sorted(bus.iterdir()))} (native StarPU, "
                  f"`STARPU_HOSTNAME={machine}`). Bandwidth matrix (MB/s, memory nodes: NUMA nodes then GPUs):", ""]
        lines += ["```", *(" ".join(r) for r in _bus_matrix(bus / f"{machine}.bandwidth")), "```", ""]
    else:
        lines += ["Not available (see Steps).", ""]
    return lines


def _codelet_lines(codelets: list[dict[str, Any]], layout: dict[int, list[int]], threshold: float,
                   unstable: list[str]) -> list[str]:
    lines = ["## LU codelet models (StarPU history, `STARPU_CALIBRATE=1`)", ""]
    if codelets:
        crow = []
        for r in codelets:
            flag = "UNSTABLE" if r["rel_std"] > threshold else ""
            if flag:
                unstable.append(f"codelet {r['symbol']} ({r['arch']}) b={r['b']} scope {r['scope']}: rel. stddev "
                                f"{r['rel_std']:.2f} over {r['n']} samples")
            crow.append([r["scope"], r["arch"], r["symbol"], r["b"], _fmt(r["mean_s"] * 1e3, 4), _fmt(r["rel_std"], 2),
                         r["n"], flag])
        lines += _table(["scope", "arch", "symbol", "b", "mean (ms)", "rel. sd", "samples", ""], crow)
        lines += ["", "`kernels.yaml` gives these times in the format machine descriptions cite (`kernels:` key)."]
        if len(layout) == 1:
            lines += ["", "One NUMA node: the per-NUMA-node models are the `all` models (not run separately)."]
    else:
        lines += ["Not available yet (see Steps): `apps/lu` real build missing or not calibrated."]
    lines += [""]
    return lines


def _reference_lines(b: Path, threshold: float, unstable: list[str]) -> list[str]:
    ref = b / "lu-reference.json"
    lines = ["## Real LU makespan on this machine (calibrated models, dmdas)", ""]
    if ref.exists():
        r = json.loads(ref.read_text())
        lines += [f"N={r['n']} b={r['b']}: mean {r['mean_s']:.4f} s over {len(r['makespans_s'])} runs "
                  f"({', '.join(f'{x:.4f}' for x in r['makespans_s'])}), rel. sd {r['rel_std']:.3f}. "
                  "This is the reference a simulation of this machine must match.", ""]
        if r["rel_std"] > threshold:
            unstable.append(f"LU makespan N={r['n']} b={r['b']}: rel. stddev {r['rel_std']:.2f}")
    else:
        lines += ["Not available yet (see Steps).", ""]
    for old in sorted(b.glob("lu-reference.superseded-*.json")):
        o = json.loads(old.read_text())
        lines += [f"Superseded reference `{old.name}` (kept, not compared): mean {o['mean_s']:.4f} s over "
                  f"{len(o['makespans_s'])} runs; {o.get('superseded_because', 'no reason recorded')}.", ""]
    return lines


def _unstable_lines(b: Path, threshold: float, unstable: list[str]) -> list[str]:
    lines = ["## Unstable timings", ""]
    lines += [f"Threshold: relative standard deviation > {threshold}. These are reported, not averaged away; "
              "rerun on a quiet node or raise `--reps`.", ""]
    lines += [f"* {u}" for u in unstable] or ["None."]
    not_measured = []
    pp = b / "network" / "pingpong.json"
    if not pp.exists():
        not_measured.append("network latency/bandwidth (MPI ping-pong between two nodes): run with `--hosts A,B`")
    elif json.loads(pp.read_text()).get("loopback"):
        not_measured.append("network latency/bandwidth between two nodes: the ping-pong ran on one host (loopback)")
    if not (b / "validation.json").exists():
        not_measured.append("agreement of numasim with the real LU makespan: `validate` step not done (see Steps)")
    lines += ["", "## Not measured by this bundle", ""]
    lines += [f"* {m};" for m in not_measured] or ["Nothing listed."]
    lines += [""]
    return lines
