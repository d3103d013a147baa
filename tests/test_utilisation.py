"""Utilisation over time (testbed/traces/utilisation.py): exact busy time per bin, conservation of
busy time and bytes on a real numasim trace of the tiny two-node platform, the figure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from support.traces import run_tiny

from testbed.common import paths
from testbed.traces.traces import read_tasks, read_transfers
from testbed.traces.utilisation import COLUMNS, busy_time, link_class, plot_utilisation, utilisation


def test_busy_time_is_the_exact_overlap_with_each_bin():
    rng = np.random.default_rng(1)
    start = rng.uniform(0, 9, 200)
    end = start + rng.exponential(0.7, 200)
    weight = rng.uniform(0.5, 2, 200)
    edges = np.linspace(0, 12, 37)
    brute = np.array([np.sum(weight * np.clip(np.minimum(end, b1) - np.maximum(start, b0), 0, None))
                      for b0, b1 in zip(edges[:-1], edges[1:], strict=True)])
    np.testing.assert_allclose(busy_time(start, end, edges, weight), brute, rtol=1e-9, atol=1e-9)


def test_busy_fraction_by_hand():
    tasks = pd.DataFrame({"ResourceId": ["n1.cpu0", "n1.cpu1", "n1.gpu0", "n2.cpu0"],
                          "Start": [0.0, 0.5, 0.25, 0.0], "End": [1.0, 1.0, 0.75, 0.1]})
    tasks["WorkerType"] = ["cpu", "cpu", "cuda", "cpu"]
    tasks["NodeName"] = tasks["ResourceId"].str.split(".").str[0]
    table = utilisation(tasks, None, bins=2)
    assert list(table.columns) == COLUMNS
    got = {(r.node, r.resource, r.time_s): r.value for r in table.itertuples()}
    assert got == pytest.approx({("n1", "cpu", 0.0): 0.5, ("n1", "cpu", 0.5): 1.0, ("n1", "gpu", 0.0): 0.5,
                                 ("n1", "gpu", 0.5): 0.5, ("n2", "cpu", 0.0): 0.2, ("n2", "cpu", 0.5): 0.0})
    assert set(table["metric"]) == {"busy_fraction"}


def test_link_classes_of_numasim_link_names():
    assert link_class("chifflet-3.eth_UP") == link_class("g5k.switch") == link_class("g5k.switch12") \
        == "network (Ethernet, NIC)"
    assert link_class("n1.nicpcie0") == "network (Ethernet, NIC)" and link_class("mpi") == "network (Ethernet, NIC)"
    assert link_class("n1.qpi") == link_class("n1.qpi1") == "inter-socket"
    assert link_class("n1.pcie0") == link_class("n1.pcie0_DOWN") == link_class("n1.xdma_d2h0") == "PCIe (GPU)"
    assert link_class("n1.qpi_UP") == "inter-socket"
    assert link_class("n1.membus1") == "memory bus"
    assert link_class("n1.core3") == "core links" and link_class("n1.bus7") == "other (bus)"


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    if not paths.NUMASIM.exists():
        pytest.skip("numasim not built (make build)")
    tasks, transfers, _ = run_tiny(tmp_path_factory.mktemp("util"), 7)
    return read_tasks(tasks), read_transfers(transfers)


def test_busy_time_and_bytes_are_conserved_on_a_real_trace(traced):
    tasks, transfers = traced
    table = utilisation(tasks, transfers, bins=50)
    span = max(tasks["End"].max(), transfers["End"].max())
    assert table["time_s"].min() == 0 and (table["time_s"] + table["bin_s"]).max() == pytest.approx(span)
    busy = table[table["metric"] == "busy_fraction"]
    assert ((busy["value"] >= 0) & (busy["value"] <= 1 + 1e-9)).all()
    assert set(busy["resource"]) == {"cpu", "gpu"} and set(busy["node"]) == {"n1", "n2"}
    # busy fraction x workers x bin width, summed, is the time the workers spent in tasks
    for (node, wtype), g in tasks.groupby(["NodeName", "WorkerType"]):
        rows = busy[(busy["node"] == node) & (busy["resource"] == ("gpu" if wtype == "cuda" else "cpu"))]
        assert (rows["value"] * rows["bin_s"]).sum() * g["ResourceId"].nunique() == pytest.approx(
            g["Duration"].sum(), rel=1e-9)
    # per link class: the bytes/s integrate to the bytes of the transfers crossing the class, the
    # active transfers to their durations
    links = table[table["node"] == "cluster"]
    classes = transfers["Links"].fillna("").map(lambda s: {link_class(x) for x in s.split()})
    assert {"network (Ethernet, NIC)", "PCIe (GPU)", "memory bus"} <= set(links["resource"])
    for cls, g in links.groupby("resource"):
        crossing = transfers[classes.map(lambda cs, cls=cls: cls in cs)]
        rate, active = g[g["metric"] == "bytes_per_s"], g[g["metric"] == "active_transfers"]
        assert (rate["value"] * rate["bin_s"]).sum() == pytest.approx(crossing["Bytes"].sum(), rel=1e-9)
        assert (active["value"] * active["bin_s"]).sum() == pytest.approx(
            (crossing["End"] - crossing["Start"]).sum(), rel=1e-9, abs=1e-12)
    # the run is deterministic given its seed, and so is the table
    pd.testing.assert_frame_equal(table, utilisation(tasks, transfers, bins=50))


def test_utilisation_figure(traced, tmp_path):
    tasks, transfers = traced
    path = plot_utilisation({"run": utilisation(tasks, transfers, bins=40)}, tmp_path / "u.png")
    import matplotlib.image

    image = matplotlib.image.imread(path)
    assert image.shape[0] > 350 and image.shape[1] > 800
    assert image[..., :3].std() > 0.1  # a heatmap and lines, not a blank canvas
