"""hwloc topology XML (format 2.0, as written by hwloc 2.x `lstopo --of xml`) of a machine.

Structure matched against `lstopo --of xml` output of hwloc 2.9 and its importer
(hwloc/topology-xml.c): Machine > Package > {NUMANode (memory child), L3Cache > Core > PU}
and, per NUMA node with devices, a host Bridge under that Package holding the PCI devices
(GPUs with a CUDA OS device, NICs with a network OS device), so that hwloc attaches each
device to the right NUMA node. PU OS indices follow Linux's numbering of hyper-threads:
thread t of core c is PU c + t * ncores.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from lxml import etree

from testbed.common.errors import InputError
from testbed.common.yaml_input import load_yaml
from testbed.describe.machines import Machine

log = logging.getLogger(__name__)

#: PCI vendor:device ids of known device models (cosmetic: lets lstopo print a name).
PCI_IDS = {
    "NVIDIA GeForce GTX 1080 Ti": "10de:1b06",
    "Intel 82599ES": "8086:10fb",
}


def bitmap(bits: set[int] | list[int]) -> str:
    """hwloc's bitmap string: 32-bit hex words, most significant first ("0x000000ff,0xffffffff")."""
    value = 0
    for b in bits:
        value |= 1 << b
    words = []
    while True:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
        if not value:
            break
    return ",".join(f"0x{w:08x}" for w in reversed(words))


class _Ids:
    def __init__(self) -> None:
        self.next = 1

    def __call__(self) -> str:
        self.next += 1
        return str(self.next - 1)


def _sets(el: etree._Element, pus: set[int], numas: set[int], allowed: bool = False) -> None:
    el.set("cpuset", bitmap(pus))
    el.set("complete_cpuset", bitmap(pus))
    if allowed:
        el.set("allowed_cpuset", bitmap(pus))
    el.set("nodeset", bitmap(numas))
    el.set("complete_nodeset", bitmap(numas))
    if allowed:
        el.set("allowed_nodeset", bitmap(numas))


def _info(el: etree._Element, name: str, value: object) -> None:
    etree.SubElement(el, "info", name=name, value=str(value))


