"""Factor mapping (config/factors.yaml): placements checked by replaying StarPU's binding."""

from __future__ import annotations

import itertools

import pytest

from testbed.common.errors import InputError
from testbed.run.factors import (
    LETTERS,
    Layout,
    check_factors,
    env_for_node,
    layout_of,
    place,
    starpu_placement,
    sysctl_for_factors,
)
from testbed.run.resolve import resolve_run_env


@pytest.fixture(scope="module")
def chifflet() -> Layout:
    return layout_of("chifflet")


@pytest.fixture(scope="module")
def chetemi() -> Layout:
    return layout_of("chetemi")


def starpu(layout: Layout, factors: dict[str, int]):
    """Where StarPU 1.4.10 would put the threads given the mapping's variables."""
    return starpu_placement(layout, env_for_node(layout, factors))


def test_chifflet_layout_matches_study(chifflet: Layout) -> None:
    assert chifflet.ncores == 28 and chifflet.numa_nodes == 2
    assert chifflet.gpu_numa == (0, 1) and chifflet.nic_numa[0] == 0


def test_default_matches_study_table(chifflet: Layout, chetemi: Layout) -> None:
    env = env_for_node(chifflet, {})
    assert env["STARPU_USE_NUMA"] == "0"
    assert env["STARPU_SCHED_BETA"] == "1"
    assert env["STARPU_CUDA_PIPELINE"] == "2"
    assert env["TESTBED_NUMA_BALANCING"] == "1"
    assert sysctl_for_factors({}) == {"kernel.numa_balancing": "1"}
    p = starpu(chifflet, {})
    # B default: both drivers on the first CPU ids, on NUMA 0
    assert [chifflet.core_numa[c] for c in p.gpu_drivers] == [0, 0]
    # C default: MPI thread on the last CPU, NUMA 1
    assert p.mpi == chifflet.ncores - 1 and chifflet.core_numa[p.mpi] == 1
    # D default: main thread on NUMA 0
    assert chifflet.core_numa[p.main] == 0
    # baseline: 28 - 2 (MPI, main) - 2 (drivers) = 24 CPU workers; chetemi 20 - 2 = 18
    assert len(p.cpu_workers) == 24
    assert len(starpu(chetemi, {}).cpu_workers) == 18


def test_all_default_is_starpu_defaults_plus_reservation(chetemi: Layout) -> None:
    # On a CPU-only machine the all-default configuration sets nothing but
    # StarPU's own default values and the two reserved cores.
    env = env_for_node(chetemi, {})
    assert env == {
        "STARPU_CUDA_PIPELINE": "2",
        "STARPU_MAIN_THREAD_BIND": "1",
        "STARPU_RESERVE_NCPU": "1",
        "STARPU_SCHED_BETA": "1",
        "STARPU_USE_NUMA": "0",
        "TESTBED_NUMA_BALANCING": "1",
    }


def test_B_drivers_on_their_gpus_numa_node(chifflet: Layout) -> None:
    p = starpu(chifflet, {"B": 1})
    assert chifflet.core_numa[p.gpu_drivers[0]] == chifflet.gpu_numa[0] == 0
    assert chifflet.core_numa[p.gpu_drivers[1]] == chifflet.gpu_numa[1] == 1
    assert len(p.cpu_workers) == 24
    assert p.main not in p.cpu_workers and p.mpi not in p.cpu_workers


def test_C_mpi_thread_on_nic_numa_node(chifflet: Layout) -> None:
    env = env_for_node(chifflet, {"C": 1})
    p = starpu_placement(chifflet, env)
    assert chifflet.core_numa[p.mpi] == chifflet.nic_numa[0] == 0
    assert int(env["STARPU_MPI_THREAD_CPUID"]) == chifflet.pu(p.mpi)
    assert len(p.cpu_workers) == 24 and p.mpi not in p.cpu_workers


def test_D_main_thread_on_numa1(chifflet: Layout, chetemi: Layout) -> None:
    for m in (chifflet, chetemi):
        p = starpu(m, {"D": 1})
        assert m.core_numa[p.main] == 1
        assert p.main == m.cores_of_numa(1)[0]
        assert p.main not in p.cpu_workers


def test_E_F_G_levels() -> None:
    assert env_for_node("chetemi", {"E": 1})["STARPU_SCHED_BETA"] == "10"
    assert env_for_node("chifflet", {"F": 1})["STARPU_CUDA_PIPELINE"] == "4"
    assert env_for_node("chifflet", {"G": 1})["TESTBED_NUMA_BALANCING"] == "0"
    assert sysctl_for_factors({"G": 1}) == {"kernel.numa_balancing": "0"}
    assert env_for_node("chifflet", {"A": 1})["STARPU_USE_NUMA"] == "1"


