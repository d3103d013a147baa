"""hwloc loads the generated topologies with the right objects and NUMA attachments."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from testbed.describe.hwloc_xml import write_topology
from testbed.describe.machines import load_machine


def hwloc_counts(xml: Path) -> dict[str, int]:
    out = subprocess.run(["hwloc-info", "--input", str(xml)], check=True, capture_output=True, text=True).stdout
    return {m.group(2): int(m.group(1)) for m in re.finditer(r":\s+(\d+) (\w+) \(type", out)}


def numa_of_osdev(xml: Path, name: str) -> str:
    return subprocess.run(["hwloc-calc", "--input", str(xml), f"os={name}", "--intersect", "NUMAnode"],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def topologies(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("hwloc")
    paths = {}
    for name in ("chifflet", "chetemi"):
        paths[name] = out / f"{name}.xml"
        write_topology(load_machine(name), paths[name])
    return paths


@pytest.mark.parametrize("name, cores, pus, pcidevs", [("chifflet", 28, 56, 3), ("chetemi", 20, 20, 1)])
def test_counts(topologies: dict[str, Path], name: str, cores: int, pus: int, pcidevs: int) -> None:
    counts = hwloc_counts(topologies[name])
    assert counts["Package"] == 2
    assert counts["NUMANode"] == 2
    assert counts["Core"] == cores
    assert counts["PU"] == pus
    assert counts["PCIDev"] == pcidevs


def test_lstopo_console_shows_devices(topologies: dict[str, Path]) -> None:
    out = subprocess.run(["lstopo", "--input", str(topologies["chifflet"]), "--of", "console"],
                         check=True, capture_output=True, text=True).stdout
    assert out.count("Package L#") == 2
    assert 'CoProc(CUDA) "cuda0"' in out and 'CoProc(CUDA) "cuda1"' in out
    assert 'Net "eth0"' in out
    assert "384GB" in out  # 768 GiB split over two NUMA nodes


def test_device_numa_attachment(topologies: dict[str, Path]) -> None:
    chifflet = topologies["chifflet"]
    assert numa_of_osdev(chifflet, "cuda0") == "0"
    assert numa_of_osdev(chifflet, "cuda1") == "1"
    assert numa_of_osdev(chifflet, "eth0") == "0"
    assert numa_of_osdev(topologies["chetemi"], "eth0") == "0"
