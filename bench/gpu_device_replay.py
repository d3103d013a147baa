#!/usr/bin/env python3
"""The device call's real LU runs on the 16-core + H100 node (bench/data/gpu-device-h100/)
against numasim and StarPU-SimGrid, from the node's own calibration, with the real FxT traces.

Data: results.tar.gz of `bench/gpu_device.sh` (README there): runs.jsonl (apps/lu, dmdas,
15 CPU + 1 CUDA workers, models frozen after STARPU_CALIBRATE=1 runs; the `timed` phase is
what is predicted), StarPU's sampling/ of host `gpunode` (bus calibration + codelet models),
task_overhead.csv (the CUDA worker's host time per task), cuda_bench.csv, and traces/ (the
testbed's task table of one FxT-traced run per case, `testbed/traces/fxt_trace.py`).

Platforms (`testbed platform --from-starpu`, the same for both engines):
* `files`: StarPU's files only (no host-side cost of the CUDA worker);
* `measured`: plus `--gpu-cost` of what the node measured: `task_overhead_s` from
  task_overhead.csv at StarPU's default pipeline (STARPU_CUDA_PIPELINE = 2,
  src/drivers/cuda/driver_cuda.c), `task_gap_s`: the median gap between consecutive CUDA tasks
  of the getrf-on-GPU traces (where the CUDA worker runs every task), and
  `first_call_{getrf,trsm,gemm}_s`: per kernel, the first
  CUDA task's duration minus the median of that kernel's CUDA tasks in the same trace, the
  median over the traced runs (separate processes from the timed runs).

Per case: numasim, mean of the seeds (seeded variability); StarPU-SimGrid on model means
(it reads StarPU's files only: the same on both platforms), unless --no-starpu. "inside" =
within the real min–max or 10 % of the real mean. With --traces DIR, numasim's trace of seed 1
on each platform beside the real one, and `testbed compare-traces` of each pair in
DIR/<case>/compare-<platform>/. The CUDA worker's timeline of each trace is decomposed
(first-call extra, the other tasks, gaps between tasks) and printed after the table, then the
GPU allocations of each traced run (fxt-<N>.tar.xz: starpu_fxt_tool's Paje trace).

Usage: .venv/bin/python bench/gpu_device_replay.py [--seeds 5] [--sizes 4800,9600,19200]
       [--no-starpu] [--traces DIR] [--data bench/data/gpu-device-h100]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tarfile
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.platform.platform_from_starpu import write_platform_dir  # noqa: E402
from testbed.run.engines import RunSpec  # noqa: E402
from testbed.run.simulate import simulate  # noqa: E402
from testbed.traces.traces import worker_type  # noqa: E402

DATA = ROOT / "bench" / "data" / "gpu-device-h100"
B = 960  # the tile size of every run of the device call
HOST = "gpunode"
KERNELS = ("getrf", "trsm", "gemm")
PIPELINE = 2  # STARPU_CUDA_PIPELINE's default (driver_cuda.c), as the runs used it


def extract(data: Path, tmp: Path) -> Path:
    """results.tar.gz into tmp; returns its results/ folder."""
    archive = data / "results.tar.gz"
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and ".." not in Path(m.name).parts
                   and not Path(m.name).is_absolute()]
        tar.extractall(tmp, members=members)  # regular files, relative paths only
    res = tmp / "results"
    for need in ("runs.jsonl", "task_overhead.csv", "sampling", "traces"):
        if not (res / need).exists():
            print(f"{archive}: results/{need} missing", file=sys.stderr)
            raise SystemExit(2)
    return res


def real_timed(res: Path) -> dict[tuple[int, str], list[float]]:
    cases: dict = defaultdict(list)
    for line in (res / "runs.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("phase") == "timed":
            cases[(rec["n"], rec["variant"])].append(rec["makespan_s"])
    return dict(sorted(cases.items()))


def cuda_tasks(trace: Path) -> list[dict]:
    with trace.open() as fh:
        rows = [r for r in csv.DictReader(fh) if worker_type(r["ResourceId"]) == "cuda"]
    return sorted(({"kind": r["Value"], "start": float(r["Start"]), "end": float(r["End"])} for r in rows),
                  key=lambda t: t["start"])


def first_call_extra(tasks: list[dict]) -> dict[str, float]:
    """Per kernel: the first task's duration minus the median of that kernel's tasks."""
    out = {}
    for k in KERNELS:
        d = [t["end"] - t["start"] for t in tasks if t["kind"] == k]
        if len(d) >= 2:
            out[k] = max(0.0, d[0] - statistics.median(d))
    return out


def allocation_costs(path: Path, tile_bytes: int) -> dict[str, float]:
    """cudaMalloc, cudaFree of one tile and cudaHostAlloc per MiB (the flags StarPU uses with CUDA
    mapping: row `hostalloc`), medians of cuda_bench at the runs' tile size (numasim's GPU host
    properties malloc_s, free_s, pinned_alloc_s_per_mib; docs/page-placement.md)."""
    rows: dict[str, float] = {}
    with path.open() as fh:
        for r in csv.DictReader(fh):
            if r["what"] != "what" and int(r["bytes"]) == tile_bytes:
                rows[r["what"]] = float(r["median_s"])
    return {"malloc_s": rows["malloc"], "free_s": rows["free"],
            "pinned_alloc_s_per_mib": rows["hostalloc"] / (tile_bytes / 1048576)}


def traced_allocation_s(data: Path, tmp: Path) -> float | None:
    """Median duration of StarPU's `Allocating` state on the GPU memory node over every traced run
    (fxt-<N>.tar.xz): the time the CUDA driver thread spends in one allocation as StarPU runs it
    (_starpu_allocate_memory_on_node: the memalloc lock, cudaMemGetInfo, cudaMalloc), which is
    what numasim's malloc_s stands for; None without traces."""
    durations: list[float] = []
    for archive in sorted(data.glob("fxt-*.tar.xz")):
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getnames() if m.endswith("/fxt-tool/paje.trace")]
            for m in members:
                tar.extract(m, tmp / "alloc")
                durations += [b - a for a, b in paje_allocations(tmp / "alloc" / m)[0]]
    return statistics.median(durations) if durations else None


