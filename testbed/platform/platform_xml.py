"""numasim's SimGrid platform (v4.1) with NUMA-split memory (docs/interfaces.md §2).

One zone per node (Floyd routing) holding a host per core, GPU, NUMA memory and NIC,
one router per NUMA node, and links for memory buses, inter-socket links, PCIe and
per-core paths; a Full top zone joins the nodes through their NIC, Ethernet link and
the switch. Only adjacent pairs get explicit routes: Floyd derives the rest, so a
transfer from NUMA 1 memory to a NIC on NUMA 0 crosses the inter-socket link.

The switch is non-blocking (a FATPIPE: it bounds each flow by its bandwidth and shares nothing),
written as one FATPIPE link per sending node, `<cluster>.switch<i>` for the i-th node of the
cluster, each with the switch's bandwidth and latency: the same bound and the same route latency
for every message as one link would give, but SimGrid solves the flows crossing a link, FATPIPE
included, as one sharing system (its max-min re-solves a flow's connected component at each of its
events), and one switch link would put every message of the cluster into one; per sender, a
message shares a system only with those that share its node's Ethernet link (numasim's run time,
bench/RESULTS.md).

Links are as the hardware is (docs/network-model.md): Ethernet, PCIe (GPU and NIC) and the
inter-socket links are full duplex, SimGrid SPLITDUPLEX links (`<id>_UP` / `<id>_DOWN`, one per
direction, each with the per-direction bandwidth of the machine description); a memory bus and a
core's path carry reads and writes over the same channel, SHARED links.
"""

from __future__ import annotations

from lxml import etree

from testbed.describe.machines import Cluster, Machine, Node


def _bw(v: float) -> str:
    return f"{v:.10g}Bps"


def _lat(v: float) -> str:
    return f"{v:.10g}s"


def _flops(v: float) -> str:
    return f"{v:.10g}f"


#: Sharing policy of the full-duplex links (SimGrid 3.32 docs, "Platform Description":
#: sharing_policy="SPLITDUPLEX" makes two links <id>_UP and <id>_DOWN; a route names the direction
#: it takes with <link_ctn id=... direction="UP|DOWN"/>, its symmetrical route the other one).
SPLITDUPLEX = "SPLITDUPLEX"


def _props(el: etree._Element, **props: object) -> None:
    for k, v in props.items():
        etree.SubElement(el, "prop", id=k, value=str(v))


def inter_socket_link_ids(machine: Machine) -> list[str]:
    """`qpi` for the usual single link, `qpi0`, `qpi1`, ... when there are several."""
    n = len(machine.inter_socket_links)
    return ["qpi"] if n == 1 else [f"qpi{i}" for i in range(n)]


def _remote_dma_routes(m: Machine, devices: list | None = None) -> list[tuple]:
    """(device, far NUMA node, inter-socket link id, its direction from the device's socket) for
    every device (the GPUs by default, or NICs) and every NUMA node joined to the device's own by
    one inter-socket link."""
    out = []
    for g in m.gpus if devices is None else devices:
        for lid, link in zip(inter_socket_link_ids(m), m.inter_socket_links, strict=False):
            a, b = link.numa_nodes
            if g.numa_node in (a, b):
                other = b if g.numa_node == a else a
                out.append((g, other, lid, "UP" if g.numa_node == a else "DOWN"))
    return out


def _node_zone(parent: etree._Element, node: Node) -> None:
    m = node.machine
    p = node.name
    zone = etree.SubElement(parent, "zone", id=p, routing="Floyd")
    _props(zone, machine=m.name, rank=node.rank, ncores=m.ncores, ngpus=len(m.gpus), nnuma=len(m.numa_nodes),
           threads_per_core=m.threads_per_core)
    # numasim's NUMA-mechanism parameters (machine `numa:` section, scalar quantities only).
    for key, q in sorted((m.raw.get("numa") or {}).items()):
        if isinstance(q, dict) and isinstance(q.get("value"), (int, float)) and not isinstance(q["value"], bool):
            _props(zone, **{f"numa_{key}": f"{q['value']:.10g}"})
        elif key == "loaded_latency":  # the curve, as simulator/src/memory_model.cpp reads it
            _props(zone, numa_loaded_latency=",".join(f"{u:.10g}:{r:.10g}" for u, r in q["value"]))

    _zone_hosts(zone, m, p)
    qpi_ids = inter_socket_link_ids(m)
    remote_dma = _remote_dma_routes(m) if m.gpu_remote_dma else []
    _zone_links(zone, m, p, qpi_ids, remote_dma)
    _zone_routes(zone, m, p, qpi_ids, remote_dma)


