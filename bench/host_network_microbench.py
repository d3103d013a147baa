#!/usr/bin/env python3
"""numasim's DMA under memory load against the public measurements of peripheral DMA throughput
while the cores load the memory controller (the way bench/memory_microbench.py validates the
memory model: simulate the microbenchmark, compare with the measurement).

Source (THN): Vuppalapati, Agarwal, Schuh, Kasikci, Krishnamurthy, Agarwal, "Understanding the
Host Network", ACM SIGCOMM 2024, extended version (tech-report.pdf of
github.com/host-architecture/understanding-the-host-network). One socket of a Xeon Gold 6234
(Cascade Lake, 2 x DDR4-2933); C2M: 1-6 cores running a modified STREAM, reading (C2M-Read) or
writing (C2M-ReadWrite, every line read then written back); P2M: FIO on 4 P5800X NVMe at ~14 GB/s
(storage reads are DMA writes to memory, P2M-Write; storage writes are DMA reads, P2M-Read), or a
ConnectX-5 RDMA NIC at ~98 Gbps (ib_write_bw: P2M-Write). Prefetchers and DDIO off. The table
gives the P2M throughput degradation (isolated / colocated) that the text states; the figures'
curves are not in the text and are not used.

The platform (bench/data/host-network/cascadelake-6234.xml) states where each number comes from.
Each case runs `memory_bench dma` (simulator/tools/memory_bench.cpp): the DMA as numasim runs a
host<->GPU copy (MemorySystem::dma_copy) while THREADS cores stream from the same controller. A
core's reads and write-backs are one flow in numasim (as a kernel's are), so C2M-Read and
C2M-ReadWrite cores are the same load there.

Columns: the simulation with the DMA mechanism (SimGrid's network/optim:Full, the exact max-min
solution), the same under SimGrid's lazy update (numasim's setting: SimGrid 3.32's lazy update
gives flows created on one route at the date of earlier flows more than their route carries,
which MemorySystem::dma_copy avoids by starting a split DMA 10 ns late; the two columns agree when
it does), and the controller's max-min sharing alone (the platform without its numa_dma_* and
numa_core_credits properties: numasim before this mechanism).

Usage: .venv/bin/python bench/host_network_microbench.py [--out bench/results/host_network_microbench.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.calibrate.memory_microbench import TOLERANCE, run  # noqa: E402

XML = ROOT / "bench" / "data" / "host-network" / "cascadelake-6234.xml"
NODE = "thn"
BYTES = 1e9
STORAGE, RDMA, RAM = "thn.nic0", "thn.nic1", "thn.ram0"

# (case, DMA source, DMA destination, C2M cores, measured degradation, source)
PFC = {4: 0.22, 5: 0.39, 6: 0.43}  # THN appendix D.1: 'PFC pause fractions of 22%, 39%, 43% with 4, 5, 6 C2M cores'
CASES = (
    [("P2M-Write (storage), C2M-Read", STORAGE, RAM, n, 1.0,
      "THN 2.2 quadrant 1: 'C2M throughput [degrades] while P2M throughput remains unaffected'") for n in range(1, 7)]
    + [("P2M-Read (storage), C2M-Read or C2M-ReadWrite", RAM, STORAGE, n, 1.0,
        "THN 2.2 quadrants 2 and 4: 'while C2M throughput degrades, P2M throughput remains unaffected'")
       for n in range(1, 7)]
    + [("P2M-Write (storage), C2M-ReadWrite", STORAGE, RAM, n, 1.0,
        "THN 5.2 quadrant 3: 'With 2 or fewer C2M cores ... there is no P2M throughput degradation'")
       for n in (1, 2)]
    + [("P2M-Write (RDMA), C2M-ReadWrite", RDMA, RAM, n, 1.0,
        "THN D.1 quadrant 3: 'with 3 or fewer C2M cores ... P2M throughput does not degrade'") for n in (1, 2, 3)]
    + [("P2M-Write (RDMA), C2M-ReadWrite", RDMA, RAM, n, round(1 / (1 - f), 3),
        f"THN D.1 quadrant 3: PFC pause fraction {f:.0%} with {n} C2M cores; throughput taken as "
        f"(1 - pause fraction) x line rate (derived)") for n, f in PFC.items()]
)


def error(sim: float, meas: float) -> float:
    return (sim - meas) / meas


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "host_network_microbench.json")
    args = ap.parse_args(argv)
    rows, alone = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        maxmin = Path(tmp) / "maxmin-only.xml"
        maxmin.write_text(re.sub(r'<prop id="numa_(dma_[a-z_]+|core_credits)" value="[^"]*"/>', "", XML.read_text()))
        for case, src, dst, n, measured, source in CASES:
            sim = {}
            for key, xml, optim in (("full", XML, "Full"), ("lazy", XML, "Lazy"), ("maxmin", maxmin, "Full")):
                cfg = f"--cfg=network/optim:{optim}"
                if (src, dst, key) not in alone:
                    alone[src, dst, key] = run(xml, NODE, "dma", src, dst, BYTES, 0, 0, cfg)["bandwidth_Bps"]
                res = run(xml, NODE, "dma", src, dst, BYTES, 0, n, cfg)
                sim[key] = alone[src, dst, key] / res["bandwidth_Bps"]
                if key == "full":
                    loaded = res
            e = error(sim["full"], measured)
            rows.append({"case": case, "c2m_cores": n, "measured": measured, "simulated": round(sim["full"], 3),
                         "simulated_lazy": round(sim["lazy"], 3), "maxmin_only": round(sim["maxmin"], 3),
                         "flows": loaded["flows"],
                         "window_bound": loaded["window_bound"], "error_pct": round(100 * e, 1),
                         "within_tolerance": abs(e) <= TOLERANCE, "source": source})
    print("P2M (DMA) throughput degradation, isolated / colocated (THN, Xeon Gold 6234)\n")
    print(f"| case | C2M cores | measured | simulated | error | within ±{100 * TOLERANCE:.0f}% | "
          "simulated, SimGrid lazy update | max-min only | DMA flows |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['c2m_cores']} | {r['measured']:.2f} | {r['simulated']:.2f} | {r['error_pct']:+.1f}% | "
              f"{'yes' if r['within_tolerance'] else 'NO'} | {r['simulated_lazy']:.2f} | {r['maxmin_only']:.2f} | {r['flows']} |")
    maxmin_ok = sum(abs(error(r["maxmin_only"], r["measured"])) <= TOLERANCE for r in rows)
    print(f"\nwithin ±{100 * TOLERANCE:.0f}%: {sum(r['within_tolerance'] for r in rows)} of {len(rows)} "
          f"(max-min only: {maxmin_ok}); "
          f"credit window binding in {sum(r['window_bound'] for r in rows)} of {len(rows)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"platform": str(XML.relative_to(ROOT)), "tolerance": TOLERANCE, "cases": rows},
                                   indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
