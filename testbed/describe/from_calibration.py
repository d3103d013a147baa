"""A machine description from a calibration bundle (`testbed platform --from-calibration`).

    testbed platform --from-calibration calibration/NAME --out platforms/machines/NAME.yaml

Topology (sockets, NUMA nodes, cores, memory, GPUs, NICs) comes from the bundle's
`hwloc.xml` through the same code as `--describe-local` (testbed.describe.hwloc_xml.topology_data);
every number the bundle measured replaces its placeholder and cites the bundle file and
field (docs/interfaces.md §8 names the files):

* `kernels.yaml`                 kernel times (`kernels:` points at the bundle), core/GPU flop rates;
* `numa/bandwidth.csv`           triad bandwidth per NUMA node and across sockets;
* `numa/matrix-*.csv`            remote-access factors (kept under `numa:` as matrices);
* `numa/remote_penalty.csv`      the remote BLAS 3 penalty at the study's tile, every core busy (with and
                                 without concurrent host<->GPU copies), kept as `numa.remote_penalty_*`
                                 and turned into `numa.stall_fraction_<kernel>` (docs/blas3-remote-penalty.md);
* `sampling/bus/M.{bandwidth,latency}`  host<->GPU and GPU<->GPU figures (StarPU bus calibration);
* `network/pingpong.json`        NIC bandwidth, only when measured between two hosts;
* `host.json`                    clock frequency when lscpu reports one.

What the bundle cannot provide stays a placeholder marked `needs_calibration: true`;
the list is returned, printed by the CLI and written into the file's `notes`.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import yaml
from lxml import etree

from testbed import ROOT
from testbed.common.errors import InputError
from testbed.common.yaml_input import load_yaml
from testbed.describe.hwloc_xml import hwloc_source, topology_data
from testbed.starpu.bus_files import read_bus_matrix


def label_of(bundle: Path) -> str:
    """How values cite the bundle: a path relative to the repository when it is inside it."""
    try:
        return str(bundle.resolve().relative_to(ROOT))
    except ValueError:
        return str(bundle)


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def _l3_bytes(xml: bytes) -> int | None:
    sizes = [int(o.get("cache_size", 0)) for o in etree.fromstring(xml).iter("object") if o.get("type") == "L3Cache"]
    return max(sizes) if sizes and max(sizes) > 0 else None


def _frequency(host: dict[str, Any]) -> tuple[float, str] | None:
    lscpu = host.get("lscpu", {})
    for key in ("CPU max MHz", "CPU MHz"):
        try:
            mhz = float(lscpu[key])
        except (KeyError, TypeError, ValueError):
            continue
        if mhz > 0:
            return mhz * 1e6, key
    return None


def machine_from_bundle(bundle: Path, name: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """(machine mapping, [key: why it is a placeholder]) from a calibration bundle."""
    if not bundle.is_dir():
        raise InputError(bundle, None, "a calibration bundle directory (testbed calibrate --machine M --out DIR)")
    label = label_of(bundle)
    hw = bundle / "hwloc.xml"
    kfile = bundle / "kernels.yaml"
    for f, what in ((hw, "the hwloc step"), (kfile, "the codelets step")):
        if not f.is_file():
            raise InputError(f, None, f"this file of the bundle (written by {what} of `testbed calibrate`)")
    kernels = load_yaml(kfile)
    if not isinstance(kernels, dict) or not isinstance(kernels.get("kernels"), dict):
        raise InputError(kfile, "kernels", "a mapping kernel -> arch -> timing")
    bundle_machine = str(kernels.get("machine") or bundle.name)
    name = name or bundle_machine
    xml = hw.read_bytes()
    hw_src = f"{label}/hwloc.xml ({hwloc_source(xml)})"
    gpus_file = bundle / "gpus.json"
    gpus = json.loads(gpus_file.read_text()) if gpus_file.is_file() else None
    data = topology_data(xml, name, src=hw_src, gpus=gpus, gpus_src=f"{label}/gpus.json")
    data["description"] = (f"Derived from the calibration bundle {label} by `testbed platform --from-calibration`: "
                           "every value cites the bundle file and field; needs_calibration marks what it did not measure")
    missing: list[str] = []

    host_file = bundle / "host.json"
    host = json.loads(host_file.read_text()) if host_file.is_file() else {}
    from testbed.describe.hwloc_xml import check_memory, mem_total_bytes

    check_memory(data, mem_total_bytes(str(host.get("meminfo_memtotal", ""))), f"{label}/host.json meminfo_memtotal")
    freq = _frequency(host)
    if freq:
        data["cpu"]["frequency_hz"] = {"value": freq[0], "source": f"{label}/host.json: lscpu.\"{freq[1]}\" (MHz)"}
    else:
        missing.append("cpu.frequency_hz: lscpu in host.json reports no clock frequency")
    l3 = _l3_bytes(xml)
    if l3:
        data["cpu"]["l3_cache_bytes"] = {"value": l3, "source": f"{hw_src}: L3Cache cache_size"}

    _kernel_rates(data, kernels, kfile, label, missing)
    _bandwidth(data, bundle, label, missing)
    _bus(data, bundle, bundle_machine, label, missing)
    _task_overhead(data, bundle, label, missing)
    _alloc_costs(data, bundle, label, missing)
    _network(data, bundle, label, missing)
    data["numa"] = _numa_factors(bundle, label)
    data["numa"].update(_remote_penalty(data, bundle, label))
    if not data["numa"]:
        del data["numa"]
    data["kernels"] = label
    for k, node in enumerate(data["numa_nodes"]):
        for key in ("memory_latency_s", "core_bandwidth_Bps"):
            if node[key].get("needs_calibration"):
                missing.append(f"numa_nodes[{k}].{key}: no microbenchmark of the bundle measures it")
    for i, link in enumerate(data["inter_socket_links"]):
        if link["latency_s"].get("needs_calibration"):
            missing.append(f"inter_socket_links[{i}].latency_s: no microbenchmark of the bundle measures it")
    for j in range(len(data["nics"])):
        for key in ("pcie_bandwidth_Bps", "pcie_latency_s"):
            missing.append(f"nics[{j}].{key}: no microbenchmark of the bundle measures it")
    _restate_placeholders(data, label)
    data["notes"] = ("Not provided by the bundle (placeholders, needs_calibration: true): "
                     + ("; ".join(missing) if missing else "none") + ".")
    return data, missing


def _restate_placeholders(node: Any, label: str) -> None:
    """Placeholders from the hwloc pass say `measure it with testbed calibrate`; here the
    bundle was that calibration, so they say it did not measure the quantity."""
    if isinstance(node, dict):
        if node.get("needs_calibration"):
            node["derived"] = node["derived"].replace("measure it with `testbed calibrate`",
                                                      f"not measured by the bundle {label}")
            return
        for v in node.values():
            _restate_placeholders(v, label)
    elif isinstance(node, list):
        for v in node:
            _restate_placeholders(v, label)


def _kernel_rates(data: dict, kernels: dict, kfile: Path, label: str, missing: list[str]) -> None:
    """Per-core and per-GPU flop rates from the dgemm time at the reference tile."""
    ref = kernels.get("reference_tile")
    if not isinstance(ref, int) or ref <= 0:
        raise InputError(kfile, "reference_tile", f"a positive tile size, got {ref!r}")
    dgemm = kernels["kernels"].get("dgemm", {})

    def rate(arch: str) -> dict | None:
        try:
            t = float(dgemm[arch]["time_s"]["value"])
        except (KeyError, TypeError, ValueError):
            return None
        if t <= 0:
            raise InputError(kfile, f"kernels.dgemm.{arch}.time_s.value", f"a positive time, got {t}")
        return {"value": 2.0 * ref**3 / t,
                "derived": f"2*{ref}^3 flop / {t:.6g} s = {label}/kernels.yaml: kernels.dgemm.{arch}.time_s"}

    cpu = rate("cpu")
    if cpu is None:
        raise InputError(kfile, "kernels.dgemm.cpu.time_s", "a calibrated CPU dgemm time")
    data["cpu"]["core_flops"] = cpu
    gpu = rate("cuda")
    for j, g in enumerate(data["gpus"]):
        if gpu:
            g["flops"] = dict(gpu)
        else:
            missing.append(f"gpus[{j}].flops: kernels.yaml has no CUDA dgemm time")


def _core_bandwidth(data: dict, bundle: Path, label: str) -> None:
    """One core's memory bandwidth: numa_bench's BLAS1 kernel alone on local data (daxpy on b*b
    vectors reads x and reads and writes y: 3 b^2 doubles per call), at its largest tile size."""
    runs = sorted(((int(p.stem.split("-b")[1].split("-")[0]), p) for p in (bundle / "numa" / "raw").glob("daxpy-b*-alone.csv")),
                  reverse=True)
    if not runs:
        return
    b, path = runs[0]
    cells = {(int(r["thread_node"]), int(r["data_node"])): r for r in _read_csv(path)}
    for k, node in enumerate(data["numa_nodes"]):
        r = cells.get((k, k))
        if r is None or not float(r["median_s"]) > 0:
            continue
        node["core_bandwidth_Bps"] = {
            "value": float(f"{3 * b * b * 8 / float(r['median_s']):.6g}"),
            "derived": f"{label}/numa/raw/{path.name}: 3 * {b}^2 * 8 bytes (daxpy reads x, reads and writes y) / "
                       f"median_s {r['median_s']} of the cell thread_node {k}, data_node {k} (one thread alone)"}


#: numa_bench's triad x[i] = y[i] + 3 z[i] (ordinary stores) counts 24 bytes per element as STREAM
#: does; the memory moves 32, the line of x[i] being read for ownership before it is written
#: (docs/references/platform-facts.md, "Write-allocate"). The controller's bandwidth is the moved
#: rate. Across sockets the link carries the 24 bytes towards the threads (the 8 written back go the
#: other way on a full-duplex link), so the counted rate is the link's rate in that direction.
TRIAD_MOVED_PER_COUNTED = 32 / 24


def _bandwidth(data: dict, bundle: Path, label: str, missing: list[str]) -> None:
    _core_bandwidth(data, bundle, label)
    path = bundle / "numa" / "bandwidth.csv"
    rows = _read_csv(path) if path.is_file() else []
    node_rows = {(int(r["thread_node"]), int(r["data_node"])): r for r in rows
                 if r.get("kernel", "triad") == "triad" and r["scope"] == "node"}
    for k, node in enumerate(data["numa_nodes"]):
        r = node_rows.get((k, k))
        if r is None:
            missing.append(f"numa_nodes[{k}].memory_bandwidth_Bps: numa/bandwidth.csv has no triad row T{k}/D{k}")
            continue
        node["memory_bandwidth_Bps"] = {
            "value": float(f"{float(r['gbps']) * 1e9 * TRIAD_MOVED_PER_COUNTED:.6g}"),
            "derived": f"{label}/numa/bandwidth.csv: gbps of triad, scope node, thread_node {k}, data_node {k} "
                       f"({r['threads']} threads, best of {r['reps']}) x 32/24: the triad counts 24 bytes per "
                       "element and moves 32 with write-allocate (docs/references/platform-facts.md)"}
    for i, link in enumerate(data["inter_socket_links"]):
        a, b = link["numa_nodes"]
        cross = [node_rows[x] for x in ((a, b), (b, a)) if x in node_rows]
        if not cross:
            missing.append(f"inter_socket_links[{i}].bandwidth_Bps: numa/bandwidth.csv has no triad row T{a}/D{b}")
            continue
        r = min(cross, key=lambda r: float(r["gbps"]))
        link["bandwidth_Bps"] = {
            "value": float(r["gbps"]) * 1e9,
            "source": f"{label}/numa/bandwidth.csv: gbps of triad, scope node, thread_node {r['thread_node']}, "
                      f"data_node {r['data_node']} (the slower direction between NUMA {a} and {b})"}


def _bus(data: dict, bundle: Path, machine: str, label: str, missing: list[str]) -> None:
    """GPU PCIe figures from StarPU's bus calibration (MB/s and us, memory nodes NUMA then CUDA)."""
    if not data["gpus"]:
        return
    files = {q: bundle / "sampling" / "bus" / f"{machine}.{q}" for q in ("bandwidth", "latency")}
    if not all(f.is_file() for f in files.values()):
        for j in range(len(data["gpus"])):
            missing.append(f"gpus[{j}].pcie_bandwidth_Bps/pcie_latency_s: no bus files in sampling/bus")
        return
    names, bw = read_bus_matrix(files["bandwidth"])
    _, lat = read_bus_matrix(files["latency"])
    idx = {n: i for i, n in enumerate(names)}
    bw_label = f"{label}/sampling/bus/{machine}.bandwidth"
    lat_label = f"{label}/sampling/bus/{machine}.latency"
    for j, g in enumerate(data["gpus"]):
        host, dev = f"NUMA {g['numa_node']}", f"CUDA {j}"
        if host not in idx or dev not in idx:
            missing.append(f"gpus[{j}].pcie_bandwidth_Bps/pcie_latency_s: bus files have no {host} -> {dev} entry")
            continue
        h, d = idx[host], idx[dev]
        g["pcie_bandwidth_Bps"] = {"value": bw[h][d] * 1e6, "source": f"{bw_label}: row {host}, column to {dev} (MB/s)"}
        g["pcie_latency_s"] = {"value": lat[h][d] * 1e-6, "source": f"{lat_label}: row {host}, column to {dev} (us)"}
    peer: dict[str, dict] = {}
    for a, ga in enumerate(data["gpus"]):
        for b, gb in enumerate(data["gpus"]):
            key = "same_numa" if ga["numa_node"] == gb["numa_node"] else "cross_numa"
            if a == b or key in peer or f"CUDA {a}" not in idx or f"CUDA {b}" not in idx:
                continue
            i, k = idx[f"CUDA {a}"], idx[f"CUDA {b}"]
            if not (math.isfinite(bw[i][k]) and bw[i][k] > 0):
                continue
            peer[key] = {"bandwidth_Bps": {"value": bw[i][k] * 1e6, "source": f"{bw_label}: row CUDA {a}, column to CUDA {b} (MB/s)"},
                         "latency_s": {"value": lat[i][k] * 1e-6, "source": f"{lat_label}: row CUDA {a}, column to CUDA {b} (us)"}}
    if peer:
        data["gpu_peer"] = peer


