"""`testbed diagnose TRACE.csv [--transfers T.csv] [--platform-dir DIR --b B] --out DIR`: what a
traced run spent its time on, as tidy tables (StarVZ's split: tables here, figures drawn from them).

* `kernels.csv`: kernel durations per machine type x worker type x NUMA node of the worker (CPU
  workers together, each GPU apart: `worker` is `cpu` or the GPU's local name, `gpu0`), per kind:
  count, median, Q1, Q3, IQR, and the share StarVZ flags as outliers; `numa` is the worker
  thread's NUMA node (a CUDA worker's: its driver thread's), `device_numa` the GPU's (from the
  platform's machine descriptions). StarVZ's rule, matched on
  schnorr/starvz R/phase1_parse_csv.R `read_worker_csv` ("Outlier detection using standard model":
  group_by(Value, ResourceType), Outlier = Duration > outlier_fun(Duration)) with
  R/phase1_outlier.R `outlier_definition` (Q3 + 1.5 (Q3 − Q1), R's default type-7 quantiles, the
  same as numpy's): per kind x resource type (CPU, CUDA: the worker name without digits) over the
  whole trace, every node and machine type together (StarVZ master, commit 7426178).
* `bound.csv`: per node, the area bound of its own tasks (the LU's owner-computes mapping keeps
  them there) and how far the node's last task end is above it; `bound_summary.csv` the same per
  machine type against the run's makespan. The area bound is the optimum of the linear program
  "every worker busy, nothing else": tasks of each kind split (fractionally) over the node's
  resource classes that ran that kind (its CPU workers as one class, each GPU as its own), each
  class's load (Σ tasks × time per task / workers) ≤ T, minimise T. A node's CPU workers are the
  run's (`--result`: numasim's `cpu_workers_by_rank`), else its machine type's as the trace shows
  them (the most any node of the type ran tasks on: a worker that ran nothing is not in a trace);
  its GPUs every GPU any node of the type used; `workers_from` says which. Dependencies, transfers and
  the scheduler are left out, so the makespan is ≥ it. Computed twice: with the perf models'
  mean times (`bound_model_s`, the StarPU history models numasim samples from; needs
  `--platform-dir` and `--b`) and with the trace's own mean durations per machine type x class
  (`bound_trace_s`: the kernels as they ran, NUMA effects included).
* `copies.csv` (with `--transfers`): per machine type x copy class (direction, and whether the
  copy crosses the inter-socket link; MPI messages under machine `cluster`), the ratio of each copy's duration to the scheduler's estimate of it
  (numasim's transfer log `Estimate`: StarPU's starpu_transfer_predict, the data penalty that
  STARPU_SCHED_BETA, factor E, scales) and to the bus calibration's figure it starts from
  (`Calibrated`: latency + bytes / bandwidth, one copy on an idle node; estimate = calibrated
  × 2 × ngpus for most buses); MPI messages between nodes have neither.
* `overheads.csv`: per machine type x worker type, the workers' time in tasks and idle, and the
  time their threads spent copying (StarPU's `DriverCopy`, `DriverCopyAsync` states) and allocating
  or freeing (`Allocating`, `AllocatingReuse`, `Freeing`; src/debug/traces/starpu_paje.c memory-node
  states), read from a thread-state table (`--states`: StarVZ's paje.worker_state columns
  ResourceId, Start, End, Value) when the engine writes one, else the copies from the transfer
  log's `Thread` column (the worker whose thread ran a memcpy) when it has one; empty (NaN)
  otherwise, and `thread_states` says which. With `--result` holding numasim's `runtime_costs`
  (the cluster's thread_copy_s, pinned_alloc_s, gpu_malloc_s, gpu_free_s) a row `cluster`, `all`. `copies_s` is what the transfer log does say: the summed duration of
  the copies into or out of the machine type's GPUs (on `cuda` rows: their drivers issue them) and
  of its RAM-to-RAM copies (on `cpu` rows: StarPU has a CPU worker or a CUDA driver memcpy them).
* `placement.csv` (numasim traces, column `OperandAllocators`): where the operands of CPU tasks
  lived and who put them there. Per machine type x NUMA node of the CPU worker x kind, the
  operands read, grouped by the thread that first allocated the RAM replica read (`allocator`:
  `main` the application's matrix before the run, `cpu` a CPU worker, `cuda` a CUDA driver, `copy`
  a copy with no modelled thread, `mpi` a received tile's buffer; `allocator_numa` that thread's
  NUMA node, -1 none modelled) and the NUMA node of the replica's pages (`page_numa`): count, share
  of the group's operands, and when the replica was allocated (median, p10, p90 of the run's
  clock). With pinned memory (CUDA workers) the pages are where the allocating thread ran
  (docs/page-placement.md), so this table says which threads decide A's locality.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from testbed.common.errors import InputError
from testbed.traces.traces import (
    _check_columns,
    _check_numbers,
    _read_csv,
    node_name,
    read_tasks,
    read_transfers,
    worker_type,
)
from testbed.traces.utilisation import link_class

#: StarPU's state names (src/debug/traces/starpu_paje.c, memory-node states "MS") counted as copies
#: and as allocations in a thread-state table
COPY_STATES = ("DriverCopy", "DriverCopyAsync")
ALLOC_STATES = ("Allocating", "AllocatingReuse", "Freeing")
STATE_COLUMNS = ["ResourceId", "Start", "End", "Value"]
TABLES = ["kernels.csv", "bound.csv", "bound_summary.csv", "copies.csv", "overheads.csv", "placement.csv"]
KERNEL_COLUMNS = ["run", "machine", "worker_type", "worker", "numa", "device_numa", "kind", "tasks", "median_s",
                  "q1_s", "q3_s", "iqr_s", "mean_s", "starvz_threshold_s", "outliers", "outlier_share"]
BOUND_COLUMNS = ["run", "node", "machine", "tasks", "cpu_workers", "workers_from", "gpus", "end_s", "busy_s", "bound_model_s",
                 "bound_trace_s", "end_over_bound_model", "end_over_bound_trace"]
SUMMARY_COLUMNS = ["run", "machine", "nodes", "makespan_s", "last_end_s", "bound_model_s", "bound_trace_s",
                   "makespan_over_bound_model", "makespan_over_bound_trace", "busy_fraction"]
COPY_COLUMNS = ["run", "machine", "copy_class", "link_classes", "copies", "bytes", "duration_median_s", "estimate_median_s",
                "actual_over_estimate_median", "actual_over_estimate_p10", "actual_over_estimate_p90",
                "actual_over_estimate_of_sums", "actual_over_calibrated_median", "actual_over_calibrated_p90",
                "estimate_over_calibrated_median"]
PLACEMENT_COLUMNS = ["run", "machine", "numa", "kind", "allocator", "allocator_numa", "page_numa", "operands",
                     "share", "allocated_median_s", "allocated_p10_s", "allocated_p90_s"]
#: numasim's allocating-thread kinds (trace column OperandAllocators)
ALLOCATOR_KINDS = ("main", "cpu", "cuda", "copy", "mpi")
OVERHEAD_COLUMNS = ["run", "machine", "worker_type", "workers", "task_s", "idle_s", "copies_s", "thread_copy_s",
                    "thread_alloc_s", "thread_states"]


# ------------------------------------------------------------------ inputs
def machine_of_node(name: str) -> str:
    """A node's machine type from its name when no platform says it: `chifflet-3` -> `chifflet`."""
    return re.sub(r"-\d+$", "", name)


