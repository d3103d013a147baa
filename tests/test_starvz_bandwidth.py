"""The bandwidth variables of `testbed trace-starvz` (testbed/traces/starvz_runtime.py): the MPI
threads' and the memory managers' `Bandwidth In/Out (MB/s)` built from the transfer log stay under
the capacity of the link the transfers shared, and carry the log's bytes."""

from __future__ import annotations

import gzip
import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from testbed.traces.starvz_runtime import min_peak_rates

NIC = 1.25e9  # B/s, the 10 Gb/s Ethernet NIC of the study's nodes
MB = 1.25e6  # bytes of each message: 1 ms alone on the NIC


def variables(out: Path) -> dict[tuple[str, str], list[tuple[float, float, float]]]:
    """paje.variable.csv.gz's (resource, type) -> [(start ms, end ms, value)]."""
    rows = defaultdict(list)
    with gzip.open(out / "paje.variable.csv.gz", "rt") as fh:
        for line in fh.read().splitlines()[1:]:
            _, res, type_, start, end, _, value = (f.strip() for f in line.split(","))
            rows[(res, type_)].append((float(start), float(end), float(value)))
    return rows


def export(tmp_path: Path, copies: list[tuple[float, float, float, str, str]]) -> dict:
    tasks = tmp_path / "tasks.csv"
    tasks.write_text("ResourceId,Start,End,Value,Node,WorkerNuma,WorkerMemNode,JobId\n"
                     "n0.CPU0,0.0,0.004,getrf,0,0,n0.ram0,1\nn1.CPU0,0.0,0.004,getrf,1,0,n1.ram0,2\n")
    transfers = tmp_path / "transfers.csv"
    transfers.write_text("Start,End,Bytes,Src,Dst,Links,Estimate,Calibrated,Thread\n"
                         + "".join(f"{s},{e},{b:.0f},{src},{dst},,,,\n" for s, e, b, src, dst in copies))
    proc = subprocess.run([sys.executable, "-m", "testbed", "trace-starvz", str(tasks), "--b", "96", "--transfers",
                           str(transfers), "--out", str(tmp_path / "sv")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return variables(tmp_path / "sv")


# Two messages on one NIC as SimGrid's max-min sharing runs them: the first alone at the NIC's rate
# for 0.5 ms, both at half of it for 1 ms (the first ends at 1.5 ms), the second alone for its last
# 0.5 ms (it ends at 2 ms). Each one's average rate is 2/3 of the NIC's: their sum, 4/3 of it, is
# what StarPU's bytes / duration would show between 0.5 and 1.5 ms. The same with two copies into
# a GPU over its PCIe link (12 GB/s: the times divided by 9.6).
@pytest.mark.parametrize("src, dst, scale, resources", [
    ("n0.ram0", "n1.ram0", 1.0, [("0_mpict", "Bandwidth Out (MB/s)"), ("1_mpict", "Bandwidth In (MB/s)")]),
    ("n0.ram0", "n0.gpu0", 1 / 9.6, [("0_MEMMANAGER0", "Bandwidth Out (MB/s)"),
                                     ("0_MEMMANAGER1", "Bandwidth In (MB/s)")]),
])
def test_two_transfers_sharing_a_link_stay_under_its_capacity(tmp_path, src, dst, scale, resources):
    capacity = NIC / scale
    copies = [(0.0, 0.0015 * scale, MB, src, dst), (0.0005 * scale, 0.002 * scale, MB, src, dst)]
    rows = export(tmp_path, copies)
    for key in resources:
        series = rows[key]
        assert series, key
        peak = max(v for _, _, v in series)
        assert peak <= capacity / 1e6 * (1 + 1e-6), (key, peak)
        # MB/s x ms = kB: the bytes of the two messages, all of them
        assert sum(v * (e - s) for s, e, v in series) * 1e3 == pytest.approx(2 * MB, rel=1e-5), key  # 6 decimals of ms
        # here the NIC (PCIe link) is busy from the first start to the last end: its rate throughout
        busy = [(s, e, v) for s, e, v in series if v > 0]
        assert busy[0][0] == 0 and busy[-1][1] == pytest.approx(2 * scale, abs=1e-6)
        assert all(v == pytest.approx(capacity / 1e6, rel=1e-5) for _, _, v in busy)


def fair_share(flows: list[tuple[float, float, float]], capacity: float) -> list[tuple[float, float, float]]:
    """A link of `capacity` shared max-min fairly by flows (start, bytes, own cap: a slower link
    elsewhere on its route), each starting at its time: [(start, end, bytes)]."""
    left = {i: b for i, (_, b, _) in enumerate(flows)}
    end: dict[int, float] = {}
    t = 0.0
    while left:
        active = sorted((i for i in left if flows[i][0] <= t), key=lambda i: flows[i][2])
        rate, room = {}, capacity
        for k, i in enumerate(active):  # water filling: the smallest caps first
            rate[i] = min(flows[i][2], room / (len(active) - k))
            room -= rate[i]
        arrivals = [flows[i][0] for i in left if flows[i][0] > t]
        step = min([left[i] / rate[i] for i in active] + [a - t for a in arrivals])
        for i in active:
            left[i] -= rate[i] * step
            if left[i] <= 1e-9 * flows[i][1]:
                del left[i]
                end[i] = t + step
        t += step
    return [(flows[i][0], end[i], flows[i][1]) for i in range(len(flows))]


@pytest.mark.parametrize("seed", range(5))
def test_rates_of_shared_links_stay_under_capacity(seed):
    """Messages of a broadcast's sizes starting at random, some slowed elsewhere on their route,
    sharing one 1.25 GB/s link: their least peaked rates never exceed it (the sum of their average
    rates does), and each busy period carries exactly its messages' bytes."""
    rng = random.Random(seed)
    flows = [(rng.uniform(0, 0.05), rng.choice([7372800, 1843200, 460800]), rng.choice([NIC, NIC, NIC / 3]))
             for _ in range(60)]
    windows = fair_share(flows, NIC)
    pieces = min_peak_rates(windows)
    assert max(r for _, _, r in pieces) <= NIC * (1 + 1e-9)
    assert sum(r * (b - a) for a, b, r in pieces) == pytest.approx(sum(w for _, _, w in windows), rel=1e-9)
    for s, e, _ in windows:  # every message's window is covered
        assert sum(min(b, e) - max(a, s) for a, b, r in pieces if r > 0 and a < e and b > s) == pytest.approx(e - s)
    times = sorted({t for s, e, _ in windows for t in (s, e)})
    averages = max(sum(w / (e - s) for s, e, w in windows if s <= a < e) for a in times)
    assert averages > NIC  # what the sum of averages shows: more than the link carries


def test_a_lone_transfer_keeps_its_average_rate():
    assert min_peak_rates([(1.0, 3.0, 10.0)]) == [(1.0, 3.0, 5.0)]
    assert min_peak_rates([(0.0, 10.0, 1.0), (0.0, 1.0, 100.0), (20.0, 30.0, 5.0)]) == [
        (0.0, 1.0, 100.0), (1.0, 10.0, pytest.approx(1 / 9)), (20.0, 30.0, 0.5)]
