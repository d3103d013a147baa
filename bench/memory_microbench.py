#!/usr/bin/env python3
"""numasim's memory model on the microbenchmarks, against the public measurements the chifflet and
chetemi descriptions cite (the way SimGrid validates its network models: simulate the
microbenchmark, compare with the measurement).

Each case runs `memory_bench` (simulator/tools/memory_bench.cpp: numasim's own memory model,
simulator/src/memory_model.cpp) on a node of the study's platform (g5k-lille-21). A case is
either an *input* (a figure the description was derived from: reproducing it checks that the
mechanism implements the description, nothing more) or a *prediction* (a figure the
description was not derived from). Sources: PF = docs/references/platform-facts.md,
RW = docs/references/related-work.md.

Usage: .venv/bin/python bench/memory_microbench.py [--out bench/results/memory_microbench.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.calibrate.memory_microbench import TOLERANCE, bytes_per_call, kernel_cell, run  # noqa: E402
from testbed.describe.machines import load_machine  # noqa: E402

B = 960  # the study's tile size


def error(sim: float, lo: float, hi: float | None = None) -> float:
    """Relative distance to a measurement, or to the nearest end of a measured range (0 inside)."""
    hi = lo if hi is None else hi
    if lo <= sim <= hi:
        return 0.0
    ref = lo if sim < lo else hi
    return (sim - ref) / ref


def cases(xml: Path, node: str, machine: str) -> list[dict]:
    m = load_machine(machine)
    kc = ((m.raw.get("numa") or {}).get("gemm_block_k") or {}).get("value")
    core_bw = m.numa_nodes[0].core_bandwidth_Bps
    ncores = len(m.numa_nodes[0].cores)
    rows = []

    def add(case: str, kind: str, sim: float, lo: float, hi: float | None, source: str) -> None:
        e = error(sim, lo, hi)
        rows.append({"machine": machine, "case": case, "kind": kind, "simulated": round(sim, 4),
                     "measured": lo if hi is None else [lo, hi], "error_pct": round(100 * e, 1),
                     "within_tolerance": abs(e) <= TOLERANCE, "source": source})

    def factor(kernel: str, d0: float, load: str) -> float:
        nbytes = bytes_per_call(kernel, B, kc)
        return (kernel_cell(xml, node, kernel, d0, nbytes, 0, 1, load)
                / kernel_cell(xml, node, kernel, d0, nbytes, 0, 0, load))

    d_gemm = 2 * B**3 / m.core_flops  # the description's dgemm rate is the core's speed
    d_axpy = bytes_per_call("daxpy", B, kc) / core_bw  # a streaming kernel at one core's bandwidth
    # The derivation of stall_fraction_dgemm (docs/blas3-remote-penalty.md): the packing of A and B
    # (2 b^2 doubles at one core's link) is the only latency-bound part of a b = 960 dgemm, so the
    # one-hop factor alone is 1 + (packing time / d0) x (remote / local latency - 1).
    lat = m.numa_nodes[0].memory_latency_s
    rho = (lat + m.inter_socket_links[0].latency_s) / lat
    pack = 2 * B * B * 8 / core_bw
    add("dgemm remote/local, alone (1 hop)", "input", factor("dgemm", d_gemm, "alone"),
        round(1 + pack / d_gemm * (rho - 1), 4), None,
        "BP: packing share of a b = 960 Goto-style dgemm x (136/85 - 1) (sets stall_fraction_dgemm; "
        "RW PaStiX's 1.04 was a 128 x 128 dgemm)")
    add("daxpy remote/local, alone (1 hop)", "input", factor("daxpy", d_axpy, "alone"), 1.3, None,
        "RW PaStiX: '~1.3 (1 hop) ... for BLAS1' (sets stall_fraction_daxpy)")
    add("daxpy remote/local, all cores busy", "prediction", factor("daxpy", d_axpy, "all"), 1.7, 2.8,
        "RW PaStiX contention: 'BLAS1 slowdowns of 1.7-2.8x under contention'")
    add("dgemm remote/local, all cores busy", "prediction", factor("dgemm", d_gemm, "all"), 1.0, 1.7,
        "RW PaStiX contention: 'much less [than 1.7-2.8x] for BLAS3'")
    local = run(xml, node, "stream", 1e9, 0, 0, ncores)["bandwidth_Bps"]
    remote = run(xml, node, "stream", 1e9, 0, 1, ncores)["bandwidth_Bps"]
    one = run(xml, node, "memcpy", 1e9, 0, 0, 1)["bandwidth_Bps"]
    if machine == "chetemi":
        add("read bandwidth, whole machine (GB/s)", "input", 2 * local / 1e9, 93.6, None,
            "PF Memory: 2 x E5-2630 v4 (MLC) '93.6 GB/s all-reads' (sets memory_bandwidth_Bps)")
        triad = run(xml, node, "triad", 1e9, 0, 0, ncores)["bandwidth_Bps"]
        add("triad bandwidth, whole machine (GB/s)", "prediction", 2 * triad / 1e9, 66.9, 81.3,
            "PF Memory: 'STREAM triad 66.9 GB/s with 40 threads', MLC '81.3 GB/s triad-like' "
            "(STREAM's count: 24 bytes per element, 32 moved with write-allocate, PF 'Write-allocate')")
    # The inter-socket link's capacity is this measurement (the one on the same QPI generation,
    # 9.6 GT/s; x 8/9.6 for chetemi's 8 GT/s), as the controllers' are their measured sustained
    # rates: reproducing it checks the route (cores -> qpi -> far controller), nothing more.
    qpi_scale = 1.0 if machine == "chifflet" else 8 / 9.6
    add("remote read bandwidth, one socket's cores (GB/s)", "input", remote / 1e9, round(30.3 * qpi_scale, 2),
        None, "PF NUMA: 2 x E5-2699 v3, 9.6 GT/s QPI, MLC: '30.3 GB/s remote'" +
        ("" if machine == "chifflet" else " x 8/9.6 (chetemi's QPI runs at 8 GT/s)") + " (sets inter_socket_links)")
    add("one thread's memcpy bandwidth, bytes copied (GB/s)", "input", one / 1e9, 5.9, 6.2,
        "PF NUMA: 'Single-thread copy bandwidth on dual-socket Xeon E5 (E5-2670 / E5-2650 v2): 5.9-6.2 GB/s', "
        "cachebench memcpy (sets core_bandwidth_Bps)")
    idle = run(xml, node, "latency", 0, 0, 0)["latency_s"]
    sat = run(xml, node, "latency", 0, 0, ncores)
    add("loaded / idle latency, controller saturated", "input", sat["latency_s"] / idle, round(235 / 107, 4), None,
        "PF Loaded latency: chetemi CPU, '107 ns up to ~11 GB/s ... 235 ns at saturation' (sets loaded_latency)")
    add("remote / local idle latency", "input", run(xml, node, "latency", 0, 1, 0)["latency_s"] / idle, 136 / 85,
        None, "PF Memory: '85 ns local vs 136 ns remote' (sets memory_latency_s and the inter-socket latency)")
    if m.gpus:
        for src, dst, lo, what in (("ram0", "gpu0", 10.5, "host->GPU, same socket"),
                                   ("ram1", "gpu0", 3.78, "host->GPU, buffer on the other socket"),
                                   ("gpu0", "ram1", 2.54, "GPU->host, buffer on the other socket")):
            bw = run(xml, node, "copy", f"{node}.{src}", f"{node}.{dst}", 1e9)["bandwidth_Bps"] / 1e9
            add(f"{what} (GB/s)", "input", bw, lo, None,
                "PF GPU: sirocco bus samples 'host<->GPU 10.5 GB/s'" if lo == 10.5 else
                "PF Cross-socket DMA: P100, CUDA bandwidthTest, 'numactl -m1 -N1': '3.78 GB/s and 2.54 GB/s'")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "memory_microbench.json")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "testbed", "platform", "--cluster", "g5k-lille-21", "--out", tmp],
                       check=True, cwd=ROOT, capture_output=True)
        xml = Path(tmp) / "numasim.xml"
        rows = cases(xml, "chifflet-1", "chifflet") + cases(xml, "chetemi-1", "chetemi")
    print(f"| machine | case | kind | measured | simulated | error | within ±{100 * TOLERANCE:.0f}% |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        meas = "–".join(map(str, r["measured"])) if isinstance(r["measured"], list) else r["measured"]
        print(f"| {r['machine']} | {r['case']} | {r['kind']} | {meas} | {r['simulated']} | {r['error_pct']:+.1f}% | "
              f"{'yes' if r['within_tolerance'] else 'NO'} |")
    preds = [r for r in rows if r["kind"] == "prediction"]
    print(f"\npredictions within ±{100 * TOLERANCE:.0f}%: {sum(r['within_tolerance'] for r in preds)} of {len(preds)}; "
          f"inputs reproduced: {sum(r['within_tolerance'] for r in rows if r['kind'] == 'input')} of "
          f"{sum(r['kind'] == 'input' for r in rows)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"tile": B, "tolerance": TOLERANCE, "cases": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