def node_machines(tasks: pd.DataFrame, platform_dir: Path | None = None) -> dict[str, str]:
    """Node name -> machine type: the platform's summary.json when given, else the name's stem."""
    names = sorted(tasks["NodeName"].unique())
    if platform_dir is None:
        return {n: machine_of_node(n) for n in names}
    summary = Path(platform_dir) / "summary.json"
    try:
        nodes = {n["name"]: n["machine"] for n in json.loads(summary.read_text())["nodes"]}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InputError(summary, "nodes", f"the platform's node list (testbed platform; {err})") from None
    missing = [n for n in names if n not in nodes]
    if missing:
        raise InputError(summary, "nodes", f"the trace's nodes (missing {missing[0]}): the run's platform")
    return {n: nodes[n] for n in names}


def model_means(platform_dir: Path, machines: set[str], b: int) -> dict[tuple[str, str, str], float]:
    """{(machine, kind, worker class): mean seconds} of the perf models a numasim run on this
    platform samples from, for b x b tiles: class `cpu` or `gpu<j>` (history arch cpu0 / cuda<j>).
    Chameleon's symbols (testbed/starpu/lu_codelets.py); a raw sampling directory (`perfmodels`
    of summary.json) is read under its own host name."""
    from testbed.starpu.lu_codelets import BY_KIND
    from testbed.starpu.perfmodel_files import history_means

    platform_dir = Path(platform_dir)
    try:
        raw = json.loads((platform_dir / "summary.json").read_text()).get("perfmodels", {})
    except (OSError, ValueError, AttributeError) as err:
        raise InputError(platform_dir / "summary.json", None, f"a platform summary (testbed platform; {err})") from None
    out = {}
    for machine in sorted(machines):
        if machine in raw:
            sampling, host = Path(raw[machine]["dir"]), raw[machine]["host"]
        else:
            sampling, host = platform_dir / "starpu" / machine / "sampling", machine
        for kind in ("getrf", "trsm", "gemm"):
            codelet = BY_KIND[kind]
            path = sampling / "codelets" / "45" / f"{codelet.symbol}.{host}"
            if not path.is_file():
                continue
            size = codelet.size_bytes(b)
            for arch, entries in history_means(path).items():
                if size in entries:
                    m = re.fullmatch(r"(cpu|cuda)(\d+)_impl0", arch)
                    if m:
                        cls = "cpu" if m[1] == "cpu" else f"gpu{m[2]}"
                        out[(machine, kind, cls)] = entries[size] * 1e-6
    return out


def gpu_numa_nodes(platform_dir: Path) -> dict[tuple[str, str], int]:
    """{(machine, `gpu<j>`): NUMA node of GPU j} from the machine descriptions a platform was
    generated from (summary.json `machines`; the YAML's `gpus[j].numa_node`)."""
    from testbed.describe.machines import load_machine

    summary = Path(platform_dir) / "summary.json"
    try:
        machines = json.loads(summary.read_text())["machines"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InputError(summary, "machines", f"the platform's machine descriptions (testbed platform; {err})") from None
    return {(name, f"gpu{j}"): g.numa_node for name, path in machines.items()
            for j, g in enumerate(load_machine(path).gpus)}


def read_result(path: str | Path | None) -> tuple[list[int] | None, dict | None]:
    """(`cpu_workers_by_rank`, `runtime_costs` or None) of a run's JSON output (testbed simulate,
    numasim); (None, None) without a path."""
    if path is None:
        return None, None
    try:
        result = json.loads(Path(path).read_text())
        counts = result["cpu_workers_by_rank"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InputError(path, "cpu_workers_by_rank", f"numasim's per-rank CPU worker counts (a run's JSON "
                                                      f"output; {type(err).__name__})") from None
    if not isinstance(counts, list) or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0
                                               for c in counts):
        raise InputError(path, "cpu_workers_by_rank", "a list of non-negative integers")
    costs = result.get("runtime_costs")
    if costs is not None and not (isinstance(costs, dict) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in costs.values())):
        raise InputError(path, "runtime_costs", "an object of numbers (numasim's summary)")
    return counts, costs


