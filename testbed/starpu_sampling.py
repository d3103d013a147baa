"""StarPU-SimGrid inputs: sampling directories (bus files + codelet models), cluster XML, hostfile.

StarPU in SimGrid mode has no hwloc: one RAM memory node, CPU workers `CPU<i>` and CUDA
workers `CUDA<j>` read from `bus/<host>.platform.v4.xml`, transfer estimates from
`bus/<host>.{bandwidth,latency}` indexed [RAM, CUDA0, CUDA1, ...] (src/core/topology.c,
src/core/perfmodel/perfmodel_bus.c). The files below follow the formats StarPU 1.4.10
writes in perfmodel_bus.c (write_bus_*_file_content, write_bus_platform_file_content,
flat-route variant) so that StarPU reads them without recalibrating.

Kernel times come from the machine's calibration bundle (`kernels:` in the machine YAML,
`<bundle>/kernels.yaml`): time(b) = time_s * (b / reference_tile) ** exponent.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path


from testbed.errors import InputError
from testbed.yaml_input import load_yaml
from testbed.machines import Cluster, Machine, check_range, quantity_range
from testbed.perfmodel_files import ArchModel, HistoryEntry, square_tiles_footprint, write_model

#: Chameleon's LU codelet symbols and the number of b x b matrix buffers of their tasks
#: (compute/pzgetrf_nopiv.c: getrf_nopiv(A:RW), trsm(A:R, B:RW), gemm(A:R, B:R, C:RW),
#: plrnt(A:W)). The footprint of a task depends on that count.
LU_KERNELS: dict[str, int] = {"dgetrf_nopiv": 1, "dtrsm": 2, "dgemm": 3, "dplrnt": 1}
#: The perf-model symbol sets apps/lu can use (its --symbols; numasim's `symbols`):
#: set -> {task kind: (model symbol, buffers, gemm/trsm have a CUDA implementation)}.
#: getrf_nopiv runs on CUDA workers only with --getrf-gpu (RunSpec.getrf_on_gpu).
SYMBOL_SETS: dict[str, dict[str, tuple[str, int, bool]]] = {
    "chameleon": {
        "getrf": ("dgetrf_nopiv", 1, False),
        "trsm": ("dtrsm", 2, True),
        "gemm": ("dgemm", 3, True),
    },
    "starpu-lu": {
        "getrf": ("starpu_dlu_lu_model_getrf", 1, False),
        "trsm_ll": ("starpu_dlu_lu_model_trsm_ll", 2, True),
        "trsm_ru": ("starpu_dlu_lu_model_trsm_ru", 2, True),
        "gemm": ("starpu_dlu_lu_model_gemm", 3, True),
    },
}

FLOPS = {
    "dgetrf_nopiv": lambda b: 2.0 * b**3 / 3.0,
    "dtrsm": lambda b: float(b**3),
    "dgemm": lambda b: 2.0 * b**3,
    "dplrnt": lambda b: 0.0,
}
#: Tile sizes written into the history models (StarPU looks entries up by exact footprint).
DEFAULT_TILE_SIZES = (64, 128, 192, 256, 320, 384, 480, 512, 640, 768, 960, 1024, 1280, 1920, 2048)
#: Pseudo sample count of a derived entry: above STARPU_CALIBRATE_MINIMUM (10) so that StarPU
#: takes the entry as calibrated; sum and sum2 are consistent with mean and deviation.
NSAMPLE = 100
#: Speed StarPU writes for CPU/CUDA hosts of a bus platform (durations come from the models).
STARPU_HOST_SPEED = "2000000000f"


@dataclass(frozen=True)
class KernelTiming:
    time_s: float
    reference_tile: int
    exponent: float
    rel_std: float

    def mean_s(self, b: int) -> float:
        return self.time_s * (b / self.reference_tile) ** self.exponent


def load_bundle(machine: Machine) -> dict[str, dict[str, KernelTiming]]:
    """kernel -> arch ('cpu'/'cuda') -> timing, from the machine's calibration bundle."""
    if machine.kernels is None:
        raise InputError(machine.path, "kernels", "a calibration bundle (directory with kernels.yaml)")
    file = machine.kernels / "kernels.yaml"
    data = load_yaml(file)
    if not isinstance(data, dict) or not isinstance(data.get("kernels"), dict):
        raise InputError(file, "kernels", "a mapping kernel -> arch -> timing")
    ref = data.get("reference_tile")
    if not isinstance(ref, int) or ref <= 0:
        raise InputError(file, "reference_tile", f"a positive tile size, got {ref!r}")
    out: dict[str, dict[str, KernelTiming]] = {}
    for kernel, archs in data["kernels"].items():
        for arch, t in archs.items():
            if arch == "flops":
                continue
            if arch not in ("cpu", "cuda"):
                raise InputError(file, f"kernels.{kernel}.{arch}", "arch cpu or cuda")
            try:
                timing = KernelTiming(float(t["time_s"]["value"]), ref, float(t["exponent"]["value"]),
                                      float(t["rel_std"]["value"]))
            except (KeyError, TypeError, ValueError):
                raise InputError(file, f"kernels.{kernel}.{arch}",
                                 "time_s, exponent, rel_std as {value, source|derived}") from None
            if timing.time_s <= 0 or timing.rel_std < 0:
                raise InputError(file, f"kernels.{kernel}.{arch}", "time_s > 0 and rel_std >= 0")
            for name in ("time_s", "exponent", "rel_std"):
                check_range(file, f"kernels.{kernel}.{arch}.{name}", t[name], positive=name == "time_s")
                if name == "rel_std" and (quantity_range(t[name]) or (0.0, 0.0))[0] < 0:
                    raise InputError(file, f"kernels.{kernel}.{arch}.rel_std", "an uncertainty range with bounds >= 0")
            out.setdefault(kernel, {})[arch] = timing
    for kernel in LU_KERNELS:
        if "cpu" not in out.get(kernel, {}):
            raise InputError(file, f"kernels.{kernel}.cpu", "a CPU timing for every LU kernel")
    return out


