"""Machine/cluster descriptions and `testbed platform`: validation, bad input, atomic output."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from testbed.cli import main
from testbed.common.errors import InputError
from testbed.common.paths import CLUSTERS, MACHINES
from testbed.describe.machines import load_cluster, load_machine
from testbed.platform.platform_cmd import generate

CLUSTER_NAMES = ["g5k-lille-21", "chifflet-1", "hetero-3"]


def test_public_machines_load_with_expected_structure() -> None:
    chifflet = load_machine("chifflet")
    assert chifflet.ncores == 28 and len(chifflet.numa_nodes) == 2 and len(chifflet.sockets) == 2
    assert [g.numa_node for g in chifflet.gpus] == [0, 1]
    assert [n.numa_node for n in chifflet.nics] == [0]
    chetemi = load_machine("chetemi")
    assert chetemi.ncores == 20 and chetemi.gpus == [] and len(chetemi.inter_socket_links) == 1


def test_every_quantity_states_its_origin() -> None:
    """Walk the raw YAML: each {value: ...} carries a source or a derivation, never both."""
    def walk(node, path):
        if isinstance(node, dict):
            if "value" in node:
                assert ("source" in node) != ("derived" in node), path
                text = node.get("source") or node.get("derived")
                assert len(text) > 10, path
                return 1
            return sum(walk(v, f"{path}.{k}") for k, v in node.items())
        if isinstance(node, list):
            return sum(walk(v, f"{path}[{i}]") for i, v in enumerate(node))
        return 0

    for name in ("chifflet", "chetemi"):
        assert walk(yaml.safe_load((MACHINES / f"{name}.yaml").read_text()), name) >= 19


def test_cluster_node_names_and_ranks() -> None:
    g5k = load_cluster("g5k-lille-21")
    assert len(g5k.nodes) == 21
    assert [n.rank for n in g5k.nodes] == list(range(21))
    assert g5k.nodes[0].name == "chetemi-1" and g5k.nodes[13].name == "chetemi-14"
    assert g5k.nodes[14].name == "chifflet-1" and g5k.nodes[20].name == "chifflet-7"
    assert sum(n.machine.name == "chifflet" for n in g5k.nodes) == 7
    hetero = load_cluster("hetero-3")
    assert [(n.name, n.machine.name) for n in hetero.nodes] == [
        ("chetemi-1", "chetemi"), ("chetemi-2", "chetemi"), ("chifflet-1", "chifflet")]


def test_local_machine_was_described() -> None:
    local = load_machine("local")
    assert local.ncores >= 1 and local.nics
    raw = yaml.safe_load((MACHINES / "local.yaml").read_text())
    assert raw["numa_nodes"][0]["memory_latency_s"]["needs_calibration"] is True  # hwloc cannot give it


def test_describe_local_on_this_machine(tmp_path: Path) -> None:
    """Runs lstopo here; the result validates and matches hwloc's own core count."""
    import subprocess

    out = tmp_path / "here.yaml"
    assert main(["platform", "--describe-local", "--out", str(out)]) == 0
    m = load_machine(out)
    ncores = int(subprocess.run(["hwloc-calc", "--number-of", "core", "machine:0"], check=True,
                                capture_output=True, text=True).stdout)
    assert m.ncores == ncores
    assert all(q.get("needs_calibration") for q in [yaml.safe_load(out.read_text())["numa_nodes"][0]["memory_latency_s"]])


def test_generate_writes_all_outputs(tmp_path: Path) -> None:
    out = tmp_path / "plat"
    generate(load_cluster("hetero-3"), out)
    summary = json.loads((out / "summary.json").read_text())
    assert [n["name"] for n in summary["nodes"]] == ["chetemi-1", "chetemi-2", "chifflet-1"]
    for rel in ["numasim.xml", "hwloc/chifflet.xml", "hwloc/chetemi.xml", "starpu/cluster.xml", "starpu/hostfile",
                "starpu/chifflet/sampling/bus/chifflet.platform.v4.xml",
                "starpu/chetemi/sampling/codelets/45/dgemm.chetemi"]:
        assert (out / rel).is_file(), rel
    assert (out / "starpu/hostfile").read_text().split() == ["chetemi-1", "chetemi-2", "chifflet-1"]
    assert not list(tmp_path.glob(".plat*")), "temporary directories left behind"


