"""Chameleon's own LU as `app: chameleon`: the installation checks, the driver's command line and
output, the app choice in the CLI and the config; with a Chameleon installed (CHAMELEON_PREFIX,
CHAMELEON_SIMGRID_PREFIX, or envs/setup.sh's build from CHAMELEON_SOURCE_TARBALL), its real run
with the residual check, its StarPU-SimGrid run, and numasim on the models a calibration of
Chameleon's codelets writes."""

from __future__ import annotations

import copy
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from testbed import ROOT
from testbed.cli import main
from testbed.common import paths
from testbed.common.errors import InputError
from testbed.common.paths import NUMASIM, starpu_prefix
from testbed.run.engines import RunSpec, chameleon_app
from testbed.starpu.perfmodel_files import read_model, square_tiles_footprint

DATA = Path(__file__).parent / "data" / "chameleon"


# The reason is the CLI's check: not installed, or installed but wrong (e.g. linked to another
# StarPU than the testbed's, which the line names)
NATIVE_WHY = chameleon_app.unavailable("native")
SIMGRID_WHY = chameleon_app.unavailable("simgrid")
needs_native = pytest.mark.skipif(NATIVE_WHY is not None, reason=str(NATIVE_WHY))
needs_simgrid = pytest.mark.skipif(SIMGRID_WHY is not None, reason=str(SIMGRID_WHY))


# ------------------------------------------------------------------ installation checks
def fake_install(root: Path, defines: tuple[str, ...], starpu_lib: str | None = None) -> Path:
    """A directory shaped like an installed Chameleon: its testing driver, config.h with
    `defines` (what CMake wrote for the options it was built with) and, given `starpu_lib`, the
    CMake package's record of the StarPU library it links (as a static StarPU-SimGrid build has)."""
    (root / "bin").mkdir(parents=True)
    driver = root / "bin" / "chameleon_dtesting"
    driver.write_text("#!/bin/sh\nexit 0\n")
    driver.chmod(driver.stat().st_mode | stat.S_IXUSR)
    (root / "include" / "chameleon").mkdir(parents=True)
    (root / "include" / "chameleon" / "config.h").write_text("".join(f"#define {d}\n" for d in defines))
    if starpu_lib is not None:
        (root / "lib" / "cmake" / "chameleon").mkdir(parents=True)
        (root / "lib" / "cmake" / "chameleon" / "starpuTargets.cmake").write_text(
            f'set_target_properties(MORSE::STARPU PROPERTIES INTERFACE_LINK_LIBRARIES "{starpu_lib}/libstarpumpi-1.4.a;'
            f'{starpu_lib}/libstarpu-1.4.a")\n')
    return root


NATIVE_DEFINES = ("CHAMELEON_SCHED_STARPU", "CHAMELEON_USE_MPI")


@pytest.mark.parametrize("variable,flavour,make,words", [
    ("CHAMELEON_PREFIX", "native", lambda d: d / "nope", ("no such directory",)),
    ("CHAMELEON_PREFIX", "native", lambda d: (d / "empty").mkdir() or d / "empty", ("bin/chameleon_dtesting",)),
    ("CHAMELEON_PREFIX", "native", lambda d: fake_install(d / "p", ("CHAMELEON_SCHED_STARPU",)), ("built with MPI",)),
    ("CHAMELEON_PREFIX", "native", lambda d: fake_install(d / "p", ("CHAMELEON_USE_MPI",)), ("built on StarPU",)),
    ("CHAMELEON_PREFIX", "native", lambda d: fake_install(d / "p", (*NATIVE_DEFINES, "CHAMELEON_SIMULATION")),
     ("simulation mode", "CHAMELEON_SIMGRID_PREFIX")),
    ("CHAMELEON_SIMGRID_PREFIX", "simgrid", lambda d: fake_install(d / "p", NATIVE_DEFINES), ("simulation mode",)),
    ("CHAMELEON_PREFIX", "native", lambda d: fake_install(d / "p", NATIVE_DEFINES, "/opt/other-starpu/lib"),
     ("the testbed's StarPU", "/opt/other-starpu/lib")),
], ids=["missing", "no driver", "without MPI", "not StarPU", "simulation as native", "native as simulation",
        "another StarPU"])
def test_a_wrong_prefix_is_one_line_naming_the_variable(tmp_path: Path, monkeypatch, variable: str, flavour: str,
                                                         make, words: tuple[str, ...]) -> None:
    prefix = make(tmp_path)
    monkeypatch.setenv(variable, str(prefix))
    with pytest.raises(InputError) as e:
        chameleon_app.installed_chameleon(flavour)
    assert e.value.key == f"{variable}={prefix}"
    for w in words:
        assert w in e.value.message()


