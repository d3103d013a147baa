"""One resolution of a run's environment (testbed/run/resolve.py) reaches every engine whole:
the user's variables come last on every machine type, a campaign's factor_env replaces the factor
rules, and each engine gives a rank its machine type's variables (numasim per node zone, real per
mpirun app context, starpu-simgrid its one process environment plus a per-rank settings file, or a
clear refusal), and runs.csv records the per-machine part."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest

from testbed.analyze.runs_table import read_runs
from testbed.cli import main
from testbed.common.errors import InputError
from testbed.run.campaign import spec_for
from testbed.run.engines import RunSpec, platform_dir_for
from testbed.run.engines.numasim import run_description
from testbed.run.engines.real import launch, rank_groups
from testbed.run.engines.starpu_simgrid import rank_envs
from testbed.run.resolve import resolve_run_env
from testbed.run.simulate import add_arguments, spec_from_args

CLUSTER = "hetero-3"  # 2 chetemi (ranks 0-1) + 1 chifflet (rank 2)


def numasim_env_by_machine(spec: RunSpec, tmp: Path) -> dict[str, dict[str, str]]:
    """What numasim applies to a rank of each machine type: its run description's env and
    env_per_machine merged as simulator/src/config.cpp does."""
    desc = run_description(spec, platform_dir_for(spec, tmp), tmp)
    return {m: {**desc["env"], **extra} for m, extra in desc["env_per_machine"].items()}


def cli_spec(*argv: str) -> RunSpec:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return spec_from_args(p.parse_args(list(argv)))


def test_user_env_wins_in_numasim_on_a_mixed_cluster(tmp_path: Path) -> None:
    """`--env` lost to factor D's per-machine main-thread core inside numasim."""
    spec = cli_spec("--engine", "numasim", "--cluster", CLUSTER, "--n", "1920", "--b", "960", "--factors", "D=1",
                    "--env", "STARPU_MAIN_THREAD_CPUID=3")
    envs = numasim_env_by_machine(spec, tmp_path)
    assert set(envs) == {"chetemi", "chifflet"}
    assert all(e["STARPU_MAIN_THREAD_CPUID"] == "3" for e in envs.values()), envs
    # the factor rule still acts where the user said nothing
    assert envs["chifflet"]["STARPU_WORKERS_CPUID"] != envs["chetemi"]["STARPU_WORKERS_CPUID"]


def test_campaign_factor_env_reaches_numasim_on_every_machine_type(tmp_path: Path) -> None:
    """a factor_env for B was overridden on chifflet by B's per-machine rule."""
    factor_env = {"B": {"low": {"STARPU_WORKERS_CPUID": "0 1 2 3 4 5"},
                        "high": {"STARPU_WORKERS_CPUID": "5 4 3 2 1 0"}}}
    row = {"engine": "numasim", "cluster": CLUSTER, "n": 1920, "b": 960, "seed": 1, "env": "{}",
           "factor_env": json.dumps(factor_env), "distribution": json.dumps({"kind": "block-cyclic"}),
           "variability": True, "A": -1, "B": 1}
    spec = spec_for(row, ["A", "B"], None, tmp_path)
    envs = numasim_env_by_machine(spec, tmp_path)
    assert {m: e["STARPU_WORKERS_CPUID"] for m, e in envs.items()} == {"chetemi": "5 4 3 2 1 0",
                                                                       "chifflet": "5 4 3 2 1 0"}