def test_platform_writes_one_sampling_directory_per_machine_type(tmp_path: Path) -> None:
    """`testbed platform` once also wrote starpu/sampling/, a copy of the files per node and
    machine name (23 on g5k-lille-21) that no engine read. Only the machine types' directories
    remain, and the starpu-simgrid engine (which links its own per-host directory) runs on them."""
    from testbed.common.paths import LU_SIMGRID
    from testbed.run.engines import RunSpec

    out = tmp_path / "plat"
    generate(load_cluster("hetero-3"), out, (960,))
    found = sorted(p.relative_to(out).as_posix() for p in out.rglob("sampling"))
    assert found == ["starpu/chetemi/sampling", "starpu/chifflet/sampling"]
    models = sorted(p.name for p in out.rglob("dgemm.*"))
    assert models == ["dgemm.chetemi", "dgemm.chifflet"]
    if not LU_SIMGRID.exists():
        pytest.skip("build/lu-simgrid/lu not built (make build)")
    from testbed.run.engines import starpu_simgrid

    res = starpu_simgrid.run(RunSpec(engine="starpu-simgrid", cluster="hetero-3", n=1920, b=960,
                                     platform_dir=out, workdir=tmp_path))
    assert res["hosts"] == ["chetemi-1", "chetemi-2", "chifflet-1"] and res["tasks"] == 5


# --------------------------------------------------------------------------- bad input


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _cluster_with(tmp_path: Path, machine: dict) -> Path:
    _write(tmp_path / f"{machine['name']}.yaml", machine)
    cluster = yaml.safe_load((CLUSTERS / "chifflet-1.yaml").read_text())
    cluster["nodes"] = [{"machine": f"{machine['name']}.yaml", "count": 1}]
    return _write(tmp_path / "bad-cluster.yaml", cluster)


def _chifflet() -> dict:
    return copy.deepcopy(yaml.safe_load((MACHINES / "chifflet.yaml").read_text()))


def _run_cli(tmp_path: Path, cluster: Path, capsys) -> tuple[int, str]:
    out = tmp_path / "out"
    code = main(["platform", "--cluster", str(cluster), "--out", str(out)])
    err = capsys.readouterr().err
    assert not out.exists(), "output directory left behind after an error"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")], "temporary output left behind"
    return code, err


def _unknown_key(m: dict) -> None:
    m["gpus"][0]["bandwith_Bps"] = {"value": 1, "source": "typo"}


def _wrong_type(m: dict) -> None:
    m["numa_nodes"][1]["memory_bytes"]["value"] = "lots"


def _plain_number(m: dict) -> None:
    m["nics"][0]["bandwidth_Bps"] = 1.25e9


def _gpu_on_missing_numa(m: dict) -> None:
    m["gpus"][1]["numa_node"] = 2


def _no_source(m: dict) -> None:
    del m["cpu"]["frequency_hz"]["source"]


def _nic_on_missing_numa(m: dict) -> None:
    m["nics"][0]["numa_node"] = 7


def _stall_above_one(m: dict) -> None:
    m["gpus"][0]["pinned_alloc_gpu_stall"]["value"] = 1.5


@pytest.mark.parametrize("mutate, key", [
    (_unknown_key, "gpus[0].bandwith_Bps"),
    (_wrong_type, "numa_nodes[1].memory_bytes.value"),
    (_plain_number, "nics[0].bandwidth_Bps"),
    (_gpu_on_missing_numa, "gpus[1].numa_node"),
    (_no_source, "cpu.frequency_hz"),
    (_nic_on_missing_numa, "nics[0].numa_node"),
    (_stall_above_one, "gpus[0].pinned_alloc_gpu_stall.value"),
])
def test_bad_machine_names_file_and_key(tmp_path: Path, capsys, mutate, key) -> None:
    machine = _chifflet()
    mutate(machine)
    cluster = _cluster_with(tmp_path, machine)
    with pytest.raises(InputError) as exc:
        load_cluster(cluster)
    assert exc.value.key == key
    assert exc.value.file.endswith("chifflet.yaml")
    code, err = _run_cli(tmp_path, cluster, capsys)
    assert code == 2
    assert err.startswith("error: ") and "chifflet.yaml" in err and key in err


