#!/usr/bin/env python3
"""Replays the real runs of the 16-core + H100 node (bench/data/real-node-16c-h100/, measured
for this project: README.shared.md there) with numasim, from what was calibrated on that node.

* CPU only (`cpu_real_runs.jsonl`, apps/lu): numasim on the machine description derived from the
  node's calibration bundle (`testbed platform --from-calibration calibration/h100cpu`,
  platforms/clusters/h100cpu-1.yaml); variant `default` = StarPU's defaults with
  STARPU_SCHED=dmdas (`--starpu-defaults`), `baseline` = the study's baseline (factors at −1).
* GPU (`gpu/real_runs.jsonl`, StarPU's examples/lu with cuBLAS/cuSOLVER, 15 CPU + 1 CUDA
  workers, no MPI): numasim on the platform converted from the node's StarPU sampling directory
  (`testbed platform --from-starpu`), StarPU's LU example models and task graph
  (`--symbols starpu-lu --dag starpu-lu-example --getrf-gpu`, STARPU_NCPU=15), with the CUDA
  worker's costs that StarPU's files do not carry (`--gpu-cost`) as measured on a node of the
  same kind (16 cores + H100, CUDA 13) by the device call of bench/data/gpu-device-h100/
  (bench/gpu_device_replay.py: host time per task, gap between back-to-back tasks, each
  kernel's first-call extra).

A case passes when the mean of the seeds lies inside the real min–max or within 10 % of the
real mean. Every case is printed; none is dropped.

Usage: .venv/bin/python bench/real_node_replay.py [--seeds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.run.engines import RunSpec  # noqa: E402
from testbed.run.resolve import resolve_run_env  # noqa: E402
from testbed.run.simulate import simulate  # noqa: E402

DATA = ROOT / "bench" / "data" / "real-node-16c-h100"
CLUSTER = "h100cpu-1"
GPU_HOST = "h100gpu"


@dataclass
class Case:
    part: str  # cpu | gpu
    variant: str
    n: int
    b: int
    real: list[float]
    simulated: list[float] = field(default_factory=list)

    @property
    def diff_pct(self) -> float:
        return 100 * (statistics.mean(self.simulated) / statistics.mean(self.real) - 1)

    @property
    def ok(self) -> bool:
        sim = statistics.mean(self.simulated)
        return min(self.real) <= sim <= max(self.real) or abs(self.diff_pct) <= 10

    @property
    def key(self) -> str:
        return f"{self.part}-{self.variant}-{self.n}-{self.b}"


def cases() -> list[Case]:
    real: dict[tuple, list[float]] = defaultdict(list)
    for line in (DATA / "cpu_real_runs.jsonl").read_text().splitlines():
        r = json.loads(line)
        real[("cpu", r["variant"], r["n"], r["b"])].append(r["makespan_s"])
    for line in (DATA / "gpu" / "real_runs.jsonl").read_text().splitlines():
        r = json.loads(line)
        real[("gpu", "starpu-lu-example", r["n"], r["b"])].append(r["makespan_s"])
    return [Case(*k, v) for k, v in sorted(real.items())]


def spec_for(case: Case, seed: int, gpu_platform: Path) -> RunSpec:
    if case.part == "gpu":
        return RunSpec(engine="numasim", cluster=GPU_HOST, n=case.n, b=case.b,
                       env={"STARPU_SCHED": "dmdas", "STARPU_NCPU": "15"}, env_per_machine={}, seed=seed,
                       symbols="starpu-lu", getrf_on_gpu=True, dag="starpu-lu-example", platform_dir=gpu_platform)
    if case.variant == "default":  # StarPU's defaults, as `STARPU_SCHED=dmdas lu` ran
        return RunSpec(engine="numasim", cluster=CLUSTER, n=case.n, b=case.b, env={"STARPU_SCHED": "dmdas"},
                       env_per_machine={}, seed=seed)
    factors = {letter: -1 for letter in "ABCDEFG"}  # the study's baseline
    return RunSpec(engine="numasim", cluster=CLUSTER, n=case.n, b=case.b, factors=factors,
                   **resolve_run_env(CLUSTER, factors, {}, None).spec_fields(), seed=seed)


def device_gpu_costs(tmp: Path) -> dict[str, float]:
    """The CUDA worker costs measured by the H100 device call (bench/gpu_device_replay.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_device_replay", ROOT / "bench" / "gpu_device_replay.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (tmp / "device").mkdir()
    return mod.measured_costs(mod.extract(mod.DATA, tmp / "device"), mod.DATA)[0]


def replay(seeds: int = 5) -> list[Case]:
    from testbed.describe.machines import load_cluster
    from testbed.platform.platform_cmd import generate
    from testbed.platform.platform_from_starpu import write_platform_dir

    all_cases = cases()
    with tempfile.TemporaryDirectory(prefix="real-node-replay-") as tmp:
        cpu_platform, gpu_platform = Path(tmp) / "cpu", Path(tmp) / "gpu"
        generate(load_cluster(CLUSTER), cpu_platform, tuple(sorted({c.b for c in all_cases})))
        write_platform_dir(DATA / "gpu" / "sampling", GPU_HOST, gpu_platform, device_gpu_costs(Path(tmp)))
        for case in all_cases:
            for seed in range(1, seeds + 1):
                spec = spec_for(case, seed, gpu_platform)
                if case.part == "cpu":
                    spec.platform_dir = cpu_platform
                case.simulated.append(simulate(spec)["makespan_s"])
    return all_cases


def markdown(all_cases: list[Case]) -> str:
    lines = ["| part | variant | N | b | real mean [min, max] (s), runs | numasim mean (s), seeds | diff | inside |",
             "|---|---|---|---|---|---|---|---|"]
    for c in all_cases:
        lines.append(f"| {c.part} | {c.variant} | {c.n} | {c.b} | {statistics.mean(c.real):.3f} "
                     f"[{min(c.real):.3f}, {max(c.real):.3f}], {len(c.real)} | "
                     f"{statistics.mean(c.simulated):.3f}, {len(c.simulated)} | {c.diff_pct:+.1f} % | "
                     f"{'yes' if c.ok else 'NO'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args(argv)
    print(markdown(replay(args.seeds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