def read_states(path: str | Path) -> pd.DataFrame:
    """A thread-state table (StarVZ's paje.worker_state columns ResourceId, Start, End, Value; s)."""
    path = Path(path)
    df = _read_csv(path, "thread states")
    _check_columns(df, path, "thread states", STATE_COLUMNS)
    _check_numbers(df, path, "thread states", ["Start", "End"])
    df["ResourceId"] = df["ResourceId"].astype(str)
    df["Value"] = df["Value"].astype(str)
    return df


# ------------------------------------------------------------------ tables
def worker_class(resource: str, worker_type: str) -> str:
    """`cpu`, or the GPU's local name (`chifflet-1.gpu0` -> `gpu0`)."""
    return resource.split(".", 1)[-1] if worker_type == "cuda" else "cpu"


def starvz_outliers(tasks: pd.DataFrame) -> pd.Series:
    """StarVZ's Outlier column: Duration > Q3 + 1.5 IQR of its kind x resource type over the whole
    trace (R/phase1_parse_csv.R read_worker_csv, R/phase1_outlier.R outlier_definition)."""
    return tasks["Duration"] > starvz_thresholds(tasks)


def starvz_thresholds(tasks: pd.DataFrame) -> pd.Series:
    """Each task's StarVZ threshold, Q3 + 1.5 (Q3 − Q1) of its kind x worker type."""
    g = tasks.groupby(["Value", "WorkerType"])["Duration"]
    q1, q3 = g.transform(lambda d: np.quantile(d, 0.25)), g.transform(lambda d: np.quantile(d, 0.75))
    return q3 + 1.5 * (q3 - q1)


def kernel_table(tasks: pd.DataFrame, machines: dict[str, str], run: str = "",
                 gpu_numa: dict[tuple[str, str], int] | None = None) -> pd.DataFrame:
    """`numa` is the worker thread's NUMA node (the trace's WorkerNuma: a CUDA worker's is its
    driver thread's); `device_numa` the GPU's own (`gpu_numa`, from the platform), NaN for CPUs."""
    gpu_numa = gpu_numa or {}
    t = tasks.assign(machine=tasks["NodeName"].map(machines), threshold=starvz_thresholds(tasks),
                     worker=[worker_class(r, w) for r, w in zip(tasks["ResourceId"], tasks["WorkerType"], strict=True)])
    t["outlier"] = t["Duration"] > t["threshold"]
    rows = []
    for (machine, wtype, worker, numa, kind), g in t.groupby(["machine", "WorkerType", "worker", "WorkerNuma", "Value"]):
        d = g["Duration"].to_numpy(dtype=float)
        q1, med, q3 = np.quantile(d, [0.25, 0.5, 0.75])
        rows.append({"run": run, "machine": machine, "worker_type": wtype, "worker": worker, "numa": int(numa),
                     "device_numa": gpu_numa.get((machine, worker), math.nan), "kind": kind, "tasks": len(d), "median_s": med, "q1_s": q1, "q3_s": q3, "iqr_s": q3 - q1,
                     "mean_s": float(d.mean()), "starvz_threshold_s": float(g["threshold"].iloc[0]),
                     "outliers": int(g["outlier"].sum()), "outlier_share": float(g["outlier"].mean())})
    return pd.DataFrame(rows, columns=KERNEL_COLUMNS)


def area_bound(work: dict[str, float], times: dict[tuple[str, str], float], capacity: dict[str, int]) -> float:
    """min T such that the `work[k]` tasks of each kind k, split over the classes r with a time
    `times[(k, r)]`, load no class beyond T: Σ_k x_kr times[k, r] ≤ capacity[r] T, Σ_r x_kr = work[k],
    x ≥ 0 (a linear program, solved by scipy's HiGHS). NaN when a kind has no class to run on."""
    from scipy.optimize import linprog

    kinds = [k for k, n in work.items() if n > 0]
    if not kinds:
        return 0.0
    pairs = [(k, r) for k in kinds for r in capacity if math.isfinite(times.get((k, r), math.nan))
             and capacity[r] > 0]
    if any(not any(p[0] == k for p in pairs) for k in kinds):
        return math.nan
    nvar = len(pairs) + 1  # x_kr, then T
    c = np.zeros(nvar)
    c[-1] = 1.0
    a_ub, b_ub = [], []
    for r in capacity:
        row = np.zeros(nvar)
        for i, (_, rr) in enumerate(pairs):
            if rr == r:
                row[i] = times[pairs[i]]
        if row.any():
            row[-1] = -capacity[r]
            a_ub.append(row)
            b_ub.append(0.0)
    a_eq = [np.array([1.0 if p[0] == k else 0.0 for p in pairs] + [0.0]) for k in kinds]
    res = linprog(c, A_ub=np.array(a_ub), b_ub=b_ub, A_eq=np.array(a_eq), b_eq=[work[k] for k in kinds],
                  bounds=[(0, None)] * nvar, method="highs")
    if not res.success:  # feasible by construction (every kind on some class): a solver failure
        raise RuntimeError(f"area bound: linear program not solved ({res.message})")
    return float(res.x[-1])


