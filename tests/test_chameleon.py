"""Chameleon's own LU as `app: chameleon`: the installation checks, the driver's (apps/chameleon_lu)
command line and output, the app choice in the CLI and the config; with a Chameleon installed
(CHAMELEON_PREFIX, CHAMELEON_SIMGRID_PREFIX, or envs/setup.sh's build from CHAMELEON_SOURCE_TARBALL)
and the driver built against it, its real run with the residual check, the heterogeneous mapping
and a distribution file on two ranks of this machine (real and StarPU-SimGrid: the tiles each rank
owns are the mapping's), its generation against Chameleon's own testing driver, and numasim on the
models a calibration of Chameleon's codelets writes."""

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
from testbed.run import distribution
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
    """A directory shaped like an installed Chameleon: config.h with `defines` (what CMake wrote
    for the options it was built with), its CMake package directory and, given `starpu_lib`, the
    package's record of the StarPU library it links (as a static StarPU-SimGrid build has)."""
    (root / "include" / "chameleon").mkdir(parents=True)
    (root / "include" / "chameleon" / "config.h").write_text("".join(f"#define {d}\n" for d in defines))
    (root / "lib" / "cmake" / "chameleon").mkdir(parents=True)
    if starpu_lib is not None:
        (root / "lib" / "cmake" / "chameleon" / "starpuTargets.cmake").write_text(
            f'set_target_properties(MORSE::STARPU PROPERTIES INTERFACE_LINK_LIBRARIES "{starpu_lib}/libstarpumpi-1.4.a;'
            f'{starpu_lib}/libstarpu-1.4.a")\n')
    return root


NATIVE_DEFINES = ("CHAMELEON_SCHED_STARPU", "CHAMELEON_USE_MPI")


