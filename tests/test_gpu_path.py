"""The GPU path: GPU discovery without hwloc's CUDA plugin, GPU calibration bundles, the
getrf-on-GPU and symbol-set options through every engine, platforms from StarPU sampling
directories. Data: calibration/gpunode and bench/data/gpu-node-h100 (measured on a 16-core +
H100 node, see their READMEs). The real CUDA build is exercised only where one exists."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.hygiene import machine_paths

from testbed import ROOT
from testbed.calibrate.calibrate import codelet_table, lu_has_cuda, repo_relative, shell_line, write_kernels_yaml
from testbed.common.errors import InputError
from testbed.common.paths import LU_REAL, LU_SIMGRID
from testbed.describe.gpu_discovery import parse_nvidia_smi, sysfs_bus_id
from testbed.describe.hwloc_xml import topology_data
from testbed.run.engines import RunSpec
from testbed.run.simulate import simulate

BUNDLE = ROOT / "calibration" / "gpunode"
SAMPLING = ROOT / "bench" / "data" / "gpu-node-h100" / "sampling"
SMI = "0, NVIDIA H100 80GB HBM3, 81559, 00000000:00:06.0\n1, NVIDIA H100 80GB HBM3, 81559, 00000000:41:00.0\n"


def run_testbed(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, cwd=cwd)


def test_nvidia_smi_gpus_get_their_numa_node_from_sysfs(tmp_path):
    (tmp_path / "0000:41:00.0").mkdir()
    (tmp_path / "0000:41:00.0" / "numa_node").write_text("1\n")
    gpus = parse_nvidia_smi(SMI, sysfs=tmp_path)
    assert [g["pci_bus_id"] for g in gpus] == ["0000:00:06.0", "0000:41:00.0"]
    assert [g["numa_node"] for g in gpus] == [-1, 1]  # no sysfs entry: affinity unknown
    assert gpus[0]["memory_bytes"] == 81559 * 2**20 and gpus[0]["model"] == "NVIDIA H100 80GB HBM3"
    assert sysfs_bus_id("00000001:0A:00.0") == "0001:0a:00.0"


def test_discovered_gpus_stand_in_when_hwloc_lists_none():
    xml = (BUNDLE / "hwloc.xml").read_bytes()
    assert topology_data(xml, "x")["gpus"] == []  # hwloc without its CUDA plugin
    gpus = json.loads((BUNDLE / "gpus.json").read_text())
    data = topology_data(xml, "x", gpus=gpus, gpus_src="calibration/gpunode/gpus.json")
    (gpu,) = data["gpus"]
    assert gpu["numa_node"] == 0 and gpu["memory_bytes"]["value"] == 85520809984
    assert "gpus.json" in gpu["memory_bytes"]["source"]


def test_gpu_bundle_models_split_by_arch_and_kernels_yaml_is_reproduced(tmp_path):
    rows = codelet_table(BUNDLE, "gpunode")
    archs = {(r["symbol"], r["arch"]) for r in rows}
    assert {("dgemm", "cpu0"), ("dgemm", "cuda0"), ("dgetrf_nopiv", "cuda0"), ("dtrsm", "cuda0")} <= archs
    gemm = {r["arch"]: r["mean_s"] for r in rows if r["symbol"] == "dgemm"}
    assert gemm["cuda0"] < gemm["cpu0"] / 100  # an H100 against one core
    out = tmp_path / "gpunode"
    shutil.copytree(BUNDLE / "sampling", out / "sampling")
    assert write_kernels_yaml(out, "gpunode", codelet_table(out, "gpunode"))
    assert yaml.safe_load((out / "kernels.yaml").read_text()) == yaml.safe_load((BUNDLE / "kernels.yaml").read_text())


def test_from_calibration_describes_the_gpu_and_writes_its_one_node_cluster(tmp_path):
    machine, cluster = tmp_path / "gpunode.yaml", tmp_path / "gpunode-1.yaml"
    proc = run_testbed("platform", "--from-calibration", str(BUNDLE), "--out", str(machine), "--cluster-out", str(cluster))
    assert proc.returncode == 0, proc.stderr
    (gpu,) = yaml.safe_load(machine.read_text())["gpus"]
    assert gpu["pcie_bandwidth_Bps"]["value"] == pytest.approx(52.93e9, rel=1e-3)
    assert "kernels.dgemm.cuda" in gpu["flops"]["derived"]
    from testbed.describe.machines import load_cluster

    loaded = load_cluster(cluster)
    assert [n.machine.name for n in loaded.nodes] == ["gpunode"]
    assert len(loaded.machines["gpunode"].gpus) == 1


@pytest.fixture(scope="module")
def starpu_platform(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gpunode") / "platform"
    proc = run_testbed("platform", "--from-starpu", str(SAMPLING), "--host", "gpunode", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def run(engine: str, pdir: Path, **kw) -> dict:
    spec = RunSpec(engine=engine, cluster="gpunode", n=9600, b=960, env={"STARPU_SCHED": "dmdas"},
                   env_per_machine={}, variability=False, platform_dir=pdir, **kw)
    return simulate(spec)


def test_numasim_honours_getrf_gpu(starpu_platform):
    cpu, gpu = run("numasim", starpu_platform), run("numasim", starpu_platform, getrf_on_gpu=True)
    assert cpu["tasks_by_worker_type"]["cpu"] >= 10  # the 10 getrf at least
    assert gpu["tasks_by_worker_type"]["cpu"] == 0
    assert gpu["makespan_s"] < cpu["makespan_s"] / 2  # 0.37 ms on the H100 instead of 20 ms on a core


def test_numasim_honours_symbols(starpu_platform):
    with pytest.raises(InputError, match="starpu_dlu_lu_model"):
        run("numasim", starpu_platform, symbols="starpu-lu")


@pytest.mark.skipif(not LU_SIMGRID.exists(), reason="apps/lu SimGrid build missing (make build)")
def test_starpu_simgrid_honours_getrf_gpu(starpu_platform):
    cpu, gpu = run("starpu-simgrid", starpu_platform), run("starpu-simgrid", starpu_platform, getrf_on_gpu=True)
    assert cpu["tasks_on_cuda"] <= 375 and gpu["tasks_on_cuda"] == 385
    assert gpu["getrf_on_gpu"] is True and cpu["getrf_on_gpu"] is False


def test_starpu_sampling_platform_runs_without_cluster_and_refuses_factors(starpu_platform):
    proc = run_testbed("simulate", "--engine", "numasim", "--platform-dir", str(starpu_platform), "--n", "1920",
                   "--b", "960", "--getrf-gpu")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cluster"] == "gpunode"
    proc = run_testbed("simulate", "--engine", "numasim", "--platform-dir", str(starpu_platform), "--n", "1920",
                   "--b", "960", "--factors", "A=1")
    assert proc.returncode == 2 and "--factors" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.skipif(not LU_REAL.exists(), reason="apps/lu real build missing (make build)")
def test_real_build_without_cuda_refuses_getrf_gpu():
    if lu_has_cuda():
        pytest.skip("this StarPU has CUDA: --getrf-gpu is accepted")
    proc = subprocess.run([str(LU_REAL), "--n", "960", "--b", "480", "--getrf-gpu"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--getrf-gpu" in proc.stderr and "CUDA" in proc.stderr


@pytest.mark.skipif(not lu_has_cuda(), reason="no CUDA: the native StarPU was built without a CUDA toolkit "
                    "(envs/setup.sh builds it with CUDA when nvcc is found)")
def test_real_lu_on_the_gpu_is_correct(tmp_path):
    env = {"STARPU_HOME": str(tmp_path), "STARPU_CALIBRATE": "1", "STARPU_SILENT": "1", "PATH": "/usr/bin:/bin"}
    for extra in ([], ["--getrf-gpu"]):
        proc = subprocess.run([str(LU_REAL), "--n", "3840", "--b", "960", "--check", *extra], capture_output=True,
                              text=True, env=env)
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["residual"] < 1e-12 and out["tasks_on_cuda"] > 0


def test_recorded_commands_are_repository_relative():
    assert shell_line([ROOT / "build" / "lu-real" / "lu", "--n", "10"], {"STARPU_HOME": str(ROOT / "x")}) == \
        "STARPU_HOME=x build/lu-real/lu --n 10"
    assert repo_relative(str(ROOT)) == "."
    for f in BUNDLE.rglob("*"):
        if f.is_file() and f.suffix in (".json", ".yaml", ".md"):
            assert machine_paths(f.read_text()) == [], f


def _simulate_cluster(cluster: Path | str, pipeline: str, tmp_path: Path) -> float:
    from testbed.describe.machines import load_cluster
    from testbed.platform.platform_cmd import generate

    pdir = tmp_path / f"p-{Path(str(cluster)).stem}"
    if not pdir.exists():
        generate(load_cluster(cluster), pdir, (960,))
    spec = RunSpec(engine="numasim", cluster=str(cluster), n=19200, b=960,
                   env={"STARPU_SCHED": "dmdas", "STARPU_CUDA_PIPELINE": pipeline}, env_per_machine={},
                   variability=False, getrf_on_gpu=True, platform_dir=pdir)
    return simulate(spec)["makespan_s"]


def test_cuda_worker_host_time_is_hidden_by_the_pipeline(tmp_path):
    """The CUDA worker's host time per task (gpus[].task_overhead_s, measured by the bundle's
    cuda-task-overhead step) adds to every kernel without a pipeline and overlaps the previous
    kernel with STARPU_CUDA_PIPELINE=2, as on the real node (CHANGELOG.md's benchmark history, "GPU node")."""
    with_host = {pl: _simulate_cluster("gpunode-1", pl, tmp_path) for pl in ("1", "2")}
    assert with_host["2"] < 0.95 * with_host["1"]
    # The same machine without the host time: the pipeline only prepares one more task ahead.
    machine = yaml.safe_load((ROOT / "platforms" / "machines" / "gpunode.yaml").read_text())
    assert machine["gpus"][0]["task_overhead_s"]["value"] == pytest.approx(15.0e-6, rel=0.1)
    del machine["gpus"][0]["task_overhead_s"]
    machine["kernels"], machine["name"] = str(BUNDLE), "bare"
    (tmp_path / "bare.yaml").write_text(yaml.safe_dump(machine))
    cluster = yaml.safe_load((ROOT / "platforms" / "clusters" / "gpunode-1.yaml").read_text())
    cluster["name"], cluster["nodes"][0]["machine"] = "bare-1", "bare.yaml"
    (tmp_path / "bare-1.yaml").write_text(yaml.safe_dump(cluster))
    bare = {pl: _simulate_cluster(tmp_path / "bare-1.yaml", pl, tmp_path) for pl in ("1", "2")}
    assert with_host["1"] - with_host["2"] > 2 * (bare["1"] - bare["2"])
    assert with_host["1"] > bare["1"] * 1.05


@pytest.mark.skipif(not LU_SIMGRID.exists(), reason="apps/lu SimGrid build missing (make build)")
def test_every_engine_honours_the_dag_option(starpu_platform):
    """StarPU's LU example priorities and order change both simulators' schedules alike."""
    res = {(e, d): run(e, starpu_platform, getrf_on_gpu=True, dag=d)["makespan_s"]
           for e in ("numasim", "starpu-simgrid") for d in ("chameleon", "starpu-lu-example")}
    for e in ("numasim", "starpu-simgrid"):
        assert res[(e, "chameleon")] != res[(e, "starpu-lu-example")], res
    with pytest.raises(InputError, match="dag"):
        run("numasim", starpu_platform, dag="cholesky")


@pytest.mark.skipif(not LU_REAL.exists(), reason="apps/lu real build missing (make build)")
def test_real_lu_in_the_example_order_is_correct(tmp_path):
    env = {**__import__("os").environ, "STARPU_HOME": str(tmp_path), "STARPU_CALIBRATE": "1", "STARPU_SILENT": "1",
           "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    proc = subprocess.run([str(LU_REAL), "--n", "1152", "--b", "192", "--check", "--dag", "starpu-lu-example"],
                          capture_output=True, text=True, env=env)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["residual"] < 1e-12 and out["tasks"] == 6 + 30 + 55


def test_hwloc_memory_cross_checked_with_memtotal():
    from testbed.describe.hwloc_xml import check_memory, mem_total_bytes

    vm = {"numa_nodes": [{"memory_bytes": {"value": 7075250176, "source": "hwloc"}}]}  # the validation VM
    check_memory(vm, mem_total_bytes("MemTotal:       131072000 kB\n"), "host.json")
    assert vm["numa_nodes"][0]["memory_bytes"]["value"] == 131072000 * 1024
    assert "MemTotal" in vm["numa_nodes"][0]["memory_bytes"]["derived"]
    ok = {"numa_nodes": [{"memory_bytes": {"value": 60e9, "source": "hwloc"}}] * 2}
    check_memory(ok, 128e9, "host.json")  # hwloc agrees: kept as measured
    assert ok["numa_nodes"][0]["memory_bytes"] == {"value": 60e9, "source": "hwloc"}