def bound_table(tasks: pd.DataFrame, machines: dict[str, str], means: dict | None = None,
                run: str = "", cpu_workers: dict[str, int] | None = None) -> pd.DataFrame:
    """Per node: its tasks, CPU workers (`cpu_workers`, node -> count, from the run's own output;
    else its machine type's as the trace shows them) and GPUs, its last task end, and the area
    bound with the perf models' means (NaN without them) and with the trace's."""
    t = tasks.assign(machine=tasks["NodeName"].map(machines),
                     cls=[worker_class(r, w) for r, w in zip(tasks["ResourceId"], tasks["WorkerType"], strict=True)])
    # the trace's own mean per machine type x kind x class; a class runs a kind if the trace shows it
    trace_means = t.groupby(["machine", "Value", "cls"])["Duration"].mean()
    # A worker that ran nothing is not in a trace: a machine type's nodes have the CPU workers of
    # the one that ran tasks on the most, and every GPU any of them used.
    cpus = t[t["cls"] == "cpu"].groupby(["machine", "NodeName"])["ResourceId"].nunique().groupby("machine").max()
    gpus = t[t["cls"] != "cpu"].groupby("machine")["cls"].unique()
    rows = []
    for node, g in sorted(t.groupby("NodeName"), key=lambda kv: kv[0]):
        machine = machines[node]
        capacity = {"cpu": int(cpu_workers[node] if cpu_workers else cpus.get(machine, 0))}
        capacity.update({c: 1 for c in sorted(gpus.get(machine, []))})
        work = g["Value"].value_counts().to_dict()
        ran = {(k, r): float(v) for (m, k, r), v in trace_means.items() if m == machine}
        model = {key: means.get((machine, *key), math.nan) for key in ran} if means is not None else None
        b_trace = area_bound(work, ran, capacity)
        b_model = area_bound(work, model, capacity) if model is not None else math.nan
        end = float(g["End"].max())
        rows.append({"run": run, "node": node, "machine": machine, "tasks": len(g), "cpu_workers": capacity["cpu"],
                     "workers_from": "run" if cpu_workers else "trace",
                     "gpus": len(capacity) - 1, "end_s": end, "busy_s": float(g["Duration"].sum()),
                     "bound_model_s": b_model, "bound_trace_s": b_trace,
                     "end_over_bound_model": end / b_model if b_model > 0 else math.nan,
                     "end_over_bound_trace": end / b_trace if b_trace > 0 else math.nan})
    return pd.DataFrame(rows, columns=BOUND_COLUMNS)


def bound_summary(bounds: pd.DataFrame, makespan: float, run: str = "") -> pd.DataFrame:
    """Per machine type: the largest node bound (the makespan cannot be below any node's) against
    the run's makespan, and the share of its workers' time in tasks."""
    rows = []
    for machine, g in bounds.groupby("machine"):
        bm, bt = float(g["bound_model_s"].max()), float(g["bound_trace_s"].max())
        workers = (g["cpu_workers"] + g["gpus"]).sum()
        rows.append({"run": run, "machine": machine, "nodes": len(g), "makespan_s": makespan,
                     "last_end_s": float(g["end_s"].max()), "bound_model_s": bm, "bound_trace_s": bt,
                     "makespan_over_bound_model": makespan / bm if bm > 0 else math.nan,
                     "makespan_over_bound_trace": makespan / bt if bt > 0 else math.nan,
                     "busy_fraction": float(g["busy_s"].sum()) / (workers * makespan) if makespan > 0 else math.nan})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def memory_kind(host: str) -> str:
    """`ram` or `gpu` from a memory node's host name (`chifflet-1.ram0`, `chifflet-1.gpu1`);
    the real engine's `<node>.memnode<k>` is `ram` (its transfers are MPI messages)."""
    local = host.split(".", 1)[-1]
    return "gpu" if local.startswith("gpu") else "ram"


def copy_class(src: str, dst: str, links: str) -> str:
    """`RAM->GPU`, `GPU->RAM`, `GPU->GPU`, `RAM->RAM` within a node (", across sockets" when a
    link crossed is inter-socket), or `network (MPI)` between nodes."""
    if src.split(".", 1)[0] != dst.split(".", 1)[0]:
        return "network (MPI)"
    name = f"{memory_kind(src).upper()}->{memory_kind(dst).upper()}"
    crosses = any(link_class(x) == "inter-socket" for x in links.split())
    return f"{name}, {'across sockets' if crosses else 'one socket'}"


def copy_table(transfers: pd.DataFrame, run: str = "", machines: dict[str, str] | None = None) -> pd.DataFrame:
    """Per machine type of the source node (`cluster` for MPI messages) x copy class."""
    machines = machines or {}
    t = transfers.copy()
    src_node = t["Src"].str.split(".").str[0]
    t["machine"] = [machines.get(n, machine_of_node(n)) for n in src_node]
    links = t["Links"].fillna("").astype(str) if "Links" in t.columns else pd.Series([""] * len(t), index=t.index)
    t["cls"] = [copy_class(s, d, x) for s, d, x in zip(t["Src"], t["Dst"], links, strict=True)]
    t.loc[t["cls"] == "network (MPI)", "machine"] = "cluster"
    t["links"] = links.map(lambda s: "+".join(sorted({link_class(x) for x in s.split()})))
    t["dur"] = t["End"] - t["Start"]
    for col in ("Estimate", "Calibrated"):
        t[col] = pd.to_numeric(t[col], errors="coerce") if col in t.columns else math.nan
    rows = []
    for (machine, cls), g in t.groupby(["machine", "cls"]):
        est = g["Estimate"].to_numpy(dtype=float)
        cal = g["Calibrated"].to_numpy(dtype=float)
        dur = g["dur"].to_numpy(dtype=float)
        ok = np.isfinite(est) & (est > 0)
        okc = np.isfinite(cal) & (cal > 0)
        r_est, r_cal = dur[ok] / est[ok], dur[okc] / cal[okc]
        both = ok & okc

        def q(x, p):
            return float(np.quantile(x, p)) if len(x) else math.nan

        rows.append({"run": run, "machine": machine, "copy_class": cls, "link_classes": " | ".join(sorted(set(g["links"]))),
                     "copies": len(g), "bytes": float(g["Bytes"].sum()), "duration_median_s": q(dur, 0.5),
                     "estimate_median_s": q(est[ok], 0.5),
                     "actual_over_estimate_median": q(r_est, 0.5), "actual_over_estimate_p10": q(r_est, 0.1),
                     "actual_over_estimate_p90": q(r_est, 0.9),
                     "actual_over_estimate_of_sums": float(dur[ok].sum() / est[ok].sum()) if ok.any() else math.nan,
                     "actual_over_calibrated_median": q(r_cal, 0.5), "actual_over_calibrated_p90": q(r_cal, 0.9),
                     "estimate_over_calibrated_median": q(est[both] / cal[both], 0.5)})
    return pd.DataFrame(rows, columns=COPY_COLUMNS)


