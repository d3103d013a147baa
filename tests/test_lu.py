"""apps/lu: real build (residual, task counts, MPI ranks) and SimGrid build (engine, determinism, errors).

The SimGrid tests drive StarPU-SimGrid with StarPU's shipped perf models of
`sirocco` and `mirage` (tools/perfmodels/sampling in the StarPU source), laid
out as `testbed platform` lays out its output (docs/interfaces.md §3).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from testbed.common.errors import InputError
from testbed.common.paths import DEPS, LU_REAL, LU_SIMGRID
from testbed.run.distribution import heterogeneous, write_distribution
from testbed.run.engines import RunSpec

SHIPPED = DEPS / "src" / "starpu-1.4.10" / "tools" / "perfmodels" / "sampling"

needs_real = pytest.mark.skipif(not LU_REAL.exists(), reason="build/lu-real/lu not built (make build)")
needs_simgrid = pytest.mark.skipif(not (LU_SIMGRID.exists() and SHIPPED.is_dir()),
                                   reason="build/lu-simgrid/lu or StarPU's shipped sampling not present")


def closed_form(nt: int) -> dict[str, int]:
    return {"getrf": nt, "trsm": nt * (nt - 1), "gemm": sum((nt - 1 - k) ** 2 for k in range(nt))}


def lu_env(home: Path, **extra: str) -> dict[str, str]:
    # StarPU's default worker count (one core kept for the MPI thread): more
    # polling threads than cores make runs crawl when the machine is busy.
    return {**os.environ, "STARPU_HOME": str(home), "STARPU_SILENT": "1", **extra}


# ----------------------------------------------------------------------------- real build


@needs_real
def test_real_residual_and_task_counts(starpu_home: Path) -> None:
    proc = subprocess.run([str(LU_REAL), "--n", "1920", "--b", "192", "--check"], env=lu_env(starpu_home),
                          capture_output=True, text=True, check=True)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1  # stdout carries only the JSON line
    out = json.loads(lines[0])
    assert out["residual"] < 1e-12
    counts = closed_form(10)
    assert {k: out["tasks_by_kind"][k] for k in counts} == counts
    assert out["tasks"] == sum(counts.values()) and out["tasks_by_kind"]["plrnt"] == 100
    assert out["makespan_s"] > 0 and out["gflops"] > 0


@needs_real
def test_real_two_ranks_with_distribution_file(tmp_path: Path, starpu_home: Path) -> None:
    """Owner-computes across 2 MPI ranks on a generated heterogeneous distribution."""
    from testbed.run.engines.real import mpirun_prefix

    dist = write_distribution(tmp_path / "d.txt", heterogeneous(6, [1.0, 2.0]))
    cmd = mpirun_prefix(2) + ["-x", "STARPU_HOME", "-x", "STARPU_NCPU", "-x", "STARPU_SILENT", str(LU_REAL),
                              "--n", "768", "--b", "128", "--dist", str(dist), "--check"]
    proc = subprocess.run(cmd, env=lu_env(starpu_home, STARPU_NCPU="1"), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["ranks"] == 2 and out["residual"] < 1e-12
    assert {k: out["tasks_by_kind"][k] for k in ("getrf", "trsm", "gemm")} == closed_form(6)


@needs_real
@pytest.mark.parametrize("args,message", [
    (["--n", "1000", "--b", "192"], "error: --n/--b: expected N a positive multiple of b, got N=1000 b=192"),
    (["--n", "400", "--b", "200", "--dist", "{bad}"], "expected a rank in [0, 1), got 1"),
    (["--n", "400", "--b", "200", "--symbols", "magma"], "error: --symbols: expected chameleon or starpu-lu"),
])
def test_real_bad_input_exits_2(tmp_path: Path, starpu_home: Path, args: list[str], message: str) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("0 1\n1 0\n")
    args = [a.replace("{bad}", str(bad)) for a in args]
    proc = subprocess.run([str(LU_REAL), *args], env=lu_env(starpu_home), capture_output=True, text=True)
    assert proc.returncode == 2 and message in proc.stderr and proc.stdout == ""


@needs_real
def test_real_engine(tmp_path: Path, starpu_home: Path) -> None:
    from testbed.run.engines import real

    spec = RunSpec(engine="real", cluster="local-1", n=960, b=192, env={"STARPU_HOME": str(starpu_home)},
                   workdir=tmp_path)
    spec.check = True  # type: ignore[attr-defined]
    out = real.run(spec)
    assert out["residual"] < 1e-12 and out["tasks"] == sum(closed_form(5).values())
    assert list(tmp_path.glob("lu-real-*")) == []  # scratch directory removed
    with pytest.raises(InputError, match="multiple of b"):
        real.run(RunSpec(engine="real", cluster="local-1", n=1000, b=192))


# ----------------------------------------------------------------------------- SimGrid build


def make_platform(root: Path, hosts: list[str]) -> Path:
    """A `testbed platform`-like output whose machines use StarPU's shipped models."""
    starpu = root / "starpu"
    starpu.mkdir(parents=True)
    links = "".join(f'  <link id="{h}.eth" bandwidth="1.25GBps" latency="10us"/>\n' for h in hosts)
    routes = "".join(f'  <route src="{a}" dst="{b}"><link_ctn id="{a}.eth"/><link_ctn id="{b}.eth"/></route>\n'
                     for i, a in enumerate(hosts) for b in hosts[i + 1:])
    starpu.joinpath("cluster.xml").write_text(
        "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
        '<platform version="4.1">\n<zone id="net" routing="Full">\n'
        + "".join(f'  <host id="{h}" speed="1Gf"/>\n' for h in hosts) + links + routes + "</zone>\n</platform>\n")
    starpu.joinpath("hostfile").write_text("".join(f"{h}\n" for h in hosts))
    for machine in {h.rsplit("-", 1)[0] for h in hosts}:
        (starpu / machine).mkdir()
        (starpu / machine / "sampling").symlink_to(SHIPPED)
    return root


