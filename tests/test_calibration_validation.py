"""The calibration's `validate` step: numasim on the machine derived from a bundle vs the real LU."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from testbed.calibrate.validation import TOLERANCE, validate, worker_stats
from testbed.common.paths import CALIBRATION, LU_REAL, NUMASIM

LOCAL = CALIBRATION / "vm-2c"

pytestmark = pytest.mark.skipif(not NUMASIM.exists() or not (LOCAL / "lu-reference.json").exists(),
                                reason="numasim not built (make build) or no local bundle")


def copy_bundle(dst: Path, machine: str = "local") -> Path:
    """The committed bundle's inputs of the validation, with its files renamed for `machine`."""
    dst.mkdir(parents=True)
    for rel in ("hwloc.xml", "host.json", "kernels.yaml", "lu-reference.json"):
        shutil.copy(LOCAL / rel, dst / rel)
    shutil.copytree(LOCAL / "numa", dst / "numa")
    for sub in ("bus", "codelets/45"):
        (dst / "sampling" / sub).mkdir(parents=True)
        for f in (LOCAL / "sampling" / sub).iterdir():
            # bus/<machine>.<suffix>, codelets/45/<symbol>.<machine>
            name = f"{machine}.{f.name.split('.', 1)[1]}" if sub == "bus" else f"{f.name.rsplit('.', 1)[0]}.{machine}"
            shutil.copy(f, dst / "sampling" / sub / name)
    k = yaml.safe_load((dst / "kernels.yaml").read_text())
    k["machine"] = machine
    (dst / "kernels.yaml").write_text(yaml.safe_dump(k, sort_keys=False))
    return dst


def scale_models(bundle: Path, factor: float) -> None:
    """Multiply every history entry's time by `factor` (mean, dev, sum; sum2 by factor^2)."""
    for f in (bundle / "sampling" / "codelets" / "45").iterdir():
        lines = []
        for line in f.read_text().splitlines():
            cols = line.split()
            if len(cols) == 8 and re.fullmatch(r"[0-9a-f]{8}", cols[0]):
                mean, dev, s, s2 = (float(c) for c in cols[3:7])
                cols[3:7] = [f"{mean * factor:e}", f"{dev * factor:e}", f"{s * factor:e}", f"{s2 * factor ** 2:e}"]
                line = "\t".join(cols)
            lines.append(line)
        f.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def committed() -> dict:
    return validate(LOCAL, "local", LU_REAL, [], paired_runs=0)


def test_compares_the_bundle_reference_with_numasim(committed: dict) -> None:
    ref = json.loads((LOCAL / "lu-reference.json").read_text())
    assert committed["real"]["makespans_s"] == ref["makespans_s"]
    assert committed["workload"]["n"] == ref["n"] and committed["workload"]["b"] == ref["b"]
    # same StarPU configuration as the real runs, minus the run's own STARPU_HOME
    assert committed["env"]["STARPU_SCHED"] == ref["env"]["STARPU_SCHED"] and "STARPU_HOME" not in committed["env"]
    sim = committed["simulated"]
    assert len(sim["makespans_s"]) == len(ref["makespans_s"])
    assert sim["tasks_by_kind"] == {k: v for k, v in ref["runs"][0]["tasks_by_kind"].items() if k != "plrnt"}
    # no simulation beats one worker per core doing nothing but the modelled kernels
    floor = committed["diagnostics"]["model_sum_s"] / sim["workers"]
    assert sim["means_only_s"] >= floor * 0.999
    diff = (sim["mean_s"] - committed["real"]["mean_s"]) / committed["real"]["mean_s"]
    assert committed["difference_pct"] == pytest.approx(100 * diff, abs=0.01)
    assert committed["within_tolerance"] == (abs(diff) <= TOLERANCE)
    assert committed["diagnosis"]


def test_memory_microbenchmarks_of_the_bundle_are_simulated(committed: dict) -> None:
    """Every numa_bench cell of the bundle (alone and all) is simulated with numasim's memory model
    on the machine derived from it, beside the measurement (testbed/calibrate/memory_microbench.py)."""
    m = committed["memory_microbenchmarks"]
    raw = sorted((LOCAL / "numa" / "raw").glob("*-all.csv"))
    assert m["total"] == len(m["cells"]) >= len(raw) > 0
    for c in m["cells"]:
        assert c["measured"] > 0 and c["simulated"] > 0
        assert c["error_pct"] == pytest.approx(100 * (c["simulated"] - c["measured"]) / c["measured"], abs=0.2)
    assert {c["kernel"] for c in m["cells"]} >= {"dgemm", "daxpy"}


def test_simulation_reads_the_bundle_models_under_its_machine_name(tmp_path: Path, committed: dict) -> None:
    # `testbed calibrate --machine node-a` names its files *.node-a, while a machine YAML
    # cannot have '-' (node_a): the validation must still find the bundle's models, and
    # use them rather than models generated from kernels.yaml: doubling them doubles the run.
    bundle = copy_bundle(tmp_path / "node-a", "node-a")
    scale_models(bundle, 2.0)
    doubled = validate(bundle, "node-a", LU_REAL, [], paired_runs=0)
    ratio = doubled["simulated"]["means_only_s"] / committed["simulated"]["means_only_s"]
    assert ratio == pytest.approx(2.0, rel=0.02)


@pytest.mark.skipif(not LU_REAL.exists(), reason="apps/lu real build missing (make build)")
def test_paired_runs_measure_real_and_simulated_now() -> None:
    doc = validate(LOCAL, "local", LU_REAL, [], paired_runs=1)
    runs = [r for v in doc["paired"]["variants"].values() for r in v]
    assert runs
    for r in runs:
        assert r["real_makespan_s"] > 0 and r["simulated_makespan_s"] > 0
        assert isinstance(r["worker_executing_s"], float) and r["worker_executing_s"] > 0
        assert all(0 < s["samples_kept"] <= s["tasks"] for s in r["samples"].values())


def test_worker_stats_reads_starpu_output_without_the_global_line() -> None:
    text = ("CPU 0\n\t485 task(s)\n\ttime split: total 694.41 ms = executing: 252.65 ms + callback: 0.08 ms + "
            "waiting: 0.11 ms + sleeping: 437.50 ms + scheduling: 0.44 ms + overhead 3.63 ms\n"
            "CPU 1\n\t10 task(s)\n\ttime split: total 694.41 ms = executing: 10.00 ms + callback: 0.08 ms + "
            "waiting: 0.11 ms + sleeping: 600.00 ms + scheduling: 0.44 ms + overhead 3.63 ms\n\n"
            "Global time split: total 1388.82 ms = executing: 262.65 ms (18.9%) + callback: 0.16 ms (0.01%) + "
            "waiting: 0.22 ms (0.02%) + sleeping: 1037.50 ms (74.7%) + scheduling: 0.88 ms + overhead 7.26 ms\n")
    assert worker_stats(text) == {"workers": 2, "executing_s": pytest.approx(0.26265), "sleeping_s": pytest.approx(1.0375)}
    assert worker_stats("no statistics") is None
