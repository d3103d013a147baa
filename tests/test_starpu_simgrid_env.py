"""Per-machine StarPU variables under the starpu-simgrid engine: SMPI runs every rank in
one process, so what differs between machine types reaches each rank through apps/lu's rank
settings file and the rank's starpu_conf (testbed/run/engines/starpu_simgrid.py PER_RANK_VARIABLES).
Real engine, real StarPU-SimGrid, hetero-3 (ranks 0-1 chetemi, rank 2 chifflet), small sizes.
Before, factors B, C, D on a mixed cluster were refused (`env_per_machine.VAR`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.cli import main
from testbed.common.errors import InputError
from testbed.common.paths import LU_SIMGRID
from testbed.run.engines import RunSpec
from testbed.run.engines.starpu_simgrid import cpuid_list, cudaid_list, rank_value
from testbed.run.resolve import resolve_run_env

CLUSTER = "hetero-3"
needs_simgrid = pytest.mark.skipif(not LU_SIMGRID.exists(), reason="build/lu-simgrid/lu not built (make build)")


def simgrid(tmp_path: Path, levels: dict[str, int], user: dict[str, str] | None = None) -> dict:
    from testbed.run.engines import starpu_simgrid

    env = resolve_run_env(CLUSTER, levels, user)
    return starpu_simgrid.run(RunSpec(engine="starpu-simgrid", cluster=CLUSTER, n=1920, b=192, workdir=tmp_path,
                                      **env.spec_fields()))


def test_cpuid_syntax_is_starpus() -> None:
    """src/core/topology.c _starpu_initialize_workers_bindid: spaces or commas, `a-b`, `a-` up to
    the last PU, ids modulo the PU count; _starpu_initialize_workers_deviceid: plain ids."""
    assert cpuid_list("V", "0 2 4", 8) == [0, 2, 4]
    assert cpuid_list("V", "1-3,6", 8) == [1, 2, 3, 6]
    assert cpuid_list("V", "5- 0", 8) == [5, 6, 7, 0]
    assert cpuid_list("V", "28 30 54 0", 28) == [0, 2, 26, 0]  # hyperthreaded ids wrap (SimGrid: 1 PU per core)
    assert cudaid_list("V", "1 0") == [1, 0]
    assert rank_value("STARPU_MPI_THREAD_CPUID", "7", 1) == "7"
    for var, bad in [("STARPU_WORKERS_CPUID", "a b"), ("STARPU_WORKERS_CPUID", ""),
                     ("STARPU_WORKERS_CPUID", "3-x"), ("STARPU_WORKERS_CUDAID", "0-1"),
                     ("STARPU_MAIN_THREAD_CPUID", "-1")]:
        with pytest.raises(InputError) as e:
            rank_value(var, bad, 8)
        assert e.value.key == var


@needs_simgrid
def test_factors_bcd_on_a_mixed_cluster_reach_each_rank(tmp_path: Path) -> None:
    """B, C, D at +1 give chetemi and chifflet different worker, main-thread and CUDA settings. Each
    rank's workers are those StarPU sets up when the machine's STARPU_WORKERS_CPUID is in the
    process environment (its own getenv path), which a run giving that value to every rank shows."""
    mixed = simgrid(tmp_path, {"B": 1, "C": 1, "D": 1})
    env = resolve_run_env(CLUSTER, {"B": 1, "C": 1, "D": 1})
    assert env.of_machine("chetemi")["STARPU_WORKERS_CPUID"] != env.of_machine("chifflet")["STARPU_WORKERS_CPUID"]
    workers = mixed["workers_by_rank"]
    assert mixed["hosts"] == ["chetemi-1", "chetemi-2", "chifflet-1"] and len(workers) == 3
    for rank, machine in [(0, "chetemi"), (2, "chifflet")]:
        cpuid = env.of_machine(machine)["STARPU_WORKERS_CPUID"]
        uniform = simgrid(tmp_path, {"B": 1, "C": 1, "D": 1}, {"STARPU_WORKERS_CPUID": cpuid})
        assert workers[rank] == uniform["workers_by_rank"][rank], machine
    assert workers[0] == workers[1] != workers[2]
    # chetemi: main thread on PU 10 (the list's first), MPI thread on PU 0, 18 workers on the rest
    chetemi = env.of_machine("chetemi")
    assert workers[0]["cpu_bindids"] == [int(p) for p in chetemi["STARPU_WORKERS_CPUID"].split()
                                         if p not in (chetemi["STARPU_MAIN_THREAD_CPUID"], "0")]
    assert workers[2]["cuda_devids"] == [0, 1] and len(workers[2]["cpu_bindids"]) == 24
    # thread binding is not simulated: the default placement gives the same makespan
    assert mixed["makespan_s"] == simgrid(tmp_path, {})["makespan_s"]
    assert list(tmp_path.iterdir()) == []


@needs_simgrid
def test_user_env_wins_over_the_factor_rules_on_every_rank(tmp_path: Path) -> None:
    """The user's STARPU_WORKERS_CPUID comes last on every machine type (testbed/run/resolve.py):
    no rank keeps its factor-rule list, every bind id is one the user gave, and B's rule (a list per
    machine type) changes nothing once the user's list replaces it."""
    user = {"STARPU_WORKERS_CPUID": " ".join(str(p) for p in range(3, 20))}
    out = simgrid(tmp_path, {"B": 1, "C": 1, "D": 1}, user)
    for w in out["workers_by_rank"]:
        assert set(w["cpu_bindids"]) <= set(range(3, 20)), w
    assert out["workers_by_rank"] == simgrid(tmp_path, {"C": 1, "D": 1}, user)["workers_by_rank"]