def _task_overhead(data: dict, bundle: Path, label: str, missing: list[str]) -> None:
    """Host time of the CUDA worker per task: median per-task time with STARPU_CUDA_PIPELINE=1
    of gpu/task_overhead.csv (it includes a one-element kernel, a few microseconds)."""
    if not data["gpus"]:
        return
    path = bundle / "gpu" / "task_overhead.csv"
    if not path.is_file():
        for j in range(len(data["gpus"])):
            missing.append(f"gpus[{j}].task_overhead_s: no gpu/task_overhead.csv (the calibration's cuda-task-overhead step)")
        return
    import statistics

    rows = [r for r in csv.DictReader(path.read_text().splitlines()) if r.get("pipeline") == "1"]
    try:
        values = [float(r["per_task_s"]) for r in rows]
    except (KeyError, ValueError):
        raise InputError(path, "per_task_s", "numbers (rows pipeline,tasks,elapsed_s,per_task_s)") from None
    if not values or not all(math.isfinite(v) and 0 <= v < 1 for v in values):
        raise InputError(path, "pipeline 1 rows", "at least one per-task time in seconds, finite, in [0, 1)")
    for g in data["gpus"]:
        g["task_overhead_s"] = {"value": statistics.median(values),
                                "source": f"{label}/gpu/task_overhead.csv: median per_task_s of the {len(values)} "
                                          "STARPU_CUDA_PIPELINE=1 runs (host time + a one-element kernel, GPU 0)"}