def measured_costs(res: Path, data: Path | None = None) -> tuple[dict[str, float], dict]:
    """--gpu-cost values from the data, and where each comes from: cuda_bench's calls, and with the
    traces (`data`) the allocation time StarPU's own path took in them."""
    with (res / "task_overhead.csv").open() as fh:
        per_task = {int(r["pipeline"]): float(r["per_task_s"]) for r in csv.DictReader(fh)}
    firsts: dict[str, list[float]] = defaultdict(list)
    gaps: list[float] = []
    for trace in sorted((res / "traces").glob("*/trace.csv")):
        tasks = cuda_tasks(trace)
        for k, v in first_call_extra(tasks).items():
            firsts[k].append(v)
        if trace.parent.name.endswith("getrf-gpu"):  # every task on the CUDA worker, back to back
            gaps += [max(0.0, b["start"] - a["end"]) for a, b in zip(tasks, tasks[1:], strict=False)]
    costs = {"task_overhead_s": per_task[PIPELINE], "task_gap_s": statistics.median(gaps)}
    costs.update({f"first_call_{k}_s": statistics.median(v) for k, v in firsts.items()})
    costs.update(allocation_costs(res / "cuda_bench.csv", 8 * B * B))
    traced = traced_allocation_s(data, res / "tmp") if data is not None else None
    if traced is not None:
        costs["malloc_s"] = traced
    return costs, {k: [round(x, 6) for x in v] for k, v in firsts.items()}


def timeline(tasks: list[dict]) -> dict[str, float]:
    """The CUDA worker's timeline: first task's start, first-call extra, the other tasks' time,
    gaps between consecutive tasks, last end (s)."""
    extra = sum(first_call_extra(tasks).values())
    busy = sum(t["end"] - t["start"] for t in tasks)
    gaps = [max(0.0, b["start"] - a["end"]) for a, b in zip(tasks, tasks[1:], strict=False)]
    return {"tasks": len(tasks), "start": tasks[0]["start"], "first_call": extra, "busy": busy - extra,
            "gaps": sum(gaps), "gap_median_us": 1e6 * statistics.median(gaps) if gaps else 0.0,
            "end": max(t["end"] for t in tasks)}