def test_real_engine_gives_each_rank_its_machine_environment(tmp_path: Path) -> None:
    """the per-machine variables never reached the real engine's ranks. Started through the
    real mpirun with a command that prints what each rank received."""
    machines = ["chetemi", "chetemi", "chifflet"]
    assert rank_groups(machines) == [("chetemi", 2), ("chifflet", 1)]
    env = resolve_run_env(CLUSTER, {"D": 1})
    spec = RunSpec(engine="real", cluster=CLUSTER, n=1920, b=960, env=env.common, env_per_machine=env.per_machine)
    cmd, proc_env = launch(spec, machines, ["sh", "-c", 'echo "$OMPI_COMM_WORLD_RANK $STARPU_MAIN_THREAD_CPUID"'])
    out = subprocess.run(cmd, env=proc_env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    got = dict(line.split() for line in out.stdout.splitlines())
    assert got == {"0": env.of_machine("chetemi")["STARPU_MAIN_THREAD_CPUID"],
                   "1": env.of_machine("chetemi")["STARPU_MAIN_THREAD_CPUID"],
                   "2": env.of_machine("chifflet")["STARPU_MAIN_THREAD_CPUID"]}
    assert got["0"] != got["2"]


def test_starpu_simgrid_splits_process_and_rank_variables(tmp_path: Path) -> None:
    """StarPU-SimGrid ranks share one process environment (StarPU reads getenv): what is equal
    everywhere (or device-only) goes there, what differs goes to the ranks' settings file
    (tests/test_starpu_simgrid_env.py runs it), and other conflicting variables are refused by name."""
    env = resolve_run_env(CLUSTER, {})
    spec = RunSpec(engine="starpu-simgrid", cluster=CLUSTER, n=1920, b=960, env=env.common,
                   env_per_machine=env.per_machine)
    starpu_dir = platform_dir_for(spec, tmp_path) / "starpu"
    ranks = ["chetemi", "chetemi", "chifflet"]
    common, own = rank_envs(spec, starpu_dir, ranks)
    assert common["STARPU_WORKERS_CUDAID"] == "0 1" and own == [{}, {}, {}]
    env = resolve_run_env(CLUSTER, {"D": 1})
    spec.env, spec.env_per_machine = env.common, env.per_machine
    common, own = rank_envs(spec, starpu_dir, ranks)
    assert "STARPU_MAIN_THREAD_CPUID" not in common
    assert [o["STARPU_MAIN_THREAD_CPUID"] for o in own] == [env.of_machine(m)["STARPU_MAIN_THREAD_CPUID"]
                                                           for m in ranks]
    spec.env_per_machine = {"chetemi": {"STARPU_SCHED_BETA": "2"}, "chifflet": {"STARPU_SCHED_BETA": "3"}}
    with pytest.raises(InputError) as e:
        rank_envs(spec, starpu_dir, ranks)
    assert e.value.key == "env_per_machine.STARPU_SCHED_BETA" and "numasim or real" in e.value.message()


def test_runs_table_records_the_per_machine_environment(tmp_path: Path) -> None:
    spec = {"name": "mixed", "cluster": CLUSTER, "engine": "numasim", "workload": {"n": 1920, "b": 960},
            "factors": {"D": [-1, 1]}, "design": {"type": "full", "generators": []}, "repetitions": 1,
            "seed": 1, "randomize": False, "batches": 1, "env": {}, "variability": False}
    design = tmp_path / "design.csv"
    assert main(["design", "--spec", json.dumps(spec), "--out", str(design)]) == 0
    out = tmp_path / "batch-000.csv"
    assert main(["campaign", "--design", str(design), "--batch", "0", "--out", str(out)]) == 0
    runs = read_runs(out)
    for row in runs.to_dict("records"):
        per = json.loads(row["env_per_machine"])
        assert per == resolve_run_env(CLUSTER, {"D": int(row["D"])}).per_machine


def test_numasim_mpi_memory_node_defaults_to_the_studys_and_is_selectable(tmp_path: Path) -> None:
    """StarPU-MPI's memory node for sends: the study's StarPU-MPI (STARPU_MAIN_RAM) unless
    `--mpi-memory-node choose_node` asks for StarPU 1.4.10's (docs/interfaces.md §4, `mpi`)."""
    spec = cli_spec("--engine", "numasim", "--cluster", CLUSTER, "--n", "1920", "--b", "960")
    assert spec.mpi_memory_node == "main_ram"
    assert run_description(spec, platform_dir_for(spec, tmp_path), tmp_path)["mpi"] == {"backend": "nmad"}
    spec = cli_spec("--engine", "numasim", "--cluster", CLUSTER, "--n", "1920", "--b", "960",
                    "--mpi-memory-node", "choose_node")
    desc = run_description(spec, platform_dir_for(spec, tmp_path), tmp_path)
    assert desc["mpi"] == {"backend": "nmad", "memory_node": "choose_node"}


def test_numasim_mpi_backend_defaults_to_the_studys_and_is_selectable(tmp_path: Path) -> None:
    """StarPU-MPI's backend: NewMadeleine's multicast (the study's) unless `--mpi-backend mpi` asks
    for StarPU's MPI backend (the one StarPU-SimGrid runs); the run description always names it."""
    spec = cli_spec("--engine", "numasim", "--cluster", CLUSTER, "--n", "1920", "--b", "960")
    assert spec.mpi_backend == "nmad"
    spec = cli_spec("--engine", "numasim", "--cluster", CLUSTER, "--n", "1920", "--b", "960", "--mpi-backend", "mpi")
    assert run_description(spec, platform_dir_for(spec, tmp_path), tmp_path)["mpi"] == {"backend": "mpi"}


def test_run_cache_keys_name_the_mpi_backend_and_memory_node() -> None:
    """`testbed simulate`'s run cache (testbed/run/run_cache.py) took a cached description of one
    StarPU-MPI backend or memory node for a command line asking for another."""
    from testbed.run import run_cache

    p = argparse.ArgumentParser()
    add_arguments(p)
    base = ["--engine", "numasim", "--cluster", CLUSTER, "--n", "1920", "--b", "960"]
    variants = ([], ["--mpi-backend", "mpi"], ["--mpi-memory-node", "choose_node"])
    assert len({run_cache.key(p.parse_args(base + v)) for v in variants}) == len(variants)