def overhead_table(tasks: pd.DataFrame, machines: dict[str, str], transfers: pd.DataFrame | None = None,
                   states: pd.DataFrame | None = None, run: str = "", cpu_workers: dict[str, int] | None = None,
                   runtime_costs: dict | None = None) -> pd.DataFrame:
    """Per machine type x worker type; the CPU workers are the run's (`cpu_workers`, node -> count)
    when given, else those in the trace. Threads' copy time from the thread states, else from the
    transfer log's `Thread` column (the worker whose thread ran a memcpy) when it has one; with the
    run's `runtime_costs` (numasim's summary: thread_copy_s, pinned_alloc_s, gpu_malloc_s,
    gpu_free_s, the whole cluster's) one more row, machine `cluster`, worker type `all`."""
    span = float(tasks["End"].max())
    t = tasks.assign(machine=tasks["NodeName"].map(machines))
    copies = {}
    if transfers is not None and len(transfers):
        tr = transfers.assign(dur=transfers["End"] - transfers["Start"])
        same = tr["Src"].str.split(".").str[0] == tr["Dst"].str.split(".").str[0]
        tr = tr[same]
        node = tr["Src"].str.split(".").str[0]
        gpu = (tr["Src"].map(memory_kind) == "gpu") | (tr["Dst"].map(memory_kind) == "gpu")
        for (m, g), d in tr.groupby([node.map(lambda n: machines.get(n, machine_of_node(n))), gpu])["dur"]:
            copies[(m, "cuda" if g else "cpu")] = float(d.sum())
    by_worker = {}
    source = "not traced (the engine writes no thread states)"
    threads = transfers is not None and "Thread" in transfers.columns
    if threads and states is None:
        source = "copies: the transfer log's Thread; allocations: not traced"
        th = transfers[transfers["Thread"].notna() & (transfers["Thread"].astype(str).str.strip() != "")]
        for rid, d in (th["End"] - th["Start"]).groupby(th["Thread"].astype(str)):
            node = node_name(rid)
            key = (machines.get(node, machine_of_node(node)), worker_type(rid), "copy")
            by_worker[key] = by_worker.get(key, 0.0) + float(d.sum())
    if states is not None:
        source = "thread states"
        known = dict(zip(t["ResourceId"], zip(t["machine"], t["WorkerType"], strict=True), strict=False))
        s = states[states["ResourceId"].isin(known)]
        for (rid, value), d in (s["End"] - s["Start"]).groupby([s["ResourceId"], s["Value"]]):
            what = "copy" if value in COPY_STATES else "alloc" if value in ALLOC_STATES else None
            if what:
                key = (*known[rid], what)
                by_worker[key] = by_worker.get(key, 0.0) + float(d.sum())
    known_copy = states is not None or threads
    rows = []
    for (machine, wtype), g in t.groupby(["machine", "WorkerType"]):
        workers = int(g["ResourceId"].nunique())
        if cpu_workers and wtype == "cpu":
            workers = sum(cpu_workers[n] for n in g["NodeName"].unique())
        busy = float(g["Duration"].sum())
        rows.append({"run": run, "machine": machine, "worker_type": wtype, "workers": workers, "task_s": busy,
                     "idle_s": workers * span - busy,
                     "copies_s": copies.get((machine, wtype), 0.0 if transfers is not None else math.nan),
                     "thread_copy_s": by_worker.get((machine, wtype, "copy"), 0.0) if known_copy else math.nan,
                     "thread_alloc_s": by_worker.get((machine, wtype, "alloc"), 0.0) if states is not None else math.nan,
                     "thread_states": source})
    if runtime_costs:
        workers = sum(r["workers"] for r in rows)
        busy = float(t["Duration"].sum())
        rc = {k: float(runtime_costs.get(k, math.nan)) for k in ("thread_copy_s", "pinned_alloc_s", "gpu_malloc_s",
                                                                   "gpu_free_s")}
        rows.append({"run": run, "machine": "cluster", "worker_type": "all", "workers": workers, "task_s": busy,
                     "idle_s": workers * span - busy, "copies_s": sum(copies.values()) if copies else math.nan,
                     "thread_copy_s": rc["thread_copy_s"],
                     "thread_alloc_s": rc["pinned_alloc_s"] + rc["gpu_malloc_s"] + rc["gpu_free_s"],
                     "thread_states": "the run's runtime_costs (pinned, cudaMalloc, cudaFree calls)"})
    return pd.DataFrame(rows, columns=OVERHEAD_COLUMNS)