def _pci_bridge(m: Machine, pkg: etree._Element, numa_index: int, pci_bus: int, gp: _Ids) -> int:
    """The PCI bridge of a package with the GPUs and NICs of its NUMA node; the next free bus."""
    gpus = [g for g in m.gpus if g.numa_node == numa_index]
    nics = [n for n in m.nics if n.numa_node == numa_index]
    if not gpus and not nics:
        return pci_bus
    first = pci_bus
    devices: list[tuple[str, str, float, str, dict[str, object], str]] = []
    for g in gpus:
        ids = PCI_IDS.get(g.model, "10de:0000" if "NVIDIA" in g.model else "0000:0000")
        devices.append(("0302" if "Tesla" in g.model else "0300", ids, g.pcie_bandwidth_Bps, f"cuda{g.index}",
                        {"Backend": "CUDA", "GPUVendor": "NVIDIA Corporation", "GPUModel": g.model,
                         "CUDAGlobalMemorySize": g.memory_bytes // 1024}, "5"))
    for n in nics:
        devices.append(("0200", PCI_IDS.get(n.model, "0000:0000"), n.pcie_bandwidth_Bps, n.name,
                        {"Backend": "testbed"}, "2"))
    last = first + len(devices) - 1
    bridge = etree.SubElement(pkg, "object", type="Bridge", gp_index=gp(), bridge_type="0-1", depth="0",
                              bridge_pci=f"0000:[{first:02x}-{last:02x}]")
    for cls, ids, bw, osname, infos, ostype in devices:
        dev = etree.SubElement(bridge, "object", type="PCIDev", gp_index=gp(),
                               pci_busid=f"0000:{pci_bus:02x}:00.0",
                               pci_type=f"{cls} [{ids}] [0000:0000] 00",
                               pci_link_speed=f"{bw / 1e9:.6f}")
        osdev = etree.SubElement(dev, "object", type="OSDev", gp_index=gp(), name=osname, osdev_type=ostype)
        if ostype == "5":
            osdev.set("subtype", "CUDA")
        for k, v in infos.items():
            _info(osdev, k, v)
        pci_bus += 1
    return max(pci_bus, last + 1)


def topology_tree(machine: Machine) -> etree._ElementTree:
    m = machine
    for s, numas in enumerate(m.sockets):
        if len(numas) != 1:
            raise InputError(m.path, f"sockets[{s}].numa_nodes", "exactly one NUMA node per socket for the hwloc export")
    ncores = m.ncores
    threads = m.threads_per_core
    gp = _Ids()

    def pus_of(cores: list[int] | tuple[int, ...]) -> set[int]:
        return {c + t * ncores for c in cores for t in range(threads)}

    root = etree.Element("topology", version="2.0")
    mach = etree.SubElement(root, "object", type="Machine", os_index="0")
    _sets(mach, pus_of(m.cores), set(range(len(m.numa_nodes))), allowed=True)
    mach.set("gp_index", gp())
    _info(mach, "Backend", "testbed")
    _info(mach, "HostName", m.name)
    _info(mach, "Architecture", "x86_64")
    _info(mach, "testbedMachineFile", m.path.name)

    pci_bus = 1
    for s, (numa_index,) in enumerate(m.sockets):
        numa = m.numa_nodes[numa_index]
        pkg = etree.SubElement(mach, "object", type="Package", os_index=str(s))
        _sets(pkg, pus_of(numa.cores), {numa.index})
        pkg.set("gp_index", gp())
        _info(pkg, "CPUModel", m.cpu_model)
        node = etree.SubElement(pkg, "object", type="NUMANode", os_index=str(numa.index))
        _sets(node, pus_of(numa.cores), {numa.index})
        node.set("gp_index", gp())
        node.set("local_memory", str(numa.memory_bytes))
        parent = pkg
        if m.l3_cache_bytes:
            parent = etree.SubElement(pkg, "object", type="L3Cache", os_index=str(s))
            _sets(parent, pus_of(numa.cores), {numa.index})
            parent.set("gp_index", gp())
            for k, v in (("cache_size", m.l3_cache_bytes), ("depth", 3), ("cache_linesize", 64),
                         ("cache_associativity", 0), ("cache_type", 0)):
                parent.set(k, str(v))
        for c in numa.cores:
            core = etree.SubElement(parent, "object", type="Core", os_index=str(c))
            _sets(core, pus_of([c]), {numa.index})
            core.set("gp_index", gp())
            for t in range(threads):
                pu = etree.SubElement(core, "object", type="PU", os_index=str(c + t * ncores))
                _sets(pu, {c + t * ncores}, {numa.index})
                pu.set("gp_index", gp())

        pci_bus = _pci_bridge(m, pkg, numa.index, pci_bus, gp)
    return etree.ElementTree(root)


def write_topology(machine: Machine, path: str | Path) -> None:
    tree = topology_tree(machine)
    with open(path, "wb") as fh:
        fh.write(b'<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n')
        fh.write(etree.tostring(tree.getroot(), pretty_print=True))


# --------------------------------------------------------------------------- hwloc XML -> machine YAML


def _bits(text: str | None) -> set[int]:
    """Parse hwloc's bitmap string ("0x000000ff,0xffffffff"; "0x0...0,,0x1" style gaps allowed)."""
    if not text:
        return set()
    value = 0
    for word in text.split(","):
        value = (value << 32) | (int(word, 16) if word else 0)
    return {i for i in range(value.bit_length()) if value >> i & 1}


def _placeholder(value: float, what: str) -> dict:
    return {"value": value, "derived": f"placeholder: hwloc gives no {what}; measure it with `testbed calibrate`",
            "needs_calibration": True}


def hwloc_source(xml: bytes) -> str:
    """How a topology names itself: hwloc version and host name."""
    root = etree.fromstring(xml)
    machine = next(o for o in root.iter("object") if o.get("type") == "Machine")
    infos = {i.get("name"): i.get("value") for i in machine.findall("info")}
    return f"hwloc {infos.get('hwlocVersion', '2')} topology of {infos.get('HostName', 'this machine')} (lstopo --of xml)"


def _devices(root: etree._Element, numa_of: Callable[[etree._Element], int], src: str, nnuma: int,
             gpus: list[dict] | None, gpus_src: str) -> tuple[list[dict], list[dict]]:
    """(gpus, nics) of the machine mapping: hwloc's CUDA and network OS devices (else the
    discovered GPUs, else one placeholder NIC)."""
    out_gpus: list[dict] = []
    out_nics: list[dict] = []
    cls_cuda = [o for o in root.iter("object") if o.get("type") == "OSDev" and o.get("osdev_type") == "5"
                and (o.get("subtype") == "CUDA" or o.get("name", "").startswith("cuda"))]
    for o in cls_cuda:
        infos = {i.get("name"): i.get("value") for i in o.findall("info")}
        mem = int(infos.get("CUDAGlobalMemorySize", "0")) * 1024
        out_gpus.append({
            "model": infos.get("GPUModel", "unknown GPU"),
            "numa_node": numa_of(o),
            "memory_bytes": {"value": mem, "source": f"{src}: CUDAGlobalMemorySize"} if mem else _placeholder(1.0e9, "GPU memory size"),
            "flops": _placeholder(1.0e11, "GPU kernel throughput"),
            "pcie_bandwidth_Bps": _placeholder(1.0e10, "PCIe bandwidth"),
            "pcie_latency_s": _placeholder(1.0e-5, "PCIe latency"),
        })
    if not out_gpus and gpus:
        out_gpus = [_discovered_gpu(g, nnuma, gpus_src) for g in gpus]
    for o in root.iter("object"):
        if o.get("type") == "OSDev" and o.get("osdev_type") == "2":
            out_nics.append({
                "name": o.get("name"),
                "numa_node": numa_of(o),
                "bandwidth_Bps": _placeholder(1.25e9, "network bandwidth"),
                "pcie_bandwidth_Bps": _placeholder(4.0e9, "NIC PCIe bandwidth"),
                "pcie_latency_s": _placeholder(1.0e-6, "NIC PCIe latency"),
            })
    if not out_nics:
        out_nics.append({"name": "net0", "numa_node": 0,
                             "bandwidth_Bps": _placeholder(1.25e9, "network device (none reported)"),
                             "pcie_bandwidth_Bps": _placeholder(4.0e9, "NIC PCIe bandwidth"),
                             "pcie_latency_s": _placeholder(1.0e-6, "NIC PCIe latency")})
    return out_gpus, out_nics


def topology_data(xml: bytes, name: str, src: str | None = None, gpus: list[dict] | None = None,
                  gpus_src: str = "") -> dict:
    """Machine mapping from an hwloc 2.x XML topology: structure (sockets, NUMA nodes, cores,
    memory, GPUs, NICs) cited to `src`, every other number a marked placeholder. Shared by
    `--describe-local` and `--from-calibration` (testbed/describe/from_calibration.py).

    `gpus` (testbed.describe.gpu_discovery: nvidia-smi + sysfs, cited as `gpus_src`) stand in for the
    CUDA devices when hwloc lists none (hwloc without its CUDA plugin)."""
    root = etree.fromstring(xml)
    machine = next(o for o in root.iter("object") if o.get("type") == "Machine")
    src = src or hwloc_source(xml)

    numas = sorted((o for o in root.iter("object") if o.get("type") == "NUMANode"), key=lambda o: int(o.get("os_index")))
    numa_ids = [int(o.get("os_index")) for o in numas]
    index_of = {os: k for k, os in enumerate(numa_ids)}
    cores = [o for o in root.iter("object") if o.get("type") == "Core"]
    if not cores:  # some VMs expose PUs only
        cores = [o for o in root.iter("object") if o.get("type") == "PU"]
    pus = [o for o in root.iter("object") if o.get("type") == "PU"]
    threads = max(1, len(pus) // max(1, len(cores)))

    def numa_of(obj: etree._Element) -> int:
        node = obj
        while node is not None and not node.get("nodeset"):
            node = node.getparent()
        ns = _bits(node.get("nodeset")) if node is not None else set()
        mine = sorted(index_of[n] for n in ns if n in index_of)
        return mine[0] if mine else 0

    numa_cores: dict[int, list[int]] = {k: [] for k in range(len(numas))}
    for c in cores:
        numa_cores[numa_of(c)].append(int(c.get("os_index")))
    packages = [o for o in root.iter("object") if o.get("type") == "Package"] or [machine]
    sockets = []
    for p in packages:
        mine = sorted({index_of[n] for n in _bits(p.get("nodeset")) if n in index_of})
        if mine:
            sockets.append({"numa_nodes": mine})
    assigned = {k for s in sockets for k in s["numa_nodes"]}
    if assigned != set(range(len(numas))):
        sockets = [{"numa_nodes": list(range(len(numas)))}]
    model = next((i.get("value") for p in packages for i in p.findall("info") if i.get("name") == "CPUModel"), "unknown")

    data: dict = {
        "name": name,
        "description": f"Described from the {src} by `testbed platform --describe-local`; numbers marked needs_calibration are placeholders",
        "cpu": {
            "model": model,
            "frequency_hz": _placeholder(2.0e9, "clock frequency"),
            "threads_per_core": {"value": threads, "source": f"{src}: {len(pus)} PUs / {len(cores)} cores"},
            "core_flops": _placeholder(1.0e10, "per-core kernel throughput"),
        },
        "sockets": sockets,
        "numa_nodes": [
            {
                "cores": {"value": sorted(numa_cores[k]), "source": f"{src}: Core os_index under NUMANode P#{numa_ids[k]}"},
                "memory_bytes": {"value": int(numas[k].get("local_memory", 0)) or 1, "source": f"{src}: NUMANode P#{numa_ids[k]} local_memory"},
                "memory_bandwidth_Bps": _placeholder(1.0e10, "memory bandwidth"),
                "memory_latency_s": _placeholder(1.0e-7, "memory latency"),
                "core_bandwidth_Bps": _placeholder(5.0e9, "per-core memory bandwidth"),
            }
            for k in range(len(numas))
        ],
        "inter_socket_links": [
            {"numa_nodes": [k, k + 1], "bandwidth_Bps": _placeholder(2.0e10, "inter-socket bandwidth"),
             "latency_s": _placeholder(5.0e-8, "inter-socket latency")}
            for k in range(len(numas) - 1)
        ],
    }
    data["gpus"], data["nics"] = _devices(root, numa_of, src, len(numas), gpus, gpus_src)
    return data


def check_memory(data: dict, mem_total: int | None, src: str) -> None:
    """Cross-check hwloc's NUMA memory with the kernel's MemTotal (/proc/meminfo): in some VMs
    hwloc reports a fraction of it (7.07 GB for 125 GiB on the validation node). When hwloc's
    sum is below half of MemTotal, MemTotal split evenly over the NUMA nodes replaces it, marked
    derived, with a warning naming what was guessed."""

    if not mem_total:
        return
    nodes = data["numa_nodes"]
    hw = sum(int(n["memory_bytes"]["value"]) for n in nodes)
    if hw >= mem_total / 2:
        return
    share = mem_total // len(nodes)
    log.warning(f"hwloc reports {hw / 1e9:.2f} GB of NUMA memory, the kernel {mem_total / 1e9:.2f} GB "
                f"(MemTotal): using MemTotal split over {len(nodes)} NUMA node(s)")
    for n in nodes:
        n["memory_bytes"] = {"value": share, "derived": f"{src}: MemTotal / {len(nodes)} NUMA node(s); hwloc "
                                                       f"reported {hw} bytes in all, below half of MemTotal"}


def mem_total_bytes(meminfo: str) -> int | None:
    """MemTotal of /proc/meminfo text, in bytes."""
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            return int(parts[1]) * 1024 if len(parts) >= 2 and parts[1].isdigit() else None
    return None


def _discovered_gpu(g: dict, nnuma: int, src: str) -> dict:
    """A machine-description GPU from testbed.describe.gpu_discovery (hwloc without CUDA plugin)."""

    numa = g["numa_node"]
    if not 0 <= numa < nnuma:
        # sysfs says -1 when the firmware reports no affinity (common in VMs).
        if nnuma > 1:
            log.warning(f"GPU {g['index']} ({g['pci_bus_id']}): no NUMA affinity in sysfs; "
                        "assumed on NUMA node 0 (check the machine description)")
        numa = 0
    where = f"{src}: GPU {g['index']} ({g['pci_bus_id']})" if src else g["source"]
    return {
        "model": g["model"],
        "numa_node": numa,
        "memory_bytes": {"value": g["memory_bytes"], "source": f"{where}, memory.total"},
        "flops": _placeholder(1.0e11, "GPU kernel throughput"),
        "pcie_bandwidth_Bps": _placeholder(1.0e10, "PCIe bandwidth"),
        "pcie_latency_s": _placeholder(1.0e-5, "PCIe latency"),
    }


def describe_local(xml: bytes, name: str = "local", kernels: str | None = None) -> str:
    """Machine YAML (text) from an hwloc 2.x XML topology: structure from hwloc, other numbers marked."""
    import yaml

    from testbed import ROOT
    from testbed.describe.gpu_discovery import discover_gpus

    data = topology_data(xml, name, gpus=discover_gpus())
    try:
        check_memory(data, mem_total_bytes(Path("/proc/meminfo").read_text()), "/proc/meminfo")
    except OSError:
        pass
    bundle = kernels or (f"calibration/{name}" if (ROOT / "calibration" / name / "kernels.yaml").is_file() else None)
    if bundle:
        data["kernels"] = bundle
        _from_bundle(data, ROOT / bundle, bundle)
    header = ("# Generated by `testbed platform --describe-local` from hwloc; edit or recalibrate.\n"
              "# Numbers with needs_calibration: true are placeholders, not measurements.\n")
    if not bundle:
        header += "# No calibration bundle yet: `testbed platform` needs `kernels:` (run `testbed calibrate`).\n"
    return header + yaml.safe_dump(data, sort_keys=False, width=200)


def _from_bundle(data: dict, folder: Path, label: str) -> None:
    """Replace placeholders by what a calibration bundle measured (core speed, NUMA bandwidth)."""
    import csv

    kernels_file = folder / "kernels.yaml"
    if kernels_file.is_file():
        k = load_yaml(kernels_file)
        try:
            b = int(k["reference_tile"])
            t = float(k["kernels"]["dgemm"]["cpu"]["time_s"]["value"])
            data["cpu"]["core_flops"] = {"value": 2.0 * b**3 / t,
                                         "derived": f"2*{b}^3 flop / dgemm cpu time_s {t:.6g} s ({label}/kernels.yaml)"}
        except (KeyError, TypeError, ValueError):
            pass
    bw_file = folder / "numa" / "bandwidth.csv"
    if bw_file.is_file():
        with bw_file.open() as fh:
            for row in csv.DictReader(fh):
                if row.get("kernel") != "triad" or row.get("scope") != "node" or row.get("thread_node") != row.get("data_node"):
                    continue
                k = int(row["thread_node"])
                if 0 <= k < len(data["numa_nodes"]):
                    data["numa_nodes"][k]["memory_bandwidth_Bps"] = {
                        "value": float(row["gbps"]) * 1e9,
                        "source": f"{label}/numa/bandwidth.csv: triad, threads and data on NUMA {k} ({row['threads']} threads)"}


# --------------------------------------------------------------------------- topology given to StarPU


def this_machine_pus() -> set[int]:
    """The PUs (OS indices) this process may run on: what a topology handed to StarPU with
    HWLOC_THISSYSTEM=1 must stick to, since StarPU binds its threads to them (core/topology.c
    `_starpu_bind_thread_on_cpu`, hwloc_set_cpubind)."""
    import os

    return set(os.sched_getaffinity(0))


def check_topology(xml: bytes, file: str | Path, key: str, pus: set[int] | None = None) -> int:
    """The number of NUMA nodes of an hwloc 2.x XML topology that StarPU can load on this machine
    (HWLOC_XMLFILE, HWLOC_THISSYSTEM=1); InputError naming `file` and `key` otherwise: not hwloc's
    XML, no NUMA node or PU, or a PU this machine does not have (`pus`: this_machine_pus())."""
    try:
        root = etree.fromstring(xml, etree.XMLParser(resolve_entities=False, no_network=True))
    except etree.XMLSyntaxError as exc:
        raise InputError(file, key, f"an hwloc XML topology (lstopo --of xml), got invalid XML: {exc}") from None
    if root.tag != "topology":
        raise InputError(file, key, f"an hwloc XML topology (lstopo --of xml; root element topology), got {root.tag!r}")
    objects = list(root.iter("object"))
    numas = [o for o in objects if o.get("type") == "NUMANode"]
    pu_ids = []
    for o in objects:
        if o.get("type") == "PU":
            index = o.get("os_index", "")
            if not index.isdigit():
                raise InputError(file, f"{key}: PU os_index", f"an integer, got {index!r}")
            pu_ids.append(int(index))
    if not numas or not pu_ids:
        raise InputError(file, key, "an hwloc XML topology with NUMANode and PU objects")
    allowed = this_machine_pus() if pus is None else pus
    foreign = sorted(set(pu_ids) - allowed)
    if foreign:
        have = ",".join(str(p) for p in sorted(allowed))
        raise InputError(file, f"{key}: PU P#{foreign[0]}",
                         f"a PU of this machine ({have}): StarPU binds its threads to the topology's PUs "
                         "(HWLOC_THISSYSTEM=1)")
    return len(numas)