def codelet_models(machine: Machine, tile_sizes: tuple[int, ...] = DEFAULT_TILE_SIZES) -> dict[str, list[ArchModel]]:
    """symbol -> combinations (CPU comb, then one per CUDA device) of that machine's models."""
    bundle = load_bundle(machine)
    models: dict[str, list[ArchModel]] = {}
    for symbol, nbuf in LU_KERNELS.items():
        combs = []
        archs = bundle[symbol]
        devices = [("cpu", 0, archs["cpu"])]
        if "cuda" in archs:
            devices += [("cuda", g.index, archs["cuda"]) for g in machine.gpus]
        for device, devid, timing in devices:
            entries = []
            for b in tile_sizes:
                mean_us = timing.mean_s(b) * 1e6
                entries.append(HistoryEntry(footprint=square_tiles_footprint(b, nbuf), size=nbuf * b * b * 8,
                                            flops=FLOPS[symbol](b), mean_us=mean_us,
                                            dev_us=mean_us * timing.rel_std, nsample=NSAMPLE))
            combs.append(ArchModel(device, devid, entries))
        models[symbol] = combs
    return models


# --------------------------------------------------------------------------- bus files


def _nodes(machine: Machine) -> list[tuple[str, int]]:
    """StarPU-SimGrid memory nodes: the single RAM node, then CUDA devices."""
    return [("NUMA", 0)] + [("CUDA", g.index) for g in machine.gpus]


def bus_matrices(machine: Machine) -> tuple[list[list[float]], list[list[float]]]:
    """(bandwidth MB/s, latency us) between memory nodes [RAM, CUDA0, ...]."""
    nodes = _nodes(machine)
    n = len(nodes)
    bw = [[0.0] * n for _ in range(n)]
    lat = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            (ki, di), (kj, dj) = nodes[i], nodes[j]
            if ki == "NUMA" or kj == "NUMA":
                g = machine.gpus[dj if kj == "CUDA" else di]
                b, l = g.pcie_bandwidth_Bps, g.pcie_latency_s
            else:
                b, l = gpu_to_gpu(machine, di, dj)
            bw[i][j] = b / 1e6
            lat[i][j] = l * 1e6
    return bw, lat