def placement_table(tasks: pd.DataFrame, machines: dict[str, str], run: str = "") -> pd.DataFrame:
    """Who first allocated the RAM replicas the CPU tasks read, and where their pages were (the
    module docstring, `placement.csv`); empty for a trace without `OperandAllocators`."""
    if "OperandAllocators" not in tasks.columns or "OperandPages" not in tasks.columns:
        return pd.DataFrame(columns=PLACEMENT_COLUMNS)
    # another engine's table has the columns empty (testbed/traces/fxt_trace.py)
    cpu = tasks[(tasks["WorkerType"] == "cpu") & tasks["OperandAllocators"].notna()]
    records = []
    for node, numa, kind, pages, allocs in zip(cpu["NodeName"], cpu["WorkerNuma"], cpu["Value"], cpu["OperandPages"],
                                               cpu["OperandAllocators"], strict=True):
        page_list, alloc_list = str(pages).split(), str(allocs).split()
        if len(page_list) != len(alloc_list):
            raise InputError(None, "OperandAllocators", f"one entry per operand as OperandPages ({pages!r}), "
                                                        f"got {allocs!r}")
        for page, alloc in zip(page_list, alloc_list, strict=True):
            if alloc == "?":
                who, who_numa, at = "unknown", -1, math.nan
            else:
                parts = alloc.split(":")
                if len(parts) != 3 or parts[0] not in ALLOCATOR_KINDS:
                    raise InputError(None, "OperandAllocators", f"kind:numa:seconds with kind in "
                                                                f"{', '.join(ALLOCATOR_KINDS)}, got {alloc!r}")
                who, who_numa, at = parts[0], int(parts[1]), float(parts[2])
            records.append((machines[node], int(numa), kind, who, who_numa, int(page) if page.isdigit() else -1, at))
    if not records:
        return pd.DataFrame(columns=PLACEMENT_COLUMNS)
    ops = pd.DataFrame(records, columns=["machine", "numa", "kind", "allocator", "allocator_numa", "page_numa", "at"])
    group = ["machine", "numa", "kind"]
    total = ops.groupby(group).size().rename("total")
    g = ops.groupby([*group, "allocator", "allocator_numa", "page_numa"])["at"]
    out = pd.DataFrame({"operands": g.size(), "allocated_median_s": g.median(),
                        "allocated_p10_s": g.quantile(0.1), "allocated_p90_s": g.quantile(0.9)}).reset_index()
    out = out.join(total, on=group)
    out["share"] = out["operands"] / out["total"]
    out["run"] = run
    return out[PLACEMENT_COLUMNS].sort_values(["machine", "numa", "kind", "operands"],
                                              ascending=[True, True, True, False], ignore_index=True)


def diagnose(tasks: pd.DataFrame, transfers: pd.DataFrame | None = None, machines: dict[str, str] | None = None,
             means: dict | None = None, states: pd.DataFrame | None = None, run: str = "",
             gpu_numa: dict[tuple[str, str], int] | None = None,
             cpu_workers_by_rank: list[int] | None = None, runtime_costs: dict | None = None) -> dict[str, pd.DataFrame]:
    """All the tables of one traced run, keyed by file name (TABLES). `cpu_workers_by_rank` is
    numasim's output of that name (the run's CPU workers, a trace lists only those that ran)."""
    machines = machines or {n: machine_of_node(n) for n in tasks["NodeName"].unique()}
    cpu_workers = None
    if cpu_workers_by_rank is not None:
        ranks = dict(zip(tasks["NodeName"], tasks["Node"].astype(int), strict=False))
        if any(not 0 <= r < len(cpu_workers_by_rank) for r in ranks.values()):
            raise InputError(None, "cpu_workers_by_rank", f"a count for each of the trace's ranks "
                                                          f"(0..{max(ranks.values())}), got {len(cpu_workers_by_rank)}")
        cpu_workers = {n: int(cpu_workers_by_rank[r]) for n, r in ranks.items()}
    bounds = bound_table(tasks, machines, means, run, cpu_workers)
    return {
        "kernels.csv": kernel_table(tasks, machines, run, gpu_numa),
        "bound.csv": bounds,
        "bound_summary.csv": bound_summary(bounds, float(tasks["End"].max()), run),
        "copies.csv": copy_table(transfers, run, machines) if transfers is not None else pd.DataFrame(columns=COPY_COLUMNS),
        "overheads.csv": overhead_table(tasks, machines, transfers, states, run, cpu_workers, runtime_costs),
        "placement.csv": placement_table(tasks, machines, run),
    }