def simgrid_spec(tmp_path: Path, platform: Path, n: int = 9600, b: int = 960, **kw) -> RunSpec:
    return RunSpec(engine="starpu-simgrid", cluster="test", n=n, b=b, platform_dir=platform, workdir=tmp_path, **kw)


@needs_simgrid
def test_simgrid_one_node_counts_and_determinism(tmp_path: Path) -> None:
    from testbed.run.engines import starpu_simgrid

    platform = make_platform(tmp_path / "p", ["sirocco-1"])
    first = starpu_simgrid.run(simgrid_spec(tmp_path, platform))
    second = starpu_simgrid.run(simgrid_spec(tmp_path, platform))
    assert first["symbols"] == "starpu-lu"
    assert first["tasks_by_kind"] == closed_form(10) and first["tasks"] == 385
    assert first["makespan_s"] > 0 and first["makespan_s"] == second["makespan_s"]


@needs_simgrid
def test_simgrid_heterogeneous_two_nodes(tmp_path: Path) -> None:
    from testbed.run.engines import starpu_simgrid

    platform = make_platform(tmp_path / "p", ["sirocco-1", "mirage-1"])
    cyclic = starpu_simgrid.run(simgrid_spec(tmp_path, platform))
    balanced = starpu_simgrid.run(simgrid_spec(tmp_path, platform, distribution={"kind": "heterogeneous"}))
    for out in (cyclic, balanced):
        assert out["ranks"] == 2 and out["tasks_by_kind"] == closed_form(10)
    assert balanced["makespan_s"] != cyclic["makespan_s"]  # the distribution reaches the app