def test_a_sound_prefix_gives_its_driver(tmp_path: Path, monkeypatch) -> None:
    prefix = fake_install(tmp_path / "p", NATIVE_DEFINES, f"{starpu_prefix('native')}/lib")
    monkeypatch.setenv("CHAMELEON_PREFIX", str(prefix))
    assert chameleon_app.installed_chameleon("native") == prefix / "bin" / "chameleon_dtesting"


def test_the_cli_exits_2_on_a_wrong_prefix(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("CHAMELEON_PREFIX", str(fake_install(tmp_path / "p", ("CHAMELEON_SCHED_STARPU",))))
    rc = main(["simulate", "--engine", "real", "--app", "chameleon", "--cluster", "local-1", "--n", "384", "--b", "192"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: CHAMELEON_PREFIX=") and "MPI" in err[0]


def checkout_build(deps: Path, monkeypatch, starpu_lib: str | None = None) -> Path:
    """envs/setup.sh's Chameleon (.deps/chameleon-native with its stamp) in a .deps of its own
    beside a native StarPU, linked to `starpu_lib`; STARPU_NATIVE_PREFIX and CHAMELEON_PREFIX unset."""
    monkeypatch.setattr(paths, "DEPS", deps)
    monkeypatch.delenv("STARPU_NATIVE_PREFIX", raising=False)
    monkeypatch.delenv("CHAMELEON_PREFIX", raising=False)
    (deps / "starpu-native" / "lib").mkdir(parents=True)
    prefix = fake_install(deps / "chameleon-native", NATIVE_DEFINES, starpu_lib)
    (prefix / ".built-0123456789ab-0123456789ab").touch()
    return prefix


def test_the_checkout_build_linked_to_another_starpu_is_named_not_missing(tmp_path: Path, monkeypatch,
                                                                          capsys) -> None:
    """.deps/chameleon-native built while STARPU_NATIVE_PREFIX named another StarPU, run with it
    unset: the skip reason and the CLI's one line (exit 2) name both StarPUs and the variable."""
    deps = tmp_path / "deps"
    prefix = checkout_build(deps, monkeypatch, "/opt/other-starpu/lib")
    why = chameleon_app.unavailable("native")
    assert why is not None and why.startswith("STARPU_NATIVE_PREFIX: ")
    for words in (f"Chameleon at {prefix} is linked to StarPU /opt/other-starpu/lib",
                  f"not the testbed's {deps / 'starpu-native'}", "STARPU_NATIVE_PREFIX unset"):
        assert words in why, why
    rc = main(["simulate", "--engine", "real", "--app", "chameleon", "--cluster", "local-1", "--n", "384", "--b", "192"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [f"error: {why}"]


def test_the_checkout_build_on_the_testbeds_starpu_is_sound(tmp_path: Path, monkeypatch) -> None:
    deps = tmp_path / "deps"
    checkout_build(deps, monkeypatch, str(deps / "starpu-native" / "lib"))
    assert chameleon_app.unavailable("native") is None


def test_no_chameleon_is_said_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(paths, "DEPS", tmp_path)
    monkeypatch.delenv("CHAMELEON_PREFIX", raising=False)
    assert chameleon_app.unavailable("native").startswith("no Chameleon of the native flavour: set CHAMELEON_PREFIX")


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_the_runpath_of_the_driver_names_its_starpu(tmp_path: Path, monkeypatch) -> None:
    """A shared build records no CMake path here: the driver's RUNPATH (envs/setup.sh links with
    CMAKE_INSTALL_RPATH_USE_LINK_PATH) says which StarPU it was built against, even where a
    libstarpu of the same soname is found first on LD_LIBRARY_PATH."""
    other = tmp_path / "other-starpu" / "lib"
    other.mkdir(parents=True)
    (other / "libstarpu-1.4.so.3").touch()
    prefix = checkout_build(tmp_path / "deps", monkeypatch)
    (prefix / "main.c").write_text("int main(void) { return 0; }\n")
    subprocess.run(["cc", "-o", str(prefix / chameleon_app.TESTING), str(prefix / "main.c"), f"-Wl,-rpath,{other}"],
                   check=True)
    why = chameleon_app.unavailable("native")
    assert why is not None and f"is linked to StarPU {other}, not the testbed's" in why, why


# ------------------------------------------------------------------ the driver's command line and output
def spec(**kw) -> RunSpec:
    return RunSpec(**{"engine": "real", "app": "chameleon", "cluster": "local-1", "n": 1920, "b": 192, "seed": 7, **kw})


def test_command_is_getrf_nopiv_with_starpus_worker_counts() -> None:
    cmd = chameleon_app.command(Path("/x/chameleon_dtesting"), spec(check=True), ranks=4)
    assert cmd == ["/x/chameleon_dtesting", "-o", "getrf_nopiv", "-n", "1920", "-b", "192", "-t", "-1", "-g", "-1",
                   "-X", "7", "-P", "2", "-c"]


@pytest.mark.parametrize("changes,key,words", [
    ({"distribution": {"kind": "heterogeneous"}}, "distribution.kind", "P x Q grid only"),
    ({"distribution": {"kind": "file", "path": "d.txt"}}, "distribution.kind", "P x Q grid only"),
    ({"distribution": {"kind": "block-cyclic", "p": 3, "q": 1}}, "distribution p x q", "4 ranks"),
    ({"symbols": "starpu-lu"}, "--symbols", "its codelets' models"),
    ({"dag": "starpu-lu-example"}, "--dag", "its own task graph"),
    ({"getrf_on_gpu": True}, "--getrf-gpu", "no CUDA implementation"),
    ({"n": 1000}, "--n/--b", "multiple"),
])
def test_what_chameleons_driver_cannot_do_is_refused(changes: dict, key: str, words: str) -> None:
    with pytest.raises(InputError) as e:
        chameleon_app.command(Path("/x/t"), spec(**changes), ranks=4)
    assert e.value.key == key and words in e.value.message()


def test_output_of_chameleon_1_2_is_parsed() -> None:
    """A captured chameleon_dtesting (1.2.0) output with -c: the first run line after the
    header (the warm-up prints none), Chameleon's residual and check status."""
    out = chameleon_app.parse_output((DATA / "getrf_nopiv-check.out").read_text(), "", 0, "t")
    assert out["makespan_s"] > 0 and out["gflops"] > 0 and (out["p"], out["q"], out["ranks"]) == (1, 1, 1)
    assert out["check_passed"] and 0 < out["residual"] < 1e-12
    fields = chameleon_app.result_fields(out, nt=5)
    assert fields["tasks_by_kind"] == {"getrf": 5, "trsm": 20, "gemm": 30} and fields["tasks"] == 55


def test_a_failed_driver_is_reported_with_its_stderr() -> None:
    with pytest.raises(RuntimeError, match="(?s)exit status 1.*CHAMELEON_Init failed"):
        chameleon_app.parse_output("", "CHAMELEON_Init failed and returned -1.\n", 1, "chameleon_dtesting")


# ------------------------------------------------------------------ the app choice
def test_numasim_refuses_app_chameleon(capsys) -> None:
    rc = main(["simulate", "--engine", "numasim", "--app", "chameleon", "--cluster", "chifflet-1", "--n", "960",
               "--b", "192"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: --app:")


def test_the_config_carries_the_app_into_the_design() -> None:
    from testbed.study.design import design_table, resolve_experiment, validate_config

    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config = copy.deepcopy(base)
    exp = config["experiments"][0]
    exp.update(app="chameleon", engine="real", cluster="local-1",
               workload={"n": 384, "b": 192, "distribution": {"kind": "block-cyclic"}}, factors={"A": [-1, 1]}, batches=1)
    config = validate_config(config, "c.yaml", cli_strings=True)
    resolved = resolve_experiment(config, exp["name"], "default", "c.yaml")
    table = design_table(resolved)
    assert set(table["app"]) == {"chameleon"}
    for engine, dist, key in (("numasim", "block-cyclic", "app"), ("real", "heterogeneous", "workload.distribution.kind")):
        bad = copy.deepcopy(base)
        bad["experiments"][0].update(app="chameleon", engine=engine)
        bad["experiments"][0]["workload"]["distribution"] = {"kind": dist}
        with pytest.raises(InputError) as e:
            bad = validate_config(bad, "c.yaml", cli_strings=True)
            resolve_experiment(bad, bad["experiments"][0]["name"], "default", "c.yaml")
        assert e.value.key.endswith(key), e.value.message()


# ------------------------------------------------------------------ with a Chameleon installed
@needs_native
def test_real_engine_runs_chameleons_lu_with_its_residual_check(tmp_path: Path) -> None:
    from testbed.run.simulate import simulate

    out = simulate(spec(n=960, b=192, check=True, env={"STARPU_HOME": str(tmp_path / "home")}, workdir=tmp_path))
    assert out["app"] == "chameleon" and out["makespan_s"] > 0 and out["tasks"] == 55
    assert out["check_passed"] and out["residual"] < 1e-12, out


@needs_native
def test_a_campaign_batch_runs_chameleon_with_the_factors(tmp_path: Path) -> None:
    """A design with `app: chameleon` through `campaign`'s batch runner: each row's program is
    Chameleon's driver, with the factor levels' StarPU variables, and the runs table says so."""
    from testbed.run.campaign import run_batch
    from testbed.study.design import design_table

    exp = {"name": "ch", "cluster": "local-1", "engine": "real", "app": "chameleon",
           "workload": {"n": 384, "b": 192, "distribution": {"kind": "block-cyclic"}},
           "factors": {"E": [-1, 1]}, "repetitions": 1, "seed": 1, "batches": 1,
           "env": {"STARPU_HOME": str(tmp_path / "home")}}
    rows = run_batch(design_table(exp), 0)
    assert [r["app"] for r in rows] == ["chameleon", "chameleon"] and all(r["makespan_s"] > 0 for r in rows)
    assert {json.loads(r["env"])["STARPU_SCHED_BETA"] for r in rows} == {"1", "10"}
    assert all(r["tasks"] == 5 for r in rows)  # 2 x 2 tiles: 2 getrf, 2 trsm, 1 gemm


@needs_simgrid
def test_starpu_simgrid_engine_simulates_chameleon(tmp_path: Path) -> None:
    from testbed.run.simulate import simulate

    # CPU workers only: the SimGrid build of Chameleon has CPU codelets only
    out = simulate(RunSpec(engine="starpu-simgrid", app="chameleon", cluster="chifflet-1", n=9600, b=960,
                           env={"STARPU_NCUDA": "0"}, workdir=tmp_path))
    assert out["app"] == "chameleon" and out["makespan_s"] > 0 and len(out["hosts"]) == 1
    if not chameleon_app.has_cuda_codelets("simgrid"):  # its GPUs would idle: refused, not a CPU-only run
        with pytest.raises(InputError, match="STARPU_NCUDA: expected 0 for app chameleon"):
            simulate(RunSpec(engine="starpu-simgrid", app="chameleon", cluster="chifflet-1", n=9600, b=960,
                             workdir=tmp_path))


@needs_native
@pytest.mark.skipif(not NUMASIM.exists(), reason="numasim not built (make build)")
def test_calibration_of_chameleons_codelets_is_read_by_numasim(tmp_path: Path) -> None:
    """`testbed calibrate --app chameleon` fills dgetrf_nopiv, dtrsm, dgemm and dplgsy models by
    running Chameleon's driver; their history entries carry the footprints of b x b tiles that
    apps/lu's tasks have (StarPU 1.4.10 folds no run-time interface id: perfmodel_files.py
    chameleon_tile_footprint), and numasim runs on them as they are (--perfmodel-dir)."""
    from testbed.calibrate import calibrate as cal
    from testbed.run.simulate import simulate
    from testbed.starpu.sampling_dir import ModelDir

    out = tmp_path / "local"
    opts = cal.Options(machine="local", out=out, tile_sizes=[64], reps=3, bw_mb=32, bw_reps=2, lu_nt=5, max_rounds=40,
                       history_max_error=1000, lu_reps=2, paired_runs=0, app="chameleon")
    cal.calibrate(opts, log=lambda _: None)
    models = out / "sampling" / "codelets" / "45"
    for sym, nbuf in (("dgetrf_nopiv", 1), ("dtrsm", 2), ("dgemm", 3), ("dplgsy", 1)):
        entries = [e for c in read_model(models / f"{sym}.local") for e in c.entries]
        assert entries and {e.footprint for e in entries if e.size == nbuf * 64 * 64 * 8} == \
            {square_tiles_footprint(64, nbuf)}, sym
    runs = json.loads((out / "codelets-all-runs.json").read_text())
    assert runs and {r["app"] for r in runs} == {"chameleon"}
    result = simulate(RunSpec(engine="numasim", cluster="local-1", n=640, b=64, workdir=tmp_path,
                              perfmodel_dirs={"local": ModelDir(out / "sampling", "local")}))
    assert result["makespan_s"] > 0 and result["tasks"] == 385
    assert os.path.exists(out / "kernels.yaml") and "dplgsy" in (out / "kernels.yaml").read_text()