def gpu_to_gpu(machine: Machine, a: int, b: int) -> tuple[float, float]:
    """GPU-GPU copy (B/s, s): the machine's gpu_peer figures, else through both PCIe links."""
    ga, gb = machine.gpus[a], machine.gpus[b]
    key = "same_numa" if ga.numa_node == gb.numa_node else "cross_numa"
    if key in machine.gpu_peer:
        return machine.gpu_peer[key].bandwidth_Bps, machine.gpu_peer[key].latency_s
    return min(ga.pcie_bandwidth_Bps, gb.pcie_bandwidth_Bps), ga.pcie_latency_s + gb.pcie_latency_s


#: Matrix size StarPU writes (STARPU_MAXNODES of the builds in .deps). StarPU's reader drops
#: the last value of each row (it stores a value only when a tab follows it), so the matrix
#: must be padded with NaN as StarPU pads it; any build with STARPU_MAXNODES > nodes reads it.
STARPU_MAXNODES = 32


def _matrix_text(nodes: list[tuple[str, int]], m: list[list[float]]) -> str:
    head = "# " + "".join(f"to {k} {d}\t" for k, d in nodes) + "\n"
    n = len(m)
    size = max(STARPU_MAXNODES, n + 1)
    rows = []
    for i in range(size):
        vals = [m[i][j] if i < n and j < n else float("nan") for j in range(size)]
        rows.append("\t".join("nan" if v != v else f"{v:e}" for v in vals) + "\n")
    return head + "".join(rows)


def affinity_text(machine: Machine) -> str:
    """GPU -> NUMA nodes by preference (own node first, then by latency), as StarPU writes it."""
    nn = len(machine.numa_nodes)
    out = "# GPU\t" + "".join(f"NUMA{k}\t" for k in range(nn)) + "\n"
    for g in machine.gpus:
        order = sorted(range(nn), key=lambda k: (k != g.numa_node, _numa_hops(machine, g.numa_node, k), k))
        out += f"{g.index}\t" + "".join(f"{k}\t" for k in order) + "\n"
    return out


def _numa_hops(machine: Machine, a: int, b: int) -> int:
    dist = {a: 0}
    frontier = [a]
    while frontier:
        nxt = []
        for x in frontier:
            for link in machine.inter_socket_links:
                u, v = link.numa_nodes
                for s, t in ((u, v), (v, u)):
                    if s == x and t not in dist:
                        dist[t] = dist[x] + 1
                        nxt.append(t)
        frontier = nxt
    return dist.get(b, len(machine.numa_nodes))


def config_text(machine: Machine) -> str:
    return ("# Current configuration\n"
            f"{machine.ncores} # Number of CPUs\n"
            "1 # Number of NUMA nodes\n"
            f"{len(machine.gpus)} # Number of CUDA nodes\n"
            "0 # Number of OpenCL nodes\n")


