#!/usr/bin/env python3
"""Real LU with CUDA on a GPU node vs numasim and StarPU-SimGrid predictions from the node's
own StarPU calibration.

The data (bench/data/gpu-node-h100/, written by bench/gpu_node.sh on the node): apps/lu runs
(timed phase: models frozen, STARPU_SCHED=dmdas, StarPU's defaults otherwise) with getrf on
the CPU and with --getrf-gpu, and StarPU's sampling directory (bus calibration + codelet
models) recorded there. Both simulators run through the testbed's engines on the platform
`testbed platform --from-starpu` writes from that sampling directory: numasim with its
seeded variability (one run per seed), StarPU-SimGrid on model means (deterministic).

A third prediction goes through the testbed's own path: numasim on the one-node cluster of
the machine description `testbed platform --from-calibration calibration/gpunode` derived
from the node's calibration bundle (platforms/clusters/gpunode-1.yaml).

Usage: .venv/bin/python bench/gpu_node_predict.py [--data DIR] [--host NAME] [--seeds 5]
       [--cluster gpunode-1] [--out bench/results/gpu_node_predict.json]
Prints the markdown table recorded in CHANGELOG.md's benchmark history ("GPU node").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.platform.platform_from_starpu import write_platform_dir  # noqa: E402
from testbed.run.engines import RunSpec  # noqa: E402
from testbed.run.simulate import simulate  # noqa: E402


def real_cases(data: Path) -> dict[tuple[int, int, str], dict[str, list[float]]]:
    """(n, b, variant) -> {"lazy": makespans, "eager": makespans} of the frozen-model runs:
    runs.jsonl's timed phase (CUDA's default lazy module loading), startup.jsonl and
    submission.jsonl (StarPU's default worker count) with CUDA_MODULE_LOADING=EAGER."""
    cases: dict = defaultdict(lambda: {"lazy": [], "eager": []})

    def records(name: str):
        f = data / name
        return [json.loads(line) for line in f.read_text().splitlines()] if f.is_file() else []

    for rec in records("runs.jsonl"):
        if rec.get("phase") == "timed":
            cases[(rec["n"], rec["b"], rec["variant"])]["lazy"].append(rec["makespan_s"])
    for rec in records("startup.jsonl"):
        cases[(rec["n"], rec["b"], rec["variant"])][rec["loading"].lower()].append(rec["makespan_s"])
    for rec in records("submission.jsonl"):
        if rec.get("ncpu") == "default":
            variant = "getrf-gpu" if rec["getrf_on_gpu"] else "getrf-cpu"
            cases[(rec["n"], rec["b"], variant)]["eager"].append(rec["makespan_s"])
    return dict(sorted(cases.items()))


def pipeline_cases(data: Path) -> dict[tuple[int, str], list[float]]:
    """(n, STARPU_CUDA_PIPELINE) -> makespans of pipeline.jsonl (getrf on the GPU, EAGER)."""
    cases: dict = defaultdict(list)
    f = data / "pipeline.jsonl"
    for line in f.read_text().splitlines() if f.is_file() else []:
        if not line.strip():  # a run that printed nothing (see the data README)
            continue
        rec = json.loads(line)
        if rec.get("tag") == "pipeline" and "makespan_s" in rec:
            cases[(rec["n"], rec["pipeline"])].append(rec["makespan_s"])
    return dict(sorted(cases.items()))


def predict(engine: str, pdir: Path, host: str, n: int, b: int, getrf_gpu: bool, seed: int,
            pipeline: str | None = None) -> dict:
    env = {"STARPU_SCHED": "dmdas", **({"STARPU_CUDA_PIPELINE": pipeline} if pipeline else {})}
    spec = RunSpec(engine=engine, cluster=host, n=n, b=b, env=env, env_per_machine={},
                   seed=seed, variability=engine == "numasim", getrf_on_gpu=getrf_gpu, platform_dir=pdir)
    return simulate(spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "bench" / "data" / "gpu-node-h100")
    ap.add_argument("--host", default="gpunode", help="STARPU_HOSTNAME of the recorded files")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--no-starpu", action="store_true", help="skip StarPU-SimGrid")
    ap.add_argument("--cluster", default="gpunode-1",
                    help="one-node cluster of the machine described from the node's calibration bundle ('' = none)")
    ap.add_argument("--out", type=Path, default=None, help="JSON of every run")
    args = ap.parse_args(argv)

    rows, records = [], []
    with tempfile.TemporaryDirectory(prefix="gpu-node-") as tmp:
        pdir = Path(tmp) / "platform"
        write_platform_dir(args.data / "sampling", args.host, pdir)
        described = None
        if args.cluster:  # the machine description derived from the node's calibration bundle
            from testbed.describe.machines import load_cluster
            from testbed.platform.platform_cmd import generate

            described = Path(tmp) / "described"
            generate(load_cluster(args.cluster), described)
        for (n, b, variant), real in real_cases(args.data).items():
            gpu = variant == "getrf-gpu"
            sims = [predict("numasim", pdir, args.host, n, b, gpu, s) for s in range(1, args.seeds + 1)]
            num = [r["makespan_s"] for r in sims]
            desc = ([predict("numasim", described, args.cluster, n, b, gpu, s)["makespan_s"]
                     for s in range(1, args.seeds + 1)] if described else [])
            sg = None if args.no_starpu else predict("starpu-simgrid", pdir, args.host, n, b, gpu, 1)
            row = {"n": n, "b": b, "variant": variant, "real_lazy": real["lazy"], "real_eager": real["eager"],
                   "numasim": num, "numasim_described": desc,
                   "starpu_simgrid": sg["makespan_s"] if sg else None}
            rows.append(row)
            records.append({**row, "numasim_runs": sims, "starpu_run": sg})
            print(f"n={n} {variant}: real {real} numasim {statistics.mean(num):.4f}", file=sys.stderr)
        pipe_rows = []
        for (n, pipeline), real in pipeline_cases(args.data).items():
            num = predict("numasim", described, args.cluster, n, 960, True, 1, pipeline)["makespan_s"] if described else None
            sg = None if args.no_starpu else predict("starpu-simgrid", pdir, args.host, n, 960, True, 1, pipeline)["makespan_s"]
            pipe_rows.append((n, pipeline, real, num, sg))

    def stat(xs: list[float]) -> str:
        return f"{statistics.mean(xs):.3f} [{min(xs):.3f}, {max(xs):.3f}] ({len(xs)})" if xs else "—"

    def diff(sim: float | None, real: list[float]) -> str:
        if sim is None or not real:
            return "—"
        inside = min(real) <= sim <= max(real) or abs(sim / statistics.mean(real) - 1) <= 0.10
        return f"{100 * (sim / statistics.mean(real) - 1):+.0f} %{'' if inside else ' ✗'}"

    print("| N | getrf on | real, lazy loading: mean [min, max] (runs) | real, eager loading | "
          "numasim (StarPU files) | numasim (calibrated description) | StarPU-SimGrid | "
          "diff vs eager: numasim / described / StarPU-SimGrid |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        num = statistics.mean(r["numasim"])
        dsc = statistics.mean(r["numasim_described"]) if r["numasim_described"] else None
        sg = r["starpu_simgrid"]
        ref = r["real_eager"] or r["real_lazy"]
        print(f"| {r['n']} | {'CPU+GPU' if r['variant'] == 'getrf-gpu' else 'CPU'} | {stat(r['real_lazy'])} | "
              f"{stat(r['real_eager'])} | {num:.3f} | {'—' if dsc is None else f'{dsc:.3f}'} | "
              f"{'—' if sg is None else f'{sg:.3f}'} | {diff(num, ref)} / {diff(dsc, ref)} / {diff(sg, ref)} |")
    print()
    print("| N | STARPU_CUDA_PIPELINE | real mean [min, max] (runs) | numasim (calibrated description) | StarPU-SimGrid |")
    print("|---|---|---|---|---|")
    for n, pipeline, real, num, sg in pipe_rows:
        print(f"| {n} | {pipeline} | {stat(real)} | {'—' if num is None else f'{num:.3f}'} | "
              f"{'—' if sg is None else f'{sg:.3f}'} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(records, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
