"""StarPU bus platforms -> numasim platform XML (docs/interfaces.md §2), same machine for both engines.

StarPU-SimGrid simulates a node with the platform StarPU wrote during bus calibration,
``sampling/bus/<host>.platform.v4.xml`` (src/core/perfmodel/perfmodel_bus.c
write_bus_platform_file_content; loaded by src/core/simgrid.c): hosts ``CPU<i>``, ``CUDA<j>``
(prop ``memsize``), ``RAM``, one link per direction between RAM and each GPU and between
GPUs, all routes also crossing one shared host link (``Host``, or ``Interconnect`` in the
flat-route variant). This module rewrites that file into the numasim convention, keeping
every link's bandwidth, latency and sharing policy and every route's link list, so that
numasim's transfers cross exactly the links StarPU-SimGrid's do:

* hosts ``<node>.cpu<i>`` (kind cpu, numa 0), ``<node>.gpu<j>`` (kind gpu, memory = memsize),
  ``<node>.ram0`` (kind ram, one RAM node: StarPU in SimGrid mode has no NUMA nodes);
* links ``<node>.membus<k>`` (the shared host links), ``<node>.pcieh2d<j>`` (RAM->CUDA j),
  ``<node>.pcied2h<j>`` (CUDA j->RAM), ``<node>.p2p<i*n+j>`` (CUDA i->CUDA j);
* the PCI tree links of hwloc-derived bus platforms (``PCI:... up/down/through``) become
  ``<node>.pci<k>`` (file order);
* OpenCL, disk and MAIN hosts are dropped (the StarPU-SimGrid build here has no OpenCL,
  the LU uses no disk).

A cluster (``starpu_smpirun -platform cluster.xml -hostfile hostfile -hostfile-platform``)
becomes one zone per hostfile entry, ranked in hostfile order, joined by the links of the
SMPI cluster file. The zone gateway is the node's RAM host: under starpu_smpirun the MPI
processes run on the cluster-file hosts, outside every node's bus zone, so an MPI message
crosses only the cluster links (tools/starpu_smpirun.in merges the two platforms without
routes between them).

Usage: ``python -m testbed.platform.starpu_bus_platform --sampling DIR --host NAME --out FILE`` (one
machine) or ``--starpu-dir DIR --out FILE`` (a `testbed platform` starpu/ directory).
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from testbed.common.atomic import atomic_file
from testbed.common.errors import InputError

#: Host ids of a StarPU bus platform that numasim keeps.
_CPU = re.compile(r"CPU(\d+)$")
_CUDA = re.compile(r"CUDA(\d+)$")
_SHARED_LINKS = ("Host", "Interconnect")


@dataclass(frozen=True)
class NodeSource:
    """One node of the converted platform: its name, machine type and StarPU bus platform."""

    node: str
    machine: str
    bus_platform: Path


def _parse(path: Path) -> ET.Element:
    if not path.is_file():
        raise InputError(path, "file", "a StarPU bus platform (sampling/bus/<host>.platform.v4.xml)")
    try:
        return ET.parse(path).getroot()
    except ET.ParseError as err:
        raise InputError(path, "xml", f"well-formed XML ({err})") from None


def _zone(root: ET.Element, path: Path) -> ET.Element:
    for tag in ("AS", "zone"):
        found = root.find(tag)
        if found is not None:
            return found
    raise InputError(path, "platform/AS", "one AS (zone) holding the machine's hosts and links")


def _prop(parent: ET.Element, key: str, value: str) -> None:
    ET.SubElement(parent, "prop", id=key, value=value)


def _link_name(node: str, starpu_id: str, shared: dict[str, int]) -> str | None:
    """numasim id of a StarPU link, None for links of dropped hosts (OpenCL, disk)."""
    if starpu_id in shared:
        return f"{node}.membus{shared[starpu_id]}"
    parts = starpu_id.split("-")
    if len(parts) == 2:
        a, b = (_CUDA.match(p) for p in parts)
        if parts[0] == "RAM" and b:
            return f"{node}.pcieh2d{b.group(1)}"
        if a and parts[1] == "RAM":
            return f"{node}.pcied2h{a.group(1)}"
    return None


def node_zone(src: NodeSource, rank: int) -> ET.Element:
    """The numasim zone of one node, from its StarPU bus platform."""
    path = src.bus_platform
    zone_in = _zone(_parse(path), path)
    zone = ET.Element("zone", id=src.node, routing="Full")
    _prop(zone, "machine", src.machine)
    _prop(zone, "rank", str(rank))
    _prop(zone, "source", f"StarPU bus platform {path.name} (testbed/platform/starpu_bus_platform.py)")

    hosts, cpus, gpus = _hosts(zone, zone_in, src, path)
    ngpu = len(gpus)
    links = _links(zone, zone_in, src.node, ngpu)
    nroutes = _routes(zone, zone_in, hosts, links)
    if ngpu and nroutes == 0:
        raise InputError(path, "route", "routes between RAM and the CUDA hosts")
    # StarPU-SimGrid charges nothing between a thread and the memories it drives (CPU kernels
    # read RAM at model speed, a CUDA driver's submissions and the MPI thread's copies are free).
    # SimGrid forbids empty routes, so every core reaches RAM and the GPUs through one
    # non-shared (FATPIPE) link of zero latency and a bandwidth far above any bus
    # (derived: stands for "no cost", 1 PB/s moves a 960x960 tile in 7 ns).
    first_route = next((k for k, e in enumerate(zone) if e.tag == "route"), len(zone))
    zone.insert(first_route, ET.Element("link", id=f"{src.node}.threadpath", bandwidth="1e15Bps", latency="0s",
                                        sharing_policy="FATPIPE"))  # the DTD wants links before routes
    for i, _ in sorted(cpus):
        for target in ["RAM"] + [f"CUDA{j}" for j, _ in sorted(gpus)]:
            r = ET.SubElement(zone, "route", src=hosts[f"CPU{i}"], dst=hosts[target], symmetrical="YES")
            ET.SubElement(r, "link_ctn", id=f"{src.node}.threadpath")
    return zone




def _hosts(zone: ET.Element, zone_in: ET.Element, src: NodeSource, path: Path) -> tuple[dict[str, str], list, list]:
    """numasim hosts of StarPU's CPU, CUDA and RAM hosts: (StarPU id -> numasim id, CPUs, GPUs)."""
    hosts: dict[str, str] = {}  # StarPU host id -> numasim host id
    cpus, gpus = [], []
    for h in zone_in.findall("host"):
        hid = h.get("id", "")
        if (m := _CPU.match(hid)) is not None:
            cpus.append((int(m.group(1)), h))
        elif (m := _CUDA.match(hid)) is not None:
            gpus.append((int(m.group(1)), h))
    if not cpus:
        raise InputError(path, "host CPU<i>", "at least one CPU host")
    if zone_in.find("host[@id='RAM']") is None:
        raise InputError(path, "host RAM", "the RAM host of StarPU's bus platform")
    for i, h in sorted(cpus):
        host = ET.SubElement(zone, "host", id=f"{src.node}.cpu{i}", speed=h.get("speed", "1f"))
        for key, value in (("kind", "cpu"), ("node", src.node), ("numa", "0"), ("index", str(i))):
            _prop(host, key, value)
        hosts[f"CPU{i}"] = host.get("id", "")
    for j, h in sorted(gpus):
        mem = h.find("prop[@id='memsize']")
        if mem is None:
            raise InputError(path, f"host CUDA{j} prop memsize", "the GPU memory size in bytes")
        host = ET.SubElement(zone, "host", id=f"{src.node}.gpu{j}", speed=h.get("speed", "1f"))
        for key, value in (("kind", "gpu"), ("node", src.node), ("numa", "0"), ("index", str(j)),
                           ("memory", mem.get("value", ""))):
            _prop(host, key, value)
        hosts[f"CUDA{j}"] = host.get("id", "")
    ram = ET.SubElement(zone, "host", id=f"{src.node}.ram0", speed="1f")
    # StarPU-SimGrid does not limit main memory; numasim does not either (memory unused).
    for key, value in (("kind", "ram"), ("node", src.node), ("numa", "0"), ("memory", "0")):
        _prop(ram, key, value)
    hosts["RAM"] = ram.get("id", "")

    return hosts, cpus, gpus


