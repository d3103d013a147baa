#!/usr/bin/env python3
"""Real LU with CUDA on a GPU node vs numasim and StarPU-SimGrid predictions from the node's
own StarPU calibration.

The data (bench/data/gpu-node-h100/, written by bench/gpu_node.sh on the node): apps/lu runs
(timed phase: models frozen, STARPU_SCHED=dmdas, StarPU's defaults otherwise) with getrf on
the CPU and with --getrf-gpu, and StarPU's sampling directory (bus calibration + codelet
models) recorded there. Both simulators run through the testbed's engines on the platform
`testbed platform --from-starpu` writes from that sampling directory: numasim with its
seeded variability (one run per seed), StarPU-SimGrid on model means (deterministic).

Usage: .venv/bin/python bench/gpu_node_predict.py [--data DIR] [--host NAME] [--seeds 5]
       [--out bench/results/gpu_node_predict.json]
Prints the markdown table recorded in bench/RESULTS.md ("GPU node").
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

from testbed.engines import RunSpec  # noqa: E402
from testbed.platform_from_starpu import write_platform_dir  # noqa: E402
from testbed.simulate import simulate  # noqa: E402


def real_cases(runs_file: Path) -> dict[tuple[int, int, str], list[float]]:
    """(n, b, variant) -> makespans of the timed runs."""
    cases: dict[tuple[int, int, str], list[float]] = defaultdict(list)
    for line in runs_file.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("phase") == "timed":
            cases[(rec["n"], rec["b"], rec["variant"])].append(rec["makespan_s"])
    return dict(sorted(cases.items()))


def predict(engine: str, pdir: Path, host: str, n: int, b: int, getrf_gpu: bool, seed: int) -> dict:
    spec = RunSpec(engine=engine, cluster=host, n=n, b=b, env={"STARPU_SCHED": "dmdas"}, env_per_machine={},
                   seed=seed, variability=engine == "numasim", getrf_on_gpu=getrf_gpu, platform_dir=pdir)
    return simulate(spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "bench" / "data" / "gpu-node-h100")
    ap.add_argument("--host", default="gpunode", help="STARPU_HOSTNAME of the recorded files")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--no-starpu", action="store_true", help="skip StarPU-SimGrid")
    ap.add_argument("--out", type=Path, default=None, help="JSON of every run")
    args = ap.parse_args(argv)

    rows, records = [], []
    with tempfile.TemporaryDirectory(prefix="gpu-node-") as tmp:
        pdir = Path(tmp) / "platform"
        write_platform_dir(args.data / "sampling", args.host, pdir)
        for (n, b, variant), real in real_cases(args.data / "runs.jsonl").items():
            gpu = variant == "getrf-gpu"
            sims = [predict("numasim", pdir, args.host, n, b, gpu, s) for s in range(1, args.seeds + 1)]
            num = [r["makespan_s"] for r in sims]
            sg = None if args.no_starpu else predict("starpu-simgrid", pdir, args.host, n, b, gpu, 1)
            real_mean, num_mean = statistics.mean(real), statistics.mean(num)
            inside = min(real) <= num_mean <= max(real) or abs(num_mean / real_mean - 1) <= 0.10
            row = {"n": n, "b": b, "variant": variant, "real": real, "numasim": num,
                   "starpu_simgrid": sg["makespan_s"] if sg else None,
                   "numasim_tasks_on_cuda": sims[0].get("tasks_by_worker_type"),
                   "diff_numasim_pct": 100 * (num_mean / real_mean - 1),
                   "diff_starpu_pct": 100 * (sg["makespan_s"] / real_mean - 1) if sg else None,
                   "numasim_ok": inside}
            rows.append(row)
            records.append({**row, "numasim_runs": sims, "starpu_run": sg})
            print(f"n={n} {variant}: real {real_mean:.4f} numasim {num_mean:.4f} "
                  f"({row['diff_numasim_pct']:+.1f} %)", file=sys.stderr)

    print("| N | b | getrf on | real mean [min, max] (s), n | numasim mean ± sd (s) | diff | StarPU-SimGrid (s) | diff |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        real, num = r["real"], r["numasim"]
        sd = statistics.stdev(num) if len(num) > 1 else 0.0
        sg = "—" if r["starpu_simgrid"] is None else f"{r['starpu_simgrid']:.4f}"
        sgd = "—" if r["diff_starpu_pct"] is None else f"{r['diff_starpu_pct']:+.1f} %"
        print(f"| {r['n']} | {r['b']} | {'CPU+GPU' if r['variant'] == 'getrf-gpu' else 'CPU'} | "
              f"{statistics.mean(real):.4f} [{min(real):.4f}, {max(real):.4f}], {len(real)} | "
              f"{statistics.mean(num):.4f} ± {sd:.4f} | {r['diff_numasim_pct']:+.1f} %"
              f"{'' if r['numasim_ok'] else ' (outside)'} | {sg} | {sgd} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(records, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
