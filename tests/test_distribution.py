"""Tile distributions: block-cyclic grid, file format, heterogeneity-aware generator, node speeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.common.errors import InputError
from testbed.run.distribution import (
    block_cyclic,
    chosen_pattern,
    heterogeneous,
    heterogeneous_with_comment,
    near_square_grid,
    node_gemm_speed,
    pattern_candidates,
    read_distribution,
    tile_shares,
    write_distribution,
)
from testbed.starpu.perfmodel_files import history_means


@pytest.mark.parametrize("nodes,grid", [(1, (1, 1)), (2, (1, 2)), (4, (2, 2)), (7, (1, 7)), (12, (3, 4)), (21, (3, 7))])
def test_near_square_grid(nodes: int, grid: tuple[int, int]) -> None:
    assert near_square_grid(nodes) == grid


def test_block_cyclic_is_chameleons_rule() -> None:
    owners = block_cyclic(5, 2, 3)
    assert owners[0][:4] == [0, 1, 2, 0]
    assert owners[1][:4] == [3, 4, 5, 3]
    assert owners[2][0] == 0 and owners[3][4] == 3 + 1


def test_file_round_trip(tmp_path: Path) -> None:
    owners = heterogeneous(7, [1.0, 2.0, 3.0])
    path = write_distribution(tmp_path / "d.txt", owners, comment="three nodes\nsecond line")
    assert path.read_text().startswith("# three nodes\n# second line\n")
    assert read_distribution(path, 7, 3) == owners


@pytest.mark.parametrize(
    "text,key",
    [("0 1\n1 x\n", "line 3"), ("0 1\n1 2\n", "line 3 column 2"), ("0 1\n", "rows"), ("0 1\n1 0 1\n", "row 2")],
)
def test_bad_file_names_file_and_line(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text("# comment\n" + text)
    with pytest.raises(InputError) as err:
        read_distribution(path, 2, 2)
    assert err.value.file == str(path) and err.value.key == key


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="existing file \\(a distribution file\\)"):
        read_distribution(tmp_path / "none.txt")


def test_heterogeneous_equal_speeds_is_block_cyclic() -> None:
    assert heterogeneous(12, [5.0] * 6) == block_cyclic(12, 2, 3)


@pytest.mark.parametrize("speeds", [[1, 1, 2], [1, 2, 3, 4, 5], [4604.8, 998.5], [3, 1, 1]])
def test_heterogeneous_shares_follow_speeds(speeds: list[float]) -> None:
    nt = 60
    owners = heterogeneous(nt, speeds)
    total = sum(speeds)
    for share, speed in zip(tile_shares(owners, len(speeds)), speeds, strict=False):
        assert share == pytest.approx(speed / total, abs=0.03)
    # a 2D-cyclic-like pattern: no node is confined to a few rows or columns
    for node in range(len(speeds)):
        rows = {m for m in range(nt) for n in range(nt) if owners[m][n] == node}
        cols = {n for m in range(nt) for n in range(nt) if owners[m][n] == node}
        assert len(rows) >= nt // 8 and len(cols) >= nt // 8


def test_heterogeneous_is_deterministic_and_validates() -> None:
    assert heterogeneous(20, [1, 2, 3]) == heterogeneous(20, [1, 2, 3])
    with pytest.raises(InputError):
        heterogeneous(20, [1, 0])


def test_the_pattern_switches_at_a_threshold_of_the_speeds() -> None:
    """g5k-lille-21's speeds (14 chetemi, then 7 chifflet; flop/s as numasim's models give them):
    35 slots (3 per chifflet, 1 per chetemi) at the nominal kernel rates; a 2.4 % slower chifflet
    falls to 28 slots (2 and 1), whose absolute error passes the 0.01 test while each chetemi gets
    16 % more than its speed share (docs/tile-mapping.md)."""
    nominal, slower = [4.8e11] * 14 + [1.301e12] * 7, [4.8e11] * 14 + [1.27e12] * 7
    chosen = chosen_pattern(pattern_candidates(100, nominal))
    assert (chosen["slots"], chosen["r"], chosen["c"]) == (35, 5, 7) and sorted(set(chosen["counts"])) == [1, 3]
    assert chosen["overload"] == pytest.approx(3 / 35 / (1.301 / (14 * 0.48 + 7 * 1.301)), rel=1e-9)
    switched = chosen_pattern(pattern_candidates(100, slower))
    assert switched["slots"] == 28 and switched["error"] <= 0.01 and switched["overload"] == pytest.approx(1.16, abs=0.01)
    assert heterogeneous(100, slower, slots=35) == heterogeneous(100, nominal)  # forced: the same counts
    with pytest.raises(InputError, match="pattern size"):
        heterogeneous(100, nominal, slots=29)  # 29 = 1 x 29: C > 3 R
    # the distribution file says which pattern was taken and how far the busiest rank is over
    assert heterogeneous_with_comment(100, slower)[1].splitlines()[1] == \
        "pattern: 28 slots (4 x 7); tile share / speed share from 0.860 (rank 16) to 1.220 (rank 0)"


def _model(size: int) -> str:
    """A dgemm history model: one CPU and one CUDA combination, one entry each (format 45)."""
    from testbed.starpu.perfmodel_files import ArchModel, HistoryEntry, model_text

    return model_text([ArchModel("cpu", 0, [HistoryEntry(0x24C84A50, size, 0.0, 4.0e4, 1.0e2, 10)]),
                       ArchModel("cuda", 0, [HistoryEntry(0x24C84A50, size, 0.0, 2.0e3, 1.0e1, 10)])])


def test_node_gemm_speed_sums_workers(tmp_path: Path) -> None:
    b = 960
    (tmp_path / "codelets" / "45").mkdir(parents=True)
    (tmp_path / "bus").mkdir()
    (tmp_path / "codelets" / "45" / "dgemm.m").write_text(_model(3 * b * b * 8))
    (tmp_path / "bus" / "m.config").write_text("# Current configuration\n8 # Number of CPUs\n1 # Number of CUDA devices\n")
    assert history_means(tmp_path / "codelets" / "45" / "dgemm.m") == {
        "cpu0_impl0": {3 * b * b * 8: 4.0e4}, "cuda0_impl0": {3 * b * b * 8: 2.0e3}}
    flop = 2.0 * b**3
    # 8 cores, one drives the GPU: 7 CPU workers + 1 GPU
    assert node_gemm_speed(tmp_path, "m", b) == pytest.approx(7 * flop / 0.04 + flop / 0.002)
    with pytest.raises(InputError, match="b=192"):
        node_gemm_speed(tmp_path, "m", 192)


def test_heterogeneous_slow_nodes_do_not_own_whole_columns() -> None:
    owners = heterogeneous(60, [3, 1, 1])  # a 2 x 5 pattern
    for node in (1, 2):
        cols = {n for m in range(60) for n in range(60) if owners[m][n] == node}
        assert len(cols) >= 20  # in 2 of the 5 pattern columns, not 1
        assert all(sum(owners[m][n] == node for m in range(60)) < 60 for n in cols)


def test_described_node_speed_counts_gpus_and_driver_cores() -> None:
    from testbed.describe.machines import load_machine
    from testbed.run.distribution import described_node_speed

    chifflet, chetemi = load_machine("chifflet"), load_machine("chetemi")
    assert chifflet.gpus and not chetemi.gpus
    assert described_node_speed(chetemi) == pytest.approx(chetemi.ncores * chetemi.core_flops)
    gpu_flops = sum(g.flops for g in chifflet.gpus)
    assert described_node_speed(chifflet) == pytest.approx(
        (chifflet.ncores - len(chifflet.gpus)) * chifflet.core_flops + gpu_flops)