def concat_runs(tables: list[dict[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """Several runs' tables as one per file (their `run` column tells them apart)."""
    return {name: pd.concat([t[name] for t in tables if len(t[name])] or [tables[0][name]], ignore_index=True)
            for name in TABLES}


def write_tables(tables: dict[str, pd.DataFrame], out: Path) -> None:
    for name in TABLES:
        tables[name].to_csv(out / name, index=False, float_format="%.9g")


# ------------------------------------------------------------------ the report's digest
def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    """A markdown table of the digest: a header row, then one row per list of cells."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def placement_digest(placement: pd.DataFrame, runs: list[str]) -> str:
    """The digest's rows of placement.csv for the CPU dgemms: per machine type x NUMA node, the
    share of operands on another node's pages and the largest allocating threads ('' if none)."""
    pl = placement[placement["kind"] == "gemm"]
    if not len(pl):
        return ""
    rows = []
    for machine, numa in sorted(set(zip(pl["machine"], pl["numa"], strict=True))):
        cells = []
        for r in runs:
            x = pl[(pl["run"] == r) & (pl["machine"] == machine) & (pl["numa"] == numa)]
            if x.empty:
                cells.append("–")
                continue
            remote = x.loc[x["page_numa"] != numa, "share"].sum()
            top = x.groupby(["allocator", "allocator_numa"])["share"].sum().sort_values(ascending=False).head(3)
            who = ", ".join(f"{a}{'' if n < 0 else f' {n}'} {v:.0%}" for (a, n), v in top.items())
            cells.append(f"{remote:.0%} remote; {who}")
        rows.append([f"{machine} NUMA {numa}", *cells])
    return ("Operands of CPU dgemms: share on another NUMA node's pages; who first allocated the replicas read "
            "(thread kind and its NUMA node, largest shares)\n\n" + markdown_table(["workers", *runs], rows))


def digest(tables: dict[str, pd.DataFrame]) -> str:
    """A short markdown digest of the tables, one column per run: makespan against the area bound
    per machine type, CPU dgemm per NUMA node, GPU tasks per GPU, copies per class."""
    runs = list(dict.fromkeys(tables["bound_summary.csv"]["run"]))

    def fmt(x, spec=".3g"):
        return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)

    parts = []
    s = tables["bound_summary.csv"]
    rows = []
    for machine in sorted(set(s["machine"])):
        cells = []
        for r in runs:
            x = s[(s["run"] == r) & (s["machine"] == machine)]
            cells.append("–" if x.empty else f"{x['makespan_s'].iloc[0]:.3f} s / {fmt(x['bound_model_s'].iloc[0], '.3f')}"
                         f" / {fmt(x['bound_trace_s'].iloc[0], '.3f')} (busy {x['busy_fraction'].iloc[0]:.0%})")
        rows.append([machine, *cells])
    parts.append("Makespan / area bound with the perf models' means / with the trace's means, per machine type "
                 "(the largest node bound; busy: share of the type's worker time in tasks)\n\n"
                 + markdown_table(["machine", *runs], rows))
    k = tables["kernels.csv"]
    rows = []
    for (machine, wtype, worker, numa, kind) in sorted(set(zip(k["machine"], k["worker_type"], k["worker"], k["numa"],
                                                               k["kind"], strict=True))):
        if not ((wtype == "cpu" and kind == "gemm") or wtype == "cuda"):
            continue
        cells = []
        for r in runs:
            x = k[(k["run"] == r) & (k["machine"] == machine) & (k["worker"] == worker) & (k["numa"] == numa)
                  & (k["kind"] == kind)]
            cells.append("–" if x.empty else f"{x['median_s'].iloc[0] * 1e3:.2f} ms (IQR {x['iqr_s'].iloc[0] * 1e3:.2f}), "
                         f"{x['outlier_share'].iloc[0]:.1%} out.")
        dev = k.loc[(k["machine"] == machine) & (k["worker"] == worker), "device_numa"].dropna()
        where = f"NUMA {numa}" if wtype == "cpu" else (
            f"on NUMA {int(dev.iloc[0])}, driver on {numa}" if len(dev) else f"driver on NUMA {numa}")
        rows.append([f"{machine} {worker} {where} {kind}", *cells])
    parts.append("Kernel durations: median, IQR and the share StarVZ flags (> Q3 + 1.5 IQR of kind × worker type over "
                 "the whole trace); CPU dgemm per NUMA node, every kind per GPU\n\n" + markdown_table(["worker", *runs], rows))
    c = tables["copies.csv"]
    if len(c):
        rows = []
        for machine, cls in sorted(set(zip(c["machine"], c["copy_class"], strict=True))):
            cells = []
            for r in runs:
                x = c[(c["run"] == r) & (c["machine"] == machine) & (c["copy_class"] == cls)]
                cells.append("–" if x.empty else f"{fmt(x['actual_over_estimate_median'].iloc[0])} "
                             f"[{fmt(x['actual_over_estimate_p10'].iloc[0])}, {fmt(x['actual_over_estimate_p90'].iloc[0])}]"
                             f"; ÷ calibrated {fmt(x['actual_over_calibrated_median'].iloc[0])} ({int(x['copies'].iloc[0])})")
            rows.append([f"{machine}: {cls}", *cells])
        parts.append("Copies: actual / scheduler estimate, median [p10, p90] (the estimate STARPU_SCHED_BETA scales); "
                     "actual / bus calibration median; (copies)\n\n" + markdown_table(["copy class", *runs], rows))
    if placement := placement_digest(tables["placement.csv"], runs):
        parts.append(placement)
    o = tables["overheads.csv"]
    rows = []
    for machine, wtype in sorted(set(zip(o["machine"], o["worker_type"], strict=True))):
        cells = []
        for r in runs:
            x = o[(o["run"] == r) & (o["machine"] == machine) & (o["worker_type"] == wtype)]
            if x.empty:
                cells.append("–")
                continue
            x = x.iloc[0]
            total = x["task_s"] + x["idle_s"]
            cells.append(f"{x['task_s'] / total:.0%} / {x['idle_s'] / total:.0%}; copies {fmt(x['copies_s'], '.4g')} s; "
                         f"thread copy {fmt(x['thread_copy_s'], '.4g')} s, alloc {fmt(x['thread_alloc_s'], '.4g')} s")
        rows.append([f"{machine} {wtype} ({int(o[(o['machine'] == machine) & (o['worker_type'] == wtype)]['workers'].iloc[0])}"
                     " workers)", *cells])
    states = "; ".join(sorted(set(o["thread_states"])))
    parts.append("Worker time: in tasks / idle; copies: summed duration of the copies to or from the GPUs (cuda rows) "
                 f"and between RAM nodes (cpu rows); threads' own copy and allocation time ({states})\n\n"
                 + markdown_table(["workers", *runs], rows))
    return "\n".join(parts)


# ------------------------------------------------------------------ figure (from the tables only)
def plot_diagnostics(tables: dict[str, pd.DataFrame], path: Path) -> Path:
    """Three panels, one colour per run: dgemm median and IQR per machine type x worker (CPU per
    NUMA node, each GPU) with StarVZ's outlier share; copies' actual / estimate (median, p10-p90)
    per machine type x class; makespan / area bound per machine type."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = list(dict.fromkeys(tables["bound_summary.csv"]["run"]))
    colours = {r: plt.get_cmap("tab10")(i % 10) for i, r in enumerate(runs)}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), gridspec_kw={"width_ratios": [3, 3, 1.4]})
    width = 0.8 / max(1, len(runs))
    _plot_gemm(axes[0], tables, runs, colours, width)
    _plot_copies(axes[1], tables, runs, colours, width)
    _plot_bound(axes[2], tables, runs, colours, width)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path




def _plot_gemm(ax, tables: dict[str, pd.DataFrame], runs: list[str], colours: dict, width: float) -> None:
    """dgemm median and IQR per machine type x worker, with StarVZ's outlier share."""
    k = tables["kernels.csv"]
    gemm = k[k["kind"] == "gemm"]
    groups = sorted(set(zip(gemm["machine"], gemm["worker"], gemm["numa"], strict=True)))
    for i, run in enumerate(runs):
        for j, (machine, worker, numa) in enumerate(groups):
            x = gemm[(gemm["run"] == run) & (gemm["machine"] == machine) & (gemm["worker"] == worker)
                     & (gemm["numa"] == numa)]
            if x.empty:
                continue
            x = x.iloc[0]
            pos = j + (i - (len(runs) - 1) / 2) * width
            ax.errorbar(pos, 1e3 * x["median_s"], yerr=[[1e3 * (x["median_s"] - x["q1_s"])],
                                                      [1e3 * (x["q3_s"] - x["median_s"])]],
                        fmt="o", color=colours[run], capsize=3, label=run if j == 0 else None)
            ax.annotate(f"{x['outlier_share']:.1%}", (pos, 1e3 * x["q3_s"]), xytext=(0, 3),
                        textcoords="offset points", ha="center", fontsize=6, color=colours[run])
    def tick(m: str, w: str, n: int) -> str:
        dev = gemm.loc[(gemm["machine"] == m) & (gemm["worker"] == w), "device_numa"].dropna()
        if w == "cpu":
            return f"{m}\ncpu N{n}"
        return f"{m}\n{w} on N{int(dev.iloc[0])}\ndriver N{n}" if len(dev) else f"{m}\n{w}\ndriver N{n}"

    ax.set_xticks(range(len(groups)), [tick(*g) for g in groups], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("dgemm duration (ms): median, Q1-Q3")
    ax.set_title("dgemm per NUMA node and GPU (label: share StarVZ flags)", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")


def _plot_copies(ax, tables: dict[str, pd.DataFrame], runs: list[str], colours: dict, width: float) -> None:
    """Copies' actual / estimate per machine type x class."""
    c = tables["copies.csv"]
    c = c[c["actual_over_estimate_median"].notna()]
    classes = sorted(set(zip(c["machine"], c["copy_class"], strict=True)))
    for i, run in enumerate(runs):
        for j, (machine, cls) in enumerate(classes):
            x = c[(c["run"] == run) & (c["machine"] == machine) & (c["copy_class"] == cls)]
            if x.empty:
                continue
            x = x.iloc[0]
            med = x["actual_over_estimate_median"]
            ax.errorbar(j + (i - (len(runs) - 1) / 2) * width, med,
                        yerr=[[med - x["actual_over_estimate_p10"]], [x["actual_over_estimate_p90"] - med]],
                        fmt="s", color=colours[run], capsize=3)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(classes)), [f"{m}\n{cl}".replace(", ", "\n") for m, cl in classes], fontsize=6)
    ax.set_yscale("log")
    ax.set_ylabel("actual / scheduler estimate: median, p10-p90")
    ax.set_title("copies against the estimate STARPU_SCHED_BETA scales", fontsize=9)
    ax.grid(alpha=0.3, axis="y")


def _plot_bound(ax, tables: dict[str, pd.DataFrame], runs: list[str], colours: dict, width: float) -> None:
    """Makespan / area bound per machine type."""
    b = tables["bound_summary.csv"]
    machines = sorted(set(b["machine"]))
    for i, run in enumerate(runs):
        for j, machine in enumerate(machines):
            x = b[(b["run"] == run) & (b["machine"] == machine)]
            if not x.empty:
                ratio = x["makespan_over_bound_model"].iloc[0]
                if not math.isfinite(ratio):
                    ratio = x["makespan_over_bound_trace"].iloc[0]
                ax.bar(j + (i - (len(runs) - 1) / 2) * width, ratio, width, color=colours[run])
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(machines)), machines, fontsize=8)
    ax.set_ylabel("makespan / area bound")
    ax.set_title("room above the area bound", fontsize=9)
    ax.grid(alpha=0.3, axis="y")


