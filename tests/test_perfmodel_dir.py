"""A real cluster's raw StarPU sampling directory as a machine type's models (`--perfmodel-dir`,
machine YAML `perfmodels:`), and models whose footprints are Chameleon's.

The "raw directory of a real cluster" is StarPU's own shipped sampling directory
(tools/perfmodels/sampling in the StarPU source): the calibration of the machine `sirocco`
(24 CPUs, 4 CUDA devices, bus/sirocco.config), mixed with other hosts' files as a copied
~/.starpu/sampling can be. The cluster is chifflet-1, whose machine type `chifflet` is mapped to it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import ROOT
from testbed.common import paths
from testbed.common.errors import InputError
from testbed.describe.machines import load_cluster, load_machine
from testbed.run.engines import RunSpec
from testbed.starpu.perfmodel_files import (
    ArchModel,
    chameleon_tile_footprint,
    matrix_handle_footprint,
    read_model,
    square_tiles_footprint,
    task_footprint,
    write_model,
)
from testbed.starpu.sampling_dir import ModelDir, model_dir, parse_option

SHIPPED = paths.DEPS / "src" / "starpu-1.4.10" / "tools" / "perfmodels" / "sampling"
LU_MODELS = ("getrf", "trsm_ll", "trsm_ru", "gemm")
N, B = 3840, 960  # 4 x 4 tiles of 960: sirocco's models have entries for b = 960

needs_numasim = pytest.mark.skipif(not (paths.NUMASIM.exists() and SHIPPED.is_dir()),
                                   reason="numasim not built or StarPU's shipped sampling absent")
needs_simgrid = pytest.mark.skipif(not (paths.LU_SIMGRID.exists() and SHIPPED.is_dir()),
                                   reason="apps/lu SimGrid build or StarPU's shipped sampling absent")


@pytest.fixture(scope="module")
def platform(tmp_path_factory) -> Path:
    from testbed.platform.platform_cmd import generate

    out = tmp_path_factory.mktemp("platform") / "chifflet-1"
    generate(load_cluster("chifflet-1"), out, (B,))
    return out


def sirocco_only(root: Path, bus: bool = True) -> Path:
    """A sampling directory holding only sirocco's LU models (and bus files): one host name."""
    (root / "codelets" / "45").mkdir(parents=True)
    for k in LU_MODELS:
        name = f"starpu_dlu_lu_model_{k}.sirocco"
        shutil.copyfile(SHIPPED / "codelets" / "45" / name, root / "codelets" / "45" / name)
    if bus:
        shutil.copytree(SHIPPED / "bus", root / "bus", ignore=lambda d, names: [n for n in names
                                                                                if not n.startswith("sirocco.")])
    return root


def as_machine_type(platform: Path, root: Path, machine: str = "chifflet", bus: bool = True) -> Path:
    """A copy of `platform` whose generated files of `machine` are replaced by sirocco's, renamed
    to the machine type: the existing path (files named by machine type, no --perfmodel-dir)."""
    out = root / "platform"
    shutil.copytree(platform, out)
    sampling = out / "starpu" / machine / "sampling"
    for k in LU_MODELS:
        shutil.copyfile(SHIPPED / "codelets" / "45" / f"starpu_dlu_lu_model_{k}.sirocco",
                        sampling / "codelets" / "45" / f"starpu_dlu_lu_model_{k}.{machine}")
    if bus:
        for f in (SHIPPED / "bus").glob("sirocco.*"):
            shutil.copyfile(f, sampling / "bus" / f"{machine}.{f.name.split('.', 1)[1]}")
    return out


def spec(engine: str, platform: Path, tmp: Path, **kw) -> RunSpec:
    return RunSpec(engine=engine, cluster="chifflet-1", n=N, b=B, env={"STARPU_SCHED": "dmdas"},
                   variability=False, platform_dir=platform, workdir=tmp, **kw)


# ----------------------------------------------------------------------------- option and YAML key


