"""StarPU's bus files (sampling/bus/<host>.*): one reader and one writer per format.

Formats of StarPU 1.4.10, src/core/perfmodel/perfmodel_bus.c: `<host>.bandwidth` and
`<host>.latency` (write_bus_bandwidth_file_content, write_bus_latency_file_content: a
`# to <kind> <id>` header, then STARPU_MAXNODES rows padded with nan; MB/s and us between
memory nodes [RAM, CUDA0, CUDA1, ...] in SimGrid mode), `<host>.affinity` (GPU -> NUMA nodes
by preference), `<host>.config` (device counts) and `<host>.platform.v4.xml`
(write_bus_platform_file_content, flat-route variant: the SimGrid platform StarPU-SimGrid
loads). The writers describe a machine (testbed.describe.machines.Machine) so that StarPU
reads the files without recalibrating; the readers take files StarPU wrote.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.common.errors import InputError
from testbed.common.simgrid_xml import check_simgrid_platform

if TYPE_CHECKING:
    from testbed.describe.machines import Machine

#: Every file of a host that StarPU's bus calibration may write.
BUS_SUFFIXES = ("affinity", "bandwidth", "config", "latency", "platform.xml", "platform.v4.xml")
#: The files written for a described machine (write_bus_files).
WRITTEN_SUFFIXES = ("bandwidth", "latency", "affinity", "config", "platform.v4.xml")
#: Speed StarPU writes for CPU/CUDA hosts of a bus platform (durations come from the models).
STARPU_HOST_SPEED = "2000000000f"


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
                bandwidth, latency = g.pcie_bandwidth_Bps, g.pcie_latency_s
            else:
                bandwidth, latency = gpu_to_gpu(machine, di, dj)
            bw[i][j] = bandwidth / 1e6
            lat[i][j] = latency * 1e6
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


def write_bus_files(machine: Machine, bus: Path) -> None:
    """bus/<machine>.{bandwidth,latency,affinity,config,platform.v4.xml} of a described machine."""
    nodes = _nodes(machine)
    bw, lat = bus_matrices(machine)
    host = machine.name
    (bus / f"{host}.bandwidth").write_text(_matrix_text(nodes, bw))
    (bus / f"{host}.latency").write_text(_matrix_text(nodes, lat))
    (bus / f"{host}.affinity").write_text(affinity_text(machine))
    (bus / f"{host}.config").write_text(config_text(machine))
    (bus / f"{host}.platform.v4.xml").write_text(platform_v4_text(machine))


# --------------------------------------------------------------------------- readers


def _text(path: Path) -> str:
    from testbed.common.inputs import MODEL_BYTES, read_input_bytes

    data = read_input_bytes(path, None, "a StarPU bus file", MODEL_BYTES)
    try:
        return data.decode()
    except UnicodeDecodeError as e:
        raise InputError(path, f"byte {e.start}", "UTF-8 text (a StarPU bus file)") from None


def read_bus_matrix(path: Path) -> tuple[list[str], list[list[float]]]:
    """(memory node names, matrix) of a StarPU bandwidth or latency file: a
    `# to NUMA 0\tto CUDA 0\t...` header, then a square matrix padded with nan (StarPU reads
    every row: perfmodel_bus.c load_bus_bandwidth_file_content). Every value is nan (StarPU's "not
    measured" and padding) or a finite number >= 0; every row as long as the matrix is tall."""
    lines = _text(path).splitlines()
    if not lines or not lines[0].startswith("#"):
        raise InputError(path, "header", "StarPU's `# to <kind> <id>` header line")
    names = [t.strip().removeprefix("to ").strip() for t in lines[0][1:].split("\t") if t.strip()]
    rows = []
    for k, line in enumerate(lines[1:], start=2):
        if line.startswith("#") or not line.strip():
            continue
        try:
            row = [float(v) for v in line.split()]
        except ValueError:
            raise InputError(path, f"line {k}", "tab-separated numbers (MB/s or us) or nan") from None
        if len(row) < len(names) or (rows and len(row) != len(rows[0])) or any(math.isinf(v) or v < 0 for v in row):
            raise InputError(path, f"line {k}", f"{len(rows[0]) if rows else 'as many'} values as the other rows "
                                                f"(at least {len(names)}), each nan or finite and >= 0")
        rows.append(row)
    if len(rows) < len(names) or len(rows) != len(rows[0]):
        raise InputError(path, "matrix", f"a square matrix of at least {len(names)} rows, one per memory node")
    return names, [row[: len(names)] for row in rows[: len(names)]]


def check_bus_files(sampling_dir: str | Path, host: str) -> dict[str, int]:
    """Everything StarPU-SimGrid reads from sampling/bus for `host`, checked before it does (it
    aborts on a damaged file); returns the `.config` device counts."""
    bus = Path(sampling_dir) / "bus"
    devices = read_bus_config(sampling_dir, host)
    for suffix in ("bandwidth", "latency"):
        if (bus / f"{host}.{suffix}").is_file():
            read_bus_matrix(bus / f"{host}.{suffix}")
    affinity = bus / f"{host}.affinity"
    if affinity.is_file():
        for k, line in enumerate(_text(affinity).splitlines(), start=1):
            if line.strip() and not line.startswith("#") and not all(t.isdigit() for t in line.split()):
                raise InputError(affinity, f"line {k}", "non-negative integers (a GPU and its NUMA nodes by preference)")
    platform = bus / f"{host}.platform.v4.xml"
    if platform.is_file():  # the hosts StarPU-SimGrid looks up (src/core/simgrid.c)
        check_simgrid_platform(platform, {"MAIN", "RAM", *(f"CPU{i}" for i in range(devices["cpus"])),
                                          *(f"CUDA{i}" for i in range(devices["cuda"]))})
    return devices


def read_bus_config(sampling_dir: str | Path, host: str) -> dict[str, int]:
    """Device counts of a StarPU bus `.config` file: {"cpus": .., "cuda": ..}."""
    path = Path(sampling_dir) / "bus" / f"{host}.config"
    if not path.is_file():
        raise InputError(path, "file", "a StarPU bus config file (sampling/bus/<host>.config)")
    values: dict[str, int] = {}
    for k, line in enumerate(_text(path).splitlines(), start=1):
        if "#" not in line or not line.split("#", 1)[0].strip():
            continue
        value, label = line.split("#", 1)
        label = label.strip().lower()
        if not value.strip().isdigit() or int(value) > 4096:
            raise InputError(path, f"line {k}", "'<count> # <device kind>', a count from 0 to 4096")
        if label.startswith("number of cpus"):
            values["cpus"] = int(value)
        elif label.startswith("number of cuda"):
            values["cuda"] = int(value)
    if "cpus" not in values:
        raise InputError(path, "Number of CPUs", "a line '<n> # Number of CPUs'")
    values.setdefault("cuda", 0)
    return values
