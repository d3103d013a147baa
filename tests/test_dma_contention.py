"""DMA under memory load (docs/memory-model.md, "DMA under memory load";
simulator/src/memory_model.cpp MemorySystem::dma_copy): a device's DMA through a memory controller
the cores keep busy, checked with memory_bench's `dma` scenario on the public measurements'
platform (bench/data/host-network/cascadelake-6234.xml) and inside the LU (numasim)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed import ROOT
from testbed.calibrate.memory_microbench import MEMORY_BENCH, run
from testbed.common.errors import InputError
from testbed.describe.machines import load_machine, parse_machine

XML = ROOT / "bench" / "data" / "host-network" / "cascadelake-6234.xml"
STORAGE, RDMA, RAM = "thn.nic0", "thn.nic1", "thn.ram0"
CONTROLLER = 42.21e9  # membus0 of the platform


def dma(xml: Path, src: str, dst: str, threads: int) -> dict:
    return run(xml, "thn", "dma", src, dst, 1e9, 0, threads)


def variant(tmp_path: Path, drop_dma: bool = False, **links: str) -> Path:
    """The platform with some links' bandwidths changed, or without its DMA parameters."""
    text = XML.read_text()
    for link, bw in links.items():
        text = re.sub(rf'(<link id="thn.{link}" bandwidth=")[^"]*"', rf'\g<1>{bw}"', text)
    if drop_dma:
        text = re.sub(r'<prop id="numa_(dma_[a-z_]+|core_credits)" value="[^"]*"/>', "", text)
    out = tmp_path / "platform.xml"
    out.write_text(text)
    return out


def test_a_dma_read_keeps_its_rate_on_a_saturated_controller(tmp_path: Path) -> None:
    """THN quadrants 2 and 4: storage writes (DMA reads of memory) keep their ~14 GB/s while six
    streaming cores saturate the controller; a DMA read holds 164 lines in flight where a core holds
    11, so it takes 15 of the controller's shares. With max-min sharing alone (numasim before) it
    got one share in seven: 42.21 / 7 GB/s."""
    loaded = dma(XML, RAM, STORAGE, 6)
    assert loaded["flows"] == 15 and loaded["utilisation"] == 1
    assert loaded["bandwidth_Bps"] == pytest.approx(14e9, rel=1e-3)
    before = dma(variant(tmp_path, drop_dma=True), RAM, STORAGE, 6)
    assert before["flows"] == 1 and before["bandwidth_Bps"] == pytest.approx(CONTROLLER / 7, rel=1e-3)


def test_a_dma_write_gets_one_share_of_a_saturated_controller() -> None:
    """THN quadrant 3 (red regime): the NIC's DMA writes compete with the cores' posted write-backs
    for the write queue and lose their rate once the controller saturates: one max-min share."""
    assert dma(XML, RDMA, RAM, 2)["bandwidth_Bps"] == pytest.approx(12.25e9, rel=1e-3)  # 2 x 10.06 + 12.25 < 42.21
    loaded = dma(XML, RDMA, RAM, 4)
    assert loaded["flows"] == 1 and loaded["bandwidth_Bps"] == pytest.approx(CONTROLLER / 5, rel=1e-3)


def test_the_credit_window_bounds_a_device_faster_than_it(tmp_path: Path) -> None:
    """A device whose link outruns its credit window streams at the window: 92 x 64 B / 300 ns
    = 19.63 GB/s for writes, 164 x 64 B / 360 ns = 29.16 GB/s for reads (THN section 4.2)."""
    fast = variant(tmp_path, nicpcie0="40GBps")
    write, read = dma(fast, STORAGE, RAM, 0), dma(fast, RAM, STORAGE, 0)
    assert write["window_bound"] and write["bandwidth_Bps"] == pytest.approx(92 * 64 / 300e-9, rel=1e-3)
    assert read["window_bound"] and read["bandwidth_Bps"] == pytest.approx(164 * 64 / 360e-9, rel=1e-3)
    (tmp_path / "plain").mkdir()
    plain = variant(tmp_path / "plain", drop_dma=True, nicpcie0="40GBps")
    assert dma(plain, STORAGE, RAM, 0)["bandwidth_Bps"] == pytest.approx(40e9, rel=1e-3)


def test_the_window_shrinks_with_the_controllers_queueing(tmp_path: Path) -> None:
    """The window's latency is the domain's unloaded latency plus what the controller's load adds to
    the idle local latency (its loaded-latency curve): 70 ns x (2 - 1) at saturation here."""
    xml = variant(tmp_path)
    xml.write_text(xml.read_text().replace('<prop id="numa_core_credits" value="11"/>',
                                           '<prop id="numa_core_credits" value="11"/>'
                                           '<prop id="numa_loaded_latency" value="0:1,1:2"/>'))
    idle, loaded = dma(xml, STORAGE, RAM, 0), dma(xml, STORAGE, RAM, 4)
    assert loaded["utilisation"] == 1
    assert idle["window_Bps"] == pytest.approx(92 * 64 / (300e-9 + 70e-9 * idle["utilisation"]), rel=1e-3)
    assert loaded["window_Bps"] == pytest.approx(92 * 64 / 370e-9, rel=1e-3)


def test_a_bad_dma_parameter_is_refused(tmp_path: Path) -> None:
    xml = variant(tmp_path)
    xml.write_text(xml.read_text().replace('"numa_dma_write_credits" value="92"', '"numa_dma_write_credits" value="-3"'))
    p = subprocess.run([str(MEMORY_BENCH), str(xml), "thn", "dma", STORAGE, RAM, "1e9", "0", "1"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "numa_dma_write_credits" in p.stderr and str(xml) in p.stderr
    assert len([line for line in p.stderr.splitlines() if line.startswith("error:")]) == 1
    data = yaml.safe_load(Path(load_machine("chifflet").path).read_text())
    data["numa"]["dma_read_credits"]["value"] = 0
    with pytest.raises(InputError) as err:
        parse_machine(data, tmp_path / "bad.yaml")
    assert "numa.dma_read_credits" in str(err.value)


def test_split_dma_copies_run_in_the_lu_and_none_beats_its_route() -> None:
    """chifflet's host<->GPU copies that start on an oversubscribed NUMA-0 controller are split
    (dma_split_copies > 0), and none is faster than the same copy alone on the idle platform: the
    minimum actual / idle ratio is 1 (SimGrid 3.32's lazy update gave a split copy twice its link's
    rate before the split was started 10 ns late: a minimum of 0.485)."""
    out = subprocess.run([sys.executable, "-m", "testbed", "simulate", "--engine", "numasim", "--cluster",
                          "chifflet-1", "--n", "15360", "--b", "960", "--seed", "1"], check=True, cwd=ROOT,
                         capture_output=True, text=True, timeout=600).stdout
    summary = json.loads(out[out.index("{"):])
    assert summary["numa"]["dma_split_copies"] > 0, summary["numa"]
    bench = subprocess.run([sys.executable, str(ROOT / "bench" / "bus_contention.py"), "--nt", "16"], check=True,
                           cwd=ROOT, capture_output=True, text=True, timeout=600).stdout
    for line in bench.splitlines():
        if line.startswith("| RAM->GPU") or line.startswith("| GPU->RAM"):
            assert float(line.split("|")[3]) >= 0.999, bench