#: StarPU-SimGrid's cost of a pinned host allocation, 650 us per MiB (StarPU 1.4.10
#: src/datawizard/malloc.c _starpu_malloc_flags_on_node, SimGrid branch).
STARPU_SIMGRID_PINNED_S_PER_MIB = 650e-6


def _alloc_costs(data: dict, bundle: Path, label: str, missing: list[str]) -> None:
    """StarPU's allocation calls (docs/page-placement.md): cudaMalloc / cudaFree of one tile and
    cudaHostAlloc per MiB from gpu/cuda_bench.csv (the calibration's cuda-alloc step), at its
    largest tile (the study's b: cudaHostAlloc's cost per MiB falls with the size, 628 us/MiB at
    b = 480 against 363 at b = 960 on an H100 node, bench/data/gpu-device-h100); without a hostalloc
    row the pinned cost is StarPU-SimGrid's constant."""
    if not data["gpus"]:
        return
    path = bundle / "gpu" / "cuda_bench.csv"
    rows: dict[str, dict[int, float]] = {}
    if path.is_file():
        for r in csv.DictReader(path.read_text().splitlines()):
            if r.get("what") == "what":  # the header of a further invocation
                continue
            try:
                size, median = int(r["bytes"]), float(r["median_s"])
            except (KeyError, TypeError, ValueError):
                raise InputError(path, "bytes/median_s", "numbers (rows what,bytes,reps,median_s,min_s,max_s)") from None
            if size <= 0 or not (math.isfinite(median) and 0 <= median < 1):
                raise InputError(path, f"{r['what']} row", "bytes > 0 and a median in seconds, finite, in [0, 1)")
            rows.setdefault(r["what"], {})[size] = median
    else:
        missing.append("gpus[].malloc_s, free_s: no gpu/cuda_bench.csv (the calibration's cuda-alloc step)")
    for g in data["gpus"]:
        for key, what in (("malloc_s", "malloc"), ("free_s", "free")):
            if rows.get(what):
                size = max(rows[what])
                g[key] = {"value": rows[what][size],
                          "source": f"{label}/gpu/cuda_bench.csv: {what} row of {size} bytes (median, GPU 0)"}
        if rows.get("hostalloc"):
            size = max(rows["hostalloc"])
            g["pinned_alloc_s_per_mib"] = {
                "value": rows["hostalloc"][size] / (size / 1048576),
                "derived": f"{label}/gpu/cuda_bench.csv: hostalloc row (cudaHostAlloc, median) of {size} bytes / "
                           f"{size / 1048576:.3f} MiB"}
        else:
            g["pinned_alloc_s_per_mib"] = {
                "value": STARPU_SIMGRID_PINNED_S_PER_MIB,
                "derived": "StarPU-SimGrid's 650 us per MiB (StarPU 1.4.10 src/datawizard/malloc.c "
                           "_starpu_malloc_flags_on_node, SimGrid branch): no hostalloc row in the bundle",
                "needs_calibration": True}