# ------------------------------------------------------------------ command
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="task trace CSV (testbed simulate --trace)")
    p.add_argument("--transfers", default=None, help="transfer log CSV of the same run (--transfers)")
    p.add_argument("--states", default=None,
                   help="thread-state CSV (ResourceId, Start, End, Value: StarPU's DriverCopy, Allocating, ...)")
    p.add_argument("--platform-dir", default=None,
                   help="the run's platform (testbed platform): machine types, and the perf models of the bound")
    p.add_argument("--b", type=int, default=None, help="tile size of the run (with --platform-dir: the models' entry)")
    p.add_argument("--result", default=None,
                   help="the run's JSON output (testbed simulate, numasim): its cpu_workers_by_rank counts the CPU "
                        "workers that ran nothing too")
    p.add_argument("--run", default="run", help="label of the run in the tables' `run` column (default: run)")
    p.add_argument("--out", required=True, help="directory for the CSV tables and digest.md")


def run(args: argparse.Namespace) -> int:
    from testbed.common.atomic import atomic_members
    from testbed.common.outputs import Out, check_distinct

    check_distinct([("TRACE", args.trace), ("--transfers", args.transfers), ("--states", args.states),
                    ("--result", args.result), ("--platform-dir", args.platform_dir)],
                   [Out("--out", args.out, "members", (*TABLES, "digest.md", "diagnostics.png"))])
    if args.platform_dir is not None and args.b is None:
        raise InputError(None, "--b", "the run's tile size with --platform-dir (the perf models' entry)")
    if args.b is not None and args.b <= 0:
        raise InputError(None, "--b", f"a positive tile size, got {args.b}")
    tasks = read_tasks(args.trace)
    transfers = read_transfers(args.transfers) if args.transfers else None
    states = read_states(args.states) if args.states else None
    platform = Path(args.platform_dir) if args.platform_dir else None
    machines = node_machines(tasks, platform)
    means = model_means(platform, set(machines.values()), args.b) if platform is not None else None
    gpu_numa = gpu_numa_nodes(platform) if platform is not None else None
    tables = diagnose(tasks, transfers, machines, means, states, args.run, gpu_numa, *read_result(args.result))
    text = digest(tables)
    with atomic_members(args.out, [*TABLES, "digest.md", "diagnostics.png"]) as tmp:
        write_tables(tables, tmp)
        (tmp / "digest.md").write_text(text)
        plot_diagnostics(tables, tmp / "diagnostics.png")
    print(text, end="")
    return 0