def platform_v4_text(machine: Machine) -> str:
    """bus/<host>.platform.v4.xml as StarPU writes it without hwloc PCI data (flat routes)."""
    bw, lat = bus_matrices(machine)
    lines = [
        "<?xml version='1.0'?>",
        "<!DOCTYPE platform SYSTEM 'http://simgrid.gforge.inria.fr/simgrid/simgrid.dtd'>",
        ' <platform version="4">',
        ' <config id="General">',
        '   <prop id="network/TCP-gamma" value="-1"></prop>',
        '   <prop id="network/latency-factor" value="1"></prop>',
        '   <prop id="network/bandwidth-factor" value="1"></prop>',
        '   <prop id="network/crosstraffic" value="0"></prop>',
        '   <prop id="network/weight-S" value="0.0"></prop>',
        " </config>",
        ' <AS  id="AS0"  routing="Full">',
        '   <host id="MAIN" speed="1f"/>',
    ]
    lines += [f'   <host id="CPU{i}" speed="{STARPU_HOST_SPEED}"/>' for i in range(machine.ncores)]
    for g in machine.gpus:
        lines += [f'   <host id="CUDA{g.index}" speed="{STARPU_HOST_SPEED}">',
                  f'     <prop id="model" value="{g.model}"/>',
                  f'     <prop id="memsize" value="{g.memory_bytes}"/>',
                  '     <prop id="memcpy_peer" value="1"/>',
                  "   </host>"]
    lines += ["", '   <host id="RAM" speed="1f"/>']
    max_bw = max([bw[0][j] for j in range(1, len(bw))] + [bw[j][0] for j in range(1, len(bw))], default=0.0)
    lines.append(f'   <link id="NUMA0" bandwidth="{max_bw * 1e6:f}Bps" latency="0.000000s"/>')
    lines.append(f'   <link id="Interconnect" bandwidth="{max_bw * 1e6:f}Bps" latency="0.000000s"/>')
    lines.append("")
    for g in machine.gpus:
        j = g.index + 1
        lines.append(f'   <link id="RAM-CUDA{g.index}" bandwidth="{bw[0][j] * 1e6:f}Bps" latency="{lat[0][j] / 1e6:f}s"/>')
        lines.append(f'   <link id="CUDA{g.index}-RAM" bandwidth="{bw[j][0] * 1e6:f}Bps" latency="{lat[j][0] / 1e6:f}s"/>')
    lines.append("")
    for a in machine.gpus:
        for b in machine.gpus:
            if a.index != b.index:
                i, j = a.index + 1, b.index + 1
                lines.append(f'   <link id="CUDA{a.index}-CUDA{b.index}" bandwidth="{bw[i][j] * 1e6:f}Bps" '
                             f'latency="{lat[i][j] / 1e6:f}s"/>')
    for g in machine.gpus:
        for src, dst, link in (("RAM", f"CUDA{g.index}", f"RAM-CUDA{g.index}"), (f"CUDA{g.index}", "RAM", f"CUDA{g.index}-RAM")):
            lines += [f'   <route src="{src}" dst="{dst}" symmetrical="NO">',
                      f'      <link_ctn id="{link}"/>', '      <link_ctn id="Interconnect"/>', "   </route>"]
    for a in machine.gpus:
        for b in machine.gpus:
            if a.index != b.index:
                lines += [f'   <route src="CUDA{a.index}" dst="CUDA{b.index}" symmetrical="NO">',
                          f'     <link_ctn id="CUDA{a.index}-CUDA{b.index}"/>', '     <link_ctn id="Interconnect"/>',
                          "   </route>"]
    lines += ["", " </AS>", " </platform>"]
    return "\n".join(lines) + "\n"


def write_sampling_dir(machine: Machine, sampling: Path, tile_sizes: tuple[int, ...] = DEFAULT_TILE_SIZES) -> None:
    """<sampling>/bus/<machine>.* and <sampling>/codelets/45/<symbol>.<machine>."""
    bus = sampling / "bus"
    codelets = sampling / "codelets" / "45"
    bus.mkdir(parents=True, exist_ok=True)
    codelets.mkdir(parents=True, exist_ok=True)
    nodes = _nodes(machine)
    bw, lat = bus_matrices(machine)
    host = machine.name
    (bus / f"{host}.bandwidth").write_text(_matrix_text(nodes, bw))
    (bus / f"{host}.latency").write_text(_matrix_text(nodes, lat))
    (bus / f"{host}.affinity").write_text(affinity_text(machine))
    (bus / f"{host}.config").write_text(config_text(machine))
    (bus / f"{host}.platform.v4.xml").write_text(platform_v4_text(machine))
    for symbol, combs in codelet_models(machine, tile_sizes).items():
        write_model(codelets / f"{symbol}.{host}", combs)


BUS_SUFFIXES = ("bandwidth", "latency", "affinity", "config", "platform.v4.xml")


def copy_as_host(src_sampling: Path, machine: str, dst_sampling: Path, host: str) -> None:
    """Copy a machine type's files under another host name (StarPU finds files by host name)."""
    (dst_sampling / "bus").mkdir(parents=True, exist_ok=True)
    (dst_sampling / "codelets" / "45").mkdir(parents=True, exist_ok=True)
    for suffix in BUS_SUFFIXES:
        shutil.copyfile(src_sampling / "bus" / f"{machine}.{suffix}", dst_sampling / "bus" / f"{host}.{suffix}")
    for symbol in LU_KERNELS:
        shutil.copyfile(src_sampling / "codelets" / "45" / f"{symbol}.{machine}",
                        dst_sampling / "codelets" / "45" / f"{symbol}.{host}")