def test_cluster_naming_unknown_machine(tmp_path: Path, capsys) -> None:
    cluster = yaml.safe_load((CLUSTERS / "hetero-3.yaml").read_text())
    cluster["nodes"][1]["machine"] = "chiflet"
    path = _write(tmp_path / "typo.yaml", cluster)
    code, err = _run_cli(tmp_path, path, capsys)
    assert code == 2
    assert "typo.yaml" in err and "nodes[1].machine" in err and "chifflet" in err


def test_cluster_wrong_count_type(tmp_path: Path, capsys) -> None:
    cluster = yaml.safe_load((CLUSTERS / "hetero-3.yaml").read_text())
    cluster["nodes"][0]["count"] = "two"
    code, err = _run_cli(tmp_path, _write(tmp_path / "c.yaml", cluster), capsys)
    assert code == 2 and "nodes[0].count" in err


def test_failure_during_generation_leaves_nothing(tmp_path: Path, capsys) -> None:
    """A broken calibration bundle is found after numasim.xml is written: nothing may remain."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    kernels = yaml.safe_load((MACHINES.parent.parent / "calibration/chifflet-public/kernels.yaml").read_text())
    del kernels["kernels"]["dgemm"]["cuda"]["time_s"]
    _write(bundle / "kernels.yaml", kernels)
    machine = _chifflet()
    machine["kernels"] = str(bundle)
    code, err = _run_cli(tmp_path, _cluster_with(tmp_path, machine), capsys)
    assert code == 2 and "kernels.dgemm.cuda" in err


def test_existing_output_is_kept_on_failure(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    generate(load_cluster("chifflet-1"), out)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    machine = _chifflet()
    machine["gpus"][0]["numa_node"] = 9
    code = main(["platform", "--cluster", str(_cluster_with(tmp_path, machine)), "--out", str(out)])
    assert code == 2
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_describe_local_roundtrips_a_generated_topology(tmp_path: Path) -> None:
    """hwloc XML of chifflet -> machine YAML keeps cores, NUMA nodes, GPUs and the NIC in place."""
    from testbed.describe.hwloc_xml import describe_local, write_topology

    write_topology(load_machine("chifflet"), tmp_path / "chifflet.xml")
    text = describe_local((tmp_path / "chifflet.xml").read_bytes(), name="roundtrip")
    (tmp_path / "roundtrip.yaml").write_text(text)
    m = load_machine(tmp_path / "roundtrip.yaml")
    orig = load_machine("chifflet")
    assert [n.cores for n in m.numa_nodes] == [n.cores for n in orig.numa_nodes]
    assert [n.memory_bytes for n in m.numa_nodes] == [n.memory_bytes for n in orig.numa_nodes]
    assert [(g.numa_node, g.memory_bytes) for g in m.gpus] == [(g.numa_node, g.memory_bytes) for g in orig.gpus]
    assert [(n.name, n.numa_node) for n in m.nics] == [("eth0", 0)]
    assert m.threads_per_core == 2 and m.sockets == [[0], [1]]


def test_pinned_allocation_stall_reaches_the_platform(tmp_path: Path) -> None:
    """gpus[].pinned_alloc_gpu_stall (docs/pinned-allocations.md): chifflet's is 1 with the range
    [0, 1] the sensitivity analysis samples (its GPU generation unmeasured); a share other than 1 becomes the GPU host's property
    (numasim's default is 1: absent means the whole call)."""
    from lxml import etree

    raw = _chifflet()
    assert [g["pinned_alloc_gpu_stall"]["range"] for g in raw["gpus"]] == [[0, 1], [0, 1]]
    assert [g.pinned_alloc_gpu_stall for g in load_machine("chifflet").gpus] == [1.0, 1.0]
    raw["gpus"][1]["pinned_alloc_gpu_stall"]["value"] = 0.25
    raw["gpus"][1]["pinned_alloc_gpu_stall"]["range"] = [0, 1]
    out = tmp_path / "plat"
    generate(load_cluster(_cluster_with(tmp_path, raw)), out)
    xml = etree.parse(str(out / "numasim.xml"))
    stall = {h.get("id"): [p.get("value") for p in h.findall("prop") if p.get("id") == "pinned_alloc_gpu_stall"]
             for h in xml.iter("host") if ".gpu" in h.get("id")}
    assert sorted(stall.values()) == [[], ["0.25"]], stall
