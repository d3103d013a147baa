"""`testbed platform --from-calibration`: a bundle becomes a machine description citing it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from testbed.cli import main
from testbed.common.paths import CALIBRATION, MACHINES
from testbed.describe.from_calibration import machine_from_bundle, render
from testbed.describe.hwloc_xml import write_topology
from testbed.describe.machines import load_machine
from testbed.starpu.bus_files import read_bus_matrix as bus_matrix

LOCAL = CALIBRATION / "vm-2c"


def quantities(node, path=""):
    """(key path, quantity) of every {value: ...} mapping."""
    if isinstance(node, dict):
        if "value" in node:
            yield path, node
            return
        for k, v in node.items():
            yield from quantities(v, f"{path}.{k}" if path else k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from quantities(v, f"{path}[{i}]")


def test_local_bundle_gives_a_valid_machine_citing_it(tmp_path: Path) -> None:
    out = tmp_path / "local.yaml"
    assert main(["platform", "--from-calibration", str(LOCAL), "--out", str(out)]) == 0
    m = load_machine(out)
    raw = yaml.safe_load(out.read_text())
    assert raw["kernels"] == "calibration/vm-2c" and m.kernels == LOCAL
    for path, q in quantities(raw):
        text = q.get("source") or q.get("derived")
        if q.get("needs_calibration"):
            assert "not measured by the bundle calibration/vm-2c" in text, path
            assert path.split(".")[-1].split("[")[0] in raw["notes"] or path in raw["notes"], path
        else:
            assert "calibration/vm-2c/" in text, (path, text)
    kernels = yaml.safe_load((LOCAL / "kernels.yaml").read_text())
    t = kernels["kernels"]["dgemm"]["cpu"]["time_s"]["value"]
    assert m.core_flops == pytest.approx(2 * kernels["reference_tile"] ** 3 / t)
    assert "kernels.dgemm.cpu.time_s" in raw["cpu"]["core_flops"]["derived"]
    bw = [r for r in (LOCAL / "numa" / "bandwidth.csv").read_text().splitlines() if r.startswith("triad,node,0,0")]
    # the triad's counted rate x 32/24: write-allocate moves the written line twice
    assert m.numa_nodes[0].memory_bandwidth_Bps == pytest.approx(float(bw[0].split(",")[-1]) * 1e9 * 32 / 24,
                                                                 rel=1e-5)
    # what a one-node bundle cannot know is reported, not invented
    assert raw["numa_nodes"][0]["memory_latency_s"]["needs_calibration"] is True
    assert raw["nics"][0]["bandwidth_Bps"]["needs_calibration"] is True
    assert raw["numa"]["factor_dgemm_b192_alone"]["value"] == [[1.0]]


def test_committed_local_machine_is_the_bundle_rendering() -> None:
    """platforms/machines/local.yaml is regenerated from calibration/vm-2c (not hand-edited)."""
    data, missing = machine_from_bundle(LOCAL, "local")
    assert (MACHINES / "local.yaml").read_text() == render(data, missing, "calibration/vm-2c")


def _bus_file(path: Path, names: list[str], m: list[list[float]]) -> None:
    lines = ["# " + "".join(f"to {n}\t" for n in names)]
    for row in m + [[float("nan")] * len(names)]:
        lines.append("\t".join("nan" if v != v else f"{v:e}" for v in row + [float("nan")]))
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture()
def gpu_bundle(tmp_path: Path) -> Path:
    """A bundle of a 2-socket, 2-GPU node (chifflet's topology) with known measurements."""
    b = tmp_path / "calibration" / "gpunode"
    (b / "numa").mkdir(parents=True)
    (b / "sampling" / "bus").mkdir(parents=True)
    (b / "network").mkdir()
    write_topology(load_machine("chifflet"), b / "hwloc.xml")
    kernels = yaml.safe_load((LOCAL / "kernels.yaml").read_text())
    kernels["machine"] = "gpunode"
    kernels["kernels"]["dgemm"]["cuda"] = {
        "time_s": {"value": 0.001, "source": "test"}, "exponent": {"value": 3, "derived": "test"},
        "rel_std": {"value": 0.01, "source": "test"}}
    (b / "kernels.yaml").write_text(yaml.safe_dump(kernels))
    (b / "numa" / "bandwidth.csv").write_text(
        "kernel,scope,thread_node,data_node,threads,reps,bytes,best_s,mean_s,rel_std,gbps\n"
        "triad,node,0,0,14,10,1,1,1,0.01,50.0\ntriad,node,0,1,14,10,1,1,1,0.01,30.0\n"
        "triad,node,1,0,14,10,1,1,1,0.01,28.0\ntriad,node,1,1,14,10,1,1,1,0.01,49.0\n")
    (b / "numa" / "matrix-dgemm-b192-alone.csv").write_text(
        "quantity,thread_node,data_node_0,data_node_1\nfactor,0,1.0,1.3\nfactor,1,1.25,1.0\n")
    names = ["NUMA 0", "NUMA 1", "CUDA 0", "CUDA 1"]
    bw = [[0, 9000, 11000, 10000], [9000, 0, 10500, 12000], [11100, 10100, 0, 7000], [10200, 12100, 6000, 0]]
    lat = [[0, 1, 9, 11], [1, 0, 12, 8], [9, 12, 0, 20], [11, 8, 21, 0]]
    _bus_file(b / "sampling" / "bus" / "gpunode.bandwidth", names, [list(map(float, r)) for r in bw])
    _bus_file(b / "sampling" / "bus" / "gpunode.latency", names, [list(map(float, r)) for r in lat])
    (b / "host.json").write_text(json.dumps({"lscpu": {"CPU max MHz": "2600.0000"}}))
    (b / "network" / "pingpong.json").write_text(json.dumps(
        {"hosts": ["a", "b"], "loopback": False, "bandwidth_Bps": 1.1e9, "latency_s": 2e-6}))
    return b


def test_gpu_bundle_measurements_land_on_the_right_devices(gpu_bundle: Path, tmp_path: Path) -> None:
    out = tmp_path / "gpunode.yaml"
    assert main(["platform", "--from-calibration", str(gpu_bundle), "--out", str(out)]) == 0
    m = load_machine(out)
    raw = yaml.safe_load(out.read_text())
    assert [g.numa_node for g in m.gpus] == [0, 1]
    assert m.gpus[0].pcie_bandwidth_Bps == pytest.approx(11000e6)  # NUMA 0 -> CUDA 0
    assert m.gpus[1].pcie_bandwidth_Bps == pytest.approx(12000e6)  # NUMA 1 -> CUDA 1
    assert m.gpus[1].pcie_latency_s == pytest.approx(8e-6)
    assert "row NUMA 1, column to CUDA 1" in raw["gpus"][1]["pcie_bandwidth_Bps"]["source"]
    assert m.gpus[0].flops == pytest.approx(2 * 192**3 / 0.001)
    assert m.gpu_peer["cross_numa"].bandwidth_Bps == pytest.approx(7000e6)
    assert "same_numa" not in m.gpu_peer  # one GPU per NUMA node: nothing measured, nothing written
    assert m.inter_socket_links[0].bandwidth_Bps == pytest.approx(28e9)  # slower direction
    assert [n.memory_bandwidth_Bps for n in m.numa_nodes] == [pytest.approx(50e9 * 4 / 3, rel=1e-5),
                                                               pytest.approx(49e9 * 4 / 3, rel=1e-5)]
    assert m.frequency_hz == pytest.approx(2.6e9) and "CPU max MHz" in raw["cpu"]["frequency_hz"]["source"]
    assert m.nics[0].bandwidth_Bps == pytest.approx(1.1e9)
    assert raw["numa"]["factor_dgemm_b192_alone"]["value"] == [[1.0, 1.3], [1.25, 1.0]]
    assert "inter_socket_links[0].latency_s" in raw["notes"]
    assert "cpu.frequency_hz" not in raw["notes"]


def test_loopback_pingpong_is_not_a_nic_bandwidth(gpu_bundle: Path) -> None:
    pp = gpu_bundle / "network" / "pingpong.json"
    pp.write_text(json.dumps({"hosts": ["localhost", "localhost"], "loopback": True, "bandwidth_Bps": 9e9}))
    data, missing = machine_from_bundle(gpu_bundle)
    assert data["nics"][0]["bandwidth_Bps"]["needs_calibration"] is True
    assert any("loopback" in m for m in missing)


def test_bus_matrix_reads_starpu_padding(gpu_bundle: Path) -> None:
    names, m = bus_matrix(gpu_bundle / "sampling" / "bus" / "gpunode.bandwidth")
    assert names == ["NUMA 0", "NUMA 1", "CUDA 0", "CUDA 1"] and m[2][0] == 11100


@pytest.mark.parametrize("remove", ["hwloc.xml", "kernels.yaml"])
def test_incomplete_bundle_is_one_clear_error(gpu_bundle: Path, tmp_path: Path, remove: str, capsys) -> None:
    (gpu_bundle / remove).unlink()
    out = tmp_path / "gpunode.yaml"
    assert main(["platform", "--from-calibration", str(gpu_bundle), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{remove}: expected this file of the bundle" in err
    assert not out.exists() and not list(tmp_path.glob(".gpunode*"))


def test_bad_kernels_yaml_names_the_key(gpu_bundle: Path, tmp_path: Path, capsys) -> None:
    k = yaml.safe_load((gpu_bundle / "kernels.yaml").read_text())
    del k["kernels"]["dgemm"]["cpu"]
    (gpu_bundle / "kernels.yaml").write_text(yaml.safe_dump(k))
    out = tmp_path / "gpunode.yaml"
    shutil.copy(MACHINES / "local.yaml", out)
    before = out.read_text()
    assert main(["platform", "--from-calibration", str(gpu_bundle), "--out", str(out)]) == 2
    assert "kernels.yaml: kernels.dgemm.cpu.time_s: expected" in capsys.readouterr().err
    assert out.read_text() == before  # the old file is untouched


PENALTY_CSV = (
    "kernel,b,copies,thread_node,data_node,threads,calls,local_median_s,remote_median_s,penalty,"
    "local_rel_std,remote_rel_std,copy_gbps\n"
    "dgemm,960,none,0,1,14,280,0.0676,0.0710,1.05,0.02,0.03,0\n"
    "dgemm,960,none,1,0,14,280,0.0676,0.0703,1.04,0.02,0.03,0\n"
    "dtrsm,960,none,0,1,14,280,0.0409,0.0421,1.03,0.02,0.03,0\n"
    "dtrsm,960,none,1,0,14,280,0.0409,0.0421,1.03,0.02,0.03,0\n"
    "dgemm,960,gpu,0,1,14,280,0.0680,0.0748,1.10,0.02,0.05,19.5\n"
    "dgemm,960,gpu,1,0,14,280,0.0680,0.0748,1.10,0.02,0.05,19.1\n")


def test_measured_remote_penalty_becomes_the_stall_fraction(gpu_bundle: Path, tmp_path: Path) -> None:
    """A 2-NUMA bundle's numa_bench penalty cells: the penalty is kept, and the stall fraction is
    the one with which numasim's latency term, 1 + sigma (rho - 1), gives that penalty back."""
    (gpu_bundle / "numa" / "remote_penalty.csv").write_text(PENALTY_CSV)
    out = tmp_path / "gpunode.yaml"
    assert main(["platform", "--from-calibration", str(gpu_bundle), "--out", str(out)]) == 0
    raw = yaml.safe_load(out.read_text())
    numa = raw["numa"]
    assert numa["remote_penalty_dgemm_b960"]["value"] == pytest.approx(1.045)
    assert numa["remote_penalty_dgemm_b960_gpu_copies"]["value"] == pytest.approx(1.10)
    assert "remote_penalty_dtrsm_b960_gpu_copies" not in numa and "stall_fraction_dgetrf_nopiv" not in numa
    assert "numa/remote_penalty.csv" in numa["remote_penalty_dgemm_b960"]["source"]
    node0, node1 = raw["numa_nodes"]
    lat = raw["inter_socket_links"][0]["latency_s"]["value"]
    rho01 = (node1["memory_latency_s"]["value"] + lat) / node0["memory_latency_s"]["value"]
    rho10 = (node0["memory_latency_s"]["value"] + lat) / node1["memory_latency_s"]["value"]
    sigma = numa["stall_fraction_dgemm"]["value"]
    assert sigma == pytest.approx((0.05 / (rho01 - 1) + 0.04 / (rho10 - 1)) / 2, rel=1e-3)
    assert 1 + sigma * (rho01 - 1) == pytest.approx(1.05, rel=0.01)  # numasim gives the penalty back
    assert numa["stall_fraction_dtrsm"]["value"] == pytest.approx(0.03 / (rho01 - 1), rel=1e-3)
    assert "loaded_latency" not in numa  # why sigma alone carries the load: no curve in the description
    load_machine(out)  # the scalars pass the schema (stall fractions in [0, 1])


@pytest.mark.parametrize("line, key", [
    ("dgemm,960,none,0,1,14,280,0.0676,0.0710,-1.05,0.02,0.03,0", "line 2"),
    ("dgemm,960,none,0,0,14,280,0.0676,0.0710,1.05,0.02,0.03,0", "line 2"),
    ("dgemm,960,both,0,1,14,280,0.0676,0.0710,1.05,0.02,0.03,0", "line 2"),
    ("dgemm,x,none,0,1,14,280,0.0676,0.0710,1.05,0.02,0.03,0", "line 2"),
])
def test_bad_penalty_cells_name_the_line(gpu_bundle: Path, tmp_path: Path, capsys, line: str, key: str) -> None:
    (gpu_bundle / "numa" / "remote_penalty.csv").write_text(PENALTY_CSV.splitlines()[0] + "\n" + line + "\n")
    out = tmp_path / "gpunode.yaml"
    assert main(["platform", "--from-calibration", str(gpu_bundle), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"remote_penalty.csv: {key}: expected" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_derived_stall_gives_the_measured_penalty_back_in_numasim(gpu_bundle: Path, tmp_path: Path) -> None:
    """Round trip through numasim's memory model (memory_bench, the calibration's validation step):
    on the machine derived from the bundle, numa_bench's penalty cells simulated with every core busy
    give the measured penalties (the stall fraction carries them, the controllers do not saturate)."""
    from testbed.calibrate.memory_microbench import bundle_check
    from testbed.calibrate.validation import build_platform
    from testbed.common.paths import BUILD

    if not (BUILD / "simulator" / "memory_bench").exists():
        pytest.skip("memory_bench not built (make build-simulator)")
    (gpu_bundle / "numa" / "remote_penalty.csv").write_text(PENALTY_CSV)
    commands: list[str] = []
    machine_yaml, pdir = build_platform(gpu_bundle, "gpunode", 960, tmp_path / "work", commands)
    check = bundle_check(gpu_bundle, pdir / "numasim.xml")
    rows = [r for r in check["cells"] if r["quantity"] == "remote_penalty"]
    assert [(r["kernel"], r["thread_node"], r["data_node"]) for r in rows] == [
        ("dgemm", 0, 1), ("dgemm", 1, 0), ("dtrsm", 0, 1), ("dtrsm", 1, 0)]  # the gpu rows are not simulated
    for r in rows:
        assert r["simulated"] > 1.0 and r["within_tolerance"], r
    dtrsm = [r for r in rows if r["kernel"] == "dtrsm"]
    assert all(r["simulated"] == pytest.approx(1.03, rel=2e-3) for r in dtrsm)


def test_gpu_allocation_costs_come_from_cuda_bench(gpu_bundle: Path, tmp_path: Path, capsys) -> None:
    """gpu/cuda_bench.csv (the calibration's cuda-alloc step) gives each GPU its cudaMalloc and
    cudaFree times and the pinned cost per MiB; without a hostalloc row the pinned cost is
    StarPU-SimGrid's 650 us per MiB, marked derived; a bad row names the file."""
    (gpu_bundle / "gpu").mkdir()
    csv_path = gpu_bundle / "gpu" / "cuda_bench.csv"
    header = "what,bytes,reps,median_s,min_s,max_s\n"
    csv_path.write_text(header + "malloc,7372800,200,6e-05,5e-05,1e-04\nfree,7372800,200,5e-05,4e-05,1e-04\n"
                        + header + "malloc,29491200,200,9e-05,5e-05,1e-04\n"
                        "hostalloc,7372800,200,0.0042,0.003,0.006\n")
    out = tmp_path / "gpunode.yaml"
    assert main(["platform", "--from-calibration", str(gpu_bundle), "--out", str(out)]) == 0
    m = load_machine(out)
    assert [g.malloc_s for g in m.gpus] == [pytest.approx(9e-5)] * 2  # the largest tile's row
    assert m.gpus[1].free_s == pytest.approx(5e-5)
    assert m.gpus[0].pinned_alloc_s_per_mib == pytest.approx(0.0042 / (7372800 / 1048576))
    csv_path.write_text(header + "malloc,7372800,200,6e-05,5e-05,1e-04\n")
    assert main(["platform", "--from-calibration", str(gpu_bundle), "--out", str(out)]) == 0
    raw = yaml.safe_load(out.read_text())
    assert raw["gpus"][0]["pinned_alloc_s_per_mib"]["value"] == pytest.approx(650e-6)
    assert "SimGrid" in raw["gpus"][0]["pinned_alloc_s_per_mib"]["derived"]
    assert "free_s" not in raw["gpus"][0]
    csv_path.write_text(header + "malloc,7372800,200,abc,5e-05,1e-04\n")
    capsys.readouterr()
    assert main(["platform", "--from-calibration", str(gpu_bundle), "--out", str(tmp_path / "bad.yaml")]) == 2
    err = capsys.readouterr().err
    assert "cuda_bench.csv" in err and "median_s" in err
    assert not (tmp_path / "bad.yaml").exists()
