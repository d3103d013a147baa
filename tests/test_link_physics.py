"""Links as the hardware is (docs/network-model.md): full-duplex Ethernet, PCIe and inter-socket
links; SimGrid's LV08 corrections on the Ethernet path only.

Flows run on the platforms `testbed platform` writes, under numasim's network model, with the
`flow_times` tool (simulator/tools/flow_times.cpp: starts the flows at t = 0, prints their ends).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from testbed.common.paths import FLOW_TIMES
from testbed.describe.machines import load_cluster
from testbed.platform.platform_xml import write_platform

SIZE = 1e9  # bytes per flow: latencies are negligible but counted exactly
LV08_BW, LV08_LAT = 0.97, 13.01  # SimGrid 3.32 surf_network_model_init_LegrandVelho


@pytest.fixture(scope="module")
def flow_times(simulator_tool) -> Path:
    return simulator_tool(FLOW_TIMES)


@pytest.fixture(scope="module")
def platforms(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("links")
    paths = {}
    for name in ("chifflet-1", "hetero-3"):
        paths[name] = out / f"{name}.xml"
        write_platform(load_cluster(name), paths[name])
    return paths


def flows(tool: Path, xml: Path, *pairs: tuple[str, str], cfg: tuple[str, ...] = ()) -> list[dict]:
    args = [str(tool), str(xml)] + [x for src, dst in pairs for x in (src, dst, f"{SIZE:.0f}")] + list(cfg)
    res = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["flows"]


# Per link class: a flow and one in the opposite direction through that class's link (the second
# avoids every other link the first one saturates). On the inter-socket link: a RAM-to-RAM copy
# (bound by the 30.3 GB/s inter-socket link) against a GPU-to-GPU copy across the sockets.
OPPOSITE = {
    "eth": ("hetero-3", ("chetemi-1.nic0", "chifflet-1.nic0"), ("chifflet-1.nic0", "chetemi-1.nic0"), "chetemi-1.eth"),
    "pcie": ("chifflet-1", ("chifflet-1.ram0", "chifflet-1.gpu0"), ("chifflet-1.gpu0", "chifflet-1.ram0"),
             "chifflet-1.pcie0"),
    "nicpcie": ("chifflet-1", ("chifflet-1.ram0", "chifflet-1.nic0"), ("chifflet-1.nic0", "chifflet-1.ram0"),
                "chifflet-1.nicpcie0"),
    "qpi": ("chifflet-1", ("chifflet-1.ram0", "chifflet-1.ram1"), ("chifflet-1.gpu1", "chifflet-1.gpu0"),
            "chifflet-1.qpi"),
}


@pytest.mark.parametrize("cls", sorted(OPPOSITE))
def test_opposite_flows_take_the_time_of_one(flow_times: Path, platforms: dict[str, Path], cls: str) -> None:
    cluster, fwd, rev, link = OPPOSITE[cls]
    xml = platforms[cluster]
    alone = [flows(flow_times, xml, fwd)[0], flows(flow_times, xml, rev)[0]]
    both = flows(flow_times, xml, fwd, rev)
    # They cross the link in opposite directions: its two SimGrid links (<id>_UP, <id>_DOWN), one each.
    dirs = [{lk for lk in f["links"] if lk in (f"{link}_UP", f"{link}_DOWN")} for f in both]
    assert len(dirs[0]) == len(dirs[1]) == 1 and dirs[0] != dirs[1], dirs
    for a, b in zip(alone, both, strict=False):
        assert b["end"] == pytest.approx(a["end"], rel=1e-9), (a, b)


# One flow per intra-node link class: latency + size / bandwidth, no correction factor.
INTRA = {
    "membus+core": ("chifflet-1.ram0", "chifflet-1.cpu3"),
    "membus+qpi+membus": ("chifflet-1.ram0", "chifflet-1.ram1"),
    "pcie": ("chifflet-1.gpu0", "chifflet-1.ram0"),
    "pcie+qpi+pcie": ("chifflet-1.gpu0", "chifflet-1.gpu1"),
    "nicpcie": ("chifflet-1.ram1", "chifflet-1.nic0"),
}


@pytest.mark.parametrize("route", sorted(INTRA))
def test_intra_node_flow_is_size_over_bandwidth_plus_latency(flow_times: Path, platforms: dict[str, Path],
                                                             route: str) -> None:
    (f,) = flows(flow_times, platforms["chifflet-1"], INTRA[route])
    assert not any(".eth" in link for link in f["links"])
    assert f["end"] == pytest.approx(f["latency"] + SIZE / f["bandwidth"], rel=1e-12)


def test_ethernet_flow_has_lv08_factors(flow_times: Path, platforms: dict[str, Path]) -> None:
    (f,) = flows(flow_times, platforms["hetero-3"], ("chetemi-1.nic0", "chifflet-1.nic0"))
    assert f["links"] == ["chetemi-1.eth_UP", "hetero-3.switch0", "chifflet-1.eth_DOWN"]
    assert f["end"] == pytest.approx(LV08_LAT * f["latency"] + SIZE / (LV08_BW * f["bandwidth"]), rel=1e-12)


def test_a_chosen_network_model_is_simgrids(flow_times: Path, platforms: dict[str, Path]) -> None:
    # --cfg=network/model:LV08 (or the bench's SMPI): SimGrid's model as is, LV08 factors everywhere.
    (f,) = flows(flow_times, platforms["chifflet-1"], INTRA["pcie"], cfg=("--cfg=network/model:LV08",))
    assert f["end"] == pytest.approx(LV08_LAT * f["latency"] + SIZE / (LV08_BW * f["bandwidth"]), rel=1e-9)


# Cross-socket DMA (machine `gpu_remote_dma`): the public measurement chifflet's figures come
# from (P100-PCIe, CUDA bandwidthTest, 32 MiB pinned, buffer on the other socket: H2D 3.78 GB/s,
# D2H 2.54 GB/s; socket-local 12.15 / 12.89 GB/s), reproduced by a single simulated copy.
BANDWIDTH_TEST_BYTES = 32 * 2**20


@pytest.mark.parametrize("src,dst,measured", [("chifflet-1.ram1", "chifflet-1.gpu0", 3.78e9),
                                               ("chifflet-1.gpu0", "chifflet-1.ram1", 2.54e9),
                                               ("chifflet-1.ram0", "chifflet-1.gpu1", 3.78e9)])
def test_cross_socket_copy_reproduces_the_measured_rate(flow_times: Path, platforms: dict[str, Path], src, dst,
                                                        measured) -> None:
    args = [str(flow_times), str(platforms["chifflet-1"]), src, dst, str(BANDWIDTH_TEST_BYTES)]
    (f,) = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)["flows"]
    assert BANDWIDTH_TEST_BYTES / f["end"] == pytest.approx(measured, rel=0.10)
    # It still crosses the inter-socket link and the GPU's PCIe link (where it contends).
    assert any("qpi" in lk for lk in f["links"]) and any("pcie" in lk for lk in f["links"])


def test_cross_socket_copy_shares_the_gpus_pcie_link(flow_times: Path, platforms: dict[str, Path]) -> None:
    xml = platforms["chifflet-1"]
    local, remote = ("chifflet-1.ram0", "chifflet-1.gpu0"), ("chifflet-1.ram1", "chifflet-1.gpu0")
    both = flows(flow_times, xml, local, remote)
    pcie = 10.5e9  # chifflet's PCIe figure
    # Together they cannot exceed the PCIe link: the local copy gets what the remote one leaves.
    assert SIZE / both[0]["end"] < pcie * 0.75
    alone = flows(flow_times, xml, local)[0]
    assert both[0]["end"] > alone["end"] * 1.3


# A NIC's DMA with the buffer on the far socket (machine `nic_remote_dma`): StarPU-MPI's progression
# thread on the far socket hands its socket buffers to the NIC, which reads (send) or writes
# (receive) them across the inter-socket link at the machine's rates.
@pytest.mark.parametrize("src,dst,which", [("chifflet-1.cpu20", "chifflet-1.nic0", 0),
                                           ("chifflet-1.nic0", "chifflet-1.cpu20", 1)])
def test_cross_socket_nic_dma_runs_at_the_machine_rate(flow_times: Path, platforms: dict[str, Path], src, dst,
                                                       which) -> None:
    from testbed.describe.machines import load_machine

    m = load_machine("chifflet")
    assert m.nics[0].numa_node == 0 and 20 in m.numa_nodes[1].cores
    (f,) = flows(flow_times, platforms["chifflet-1"], (src, dst))
    assert f["end"] == pytest.approx(f["latency"] + SIZE / m.nic_remote_dma[which], rel=1e-9)
    assert any("qpi" in lk for lk in f["links"]) and any("nicpcie" in lk for lk in f["links"])
    # from the NIC's own socket: the NIC's PCIe link, no cap
    (local,) = flows(flow_times, platforms["chifflet-1"], ("chifflet-1.cpu2", "chifflet-1.nic0"))
    assert not any("xdma" in lk for lk in local["links"])