def _network(data: dict, bundle: Path, label: str, missing: list[str]) -> None:
    path = bundle / "network" / "pingpong.json"
    why = "no two-host ping-pong in the bundle (network/pingpong.json)"
    if path.is_file():
        pp = json.loads(path.read_text())
        if not pp.get("loopback") and pp.get("bandwidth_Bps"):
            data["nics"][0]["bandwidth_Bps"] = {
                "value": float(pp["bandwidth_Bps"]),
                "source": f"{label}/network/pingpong.json: bandwidth_Bps (MPI ping-pong {' <-> '.join(pp.get('hosts', []))})"}
            for j in range(1, len(data["nics"])):
                missing.append(f"nics[{j}].bandwidth_Bps: the ping-pong measures one path (nics[0])")
            return
        if pp.get("loopback"):
            why = "network/pingpong.json measured loopback (both ranks on one host), not the NIC"
    missing.append(f"nics[0].bandwidth_Bps: {why}")
    for j in range(1, len(data["nics"])):
        missing.append(f"nics[{j}].bandwidth_Bps: the ping-pong measures one path (nics[0])")


def _remote_spread(bundle: Path, label: str) -> dict[str, dict]:
    """Per kernel, how much more a remote cell varies than the local one with every core busy:
    the mean over thread nodes T and data nodes D != T of rel_std(T, D) / rel_std(T, T), at the
    kernel's largest tile size (numa/raw/<kernel>-b<b>-all.csv). One NUMA node: nothing."""
    out: dict[str, dict] = {}
    best: dict[str, tuple[int, Path]] = {}
    for path in (bundle / "numa" / "raw").glob("*-all.csv"):
        kernel, b = path.stem.removesuffix("-all").rsplit("-b", 1)
        if int(b) > best.get(kernel, (0, path))[0]:
            best[kernel] = (int(b), path)
    for kernel, (_, path) in sorted(best.items()):
        cells = {(int(r["thread_node"]), int(r["data_node"])): float(r["rel_std"]) for r in _read_csv(path)}
        ratios = [v / cells[(t, t)] for (t, d), v in cells.items() if t != d and cells.get((t, t), 0) > 0]
        if ratios:
            out[f"variability_remote_{kernel}"] = {
                "value": float(f"{sum(ratios) / len(ratios):.4g}"),
                "derived": f"{label}/numa/raw/{path.name}: mean over the remote cells (T, D != T) of "
                           f"rel_std(T, D) / rel_std(T, T) ({len(ratios)} cells, every core busy)"}
    return out