def test_option_host_given_or_detected(tmp_path: Path) -> None:
    given = parse_option([f"chifflet={SHIPPED}:sirocco"])
    assert given == {"chifflet": ModelDir(SHIPPED.resolve(), "sirocco")}
    assert given["chifflet"].model("starpu_dlu_lu_model_gemm").is_file()
    one = sirocco_only(tmp_path / "raw")
    assert parse_option([f"chifflet={one}"])["chifflet"].host == "sirocco"


@pytest.mark.parametrize("item,message", [
    ("chifflet", "MACHINE=DIR or MACHINE=DIR:HOSTNAME, got 'chifflet'"),
    ("chifflet={missing}", "a StarPU sampling directory (with codelets/45/)"),
    ("chifflet={shipped}", "a host name (several or none in"),
    ("chifflet={shipped}:nosuchhost", "a host name with model files in"),
])
def test_option_bad_input(tmp_path: Path, item: str, message: str) -> None:
    item = item.format(missing=tmp_path / "none", shipped=SHIPPED)
    with pytest.raises(InputError, match="--perfmodel-dir") as err:
        parse_option([item])
    assert message in str(err.value)


def test_option_several_hosts_are_listed() -> None:
    with pytest.raises(InputError) as err:
        model_dir(SHIPPED, None, None, "--perfmodel-dir chifflet")
    assert "sirocco" in str(err.value) and "mirage" in str(err.value)


def machine_yaml(tmp_path: Path, entry: str) -> Path:
    text = (paths.MACHINES / "chifflet.yaml").read_text() + f"perfmodels: {entry}\n"
    (tmp_path / "chifflet.yaml").write_text(text)
    cluster = (paths.CLUSTERS / "chifflet-1.yaml").read_text().replace("machine: chifflet,", "machine: chifflet.yaml,")
    (tmp_path / "chifflet-1.yaml").write_text(cluster)
    return tmp_path / "chifflet-1.yaml"


def test_machine_yaml_key(tmp_path: Path) -> None:
    raw = sirocco_only(tmp_path / "raw")
    machine = load_machine(machine_yaml(tmp_path, f"{{dir: {raw}}}").parent / "chifflet.yaml")
    assert machine.perfmodels == ModelDir(raw.resolve(), "sirocco")
    machine_yaml(tmp_path, f"{{dir: {SHIPPED}, hostname: nosuchhost}}")
    with pytest.raises(InputError) as err:
        load_machine(tmp_path / "chifflet.yaml")
    assert err.value.file == str(tmp_path / "chifflet.yaml") and err.value.key == "perfmodels"
    machine_yaml(tmp_path, f"{{dir: {SHIPPED}, host: sirocco}}")  # `hostname`, not `host`
    with pytest.raises(InputError, match="perfmodels"):
        load_machine(tmp_path / "chifflet.yaml")


# ----------------------------------------------------------------------------- numasim


@needs_numasim
def test_numasim_reads_the_raw_directory(platform: Path, tmp_path: Path) -> None:
    from testbed.run.engines import numasim

    generated = numasim.run(spec("numasim", platform, tmp_path))
    raw = numasim.run(spec("numasim", platform, tmp_path, symbols="starpu-lu",
                           perfmodel_dirs=parse_option([f"chifflet={SHIPPED}:sirocco"])))
    existing = numasim.run(spec("numasim", as_machine_type(platform, tmp_path), tmp_path, symbols="starpu-lu"))
    assert raw["makespan_s"] != generated["makespan_s"]
    assert raw["makespan_s"] == existing["makespan_s"]
    desc = numasim.run_description(spec("numasim", platform, tmp_path, symbols="starpu-lu",
                                        perfmodel_dirs=parse_option([f"chifflet={SHIPPED}:sirocco"])), platform)
    assert desc["perfmodels"] == {"chifflet": {"dir": str(SHIPPED.resolve()), "host": "sirocco"}}