def cluster_xml_text(cluster: Cluster) -> str:
    """MPI-level platform for `starpu_smpirun -platform`: one host per node, NIC links, one switch.

    starpu_smpirun drops the first two lines and the <platform> lines, and wraps the rest
    with the per-node StarPU zones (tools/starpu_smpirun.in), hence the fixed layout.
    """
    net = cluster.network
    lines = ["<?xml version='1.0'?>",
             "<!DOCTYPE platform SYSTEM 'http://simgrid.gforge.inria.fr/simgrid/simgrid.dtd'>",
             '<platform version="4">',
             f' <AS id="{cluster.name}" routing="Full">']
    for node in cluster.nodes:
        lines.append(f'  <host id="{node.name}" speed="1Gf"/>')
    for node in cluster.nodes:
        bw = min(node.machine.nics[0].bandwidth_Bps, net.link_bandwidth_Bps)
        lines.append(f'  <link id="{node.name}.eth" bandwidth="{bw:.10g}Bps" latency="{net.link_latency_s:.10g}s"/>')
    lines.append(f'  <link id="{cluster.name}.switch" bandwidth="{net.switch_bandwidth_Bps:.10g}Bps" '
                 f'latency="{net.switch_latency_s:.10g}s" sharing_policy="FATPIPE"/>')
    for i, a in enumerate(cluster.nodes):
        for b in cluster.nodes[i + 1:]:
            lines += [f'  <route src="{a.name}" dst="{b.name}">',
                      f'   <link_ctn id="{a.name}.eth"/><link_ctn id="{cluster.name}.switch"/><link_ctn id="{b.name}.eth"/>',
                      "  </route>"]
    lines += [" </AS>", "</platform>"]
    return "\n".join(lines) + "\n"


def write_starpu_dir(cluster: Cluster, out: Path, tile_sizes: tuple[int, ...] = DEFAULT_TILE_SIZES) -> None:
    """<out>/<machine>/sampling per machine type, <out>/sampling for all nodes, cluster.xml, hostfile."""
    for name, machine in cluster.machines.items():
        write_sampling_dir(machine, out / name / "sampling", tile_sizes)
    combined = out / "sampling"
    for name in cluster.machines:
        copy_as_host(out / name / "sampling", name, combined, name)
    for node in cluster.nodes:
        copy_as_host(out / node.machine.name / "sampling", node.machine.name, combined, node.name)
    (out / "cluster.xml").write_text(cluster_xml_text(cluster))
    (out / "hostfile").write_text("".join(f"{node.name}\n" for node in cluster.nodes))


def detect_symbols(sampling: Path, machine: str, default: str | None = None) -> str:
    """The symbol set whose models are all in `sampling`; else `default` (the simulator then
    names the missing file), or an InputError listing what was expected."""
    models = sampling / "codelets" / "45"
    for name, kinds in SYMBOL_SETS.items():
        if all((models / f"{sym}.{machine}").is_file() for sym, _, _ in kinds.values()):
            return name
    if default is not None:
        return default
    expected = " or ".join(
        ", ".join(f"{sym}.{machine}" for sym, _, _ in kinds.values()) for kinds in SYMBOL_SETS.values())
    raise InputError(models, "codelet models", f"{expected} (calibrate the machine first)")


def numasim_symbols(symbols: str) -> dict[str, str]:
    """numasim's `symbols` object (docs/interfaces.md §4) for a symbol set: the row and column
    trsm have their own models in StarPU's LU example (trsm_ll, trsm_ru), one in Chameleon."""
    kinds = SYMBOL_SETS[symbols]
    out = {"getrf": kinds["getrf"][0], "gemm": kinds["gemm"][0]}
    if "trsm" in kinds:
        out["trsm"] = kinds["trsm"][0]
    else:
        out["trsm_row"], out["trsm_col"] = kinds["trsm_ll"][0], kinds["trsm_ru"][0]
    return out
