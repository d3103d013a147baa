#!/usr/bin/env python3
"""What StarPU's scheduler believes a copy costs against what it costs inside the LU.

StarPU's dmda estimates a transfer from the bus calibration, taken on an idle node
(src/core/perfmodel/perfmodel_bus.c: one copy at a time, nothing else running). numasim gives
the scheduler those figures (the platform's StarPU bus files) while its copies share the memory
buses, the inter-socket and PCIe links with every kernel's memory traffic and the other copies.
This bench runs the same copy alone on the idle platform (the calibration scenario) and reads
every host<->GPU copy of a loaded LU from numasim's transfer log: the ratio actual / idle is the
optimism that STARPU_SCHED_BETA (factor E) scales.

Usage: .venv/bin/python bench/bus_contention.py [--cluster chifflet-1] [--nt 30] [--factors ""]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.common.paths import FLOW_TIMES  # noqa: E402
from testbed.run.engines import RunSpec  # noqa: E402
from testbed.run.resolve import resolve_run_env  # noqa: E402
from testbed.run.simulate import parse_assignments, simulate  # noqa: E402


def idle_copy_s(xml: Path, src: str, dst: str, nbytes: int) -> float:
    """One copy alone on the platform: StarPU's bus calibration scenario."""
    out = subprocess.run([str(FLOW_TIMES), str(xml), src, dst, str(nbytes)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["flows"][0]["end"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="chifflet-1")
    ap.add_argument("--nt", type=int, default=30)
    ap.add_argument("--factors", default="")
    args = ap.parse_args(argv)
    from testbed.describe.machines import load_cluster
    from testbed.platform.platform_cmd import generate
    from testbed.run.factors import check_factors

    factors = check_factors({k: int(v) for k, v in parse_assignments([args.factors], "--factors").items()})
    with tempfile.TemporaryDirectory(prefix="bus-contention-") as tmp:
        pdir, log = Path(tmp) / "platform", Path(tmp) / "transfers.csv"
        generate(load_cluster(args.cluster), pdir, (960,))
        spec = RunSpec(engine="numasim", cluster=args.cluster, n=960 * args.nt, b=960, factors=factors,
                       **resolve_run_env(args.cluster, factors, {}, None).spec_fields(), seed=1, variability=False,
                       platform_dir=pdir, transfers=log)
        makespan = simulate(spec)["makespan_s"]
        idle: dict[tuple[str, str, int], float] = {}
        ratios: dict[str, list[float]] = {"RAM->GPU": [], "GPU->RAM": []}
        with log.open() as fh:
            for r in csv.DictReader(fh):
                src, dst, nbytes = r["Src"], r["Dst"], int(r["Bytes"])
                kind = "RAM->GPU" if ".ram" in src and ".gpu" in dst else "GPU->RAM" if ".gpu" in src and ".ram" in dst else None
                if kind is None:
                    continue
                key = (src, dst, nbytes)
                if key not in idle:
                    idle[key] = idle_copy_s(pdir / "numasim.xml", src, dst, nbytes)
                ratios[kind].append((float(r["End"]) - float(r["Start"])) / idle[key])
    print(f"{args.cluster}, N = {960 * args.nt}, b = 960, factors {args.factors or 'all -1'}: makespan "
          f"{makespan:.3f} s")
    print()
    print("| copies | count | actual / idle: min | 10 % | median | 90 % | max |")
    print("|---|---|---|---|---|---|---|")
    for kind, xs in ratios.items():
        if xs:
            q = statistics.quantiles(xs, n=10)
            print(f"| {kind} | {len(xs)} | {min(xs):.3f} | {q[0]:.2f} | {statistics.median(xs):.2f} | {q[-1]:.2f} | "
                  f"{max(xs):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