def _links(zone: ET.Element, zone_in: ET.Element, node: str, ngpu: int) -> dict[str, str]:
    """numasim links of StarPU's links: StarPU id -> numasim id."""
    shared = {name: k for k, name in enumerate(n for n in _SHARED_LINKS
                                               if zone_in.find(f"link[@id='{n}']") is not None)}
    links: dict[str, str] = {}
    for link in zone_in.findall("link"):
        lid = link.get("id", "")
        name = _link_name(node, lid, shared)
        if name is None:
            ends = lid.split("-")
            a, b = (_CUDA.match(p) if p else None for p in (ends + [""])[:2])
            if len(ends) == 2 and a and b:
                name = f"{node}.p2p{int(a.group(1)) * ngpu + int(b.group(1))}"
        if name is None and not any(k in lid for k in ("OpenCL", "DISK", "MAIN")):
            # hwloc-derived PCI tree links ("PCI:0000:[00-0f] up/down/through", perfmodel_bus.c
            # emit_topology_bandwidths): kept as they are, numbered in file order.
            name = f"{node}.pci{sum(1 for v in links.values() if '.pci' in v)}"
        if name is None:
            continue
        attrs = {"id": name, "bandwidth": link.get("bandwidth", ""), "latency": link.get("latency", "0s")}
        if link.get("sharing_policy"):
            attrs["sharing_policy"] = link.get("sharing_policy", "")
        ET.SubElement(zone, "link", attrs)
        links[lid] = name
    return links