def paje_allocations(paje: Path, gpu_mem: str = "MEMMANAGER1", worker: str = "CUDA0_0") -> tuple[list, float]:
    """(start, end) of each `Allocating` state (StarPU's "A", _STARPU_TRACE_START_ALLOC) of the GPU's
    memory manager in starpu_fxt_tool's Paje trace (ms there, s here), and the time of the CUDA
    worker's first kernel state (the task table's origin: its first CUDA task starts there)."""
    names: dict[str, str] = {}
    stacks: dict[str, list] = defaultdict(list)
    allocs, first_kernel = [], None
    with paje.open(errors="replace") as fh:
        for line in fh:
            p = line.split()
            if not p or p[0][0] in "%#":
                continue
            if p[0] == "7":  # PajeCreateContainer: time alias type parent name
                names[p[2]] = p[-1].strip('"')
            elif p[0] == "11":  # PajePushState
                stacks[p[2]].append((float(p[1]), p[4].strip('"')))
            elif p[0] == "12" and stacks[p[2]]:  # PajePopState
                t0, value = stacks[p[2]].pop()
                if names.get(p[2]) == gpu_mem and value == "A":
                    allocs.append((t0 / 1e3, float(p[1]) / 1e3))
            elif (p[0] in ("10", "20", "21", "26") and first_kernel is None and names.get(p[2]) == worker
                  and p[4].strip('"') in ("dgetrf_nopiv", "dtrsm", "dgemm")):
                first_kernel = float(p[1]) / 1e3
    return allocs, first_kernel or 0.0


def allocation_stats(data: Path, case: str, tasks: list[dict], tmp: Path) -> dict | None:
    """GPU allocations of the traced run of `case` (fxt-<N>.tar.xz), on the task table's clock."""
    archive = data / f"fxt-{case.split('-')[0]}.tar.xz"
    member = f"traces/{case}/fxt-tool/paje.trace"
    if not archive.is_file():
        return None
    with tarfile.open(archive) as tar:
        try:
            tar.extract(member, tmp / "fxt")
        except KeyError:
            return None
    allocs, origin = paje_allocations(tmp / "fxt" / member)
    if not allocs:
        return None
    origin -= tasks[0]["start"]
    allocs = [(a - origin, b - origin) for a, b in allocs]
    end = max(t["end"] for t in tasks)
    inside = [(a, b) for a, b in allocs if b > 0 and a < end]
    spans = [(t["start"], t["end"]) for t in tasks]

    def overlap(iv, ivs):
        return sum(max(0.0, min(iv[1], y) - max(iv[0], x)) for x, y in ivs)

    total = sum(b - a for a, b in inside)
    return {"count": len(allocs), "in_factorization": len(inside), "seconds": total,
            "median_us": 1e6 * statistics.median([b - a for a, b in inside]) if inside else 0.0,
            "in_task_spans": sum(overlap(iv, spans) for iv in inside)}


def spec(engine: str, pdir: Path, n: int, variant: str, seed: int, trace: Path | None = None) -> RunSpec:
    return RunSpec(engine=engine, cluster=HOST, n=n, b=B, env={"STARPU_SCHED": "dmdas", "STARPU_NCPU": "15"},
                   env_per_machine={}, seed=seed, variability=engine == "numasim",
                   getrf_on_gpu=variant == "getrf-gpu", platform_dir=pdir, trace=trace)


def stat(xs: list[float]) -> str:
    return f"{statistics.mean(xs):.4f} [{min(xs):.4f}, {max(xs):.4f}]"


