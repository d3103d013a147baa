"""The kernel rates and remote BLAS 3 stalls of chifflet and chetemi are the derivations'
(docs/kernel-rates.md, docs/blas3-remote-penalty.md): recomputed here from the descriptions' own
numbers and the public sources they cite, so that a value edited by hand, or a derivation changed
without its numbers, fails."""

from __future__ import annotations

import pytest

from bench import kernel_ratios
from testbed.common.yaml_input import load_yaml
from testbed.describe.machines import load_machine
from testbed.study.sensitivity import description_files

B = 960
TILE = B * B * 8
GEMM = 2 * B**3


def kernels(machine: str) -> dict:
    return load_yaml(load_machine(machine).kernels / "kernels.yaml")["kernels"]


def numa(machine: str, key: str) -> dict:
    return load_machine(machine).raw["numa"][key]


@pytest.mark.parametrize("machine", ["chifflet", "chetemi"])
def test_dgemm_stall_is_the_packing_share(machine: str) -> None:
    """sigma = (2 b^2 doubles packed at one core's link rate) / (the local dgemm time)."""
    m = load_machine(machine)
    pack = 2 * TILE / m.numa_nodes[0].core_bandwidth_Bps
    q = numa(machine, "stall_fraction_dgemm")
    assert q["value"] == pytest.approx(pack / (GEMM / m.core_flops), rel=0.01)
    assert q["range"][0] < q["value"] < q["range"][1] < 0.04  # far below the PaStiX-128 0.0667
    assert "docs/blas3-remote-penalty.md" in open(description_files("g5k-lille-21")[machine]).read()
    trsm = kernels(machine)["dtrsm"]["cpu"]["time_s"]["value"]
    assert numa(machine, "stall_fraction_dtrsm")["value"] == pytest.approx(pack / trsm, rel=0.01)
    assert numa(machine, "stall_fraction_dgetrf_nopiv").get("needs_calibration") is True


@pytest.mark.parametrize("machine", ["chifflet", "chetemi"])
def test_cpu_dgemm_time_is_the_core_rate(machine: str) -> None:
    m = load_machine(machine)
    t = kernels(machine)["dgemm"]["cpu"]["time_s"]
    assert t["value"] == pytest.approx(GEMM / m.core_flops, rel=1e-4)
    lo, hi = m.raw["cpu"]["core_flops"]["range"]
    assert t["range"] == pytest.approx([GEMM / hi, GEMM / lo], rel=1e-3)


def test_chetemi_rate_is_its_own_measurement() -> None:
    """The 23-25 GF/s figure is chetemi's (docs/kernel-rates.md section 1): no 1.8 GHz high end."""
    q = load_machine("chetemi").raw["cpu"]["core_flops"]
    assert q["value"] == 24.0e9 and q["range"] == [23.0e9, 25.0e9]


def test_gpu_dtrsm_is_the_shipped_cublas_ratio() -> None:
    """chifflet's GPU dtrsm / dgemm is the K40m ratio of StarPU's shipped LU models, not the CPU's."""
    if not kernel_ratios.CODELETS.is_dir():
        pytest.skip("StarPU's source (shipped perfmodels) is not under .deps")
    rows = {(r["machine"], r["kind"]): r for r in kernel_ratios.ratios(B)}
    sirocco = rows[("sirocco", "cuda")]
    ratio = (sirocco["trsm_ll_mean"] + sirocco["trsm_ru_mean"]) / 2
    k = kernels("chifflet")
    assert k["dtrsm"]["cuda"]["time_s"]["value"] == pytest.approx(k["dgemm"]["cuda"]["time_s"]["value"] * ratio,
                                                                 rel=1e-3)
    gpu = [r for (_, kind), r in rows.items() if kind == "cuda"]
    lo = min(r["trsm_ru_min"] for r in gpu) * k["dgemm"]["cuda"]["time_s"]["range"][0]
    hi = max(r["trsm_ll_max"] for r in gpu) * k["dgemm"]["cuda"]["time_s"]["range"][1]
    assert k["dtrsm"]["cuda"]["time_s"]["range"] == pytest.approx([lo, hi], rel=2e-3)
    cpu = [r for (_, kind), r in rows.items() if kind == "cpu"]
    span = (min(min(r["trsm_ll_min"], r["trsm_ru_min"]) for r in cpu), max(max(r["trsm_ll_max"], r["trsm_ru_max"]) for r in cpu))
    assert span == pytest.approx((0.511, 0.741), abs=1e-3)
