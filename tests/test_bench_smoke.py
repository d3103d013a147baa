"""Smoke test of the numasim vs StarPU-SimGrid bench: the bus-platform converter and one tiny
comparison (sirocco's shipped models, 4x4 tiles of 960) through both engines."""

from __future__ import annotations

import importlib.util
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from testbed import ROOT
from testbed.common.errors import InputError
from testbed.platform.starpu_bus_platform import NodeSource, build_platform, main, write_platform

SHIPPED = ROOT / ".deps" / "src" / "starpu-1.4.10" / "tools" / "perfmodels" / "sampling"
NUMASIM = ROOT / "build" / "simulator" / "numasim"
LU_SIMGRID = ROOT / "build" / "lu-simgrid" / "lu"

needs_shipped = pytest.mark.skipif(not SHIPPED.is_dir(), reason="StarPU sources not unpacked (envs/setup.sh)")


@needs_shipped
def test_converter_keeps_starpu_links_and_routes(tmp_path: Path) -> None:
    out = tmp_path / "sirocco.xml"
    assert main(["--sampling", str(SHIPPED), "--host", "sirocco", "--out", str(out)]) == 0
    zone = ET.parse(out).getroot().find("zone/zone")
    assert zone is not None and zone.get("id") == "sirocco"
    kinds = [h.find("prop[@id='kind']").get("value") for h in zone.findall("host")]
    assert kinds.count("cpu") == 24 and kinds.count("gpu") == 4 and kinds.count("ram") == 1
    links = {link.get("id"): link for link in zone.findall("link")}
    # sirocco.platform.v4.xml: RAM-CUDA0 10517678844.278971Bps 0.000010s, shared "Host" link.
    assert float(links["sirocco.pcieh2d0"].get("bandwidth").removesuffix("Bps")) == pytest.approx(10517678844.278971)
    assert "sirocco.membus0" in links
    route = zone.find("route[@src='sirocco.ram0'][@dst='sirocco.gpu0']")
    assert [c.get("id") for c in route.findall("link_ctn")] == ["sirocco.pcieh2d0", "sirocco.membus0"]
    assert route.get("symmetrical") == "NO"


def test_converter_rejects_a_missing_bus_platform(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="platform.v4.xml"):
        build_platform([NodeSource("x", "x", tmp_path / "bus" / "x.platform.v4.xml")])
    assert main(["--sampling", str(tmp_path), "--host", "nowhere", "--out", str(tmp_path / "o.xml")]) == 2
    assert not (tmp_path / "o.xml").exists()


@needs_shipped
@pytest.mark.skipif(not (NUMASIM.exists() and LU_SIMGRID.exists()), reason="numasim / apps/lu SimGrid build not built")
def test_tiny_comparison_agrees(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_vs", ROOT / "bench" / "numasim_vs_starpu.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_vs"] = bench  # dataclasses look their module up
    spec.loader.exec_module(bench)
    bench.USE_CACHE = False  # no StarPU-SimGrid result cached in bench/results from a test
    case = bench.shipped_case("sirocco", 4, tmp_path)
    assert case.starpu.tasks == case.numasim.tasks == 4 + 4 * 3 + sum(k * k for k in range(4))
    # A 4x4 LU is a chain of a few dozen kernels: both engines must land within the target.
    assert abs(case.diff_pct) <= 10.0, json.dumps({"starpu": case.starpu.makespan_s, "numasim": case.numasim.makespan_s})
    write_platform(build_platform([NodeSource("s", "sirocco", SHIPPED / "bus" / "sirocco.platform.v4.xml")]),
                   tmp_path / "again.xml")
    assert (tmp_path / "again.xml").read_text().count("kind") > 0


@pytest.mark.skipif(not NUMASIM.exists(), reason="numasim not built (make build)")
def test_study_diagnostics_bench_writes_every_table(tmp_path: Path) -> None:
    """bench/study_diagnostics.py at 6 x 6 tiles: both configurations traced and diagnosed."""
    import subprocess

    import pandas as pd

    out = tmp_path / "diag"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "study_diagnostics.py"), "--nt", "6", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "default, seed 1: makespan" in proc.stderr and "A=1, seed 1: makespan" in proc.stderr
    summary = pd.read_csv(out / "bound_summary.csv")
    assert set(summary["run"]) == {"default seed 1", "A=1 seed 1"} and set(summary["machine"]) == {"chetemi", "chifflet"}
    assert (summary["makespan_over_bound_model"] >= 1).all()
    assert "| machine | default seed 1 | A=1 seed 1 |" in (out / "digest.md").read_text()


@pytest.mark.skipif(not NUMASIM.exists(), reason="numasim not built (make build)")
def test_broadcast_bench_trees(tmp_path: Path) -> None:
    """bench/nmad_broadcast.py: one tile to 4 nodes takes ⌈log2 5⌉ = 3 single copies along
    NewMadeleine's binomial tree, 4 along its chain, and 4 sharing the owner's link with StarPU's
    MPI backend (docs/network-model.md, "Cooperative sends")."""
    import subprocess

    out = tmp_path / "bcast.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "nmad_broadcast.py"), "--k", "4", "--b", "480",
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(out.read_text())
    one = row["one_copy_s"]
    assert row["nmad binomial"]["time_s"] == pytest.approx(3 * one, rel=1e-3)
    assert row["nmad binomial"]["copies_from_owner"] == 3 and row["nmad binomial"]["forwarders"] == 1
    assert row["nmad chain"]["time_s"] == pytest.approx(4 * one, rel=1e-3)
    assert row["nmad chain"]["copies_from_owner"] == 1 and row["nmad chain"]["forwarders"] == 3
    assert row["mpi"]["copies_from_owner"] == 4 and row["mpi"]["forwarders"] == 0
    assert 3 * one < row["mpi"]["time_s"] < 4 * one


def test_campaign_completion_takes_the_full_designs_experiment_and_numbering() -> None:
    """bench/campaign_complete.py: the runs of a 1-repetition design (experiment `x1`) completed to
    2 repetitions (experiment `x2`) form one runs table of `x2`, in the full design's order."""
    import pandas as pd

    spec = importlib.util.spec_from_file_location("campaign_complete", ROOT / "bench" / "campaign_complete.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    full = pd.DataFrame({"experiment": "x2", "run": [0, 1, 2, 3], "order": [2, 0, 3, 1], "batch": [0, 0, 1, 1],
                         "config": ["a", "a", "b", "b"], "repetition": [1, 2, 1, 2], "seed": [11, 12, 21, 22]})
    runs = full.assign(makespan_s=[1.0, 2.0, 3.0, 4.0])
    have = runs[runs["repetition"] == 1].assign(experiment="x1", run=[0, 1], order=[1, 0], batch=0)
    new = runs[runs["repetition"] == 2].assign(experiment="x2-missing", run=[0, 1], order=[0, 1], batch=0)
    merged = bench.merge_runs(have, new, full)
    assert list(merged["experiment"].unique()) == ["x2"]
    assert list(merged["order"]) == [0, 1, 2, 3]
    assert list(merged["makespan_s"]) == [2.0, 4.0, 1.0, 3.0]
    assert list(merged.columns) == list(have.columns)