def test_chetemi_ignores_gpu_factors(chetemi: Layout) -> None:
    base = env_for_node(chetemi, {})
    assert env_for_node(chetemi, {"B": 1}) == base
    assert "STARPU_WORKERS_CUDAID" not in base
    assert place(chetemi, check_factors({"B": 1})).notes  # says why B was not applied


@pytest.mark.parametrize("levels", list(itertools.product((-1, 1), repeat=3)))
def test_rules_agree_with_starpu_binding(chifflet: Layout, chetemi: Layout, levels: tuple[int, ...]) -> None:
    """The placement the rules intend is the one StarPU derives from the variables."""
    factors = dict(zip("BCD", levels, strict=False))
    for m in (chifflet, chetemi):
        want = place(m, check_factors(factors))
        got = starpu(m, factors)
        assert (got.main, got.mpi, got.gpu_drivers) == (want.main, want.mpi, want.gpu_drivers)
        assert sorted(got.cpu_workers) == want.cpu_workers
        assert len(set(got.cpu_workers) | {got.main, got.mpi} | set(got.gpu_drivers)) == m.ncores


def test_hyperthreading_uses_first_pu_of_each_core() -> None:
    ht = Layout("ht", (0, 0, 1, 1), threads_per_core=2, gpu_numa=(1,), nic_numa=(0,))
    env = env_for_node(ht, {"B": 1, "C": 1, "D": 1})
    assert env["STARPU_MAIN_THREAD_CPUID"] == "4"  # core 2 -> PU 4
    p = starpu_placement(ht, env)
    assert p.main == 2 and p.mpi == 0 and p.gpu_drivers == [3]


def test_heterogeneous_cluster_convention() -> None:
    cluster = "g5k-lille-21"
    for factors in ({}, {"A": 1, "B": 1, "C": 1, "D": 1, "E": 1}):
        env = resolve_run_env(cluster, factors)
        assert set(env.per_machine) == {"chetemi", "chifflet"}
        for m, extra in env.per_machine.items():
            assert not set(extra) & set(env.common)
            assert env.of_machine(m) == env_for_node(m, factors)
    per = resolve_run_env(cluster, {"D": 1}).per_machine
    assert per["chifflet"]["STARPU_MAIN_THREAD_CPUID"] != per["chetemi"]["STARPU_MAIN_THREAD_CPUID"]


def test_user_variables_win_on_every_machine_type() -> None:
    """On a mixed cluster the user's variables used to lose to the per-machine factor
    rules (numasim applied env_per_machine over --env); they now come last on every machine type."""
    user = {"STARPU_MAIN_THREAD_CPUID": "5", "STARPU_WORKERS_CPUID": "1 2 3 4 5 6"}
    env = resolve_run_env("g5k-lille-21", {"D": 1}, user)
    for m in ("chifflet", "chetemi"):
        assert {k: env.of_machine(m)[k] for k in user} == user
    assert all(not set(user) & set(extra) for extra in env.per_machine.values())


def test_factor_env_replaces_the_rules_on_every_machine_type() -> None:
    """A campaign's factor_env for B used to be overridden on chifflet by B's
    per-machine rule; its variables now replace the rule on every machine type."""
    factor_env = {"B": {"low": {"STARPU_WORKERS_CPUID": "0 1 2"}, "high": {"STARPU_WORKERS_CPUID": "3 4 5"}}}
    for level, want in ((-1, "0 1 2"), (1, "3 4 5")):
        env = resolve_run_env("g5k-lille-21", {"B": level}, {}, None, factor_env)
        assert env.of_machine("chifflet")["STARPU_WORKERS_CPUID"] == want
        assert env.of_machine("chetemi")["STARPU_WORKERS_CPUID"] == want


@pytest.mark.parametrize("bad", [{"H": 1}, {"A": 0}, {"B": 2}, {"c": "1"}])
def test_bad_factors_rejected(bad: dict) -> None:
    with pytest.raises(InputError):
        env_for_node("chifflet", bad)


def test_all_letters_defined() -> None:
    assert check_factors({}) == {letter: -1 for letter in LETTERS}
    assert check_factors({"a": 1})["A"] == 1


def test_small_machine_keeps_one_worker() -> None:
    tiny = Layout("tiny", (0, 0), nic_numa=(0,))
    for factors in ({}, {"C": 1}):
        p = starpu_placement(tiny, env_for_node(tiny, factors))
        assert len(p.cpu_workers) == 1 and p.mpi not in p.cpu_workers