@needs_numasim
def test_numasim_machine_yaml_key_through_the_platform(tmp_path: Path) -> None:
    from testbed.platform.platform_cmd import generate
    from testbed.run.engines import numasim

    raw = sirocco_only(tmp_path / "raw")
    out = tmp_path / "p"
    generate(load_cluster(machine_yaml(tmp_path, f"{{dir: {raw}}}")), out, (B,))
    assert json.loads((out / "summary.json").read_text())["perfmodels"] == {
        "chifflet": {"dir": str(raw.resolve()), "host": "sirocco"}}
    by_yaml = numasim.run(spec("numasim", out, tmp_path, symbols="starpu-lu"))
    by_option = numasim.run(spec("numasim", out, tmp_path, symbols="starpu-lu",
                                 perfmodel_dirs=parse_option([f"chifflet={SHIPPED}:sirocco"])))
    assert by_yaml["makespan_s"] == by_option["makespan_s"]


@needs_numasim
def test_numasim_missing_size_and_model(platform: Path, tmp_path: Path) -> None:
    from testbed.run.engines import numasim

    dirs = parse_option([f"chifflet={SHIPPED}:sirocco"])
    with pytest.raises(InputError) as err:  # sirocco has no b = 768 entries: numasim's own message
        numasim.run(RunSpec(engine="numasim", cluster="chifflet-1", n=3072, b=768, platform_dir=platform,
                            workdir=tmp_path, symbols="starpu-lu", perfmodel_dirs=dirs))
    assert err.value.file.startswith(str(SHIPPED.resolve() / "codelets" / "45" / "starpu_dlu_lu_model_"))
    assert err.value.file.endswith(".sirocco") and "tile 768" in str(err.value)
    with pytest.raises(InputError) as err:  # Chameleon's symbols are not in sirocco's directory
        numasim.run(spec("numasim", platform, tmp_path, symbols="chameleon", perfmodel_dirs=dirs))
    assert err.value.file.endswith("codelets/45/dgetrf_nopiv.sirocco") and "--perfmodel-dir" in str(err.value)
    with pytest.raises(InputError, match="a machine type of the cluster"):
        numasim.run(spec("numasim", platform, tmp_path, perfmodel_dirs=parse_option([f"sirocco={SHIPPED}:sirocco"])))


