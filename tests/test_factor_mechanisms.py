"""numasim's NUMA-mechanism parameters: machine `numa:` sections, schema, platform zone properties."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from testbed.common.errors import InputError
from testbed.describe.machines import load_cluster, load_machine, parse_machine
from testbed.platform.platform_xml import platform_tree

KEYS = {
    "gemm_block_k", "control_message_bytes", "page_bytes", "hinting_fault_cost_s", "balancing_scan_delay_s",
    "balancing_scan_period_s", "balancing_scan_size_bytes", "migrate_ratelimit_bytes", "migrate_ratelimit_window_s",
}


@pytest.mark.parametrize("machine", ["chifflet", "chetemi"])
def test_numa_section_cites_every_parameter(machine: str) -> None:
    numa = load_machine(machine).raw["numa"]
    assert KEYS <= set(numa)
    for key in KEYS:
        assert ("source" in numa[key]) != ("derived" in numa[key]), key


def test_linux_balancing_defaults_are_the_documented_ones() -> None:
    numa = load_machine("chifflet").raw["numa"]
    assert numa["balancing_scan_period_s"]["value"] == 1.0  # numa_balancing_scan_period_min_ms=1000
    assert numa["balancing_scan_size_bytes"]["value"] == 256 * 2**20  # numa_balancing_scan_size_mb=256


def test_zone_properties_carry_the_numa_parameters() -> None:
    root = platform_tree(load_cluster("hetero-3")).getroot()
    zones = {z.get("id"): {p.get("id"): p.get("value") for p in z.findall("prop")} for z in root.iter("zone")}
    chifflet = zones["chifflet-1"]
    assert float(chifflet["numa_gemm_block_k"]) == 256
    assert float(chifflet["numa_migrate_ratelimit_window_s"]) == 0.1
    assert all(f"numa_{k}" in zones["chetemi-1"] for k in KEYS)


def test_bad_numa_parameter_is_an_input_error(tmp_path: Path) -> None:
    data = yaml.safe_load(Path(load_machine("chetemi").path).read_text())
    data["numa"]["page_bytes"] = {"value": -4096, "derived": "wrong"}
    with pytest.raises(InputError) as err:
        parse_machine(data, tmp_path / "bad.yaml")
    assert "numa.page_bytes" in str(err.value)