# A NIC's DMA to and from buffers on the far socket runs at the machine's `nic_remote_dma` rates.
# numasim's MPI messages reach the NIC from the MPI thread's core (StarPU-MPI's progression thread
# copies into socket buffers on its node, the NIC DMAs from there), so each core of a far NUMA node
# gets a bypass route to the NIC: core link, inter-socket link, the TX cap, the NIC's PCIe link;
# and back with the RX cap. Other traffic keeps the plain path. Links first, routes after (the
# SimGrid DTD's order inside a zone).
def _remote_nic_dma_links(zone: etree._Element, m: Machine, p: str) -> None:
    if not m.nic_remote_dma:
        return
    tx, rx = m.nic_remote_dma
    for nic in dict.fromkeys(r[0].index for r in _remote_dma_routes(m, m.nics)):
        etree.SubElement(zone, "link", id=f"{p}.xdma_tx_nic{nic}", bandwidth=_bw(tx), latency="0s")
        etree.SubElement(zone, "link", id=f"{p}.xdma_rx_nic{nic}", bandwidth=_bw(rx), latency="0s")


def _remote_nic_dma_routes(zone: etree._Element, m: Machine, p: str) -> None:
    if not m.nic_remote_dma:
        return
    for nic, other, qpi, up in _remote_dma_routes(m, m.nics):
        down = "DOWN" if up == "UP" else "UP"
        for core in m.numa_nodes[other].cores:
            r = etree.SubElement(zone, "bypassRoute", src=f"{p}.cpu{core}", dst=f"{p}.nic{nic.index}")
            for lid, d in ((f"core{core}", None), (qpi, down), (f"xdma_tx_nic{nic.index}", None),
                           (f"nicpcie{nic.index}", "DOWN")):
                etree.SubElement(r, "link_ctn", id=f"{p}.{lid}", **({"direction": d} if d else {}))
            r = etree.SubElement(zone, "bypassRoute", src=f"{p}.nic{nic.index}", dst=f"{p}.cpu{core}")
            for lid, d in ((f"nicpcie{nic.index}", "UP"), (f"xdma_rx_nic{nic.index}", None), (qpi, up),
                           (f"core{core}", None)):
                etree.SubElement(r, "link_ctn", id=f"{p}.{lid}", **({"direction": d} if d else {}))


def _zone_hosts(zone: etree._Element, m: Machine, p: str) -> None:
    """Cores, GPUs, RAMs (one per NUMA node), NICs and the socket routers of node `p`."""
    for numa in m.numa_nodes:
        for core in numa.cores:
            h = etree.SubElement(zone, "host", id=f"{p}.cpu{core}", speed=_flops(m.core_flops))
            _props(h, kind="cpu", node=p, numa=numa.index, socket=numa.socket, index=core)
    for g in m.gpus:
        h = etree.SubElement(zone, "host", id=f"{p}.gpu{g.index}", speed=_flops(g.flops))
        _props(h, kind="gpu", node=p, numa=g.numa_node, index=g.index, memory=g.memory_bytes, model=g.model,
               **{k: v for k, v in (("task_overhead_s", g.task_overhead_s), ("malloc_s", g.malloc_s),
                                    ("free_s", g.free_s), ("pinned_alloc_s_per_mib", g.pinned_alloc_s_per_mib))
                  if v > 0},
               # numasim's default is 1 (the whole call): written only when it differs
               **({"pinned_alloc_gpu_stall": g.pinned_alloc_gpu_stall} if g.pinned_alloc_gpu_stall != 1.0 else {}))
    for numa in m.numa_nodes:
        h = etree.SubElement(zone, "host", id=f"{p}.ram{numa.index}", speed="1f")
        _props(h, kind="ram", node=p, numa=numa.index, socket=numa.socket, memory=numa.memory_bytes)
    for nic in m.nics:
        h = etree.SubElement(zone, "host", id=f"{p}.nic{nic.index}", speed="1f")
        _props(h, kind="nic", node=p, numa=nic.numa_node, index=nic.index, name=nic.name)
    for numa in m.numa_nodes:
        etree.SubElement(zone, "router", id=f"{p}.socket{numa.index}")