@needs_simgrid
def test_mpi_thread_cpuid_on_one_machine_type_frees_its_core(tmp_path: Path) -> None:
    """Without STARPU_RESERVE_NCPU, a set STARPU_MPI_THREAD_CPUID stops StarPU-MPI reserving a core
    (mpi/src/starpu_mpi_init.c starpu_mpi_init_conf): chetemi's ranks get one more CPU worker than
    without it, chifflet's keep StarPU's default."""
    from testbed.run.engines import starpu_simgrid

    def counts(per: dict[str, dict[str, str]]) -> list[int]:
        out = starpu_simgrid.run(RunSpec(engine="starpu-simgrid", cluster=CLUSTER, n=1920, b=192, workdir=tmp_path,
                                         env={"STARPU_SCHED": "dmdas"}, env_per_machine=per))
        return [len(w["cpu_bindids"]) for w in out["workers_by_rank"]]

    default = counts({})
    assert counts({"chetemi": {"STARPU_MPI_THREAD_CPUID": "3"}}) == [default[0] + 1, default[1] + 1, default[2]]


@needs_simgrid
def test_bad_rank_settings_file_is_an_input_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """apps/lu checks every line of the file on every rank, so all ranks stop alike (exit 2)."""
    from testbed.run.engines import starpu_simgrid

    def bad_file(path: Path, own: list[dict[str, str]]) -> Path:
        path.write_text("0\tSTARPU_WORKERS_CPUID=1 2\n1\n2\tSTARPU_WORKERS_CPUID=x\n")
        return path

    monkeypatch.setattr(starpu_simgrid, "write_rank_env", bad_file)
    with pytest.raises(InputError) as e:
        simgrid(tmp_path, {"D": 1})
    assert "rank 2: STARPU_WORKERS_CPUID" in e.value.key and "non-negative ids" in e.value.expected


@needs_simgrid
def test_simulate_records_each_machine_types_variables(capsys: pytest.CaptureFixture[str]) -> None:
    """`testbed simulate` prints the per-machine part of the environment with the result."""
    assert main(["simulate", "--engine", "starpu-simgrid", "--cluster", CLUSTER, "--n", "1920", "--b", "192",
                 "--factors", "C=1,D=1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["env_per_machine"] == resolve_run_env(CLUSTER, {"C": 1, "D": 1}).per_machine
    assert out["env_per_machine"]["chetemi"]["STARPU_MAIN_THREAD_CPUID"] != \
        out["env_per_machine"]["chifflet"]["STARPU_MAIN_THREAD_CPUID"]
    assert len(out["workers_by_rank"]) == 3