def _numa_factors(bundle: Path, label: str) -> dict[str, dict]:
    """Remote-access factor matrices [thread node][data node] of the NUMA microbenchmarks."""
    out: dict[str, dict] = _remote_spread(bundle, label)
    for path in sorted((bundle / "numa").glob("matrix-*.csv")):
        rows = [r for r in _read_csv(path) if r["quantity"] == "factor"]
        if not rows:
            continue
        cols = [c for c in rows[0] if c.startswith("data_node_")]
        try:
            matrix = [[float(r[c]) for c in cols] for r in sorted(rows, key=lambda r: int(r["thread_node"]))]
        except ValueError:
            continue  # a cell was not measured
        key = "factor_" + path.stem.removeprefix("matrix-").replace("-", "_")
        out[key] = {"value": matrix, "source": f"{label}/numa/{path.name}: rows quantity=factor "
                                               "(median time / local median; [thread node][data node])"}
    return out


def _idle_latency_ratio(data: dict, t: int, d: int) -> float | None:
    """numasim's idle route latency from node d's memory to a core of node t over that of t's own
    memory (memory latency of d + the direct inter-socket link's, over t's memory latency);
    None without a direct link."""
    link = next((lk for lk in data["inter_socket_links"] if sorted(lk["numa_nodes"]) == sorted((t, d))), None)
    if link is None:
        return None
    local = float(data["numa_nodes"][t]["memory_latency_s"]["value"])
    remote = float(data["numa_nodes"][d]["memory_latency_s"]["value"]) + float(link["latency_s"]["value"])
    return remote / local if local > 0 else None


