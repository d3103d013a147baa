"""The memory microbenchmarks simulated with numasim's memory model, beside what was measured.

`memory_bench` (simulator/tools/memory_bench.cpp) runs numasim's memory model
(simulator/src/memory_model.cpp, docs/memory-model.md) on the scenarios of the calibration's
microbenchmarks: numa_bench's thread-node x data-node cells alone and with every core busy,
streaming bandwidth, MLC's loaded latency and host<->GPU copies. Two users:

* `bench/memory_microbench.py`: the chifflet and chetemi descriptions against the public
  measurements they cite (docs/references/platform-facts.md, related-work.md);
* the calibration's `validate` step: a bundle's own numa_bench matrices against the same
  cells simulated on the machine description derived from that bundle.

A cell's local idle-memory duration d0 is the measured median of the kernel alone on local data
(the input numa_bench gives every other cell); its traffic per call is numasim's (bytes_per_call).
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
from pathlib import Path
from typing import Any

from lxml import etree

from testbed.common.paths import BUILD, binary
from testbed.starpu.lu_codelets import BY_SYMBOL

MEMORY_BENCH = BUILD / "simulator" / "memory_bench"
WORD = 8  # bytes of a double
#: Relative distance within which a simulated microbenchmark "reproduces" a measurement.
TOLERANCE = 0.10


def bytes_per_call(kernel: str, b: int, gemm_block_k: float | None) -> float:
    """Bytes one call moves, as numasim charges an LU task (simulator/src/numa_effects.cpp
    run_task): read-only tiles once, the written tile read and written once per pass over k
    (ceil(b / kc) passes of a k-blocked BLAS, one without kc); daxpy (numa_bench's BLAS1 on
    b*b vectors) reads x and reads and writes y."""
    tile = b * b * WORD
    passes = math.ceil(b / gemm_block_k) if gemm_block_k else 1
    if kernel == "daxpy":
        return 3 * tile
    codelet = BY_SYMBOL.get(kernel)
    if codelet is None or codelet.kind == "plrnt":
        raise ValueError(f"unknown kernel {kernel!r} (dgemm, dtrsm, dgetrf_nopiv, daxpy)")
    return (codelet.buffers - 1 + 2 * passes) * tile  # every buffer but the last is read only


def first_node(platform_xml: Path) -> str:
    """Name of the rank-0 node zone of a numasim platform."""
    root = etree.parse(str(platform_xml)).getroot()
    for zone in root.iter("zone"):
        props = {p.get("id"): p.get("value") for p in zone.findall("prop")}
        if props.get("rank") == "0":
            return zone.get("id")
    raise ValueError(f"{platform_xml}: no node zone with property rank=0")


def run(platform_xml: Path, node: str, *args: Any) -> dict[str, Any]:
    exe = binary(MEMORY_BENCH, "memory_bench")
    out = subprocess.run([str(exe), str(platform_xml), node, *map(str, args)], capture_output=True, text=True,
                         timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"memory_bench {' '.join(map(str, args))}: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout)


def kernel_cell(platform_xml: Path, node: str, kernel: str, d0: float, nbytes: float, t: int, d: int, load: str,
                reps: int = 5) -> float:
    """Simulated median call time of numa_bench's cell (t, d) under `load` (alone | all)."""
    return run(platform_xml, node, "kernel", kernel, f"{d0:.9g}", f"{nbytes:.9g}", t, d, load, reps)["median_s"]


def _read_raw(path: Path) -> dict[tuple[int, int], dict[str, float]]:
    with path.open() as fh:
        return {(int(r["thread_node"]), int(r["data_node"])): {"median_s": float(r["median_s"]),
                                                               "rel_std": float(r["rel_std"])}
                for r in csv.DictReader(fh)}