def _zone_links(zone: etree._Element, m: Machine, p: str, qpi_ids: list[str], remote_dma: list) -> None:
    for numa in m.numa_nodes:
        etree.SubElement(zone, "link", id=f"{p}.membus{numa.index}",
                         bandwidth=_bw(numa.memory_bandwidth_Bps), latency=_lat(numa.memory_latency_s))
    for lid, link in zip(qpi_ids, m.inter_socket_links, strict=False):
        etree.SubElement(zone, "link", id=f"{p}.{lid}", bandwidth=_bw(link.bandwidth_Bps), latency=_lat(link.latency_s),
                         sharing_policy=SPLITDUPLEX)
    for g in m.gpus:
        etree.SubElement(zone, "link", id=f"{p}.pcie{g.index}",
                         bandwidth=_bw(g.pcie_bandwidth_Bps), latency=_lat(g.pcie_latency_s), sharing_policy=SPLITDUPLEX)
    for nic in m.nics:
        etree.SubElement(zone, "link", id=f"{p}.nicpcie{nic.index}",
                         bandwidth=_bw(nic.pcie_bandwidth_Bps), latency=_lat(nic.pcie_latency_s),
                         sharing_policy=SPLITDUPLEX)
    # DMA between a GPU and a host buffer on the other socket: measured far below both the PCIe
    # and the inter-socket link rates (machine `gpu_remote_dma`, e.g. a P100: 12.2 GB/s local vs
    # 3.8 GB/s host->device across sockets). One link per GPU and direction caps such copies;
    # they still cross the inter-socket link and the GPU's PCIe link, where they contend.
    for g, _other, _qpi, _dir in remote_dma:
        h2d, d2h = m.gpu_remote_dma
        etree.SubElement(zone, "link", id=f"{p}.xdma_h2d{g.index}", bandwidth=_bw(h2d), latency="0s")
        etree.SubElement(zone, "link", id=f"{p}.xdma_d2h{g.index}", bandwidth=_bw(d2h), latency="0s")
    for numa in m.numa_nodes:
        for core in numa.cores:
            # Latency is counted once, on the memory bus; the core link only caps bandwidth.
            etree.SubElement(zone, "link", id=f"{p}.core{core}", bandwidth=_bw(numa.core_bandwidth_Bps), latency="0s")
    _remote_nic_dma_links(zone, m, p)


def _route(zone: etree._Element, src: str, dst: str, link: str, direction: str | None = None) -> None:
    r = etree.SubElement(zone, "route", src=src, dst=dst)
    etree.SubElement(r, "link_ctn", id=link, **({"direction": direction} if direction else {}))


def _zone_routes(zone: etree._Element, m: Machine, p: str, qpi_ids: list[str], remote_dma: list) -> None:
    for numa in m.numa_nodes:
        _route(zone, f"{p}.ram{numa.index}", f"{p}.socket{numa.index}", f"{p}.membus{numa.index}")
    # Split-duplex links: UP from the device (or lower socket) towards the socket, DOWN back.
    for lid, link in zip(qpi_ids, m.inter_socket_links, strict=False):
        a, b = link.numa_nodes
        _route(zone, f"{p}.socket{a}", f"{p}.socket{b}", f"{p}.{lid}", "UP")
    for g in m.gpus:
        _route(zone, f"{p}.gpu{g.index}", f"{p}.socket{g.numa_node}", f"{p}.pcie{g.index}", "UP")
    for nic in m.nics:
        _route(zone, f"{p}.nic{nic.index}", f"{p}.socket{nic.numa_node}", f"{p}.nicpcie{nic.index}", "UP")
    for numa in m.numa_nodes:
        for core in numa.cores:
            _route(zone, f"{p}.cpu{core}", f"{p}.socket{numa.index}", f"{p}.core{core}")
    # Copies between a GPU and the RAM of the far socket take an explicit route (a SimGrid bypass
    # route: Floyd routing picks the fewest links, src/kernel/routing/FloydZone.cpp): RAM -> GPU
    # = memory bus, inter-socket link, the H2D cap, PCIe down; GPU -> RAM the reverse with the
    # D2H cap. Other traffic to the GPU (a remote driver's commands) keeps the plain path.
    for g, other, qpi, up in remote_dma:
        down = "DOWN" if up == "UP" else "UP"
        r = etree.SubElement(zone, "bypassRoute", src=f"{p}.ram{other}", dst=f"{p}.gpu{g.index}")
        for lid, d in ((f"membus{other}", None), (qpi, down), (f"xdma_h2d{g.index}", None), (f"pcie{g.index}", "DOWN")):
            etree.SubElement(r, "link_ctn", id=f"{p}.{lid}", **({"direction": d} if d else {}))
        r = etree.SubElement(zone, "bypassRoute", src=f"{p}.gpu{g.index}", dst=f"{p}.ram{other}")
        for lid, d in ((f"pcie{g.index}", "UP"), (f"xdma_d2h{g.index}", None), (qpi, up), (f"membus{other}", None)):
            etree.SubElement(r, "link_ctn", id=f"{p}.{lid}", **({"direction": d} if d else {}))
    _remote_nic_dma_routes(zone, m, p)