@needs_numasim
def test_cli_option_and_run_cache(platform: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "testbed", "simulate", "--engine", "numasim", "--platform-dir", str(platform),
           "--n", str(N), "--b", str(B), "--no-variability", "--symbols", "starpu-lu", "--starpu-defaults",
           "--perfmodel-dir", f"chifflet={SHIPPED}:sirocco"]
    env = {"PYTHONPATH": str(ROOT), "TESTBED_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    second = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)  # from the run cache
    assert json.loads(second.stdout)["makespan_s"] == json.loads(first.stdout)["makespan_s"]
    assert list((tmp_path / "cache" / "runs").iterdir())
    bad = subprocess.run(cmd[:-1] + [f"chifflet={SHIPPED}"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().count("\n") == 0 and "--perfmodel-dir chifflet" in bad.stderr


# ----------------------------------------------------------------------------- starpu-simgrid


@needs_simgrid
def test_simgrid_reads_the_raw_directory_and_its_bus_files(platform: Path, tmp_path: Path) -> None:
    from testbed.run.engines import starpu_simgrid

    generated = starpu_simgrid.run(spec("starpu-simgrid", platform, tmp_path))
    raw = starpu_simgrid.run(spec("starpu-simgrid", platform, tmp_path, symbols="starpu-lu",
                                  perfmodel_dirs=parse_option([f"chifflet={SHIPPED}:sirocco"])))
    existing = starpu_simgrid.run(spec("starpu-simgrid", as_machine_type(platform, tmp_path), tmp_path,
                                       symbols="starpu-lu"))
    assert raw["makespan_s"] != generated["makespan_s"]
    assert raw["makespan_s"] == existing["makespan_s"]
    # sirocco's bus files were read: its 4 CUDA devices (bus/sirocco.config), chifflet has 2.
    assert raw["cuda_workers"] == 4 and generated["cuda_workers"] == 2


# ----------------------------------------------------------------------------- Chameleon footprints


def test_chameleon_tile_footprint_is_the_matrix_footprint_under_starpu_1_4() -> None:
    """Chameleon's tile interface hashes (m, n) (cham_tile_interface.c cti_footprint) like the
    matrix interface hashes (nx, ny), and StarPU 1.4.10 folds 0 for an interface id given at run
    time (footprint.c): a Chameleon model's footprints are apps/lu's. Folding the raw id (earlier
    StarPU sources) gives other footprints."""
    for b in (320, 960):
        assert chameleon_tile_footprint(b, b) == matrix_handle_footprint(b, b)
        assert chameleon_tile_footprint(b, b, fold_raw_id=True) != matrix_handle_footprint(b, b)
    assert task_footprint([chameleon_tile_footprint(B, B)] * 3) == square_tiles_footprint(B, 3)


def chameleon_models(platform: Path, root: Path, fold_raw_id: bool) -> Path:
    """The generated chifflet models, rewritten with Chameleon's footprints, under host name
    `chameleon-host` in a raw sampling directory without bus files."""
    codelets = root / "codelets" / "45"
    codelets.mkdir(parents=True)
    for sym, nbuf in (("dgetrf_nopiv", 1), ("dtrsm", 2), ("dgemm", 3), ("dplrnt", 1)):
        combs = read_model(platform / "starpu" / "chifflet" / "sampling" / "codelets" / "45" / f"{sym}.chifflet")
        fp = task_footprint([chameleon_tile_footprint(B, B, fold_raw_id=fold_raw_id)] * nbuf)
        for c in combs:
            for e in c.entries:
                e.footprint = fp
        write_model(codelets / f"{sym}.chameleon-host", [ArchModel(c.device, c.devid, c.entries) for c in combs])
    return root


@needs_numasim
def test_numasim_falls_back_on_the_size(platform: Path, tmp_path: Path) -> None:
    from testbed.run.engines import numasim

    generated = numasim.run(spec("numasim", platform, tmp_path))
    for fold in (False, True):
        dirs = parse_option([f"chifflet={chameleon_models(platform, tmp_path / str(fold), fold)}"])
        assert numasim.run(spec("numasim", platform, tmp_path, perfmodel_dirs=dirs))["makespan_s"] == \
            generated["makespan_s"]


@needs_simgrid
def test_simgrid_refuses_a_foreign_footprint_as_starpu_would_stop(platform: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from testbed.run.engines import starpu_simgrid

    own = parse_option([f"chifflet={chameleon_models(platform, tmp_path / 'own', False)}"])
    starpu_simgrid.check_models(own["chifflet"], ModelDir(platform / "starpu" / "chifflet" / "sampling", "chifflet"),
                                "chameleon", B, True)
    foreign = parse_option([f"chifflet={chameleon_models(platform, tmp_path / 'foreign', True)}"])
    with pytest.raises(InputError) as err:
        starpu_simgrid.run(spec("starpu-simgrid", platform, tmp_path, perfmodel_dirs=foreign))
    assert err.value.file.endswith("dgetrf_nopiv.chameleon-host")
    assert f"entry of footprint {square_tiles_footprint(B, 1):08x}" in err.value.key
    assert "footprint only" in str(err.value) and "numasim engine falls back on the size" in str(err.value)
    # Without the check, StarPU-SimGrid itself stops: it takes the missing entry as 0.
    monkeypatch.setattr(starpu_simgrid, "check_entry", lambda *a: None)
    with pytest.raises(InputError, match="found none and cannot calibrate"):
        starpu_simgrid.run(spec("starpu-simgrid", platform, tmp_path, perfmodel_dirs=foreign))