@pytest.mark.parametrize("variable,flavour,make,words", [
    ("CHAMELEON_PREFIX", "native", lambda d: d / "nope", ("no such directory",)),
    ("CHAMELEON_PREFIX", "native", lambda d: (d / "empty").mkdir() or d / "empty",
     ("include/chameleon/config.h", "lib/cmake/chameleon")),
    ("CHAMELEON_PREFIX", "native", lambda d: fake_install(d / "p", ("CHAMELEON_SCHED_STARPU",)), ("built with MPI",)),
    ("CHAMELEON_PREFIX", "native", lambda d: fake_install(d / "p", ("CHAMELEON_USE_MPI",)), ("built on StarPU",)),
    ("CHAMELEON_PREFIX", "native", lambda d: fake_install(d / "p", (*NATIVE_DEFINES, "CHAMELEON_SIMULATION")),
     ("simulation mode", "CHAMELEON_SIMGRID_PREFIX")),
    ("CHAMELEON_SIMGRID_PREFIX", "simgrid", lambda d: fake_install(d / "p", NATIVE_DEFINES), ("simulation mode",)),
    ("CHAMELEON_PREFIX", "native", lambda d: fake_install(d / "p", NATIVE_DEFINES, "/opt/other-starpu/lib"),
     ("the testbed's StarPU", "/opt/other-starpu/lib")),
], ids=["missing", "not an install", "without MPI", "not StarPU", "simulation as native", "native as simulation",
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


def driver_build(build: Path, package: Path, monkeypatch) -> Path:
    """build/chameleon-lu-native as envs/setup.sh leaves it (in `build`): the program and CMake's
    record of the Chameleon package it found."""
    program = build / "chameleon_lu"
    build.mkdir(parents=True)
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    (build / "CMakeCache.txt").write_text(f"CMAKE_BUILD_TYPE:STRING=Release\nCHAMELEON_DIR:PATH={package}\n")
    monkeypatch.setitem(paths.CHAMELEON_LU, "native", program)
    return program


def test_a_sound_prefix_gives_the_driver_built_against_it(tmp_path: Path, monkeypatch) -> None:
    """installed_chameleon gives the checked prefix; driver() the program envs/setup.sh built
    against that very Chameleon, else one line saying to run envs/setup.sh: not built, or built
    against another Chameleon (CHAMELEON_PREFIX changed since: the line names the variable)."""
    prefix = fake_install(tmp_path / "p", NATIVE_DEFINES, f"{starpu_prefix('native')}/lib")
    monkeypatch.setenv("CHAMELEON_PREFIX", str(prefix))
    monkeypatch.setitem(paths.CHAMELEON_LU, "native", tmp_path / "build" / "chameleon_lu")
    assert chameleon_app.installed_chameleon("native") == prefix
    why = chameleon_app.unavailable("native")
    assert why is not None and why.startswith("Chameleon's LU driver (native flavour) not built") and \
        "bash envs/setup.sh" in why, why
    program = driver_build(tmp_path / "build", prefix / "lib" / "cmake" / "chameleon", monkeypatch)
    assert chameleon_app.driver("native") == program and chameleon_app.unavailable("native") is None
    other = fake_install(tmp_path / "other", NATIVE_DEFINES, f"{starpu_prefix('native')}/lib")
    monkeypatch.setenv("CHAMELEON_PREFIX", str(other))
    with pytest.raises(InputError) as e:
        chameleon_app.driver("native")
    assert e.value.key == f"CHAMELEON_PREFIX={other}"
    assert f"was built against Chameleon {prefix / 'lib' / 'cmake' / 'chameleon'}" in e.value.message()


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
    prefix = checkout_build(deps, monkeypatch, str(deps / "starpu-native" / "lib"))
    assert chameleon_app.installed_chameleon("native") == prefix


def test_no_chameleon_is_said_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(paths, "DEPS", tmp_path)
    monkeypatch.delenv("CHAMELEON_PREFIX", raising=False)
    assert chameleon_app.unavailable("native").startswith("no Chameleon of the native flavour: set CHAMELEON_PREFIX")


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_the_runpath_of_chameleons_library_names_its_starpu(tmp_path: Path, monkeypatch) -> None:
    """A shared build records no CMake path here: the RUNPATH of libchameleon_starpu (envs/setup.sh
    links with CMAKE_INSTALL_RPATH_USE_LINK_PATH) says which StarPU it was built against, even
    where a libstarpu of the same soname is found first on LD_LIBRARY_PATH."""
    other = tmp_path / "other-starpu" / "lib"
    other.mkdir(parents=True)
    (other / "libstarpu-1.4.so.3").touch()
    prefix = checkout_build(tmp_path / "deps", monkeypatch)
    (prefix / "lib.c").write_text("int chameleon_lib(void) { return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(prefix / "lib" / "libchameleon_starpu.so.1"),
                    str(prefix / "lib.c"), f"-Wl,-rpath,{other}"], check=True)
    why = chameleon_app.unavailable("native")
    assert why is not None and f"is linked to StarPU {other}, not the testbed's" in why, why


# ------------------------------------------------------------------ the driver's command line and output
def spec(**kw) -> RunSpec:
    return RunSpec(**{"engine": "real", "app": "chameleon", "cluster": "local-1", "n": 1920, "b": 192, "seed": 7, **kw})


def test_command_takes_apps_lus_mapping_arguments(tmp_path: Path) -> None:
    """The driver's arguments are apps/lu's: a P x Q grid, or a distribution file, the
    heterogeneous mapping written into the run's work directory from the nodes' speeds."""
    cmd = chameleon_app.command(Path("/x/chameleon_lu"), spec(check=True), 4, tmp_path, None)
    assert cmd == ["/x/chameleon_lu", "--n", "1920", "--b", "192", "--seed", "7", "--p", "2", "--q", "2", "--check"]
    cmd = chameleon_app.command(Path("/x/chameleon_lu"), spec(distribution={"kind": "heterogeneous"}), 2, tmp_path,
                                [2.0, 1.0])
    assert cmd[-2:] == ["--dist", str(tmp_path / "distribution.txt")]
    assert distribution.read_distribution(cmd[-1], 10, 2) == distribution.heterogeneous(10, [2.0, 1.0])


@pytest.mark.parametrize("changes,key,words", [
    ({"distribution": {"kind": "block-cyclic", "p": 3, "q": 1}}, "distribution p x q", "4 ranks"),
    ({"symbols": "starpu-lu"}, "--symbols", "its codelets' models"),
    ({"dag": "starpu-lu-example"}, "--dag", "its own task graph"),
    ({"getrf_on_gpu": True}, "--getrf-gpu", "no CUDA implementation"),
    ({"n": 1000}, "--n/--b", "multiple"),
])
def test_what_chameleons_driver_cannot_do_is_refused(changes: dict, key: str, words: str) -> None:
    with pytest.raises(InputError) as e:
        chameleon_app.command(Path("/x/t"), spec(**changes), 4, Path("/nonexistent"), None)
    assert e.value.key == key and words in e.value.message()


def test_output_of_the_driver_is_parsed() -> None:
    """A captured apps/chameleon_lu output (Chameleon 1.2.0, two ranks, a distribution file, with
    --check): the first run line after the header (the warm-up prints none), each rank's tiles,
    Chameleon's residual and check status; no P x Q for a file (the descriptor's grid is not the
    mapping)."""
    out = chameleon_app.parse_output((DATA / "chameleon_lu-file-check.out").read_text(), "", 0, "t")
    assert out["makespan_s"] > 0 and out["gflops"] > 0 and out["ranks"] == 2 and "p" not in out
    assert out["tiles_by_rank"] == [15, 10] and out["check_passed"] and 0 < out["residual"] < 1e-12
    fields = chameleon_app.result_fields(out, nt=5)
    assert fields["tasks_by_kind"] == {"getrf": 5, "trsm": 20, "gemm": 30} and fields["tasks"] == 55


def test_the_driver_prints_chameleons_testing_line() -> None:
    """Its columns are those chameleon_dtesting (1.2.0) prints for getrf_nopiv, plus the mapping's
    two: a captured line of Chameleon's own driver parses the same way (its grid is the mapping)."""
    ours = (DATA / "chameleon_lu-file-check.out").read_text().splitlines()[0].split(";")
    theirs = (DATA / "getrf_nopiv-check.out").read_text().splitlines()[0].split(";")
    assert [c for c in ours if c not in ("distribution", "tiles_by_rank")] == theirs
    out = chameleon_app.parse_output((DATA / "getrf_nopiv-check.out").read_text(), "", 0, "t")
    assert (out["p"], out["q"], out["ranks"]) == (1, 1, 1) and out["check_passed"] and 0 < out["residual"] < 1e-12


def test_a_failed_driver_is_reported_with_its_stderr() -> None:
    with pytest.raises(RuntimeError, match="(?s)exit status 1.*CHAMELEON_Init failed"):
        chameleon_app.parse_output("", "CHAMELEON_Init failed and returned -1.\n", 1, "apps/chameleon_lu")


@pytest.mark.parametrize("returncode", [2, 0], ids=["exit 2", "under SMPI (exit status lost)"])
def test_the_drivers_bad_input_line_is_an_input_error(returncode: int) -> None:
    with pytest.raises(InputError) as e:
        chameleon_app.parse_output("", "error: d.txt: line 3 column 2: expected a rank in [0, 2), got 5\n",
                                   returncode, "apps/chameleon_lu")
    assert e.value.message() == "d.txt: line 3 column 2: expected a rank in [0, 2), got 5"


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
    good = copy.deepcopy(base)  # any mapping: the driver takes the testbed's owner table
    good["experiments"][0].update(app="chameleon", engine="real")
    good["experiments"][0]["workload"]["distribution"] = {"kind": "heterogeneous"}
    good = validate_config(good, "c.yaml", cli_strings=True)
    assert resolve_experiment(good, good["experiments"][0]["name"], "default", "c.yaml")["app"] == "chameleon"
    bad = copy.deepcopy(base)
    bad["experiments"][0].update(app="chameleon", engine="numasim")
    with pytest.raises(InputError) as e:
        bad = validate_config(bad, "c.yaml", cli_strings=True)
        resolve_experiment(bad, bad["experiments"][0]["name"], "default", "c.yaml")
    assert e.value.key.endswith("app"), e.value.message()


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


#: This machine as a 2-core and a 1-core node (platforms/clusters/local-hetero-2.yaml): both ranks
#: run here; every engine weighs the first twice the second (its cores), so the speed-balanced
#: mapping is unequal, and one CPU worker per rank keeps two ranks within two cores
HETERO = "local-hetero-2"
TWO_RANKS = {"STARPU_NCPU": "1"}
#: An owner table of 5 x 5 tiles that no grid gives: rank 1 owns the diagonal and the last column
IRREGULAR = [[1 if m == n or n == 4 else 0 for n in range(5)] for m in range(5)]


def tile_counts(owners: list[list[int]], ranks: int) -> list[int]:
    return [sum(row.count(r) for row in owners) for r in range(ranks)]


def mapping_case(kind: str, tmp_path: Path) -> tuple[dict, int, list[int]]:
    """(spec.distribution, N, each rank's tiles) of the heterogeneous mapping of HETERO at
    10 x 10 tiles (from the nodes' described speeds, as the real engine weighs them) or of a
    distribution file."""
    from testbed.run.engines.real import cluster_ranks

    if kind == "heterogeneous":
        return {"kind": kind}, 1920, tile_counts(distribution.heterogeneous(10, cluster_ranks(HETERO)[1]), 2)
    path = distribution.write_distribution(tmp_path / "owners.txt", IRREGULAR)
    return {"kind": "file", "path": str(path)}, 960, tile_counts(IRREGULAR, 2)


@pytest.mark.parametrize("engine", [pytest.param("real", marks=needs_native),
                                    pytest.param("starpu-simgrid", marks=needs_simgrid)])
@pytest.mark.parametrize("kind", ["heterogeneous", "file"])
def test_chameleons_lu_runs_on_the_testbeds_mapping(tmp_path: Path, starpu_home: Path, engine: str, kind: str) -> None:
    """`--app chameleon` with the heterogeneous mapping or a distribution file, on two ranks of
    this machine (real: two processes under mpirun; StarPU-SimGrid: two simulated nodes): the
    tiles each rank owns in Chameleon's descriptor (its get_rankof after CHAMELEON_Desc_Create_User,
    as the driver prints them) are the mapping's, and the real LU passes Chameleon's check.
    StarPU-SimGrid weighs the nodes by their models' gemm speed, the same 2:1 here (the same
    models, twice the cores)."""
    from testbed.run.simulate import simulate

    dist, n, expected = mapping_case(kind, tmp_path)
    assert expected[0] != expected[1]
    real = engine == "real"
    out = simulate(RunSpec(engine=engine, app="chameleon", cluster=HETERO, n=n, b=192, distribution=dist, check=real,
                           env={**TWO_RANKS, "STARPU_HOME": str(starpu_home)}, workdir=tmp_path))
    assert out["app"] == "chameleon" and out["ranks"] == 2 and out["makespan_s"] > 0 and "p" not in out
    assert out["tiles_by_rank"] == expected, out
    assert out["tasks"] == sum(chameleon_app.lu_tasks(n // 192).values())
    if real:
        assert out["check_passed"] and out["residual"] < 1e-12, out


def test_a_wrong_owner_in_a_distribution_file_is_one_line(tmp_path: Path, capsys) -> None:
    """A file whose owner is not a rank of the cluster: one line naming the file, the line and
    column and what was expected, exit 2, nothing on stdout; before any program is looked for,
    so with or without a Chameleon."""
    bad = [row[:] for row in IRREGULAR]
    bad[2][3] = 2
    path = distribution.write_distribution(tmp_path / "owners.txt", bad, "rank 2 of 2")
    for engine in ("real", "starpu-simgrid"):
        rc = main(["simulate", "--engine", engine, "--app", "chameleon", "--cluster", HETERO, "--n", "960", "--b", "192",
                   "--distribution", str(path), "--starpu-defaults", "--env", "STARPU_NCPU=1"])
        captured = capsys.readouterr()
        assert rc == 2 and captured.out == "", captured
        assert captured.err.splitlines() == [f"error: {path}: line 4 column 4: expected a rank in [0, 2), got 2"]


@needs_native
def test_the_driver_itself_refuses_a_wrong_owner(tmp_path: Path, starpu_home: Path) -> None:
    """apps/chameleon_lu reads the file with apps/lu's reader: the same line (exit 2, no output)
    when it is run by hand."""
    path = distribution.write_distribution(tmp_path / "owners.txt", [[0, 0], [1, 0]])
    proc = subprocess.run([str(chameleon_app.driver("native")), "--n", "384", "--b", "192", "--dist", str(path)],
                          env={**os.environ, "STARPU_HOME": str(starpu_home), "STARPU_SILENT": "1",
                               "OMPI_MCA_ess_singleton_isolated": "1"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"error: {path}: line 2 column 1: expected a rank in [0, 1), got 1" in proc.stderr.splitlines()


@needs_native
def test_the_matrix_is_chameleons_testing_matrix(starpu_home: Path) -> None:
    """The driver generates what Chameleon's own testing driver does for getrf_nopiv with the same
    seed (CHAMELEON_dplgtr_Tile, the bump N on the diagonal): the same ||A||_1, and both LUs pass
    Chameleon's check with residuals of the same order."""
    prefix = chameleon_app.installed_chameleon("native")
    env = {**os.environ, "STARPU_HOME": str(starpu_home), "STARPU_SILENT": "1", "STARPU_NCPU": "1",
           "OMPI_MCA_ess_singleton_isolated": "1", "LD_LIBRARY_PATH": chameleon_app.library_path("native")}
    runs = [[str(chameleon_app.driver("native")), "--n", "960", "--b", "192", "--seed", "7", "--check"],
            [str(prefix / "bin" / "chameleon_dtesting"), "-o", "getrf_nopiv", "-n", "960", "-b", "192", "-t", "-1",
             "-g", "-1", "-X", "7", "-c"]]
    if not Path(runs[1][0]).is_file():
        pytest.skip(f"this Chameleon has no testing driver ({runs[1][0]}: built without CHAMELEON_ENABLE_TESTING)")
    procs = [subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300) for cmd in runs]
    ours, theirs = (chameleon_app.parse_output(p.stdout, p.stderr, p.returncode, "t") for p in procs)
    norms = [dict(zip(*(line.split(";") for line in p.stdout.splitlines()[-2:]), strict=True))["||A||"] for p in procs]
    assert float(norms[0]) == pytest.approx(float(norms[1]), rel=1e-6)  # as printed: %e
    assert ours["check_passed"] and theirs["check_passed"]
    assert 0.1 < ours["residual"] / theirs["residual"] < 10


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