def platform_tree(cluster: Cluster) -> etree._ElementTree:
    root = etree.Element("platform", version="4.1")
    # Suffixed: a cluster may be named like one of its nodes (chifflet-1), zone ids must be unique.
    top = etree.SubElement(root, "zone", id=f"{cluster.name}.cluster", routing="Full")
    _props(top, cluster=cluster.name, nnodes=len(cluster.nodes))
    for node in cluster.nodes:
        _node_zone(top, node)
    net = cluster.network
    for node in cluster.nodes:
        nic = node.machine.nics[0]
        etree.SubElement(top, "link", id=f"{node.name}.eth",
                         bandwidth=_bw(min(nic.bandwidth_Bps, net.link_bandwidth_Bps)), latency=_lat(net.link_latency_s),
                         sharing_policy=SPLITDUPLEX)
    for i, _ in enumerate(cluster.nodes):
        etree.SubElement(top, "link", id=switch_port(cluster, i), bandwidth=_bw(net.switch_bandwidth_Bps),
                         latency=_lat(net.switch_latency_s), sharing_policy="FATPIPE")
    for i, a in enumerate(cluster.nodes):
        for b in cluster.nodes:
            if b is a:
                continue
            zr = etree.SubElement(top, "zoneRoute", src=a.name, dst=b.name, symmetrical="NO",
                                  gw_src=f"{a.name}.nic0", gw_dst=f"{b.name}.nic0")
            # <node>.eth_UP: the node's sending direction, <node>.eth_DOWN: its receiving one.
            etree.SubElement(zr, "link_ctn", id=f"{a.name}.eth", direction="UP")
            etree.SubElement(zr, "link_ctn", id=switch_port(cluster, i))
            etree.SubElement(zr, "link_ctn", id=f"{b.name}.eth", direction="DOWN")
    return etree.ElementTree(root)


def switch_port(cluster: Cluster, sender: int) -> str:
    """The switch's link for messages sent by the cluster's node `sender` (module docstring)."""
    return f"{cluster.name}.switch{sender}"


def write_platform(cluster: Cluster, path) -> None:
    tree = platform_tree(cluster)
    with open(path, "wb") as fh:
        fh.write(b"<?xml version='1.0'?>\n")
        fh.write(b'<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">\n')
        fh.write(etree.tostring(tree.getroot(), pretty_print=True))


def expected_counts(cluster: Cluster) -> dict[str, int]:
    """Hosts and SimGrid links the platform must contain, computed from the YAML only (for tests);
    a split-duplex link counts twice (SimGrid lists its `_UP` and `_DOWN` links)."""
    hosts = links = 0
    for node in cluster.nodes:
        m = node.machine
        hosts += m.ncores + len(m.gpus) + len(m.numa_nodes) + len(m.nics)
        duplex = len(m.inter_socket_links) + len(m.gpus) + len(m.nics) + 1  # + eth
        links += len(m.numa_nodes) + m.ncores + 2 * duplex
        links += 2 * len(_remote_dma_routes(m)) if m.gpu_remote_dma else 0  # H2D and D2H caps
        if m.nic_remote_dma:  # TX and RX caps per NIC with a far socket
            links += 2 * len({r[0].index for r in _remote_dma_routes(m, m.nics)})
    return {"hosts": hosts, "links": links + len(cluster.nodes)}  # + the switch's, one per node