def _remote_penalty(data: dict, bundle: Path, label: str) -> dict[str, dict]:
    """The measured remote BLAS 3 penalty (numa/remote_penalty.csv) and the stall fraction it gives.

    P = remote / local median call time, every core busy, mean over the ordered pairs of nodes.
    numasim stretches a kernel by 1 + sigma (rho - 1), rho its byte-weighted latency ratio
    (docs/memory-model.md); a description derived from a bundle has no loaded-latency curve (no
    microbenchmark measures one), so a fully remote kernel has rho = its idle route-latency ratio
    and sigma = (P - 1) / (rho - 1) reproduces the measured P, load included. The cells with
    concurrent GPU copies are kept as measured (`remote_penalty_<k>_b<b>_gpu_copies`): numasim
    adds the copies' load through its controller model, not through sigma."""
    path = bundle / "numa" / "remote_penalty.csv"
    if not path.is_file():
        return {}
    rows = _read_csv(path)
    need = {"kernel", "b", "copies", "thread_node", "data_node", "penalty"}
    if rows and not need <= set(rows[0]):
        raise InputError(path, "header", f"the columns of numa_bench penalty ({', '.join(sorted(need))})")
    out: dict[str, dict] = {}
    groups: dict[tuple[str, int, str], list[tuple[int, int, float]]] = {}
    for i, r in enumerate(rows, start=2):
        try:
            cell = (int(r["thread_node"]), int(r["data_node"]), float(r["penalty"]))
            key = (r["kernel"], int(r["b"]), r["copies"])
        except (TypeError, ValueError):
            raise InputError(path, f"line {i}", "numbers in thread_node, data_node, b and penalty") from None
        if not (math.isfinite(cell[2]) and cell[2] > 0) or r["copies"] not in ("none", "gpu") or \
                not r["kernel"].replace("_", "").isalnum():
            raise InputError(path, f"line {i}", "a kernel name, copies none|gpu and a positive finite penalty")
        if not all(0 <= n < len(data["numa_nodes"]) for n in cell[:2]) or cell[0] == cell[1]:
            raise InputError(path, f"line {i}", f"two different NUMA nodes of the bundle (0..{len(data['numa_nodes']) - 1})")
        groups.setdefault(key, []).append(cell)
    for (kernel, b, copies), cells in sorted(groups.items()):
        mean_p = sum(p for _, _, p in cells) / len(cells)
        suffix = "" if copies == "none" else "_gpu_copies"
        what = "every core busy" + ("" if copies == "none" else ", every GPU copying to and from the data's node")
        out[f"remote_penalty_{kernel}_b{b}{suffix}"] = {
            "value": float(f"{mean_p:.5g}"),
            "source": f"{label}/numa/remote_penalty.csv: mean penalty (remote / local median call time) of the "
                      f"{len(cells)} rows kernel {kernel}, b {b}, copies {copies} ({what})"}
        if copies != "none":
            continue
        sigmas, rhos = [], []
        for t, d, p in cells:
            rho = _idle_latency_ratio(data, t, d)
            if rho is not None and rho > 1:
                sigmas.append(min(1.0, max(0.0, (p - 1) / (rho - 1))))
                rhos.append(rho)
        if sigmas:
            sigma = sum(sigmas) / len(sigmas)
            out[f"stall_fraction_{kernel}"] = {
                "value": float(f"{sigma:.4g}"),
                "derived": f"(P - 1) / (rho - 1) averaged over {len(sigmas)} node pairs, clipped to [0, 1]: P the "
                           f"measured penalty (remote_penalty_{kernel}_b{b}, {label}/numa/remote_penalty.csv), rho "
                           f"= {sum(rhos) / len(rhos):.4g} this description's idle route-latency ratio (memory_latency_s "
                           "of the data's node + inter-socket latency_s, over the thread node's memory_latency_s); "
                           "with no loaded-latency curve in this description, numasim then reproduces P for a fully "
                           "remote kernel (docs/blas3-remote-penalty.md)"}
    return out


def render(data: dict, missing: list[str], bundle_label: str) -> str:
    header = (f"# Generated by `testbed platform --from-calibration {bundle_label}`; regenerate rather than edit.\n"
              "# Every value cites the bundle; needs_calibration: true marks what the bundle did not measure:\n")
    header += "".join(f"#   {m}\n" for m in missing) or "#   (nothing)\n"
    return header + yaml.safe_dump(data, sort_keys=False, width=200)


def write_machine(bundle: Path, out: Path) -> list[str]:
    """Write the machine description of `bundle` to `out` (named after the file, as
    load_machine requires), validated before it replaces anything; returns what is missing."""
    import re

    from testbed.common.atomic import atomic_file
    from testbed.describe.machines import parse_machine

    name = out.stem
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
        raise InputError(out, "name", f"a file named like a machine (letters, digits, _), got {name!r}")
    data, missing = machine_from_bundle(bundle, name)
    parse_machine(data, out)  # schema, sources and cross references: fail before writing
    with atomic_file(out) as fh:
        fh.write(render(data, missing, label_of(bundle)))
    return missing
