"""SimGrid loads the generated numasim platforms; counts and routes follow the YAML."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from testbed.common.paths import PLATFORM_INFO
from testbed.describe.machines import load_cluster
from testbed.platform.platform_xml import expected_counts, write_platform

CLUSTERS = ["g5k-lille-21", "chifflet-1", "hetero-3"]


@pytest.fixture(scope="module")
def platform_info(simulator_tool) -> Path:
    """The platform_info tool (built here if `make build` has not run yet)."""
    return simulator_tool(PLATFORM_INFO)


def info(tool: Path, xml: Path, *pairs: tuple[str, str]) -> dict:
    args = [str(tool), str(xml)] + [h for p in pairs for h in p]
    res = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def platforms(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("numasim")
    paths = {}
    for name in CLUSTERS:
        paths[name] = out / f"{name}.xml"
        write_platform(load_cluster(name), paths[name])
    return paths


@pytest.mark.parametrize("name", CLUSTERS)
def test_counts_match_yaml(platform_info: Path, platforms: dict[str, Path], name: str) -> None:
    cluster = load_cluster(name)
    data = info(platform_info, platforms[name])
    links = [lk for lk in data["links"] if lk["name"] != "__loopback__"]
    assert len(data["hosts"]) == expected_counts(cluster)["hosts"]
    assert len(links) == expected_counts(cluster)["links"]
    for node in cluster.nodes:
        m = node.machine
        hosts = [h for h in data["hosts"] if h["properties"].get("node") == node.name]
        kinds = [h["properties"]["kind"] for h in hosts]
        assert kinds.count("cpu") == m.ncores
        assert kinds.count("gpu") == len(m.gpus)
        assert kinds.count("ram") == len(m.numa_nodes)
        assert kinds.count("nic") == len(m.nics)
    zones = {z["name"]: z for z in data["zones"]}
    for node in cluster.nodes:
        assert zones[node.name]["properties"]["rank"] == str(node.rank)
        assert zones[node.name]["properties"]["machine"] == node.machine.name


def test_numa_values_reach_simgrid(platform_info: Path, platforms: dict[str, Path]) -> None:
    data = info(platform_info, platforms["chifflet-1"])
    links = {lk["name"]: lk for lk in data["links"]}
    cluster = load_cluster("chifflet-1")
    m = cluster.nodes[0].machine
    assert links["chifflet-1.membus1"]["bandwidth"] == pytest.approx(m.numa_nodes[1].memory_bandwidth_Bps)
    # Full-duplex links: one SimGrid link per direction, each with the per-direction figure.
    for d in ("UP", "DOWN"):
        assert links[f"chifflet-1.qpi_{d}"]["latency"] == pytest.approx(m.inter_socket_links[0].latency_s)
        assert links[f"chifflet-1.qpi_{d}"]["bandwidth"] == pytest.approx(m.inter_socket_links[0].bandwidth_Bps)
        assert links[f"chifflet-1.pcie1_{d}"]["bandwidth"] == pytest.approx(m.gpus[1].pcie_bandwidth_Bps)
        assert links[f"chifflet-1.nicpcie0_{d}"]["bandwidth"] == pytest.approx(m.nics[0].pcie_bandwidth_Bps)
        assert links[f"chifflet-1.eth_{d}"]["bandwidth"] == pytest.approx(m.nics[0].bandwidth_Bps)
    assert "chifflet-1.qpi" not in links
    # Memory buses and core paths carry reads and writes on one channel: one shared link.
    assert links["chifflet-1.membus0"]["sharing"] == links["chifflet-1.core0"]["sharing"] == "SHARED"
    assert links["chifflet-1.switch0"]["sharing"] == "FATPIPE"
    hosts = {h["name"]: h for h in data["hosts"]}
    assert hosts["chifflet-1.gpu1"]["properties"]["numa"] == "1"
    assert hosts["chifflet-1.cpu20"]["properties"]["numa"] == "1"
    assert hosts["chifflet-1.ram0"]["properties"]["memory"] == str(m.numa_nodes[0].memory_bytes)


def test_numa1_routes_cross_the_inter_socket_link(platform_info: Path, platforms: dict[str, Path]) -> None:
    data = info(platform_info, platforms["hetero-3"],
                ("chifflet-1.ram1", "chifflet-1.gpu0"), ("chifflet-1.ram1", "chifflet-1.nic0"),
                ("chifflet-1.ram0", "chifflet-1.gpu0"), ("chifflet-1.ram0", "chifflet-1.nic0"),
                ("chifflet-1.ram1", "chetemi-2.ram0"), ("chifflet-1.cpu20", "chifflet-1.ram0"))
    routes = {(r["src"], r["dst"]): r["links"] for r in data["routes"]}
    # Split-duplex directions: UP from a device (GPU, NIC) to its socket, from socket 0 to socket 1,
    # and from a node to the switch; DOWN the other way.
    # (the GPU copy from the far socket also takes the cross-socket DMA cap, machine gpu_remote_dma)
    assert routes[("chifflet-1.ram1", "chifflet-1.gpu0")] == [
        "chifflet-1.membus1", "chifflet-1.qpi_DOWN", "chifflet-1.xdma_h2d0", "chifflet-1.pcie0_DOWN"]
    assert routes[("chifflet-1.ram1", "chifflet-1.nic0")] == [
        "chifflet-1.membus1", "chifflet-1.qpi_DOWN", "chifflet-1.nicpcie0_DOWN"]
    assert routes[("chifflet-1.ram0", "chifflet-1.gpu0")] == ["chifflet-1.membus0", "chifflet-1.pcie0_DOWN"]
    assert routes[("chifflet-1.ram0", "chifflet-1.nic0")] == ["chifflet-1.membus0", "chifflet-1.nicpcie0_DOWN"]
    assert routes[("chifflet-1.ram1", "chetemi-2.ram0")] == [
        "chifflet-1.membus1", "chifflet-1.qpi_DOWN", "chifflet-1.nicpcie0_DOWN", "chifflet-1.eth_UP",
        "hetero-3.switch2", "chetemi-2.eth_DOWN", "chetemi-2.nicpcie0_UP", "chetemi-2.membus0"]
    assert "chifflet-1.qpi_DOWN" in routes[("chifflet-1.cpu20", "chifflet-1.ram0")]  # socket 1 -> socket 0