def bundle_check(bundle: Path, platform_xml: Path, gemm_block_k: float | None = None) -> dict[str, Any]:
    """A bundle's numa_bench cells (numa/raw/<kernel>-b<b>-<load>.csv) beside the same cells
    simulated on `platform_xml` (built from that bundle). Two quantities per cell: the remote
    factor (cell / local cell, same load) and the load factor (all / alone, same cell)."""
    node = first_node(platform_xml)
    rows = []
    raw = bundle / "numa" / "raw"
    for alone_file in sorted(raw.glob("*-alone.csv")):
        kernel, b_text = alone_file.stem.removesuffix("-alone").rsplit("-b", 1)
        b = int(b_text)
        alone = _read_raw(alone_file)
        all_file = raw / f"{kernel}-b{b}-all.csv"
        loaded = _read_raw(all_file) if all_file.is_file() else {}
        nbytes = bytes_per_call(kernel, b, gemm_block_k)
        for t, d in sorted(alone):
            d0 = alone.get((t, t), {}).get("median_s")
            if not d0:
                continue
            for load, measured in (("alone", alone), ("all", loaded)):
                if (t, d) not in measured or (t, t) not in measured:
                    continue
                sim = kernel_cell(platform_xml, node, kernel, d0, nbytes, t, d, load)
                sim_local = sim if t == d else kernel_cell(platform_xml, node, kernel, d0, nbytes, t, t, load)
                quantities = {"remote_factor": (measured[(t, d)]["median_s"] / measured[(t, t)]["median_s"],
                                                sim / sim_local)}
                if load == "all":
                    quantities["load_factor"] = (measured[(t, d)]["median_s"] / alone[(t, d)]["median_s"],
                                                 sim / kernel_cell(platform_xml, node, kernel, d0, nbytes, t, d, "alone"))
                for q, (m, s) in quantities.items():
                    if q == "remote_factor" and t == d:
                        continue  # 1 by definition on both sides
                    rows.append({"kernel": kernel, "b": b, "load": load, "thread_node": t, "data_node": d,
                                 "quantity": q, "measured": round(m, 4), "simulated": round(s, 4),
                                 "error_pct": round(100 * (s - m) / m, 1),
                                 "within_tolerance": abs(s - m) <= TOLERANCE * m})
    rows += _penalty_rows(bundle, platform_xml, node, gemm_block_k)
    return {"tolerance_pct": 100 * TOLERANCE, "platform_node": node, "gemm_block_k": gemm_block_k,
            "cells": rows, "reproduced": sum(r["within_tolerance"] for r in rows), "total": len(rows),
            "method": "memory_bench (numasim's memory model) on the machine derived from the bundle; d0 = the "
                      "measured local median alone; remote_factor = cell / local cell; load_factor = all / alone; "
                      "remote_penalty (numa/remote_penalty.csv, every core busy, no GPU copies): d0 = the measured "
                      "local median of the penalty cell"}


def _penalty_rows(bundle: Path, platform_xml: Path, node: str, gemm_block_k: float | None) -> list[dict[str, Any]]:
    """The remote BLAS 3 penalty cells of `numa_bench penalty` without GPU copies, simulated as the
    same two cells with every core busy (docs/blas3-remote-penalty.md). memory_bench's kernel cells
    run no concurrent host<->GPU copies, so the `gpu` rows stay measurements only."""
    path = bundle / "numa" / "remote_penalty.csv"
    if not path.is_file():
        return []
    rows = []
    with path.open() as fh:
        cells = [r for r in csv.DictReader(fh) if r["copies"] == "none"]
    for r in cells:
        kernel, b, t, d = r["kernel"], int(r["b"]), int(r["thread_node"]), int(r["data_node"])
        d0, m = float(r["local_median_s"]), float(r["penalty"])
        nbytes = bytes_per_call(kernel, b, gemm_block_k)
        s = (kernel_cell(platform_xml, node, kernel, d0, nbytes, t, d, "all")
             / kernel_cell(platform_xml, node, kernel, d0, nbytes, t, t, "all"))
        rows.append({"kernel": kernel, "b": b, "load": "all", "thread_node": t, "data_node": d,
                     "quantity": "remote_penalty", "measured": round(m, 4), "simulated": round(s, 4),
                     "error_pct": round(100 * (s - m) / m, 1), "within_tolerance": abs(s - m) <= TOLERANCE * m})
    return rows