def inside(sim: float, real: list[float]) -> bool:
    return min(real) <= sim <= max(real) or abs(sim / statistics.mean(real) - 1) <= 0.10


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--sizes", default="", help="comma-separated N to replay (default: all)")
    ap.add_argument("--no-starpu", action="store_true", help="skip StarPU-SimGrid")
    ap.add_argument("--traces", type=Path, default=None, help="write simulated traces and comparisons here")
    ap.add_argument("--json", type=Path, default=None, help="every number as JSON")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        print("--seeds: at least 1", file=sys.stderr)
        return 2
    try:
        sizes = {int(x) for x in args.sizes.split(",") if x.strip()}
    except ValueError:
        print(f"--sizes {args.sizes}: comma-separated integers", file=sys.stderr)
        return 2

    out: dict = {"cases": []}
    with tempfile.TemporaryDirectory(prefix="gpu-device-replay-") as tmp_s:
        tmp = Path(tmp_s)
        res = extract(args.data, tmp)
        costs, firsts = measured_costs(res, args.data)
        out["gpu_costs"], out["first_call_per_trace"] = costs, firsts
        platforms = {"files": write_platform_dir(res / "sampling", HOST, tmp / "files") and tmp / "files",
                     "measured": write_platform_dir(res / "sampling", HOST, tmp / "measured", costs)
                     and tmp / "measured"}
        real = {k: v for k, v in real_timed(res).items() if not sizes or k[0] in sizes}
        if not real:
            print(f"{args.data}: no timed run of the sizes asked for", file=sys.stderr)
            return 2
        for (n, variant), makespans in real.items():
            case = f"{n}-{variant}"
            row = {"n": n, "variant": variant, "real": makespans}
            real_trace = res / "traces" / case / "trace.csv"
            if real_trace.is_file():
                row["real_trace"] = {"makespan": max(t["end"] for t in cuda_tasks(real_trace)),
                                     "cuda": timeline(cuda_tasks(real_trace)),
                                     "gpu_allocations": allocation_stats(args.data, case, cuda_tasks(real_trace), tmp)}
            for name, pdir in platforms.items():
                sims = []
                for seed in range(1, args.seeds + 1):
                    trace = None
                    if args.traces and seed == 1:
                        trace = args.traces / case / f"numasim-{name}.csv"
                        trace.parent.mkdir(parents=True, exist_ok=True)
                    sims.append(simulate(spec("numasim", pdir, n, variant, seed, trace))["makespan_s"])
                    if trace is not None:
                        row[f"sim_trace_{name}"] = {"cuda": timeline(cuda_tasks(trace))}
                        if real_trace.is_file():
                            from testbed.traces.compare_traces import write_comparison
                            from testbed.traces.traces import read_tasks

                            write_comparison(read_tasks(real_trace), read_tasks(trace), "real (FxT)",
                                             f"numasim ({name})", args.traces / case / f"compare-{name}")
                row[f"numasim_{name}"] = sims
            if not args.no_starpu:
                row["starpu_simgrid"] = simulate(spec("starpu-simgrid", platforms["files"], n, variant, 1))["makespan_s"]
            out["cases"].append(row)
            print(f"{case}: real {stat(makespans)} numasim files {statistics.mean(row['numasim_files']):.4f} "
                  f"measured {statistics.mean(row['numasim_measured']):.4f}", file=sys.stderr)

    print("CUDA worker costs measured on the node (--gpu-cost): "
          + ", ".join(f"{k} = {1e6 * v:.1f} µs" for k, v in costs.items()))
    print()
    print("| N | getrf on | real mean [min, max] (s), runs | numasim, StarPU files | numasim, + measured CUDA worker "
          "costs | StarPU-SimGrid | diff: files / measured / StarPU-SimGrid |")
    print("|---|---|---|---|---|---|---|")
    for r in out["cases"]:
        mean = statistics.mean(r["real"])
        vals = [statistics.mean(r["numasim_files"]), statistics.mean(r["numasim_measured"]), r.get("starpu_simgrid")]
        diffs = " / ".join("—" if v is None else f"{100 * (v / mean - 1):+.1f} %{'' if inside(v, r['real']) else ' ✗'}"
                           for v in vals)
        sg = "—" if vals[2] is None else f"{vals[2]:.4f}"
        print(f"| {r['n']} | {'GPU' if r['variant'] == 'getrf-gpu' else 'CPU'} | {stat(r['real'])}, {len(r['real'])} | "
              f"{vals[0]:.4f} | {vals[1]:.4f} | {sg} | {diffs} |")
    print()
    print("The CUDA worker's timeline (ms; real: the FxT-traced run; numasim: seed 1): first task's start, "
          "first-call extra, the other tasks, gaps between tasks (median gap µs), last end")
    print()
    print("| N | getrf on | trace | tasks | start | first-call extra | other tasks | gaps (median µs) | end |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in out["cases"]:
        for label, key in (("real", "real_trace"), ("numasim, files", "sim_trace_files"),
                           ("numasim, measured", "sim_trace_measured")):
            if key in r:
                c = r[key]["cuda"]
                print(f"| {r['n']} | {'GPU' if r['variant'] == 'getrf-gpu' else 'CPU'} | {label} | {c['tasks']} | "
                      f"{1e3 * c['start']:.1f} | {1e3 * c['first_call']:.1f} | {1e3 * c['busy']:.1f} | "
                      f"{1e3 * c['gaps']:.1f} ({c['gap_median_us']:.1f}) | {1e3 * c['end']:.1f} |")
    print()
    print("GPU allocations of the traced runs (StarPU's Allocating state on the GPU memory node, "
          "starpu_fxt_tool's Paje trace):")
    print()
    print("| N | getrf on | allocations (in the factorization) | ms | median µs | ms inside task spans |")
    print("|---|---|---|---|---|---|")
    for r in out["cases"]:
        a = r.get("real_trace", {}).get("gpu_allocations")
        if a:
            print(f"| {r['n']} | {'GPU' if r['variant'] == 'getrf-gpu' else 'CPU'} | {a['count']} "
                  f"({a['in_factorization']}) | {1e3 * a['seconds']:.1f} | {a['median_us']:.0f} | "
                  f"{1e3 * a['in_task_spans']:.1f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
