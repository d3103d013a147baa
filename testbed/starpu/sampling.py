"""StarPU-SimGrid inputs: sampling directories (bus files + codelet models), cluster XML, hostfile.

StarPU in SimGrid mode has no hwloc: one RAM memory node, CPU workers `CPU<i>` and CUDA
workers `CUDA<j>` read from `bus/<host>.platform.v4.xml`, transfer estimates from
`bus/<host>.{bandwidth,latency}` indexed [RAM, CUDA0, CUDA1, ...] (src/core/topology.c,
src/core/perfmodel/perfmodel_bus.c). The bus files are written by testbed/starpu/bus_files.py,
the codelet models by testbed/starpu/perfmodel_files.py, both in the formats StarPU 1.4.10
writes, so that StarPU reads them without recalibrating.

Kernel times come from the machine's calibration bundle (`kernels:` in the machine YAML,
`<bundle>/kernels.yaml`): time(b) = time_s * (b / reference_tile) ** exponent.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from testbed.common.errors import InputError
from testbed.common.yaml_input import load_yaml
from testbed.describe.machines import Cluster, Machine, check_range, quantity_range
from testbed.starpu.bus_files import WRITTEN_SUFFIXES, write_bus_files
from testbed.starpu.lu_codelets import BY_SYMBOL, LU_KERNELS, SYMBOL_SETS
from testbed.starpu.perfmodel_files import ArchModel, HistoryEntry, square_tiles_footprint, write_model

#: Tile sizes written into the history models (StarPU looks entries up by exact footprint).
DEFAULT_TILE_SIZES = (64, 128, 192, 256, 320, 384, 480, 512, 640, 768, 960, 1024, 1280, 1920, 2048)
#: Pseudo sample count of a derived entry: above STARPU_CALIBRATE_MINIMUM (10) so that StarPU
#: takes the entry as calibrated; sum and sum2 are consistent with mean and deviation.
NSAMPLE = 100


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
                                            flops=BY_SYMBOL[symbol].flop_count(b), mean_us=mean_us,
                                            dev_us=mean_us * timing.rel_std, nsample=NSAMPLE))
            combs.append(ArchModel(device, devid, entries))
        models[symbol] = combs
    return models


def write_sampling_dir(machine: Machine, sampling: Path, tile_sizes: tuple[int, ...] = DEFAULT_TILE_SIZES) -> None:
    """<sampling>/bus/<machine>.* and <sampling>/codelets/45/<symbol>.<machine>."""
    bus = sampling / "bus"
    codelets = sampling / "codelets" / "45"
    bus.mkdir(parents=True, exist_ok=True)
    codelets.mkdir(parents=True, exist_ok=True)
    write_bus_files(machine, bus)
    host = machine.name
    for symbol, combs in codelet_models(machine, tile_sizes).items():
        write_model(codelets / f"{symbol}.{host}", combs)


def copy_as_host(src_sampling: Path, machine: str, dst_sampling: Path, host: str) -> None:
    """Copy a machine type's files under another host name (StarPU finds files by host name)."""
    (dst_sampling / "bus").mkdir(parents=True, exist_ok=True)
    (dst_sampling / "codelets" / "45").mkdir(parents=True, exist_ok=True)
    for suffix in WRITTEN_SUFFIXES:
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
    """<out>/<machine>/sampling per machine type, cluster.xml, hostfile.

    Only one sampling directory per machine type: the starpu-simgrid engine links the files
    under each hostfile name itself (testbed/run/engines/starpu_simgrid.py merged_sampling), and
    numasim reads them per machine type. (A copy of every file per node name, <out>/sampling,
    was once written and read by nothing.)"""
    for name, machine in cluster.machines.items():
        write_sampling_dir(machine, out / name / "sampling", tile_sizes)
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

