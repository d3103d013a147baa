"""Machine descriptions in two variants: first principles (every quantity's `value`) and fitted (a
quantity's `fitted.value`, fitted to a trace observation of the study), selected per cluster
(`variant`, and `base` for a cluster that is another's under a variant; docs/interfaces.md §1)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from testbed import ROOT
from testbed.common.errors import InputError
from testbed.describe.machines import cluster_source_files, load_cluster


def sigma(cluster) -> dict:
    return cluster.machines["chifflet"].raw["numa"]["stall_fraction_dgemm"]


def test_the_fitted_cluster_takes_the_fitted_value_and_keeps_the_first_principles_one_at_the_range_end():
    first, fitted = load_cluster("g5k-lille-21"), load_cluster("g5k-lille-21-fitted")
    assert [n.name for n in fitted.nodes] == [n.name for n in first.nodes]  # the base's nodes and order
    assert fitted.network == first.network and fitted.name == "g5k-lille-21-fitted"
    q0, q1 = sigma(first), sigma(fitted)
    assert q0["value"] == 0.018 and "fitted" in q0  # the description as written
    assert q1["value"] == q0["fitted"]["value"] == 0.26 and "fitted" not in q1
    assert q1["range"] == [0.018, 0.26] and q1["range_reason"].startswith("fitted: ")
    # quantities without a fitted entry are the same in both
    assert first.machines["chetemi"].raw == fitted.machines["chetemi"].raw
    # the platform depends on the base's file too (platform cache keys)
    assert str(first.path) in cluster_source_files("g5k-lille-21-fitted")


def test_the_variants_platforms_differ_in_the_fitted_quantity_only(tmp_path):
    def run(cluster: str) -> str:
        out = tmp_path / cluster
        proc = subprocess.run([sys.executable, "-m", "testbed", "platform", "--cluster", cluster, "--out", out],
                              capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        return (out / "numasim.xml").read_text()

    first, fitted = run("g5k-lille-21"), run("g5k-lille-21-fitted")
    assert first.count('"numa_stall_fraction_dgemm" value="0.018"') == 7
    assert fitted.count('"numa_stall_fraction_dgemm" value="0.26"') == 7
    assert fitted.replace('value="0.26"', 'value="0.018"').replace("g5k-lille-21-fitted", "g5k-lille-21") == first


def write(path, data) -> str:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def test_bad_variants_are_one_error_naming_the_file_and_key(tmp_path):
    machine = yaml.safe_load((ROOT / "platforms" / "machines" / "chifflet.yaml").read_text())
    del machine["numa"]["stall_fraction_dgemm"]["fitted"]["procedure"]
    (tmp_path / "machines").mkdir()
    write(tmp_path / "machines" / "chifflet.yaml", machine)
    cluster = {"name": "one", "variant": "fitted", "nodes": [{"machine": "machines/chifflet.yaml", "count": 1}],
               "network": yaml.safe_load((ROOT / "platforms/clusters/g5k-lille-21.yaml").read_text())["network"]}
    with pytest.raises(InputError, match="procedure"):
        load_cluster(write(tmp_path / "one.yaml", cluster))
    with pytest.raises(InputError, match="variant"):
        load_cluster(write(tmp_path / "two.yaml", {**cluster, "name": "two", "variant": "tuned"}))
    with pytest.raises(InputError, match="base"):
        load_cluster(write(tmp_path / "three.yaml", {"name": "three", "base": "no-such-cluster"}))
    with pytest.raises(InputError, match="base"):  # one level of base only
        write(tmp_path / "four.yaml", {"name": "four", "base": "g5k-lille-21-fitted"})
        load_cluster(str(tmp_path / "four.yaml"))


def test_sensitivity_descriptions_carry_the_variants_values(tmp_path):
    from testbed.common.yaml_input import load_yaml
    from testbed.study.sensitivity import write_descriptions

    path = write_descriptions({"experiment": {"cluster": "g5k-lille-21-fitted"}, "parameters": []}, {}, tmp_path)
    written = load_yaml(tmp_path / "machines" / "chifflet.yaml")
    assert written["numa"]["stall_fraction_dgemm"]["value"] == 0.26
    assert "variant" not in load_yaml(path) and "base" not in load_yaml(path)
    assert sigma(load_cluster(path))["value"] == 0.26  # a first-principles description of the fitted values