def _routes(zone: ET.Element, zone_in: ET.Element, hosts: dict[str, str], links: dict[str, str]) -> int:
    """StarPU's routes between kept hosts over kept links; their count."""
    nroutes = 0
    for route in zone_in.findall("route"):
        s, d = route.get("src", ""), route.get("dst", "")
        ctn = [c.get("id", "") for c in route.findall("link_ctn")]
        if s not in hosts or d not in hosts or any(c not in links for c in ctn):
            continue
        r = ET.SubElement(zone, "route", src=hosts[s], dst=hosts[d],
                          symmetrical=route.get("symmetrical", "YES"))
        for c in ctn:
            ET.SubElement(r, "link_ctn", id=links[c])
        nroutes += 1
    return nroutes


def _cluster_links(cluster_xml: Path) -> tuple[list[ET.Element], dict[tuple[str, str], list[str]]]:
    """Links and host-to-host routes of an SMPI cluster file (routing Full, explicit routes)."""
    zone = _zone(_parse(cluster_xml), cluster_xml)
    links = zone.findall("link")
    routes: dict[tuple[str, str], list[str]] = {}
    for r in zone.findall("route"):
        routes[(r.get("src", ""), r.get("dst", ""))] = [c.get("id", "") for c in r.findall("link_ctn")]
    return links, routes


def build_platform(nodes: list[NodeSource], cluster_xml: Path | None = None, name: str = "bus") -> ET.ElementTree:
    """numasim platform: one zone per node (rank = list order), joined by the cluster file's links."""
    root = ET.Element("platform", version="4.1")
    top = ET.SubElement(root, "zone", id=f"{name}.cluster", routing="Full")
    _prop(top, "cluster", name)
    _prop(top, "nnodes", str(len(nodes)))
    for rank, src in enumerate(nodes):
        top.append(node_zone(src, rank))
    if len(nodes) > 1:
        if cluster_xml is None:
            raise InputError(None, "cluster_xml", "the SMPI cluster file joining several nodes")
        links, routes = _cluster_links(cluster_xml)
        for link in links:
            top.append(link)
        for i, a in enumerate(nodes):
            for b in nodes[i + 1:]:
                ctn = routes.get((a.node, b.node))
                rev = routes.get((b.node, a.node))
                if ctn is None and rev is not None:
                    ctn = list(reversed(rev))
                if ctn is None:
                    raise InputError(cluster_xml, f"route {a.node} -> {b.node}", "a route between every pair of hosts")
                zr = ET.SubElement(top, "zoneRoute", src=a.node, dst=b.node,
                                   gw_src=f"{a.node}.ram0", gw_dst=f"{b.node}.ram0", symmetrical="YES")
                for c in ctn:
                    ET.SubElement(zr, "link_ctn", id=c)
    ET.indent(root, " ")
    return ET.ElementTree(root)


def nodes_of_starpu_dir(starpu_dir: Path) -> list[NodeSource]:
    """Nodes of a `testbed platform` starpu/ directory (hostfile order = rank order)."""
    hostfile = starpu_dir / "hostfile"
    if not hostfile.is_file():
        raise InputError(hostfile, "file", "the hostfile written by `testbed platform`")
    out = []
    for host in (ln.strip() for ln in hostfile.read_text().splitlines()):
        if not host:
            continue
        machine = host if (starpu_dir / host / "sampling").is_dir() else re.sub(r"-\d+$", "", host)
        out.append(NodeSource(host, machine, starpu_dir / machine / "sampling" / "bus" / f"{machine}.platform.v4.xml"))
    if not out:
        raise InputError(hostfile, "lines", "at least one host")
    return out


def write_platform(tree: ET.ElementTree, out: Path) -> None:
    with atomic_file(out, option="--out") as fh:
        fh.write("<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n")
        fh.write(ET.tostring(tree.getroot(), encoding="unicode"))
        fh.write("\n")


def main(argv: list[str] | None = None) -> int:
    from testbed.common.arguments import Parser

    p = Parser(prog="python -m testbed.platform.starpu_bus_platform", description=__doc__.split("\n\n")[0])
    p.add_argument("--sampling", type=Path, help="a StarPU sampling directory (one machine)")
    p.add_argument("--host", help="STARPU_HOSTNAME of the bus files in --sampling")
    p.add_argument("--node", help="node name in the output (default: the host)")
    p.add_argument("--starpu-dir", type=Path, help="a `testbed platform` starpu/ directory (cluster)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    try:
        if args.starpu_dir is not None:
            tree = build_platform(nodes_of_starpu_dir(args.starpu_dir), args.starpu_dir / "cluster.xml",
                                  args.starpu_dir.parent.name or "bus")
        elif args.sampling is not None and args.host:
            node = args.node or args.host
            tree = build_platform([NodeSource(node, args.host, args.sampling / "bus" / f"{args.host}.platform.v4.xml")],
                                  name=node)
        else:
            raise InputError(None, "arguments", "--starpu-dir DIR, or --sampling DIR with --host NAME")
        write_platform(tree, args.out)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # disk full, permissions
        from testbed.cli import os_error_line

        print(f"error: {os_error_line(err)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