@needs_simgrid
def test_simgrid_uncalibrated_tile_size(tmp_path: Path) -> None:
    from testbed.run.engines import starpu_simgrid

    platform = make_platform(tmp_path / "p", ["sirocco-1"])
    with pytest.raises(InputError) as err:
        starpu_simgrid.run(simgrid_spec(tmp_path, platform, n=1920, b=192))
    assert err.value.file.endswith("codelets/45/starpu_dlu_lu_model_getrf.sirocco")
    assert "b=192" in err.value.expected


@needs_simgrid
def test_simgrid_uncalibrated_caught_from_starpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the pre-check, StarPU's own abort is turned into the same kind of error."""
    from testbed.run.engines import starpu_simgrid

    monkeypatch.setattr(starpu_simgrid, "check_models", lambda *a, **k: None)
    platform = make_platform(tmp_path / "p", ["sirocco-1"])
    with pytest.raises(InputError) as err:
        starpu_simgrid.run(simgrid_spec(tmp_path, platform, n=1920, b=192))
    assert err.value.key == "starpu_dlu_lu_model_getrf"
    assert err.value.file.endswith("sirocco/sampling/codelets/45/starpu_dlu_lu_model_getrf.sirocco")


@needs_simgrid
def test_simgrid_missing_sampling_dir(tmp_path: Path) -> None:
    from testbed.run.engines import starpu_simgrid

    platform = make_platform(tmp_path / "p", ["sirocco-1"])
    (platform / "starpu" / "hostfile").write_text("sirocco-1\nchifflet-1\n")
    with pytest.raises(InputError) as err:
        starpu_simgrid.run(simgrid_spec(tmp_path, platform))
    assert err.value.file == str(platform / "starpu" / "chifflet" / "sampling")


def test_simgrid_n_not_multiple_of_b(tmp_path: Path) -> None:
    from testbed.run.engines import starpu_simgrid

    with pytest.raises(InputError, match="multiple of b"):
        starpu_simgrid.run(simgrid_spec(tmp_path, tmp_path, n=1000, b=960))


@needs_simgrid
def test_simgrid_generated_platform_three_nodes(tmp_path: Path) -> None:
    """hetero-3 (2 chetemi + 1 chifflet) end to end from `testbed platform`'s generator."""
    from testbed.run.engines import starpu_simgrid

    spec = RunSpec(engine="starpu-simgrid", cluster="hetero-3", n=4800, b=480, workdir=tmp_path,
                   distribution={"kind": "heterogeneous"})
    out = starpu_simgrid.run(spec)
    assert out["hosts"] == ["chetemi-1", "chetemi-2", "chifflet-1"] and out["symbols"] == "chameleon"
    assert out["tasks_by_kind"] == closed_form(10) and out["makespan_s"] > 0
    assert list(tmp_path.iterdir()) == []  # generated platform and scratch files removed


@needs_simgrid
def test_simgrid_app_error_becomes_input_error(tmp_path: Path) -> None:
    """SMPI returns 0 whatever main returns: the app's `error:` line is what tells."""
    from testbed.common.paths import STARPU_SIMGRID
    from testbed.run.engines.lu_app import parse_output

    starpu = make_platform(tmp_path / "p", ["sirocco"]) / "starpu"
    env = {**os.environ, "STARPU_PERF_MODEL_DIR": str(SHIPPED), "STARPU_HOSTNAME": "sirocco",
           "STARPU_HOME": str(tmp_path), "STARPU_SILENT": "1"}
    proc = subprocess.run([str(STARPU_SIMGRID / "bin" / "starpu_smpirun"), "-platform", str(starpu / "cluster.xml"),
                           "-hostfile", str(starpu / "hostfile"), str(LU_SIMGRID), "--n", "1000", "--b", "960"],
                          env=env, capture_output=True, text=True, timeout=60)
    with pytest.raises(InputError) as err:
        parse_output(proc.stdout, proc.stderr, proc.returncode, "lu")
    assert err.value.key == "--n/--b" and "N=1000 b=960" in err.value.expected
