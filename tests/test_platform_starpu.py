"""StarPU inputs: footprints and model files as StarPU computes/reads them; StarPU-SimGrid runs on them."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from testbed.common.paths import PLATFORM_INFO, ROOT, STARPU_SIMGRID
from testbed.describe.machines import load_cluster, load_machine
from testbed.starpu.perfmodel_files import read_model, square_tiles_footprint, write_model
from testbed.starpu.sampling import LU_KERNELS, codelet_models, load_bundle, write_starpu_dir

SHIPPED = ROOT / ".deps/src/starpu-1.4.10/tools/perfmodels/sampling"


def test_crc32c_footprints_match_models_written_by_starpu() -> None:
    """StarPU's shipped LU models (written by real StarPU runs) key b x b tiles by these footprints."""
    path = SHIPPED / "codelets/45/starpu_dlu_lu_model_gemm.sirocco"
    if not path.exists():
        pytest.skip("StarPU sources not unpacked (.deps/src)")
    checked = 0
    for comb in read_model(path):
        for entry in comb.entries:
            b = round((entry.size / (3 * 8)) ** 0.5)
            assert 3 * b * b * 8 == entry.size
            assert square_tiles_footprint(b, 3) == entry.footprint, b
            checked += 1
    assert checked >= 4


def test_model_file_roundtrip(tmp_path: Path) -> None:
    models = codelet_models(load_machine("chifflet"), (320, 960))
    write_model(tmp_path / "m", models["dgemm"])
    back = read_model(tmp_path / "m")
    assert [(c.device, c.devid) for c in back] == [("cpu", 0), ("cuda", 0), ("cuda", 1)]
    for a, b in zip(models["dgemm"], back, strict=False):
        for ea, eb in zip(a.entries, b.entries, strict=False):
            assert (ea.footprint, ea.size, ea.nsample) == (eb.footprint, eb.size, eb.nsample)
            assert eb.mean_us == pytest.approx(ea.mean_us, rel=1e-6)


def test_models_follow_the_bundle() -> None:
    machine = load_machine("chifflet")
    bundle = load_bundle(machine)
    models = codelet_models(machine, (960,))
    assert [c.device for c in models["dgetrf_nopiv"]] == ["cpu"]  # CPU-only kernel
    gemm = {c.device + str(c.devid): c.entries[0] for c in models["dgemm"]}
    assert gemm["cpu0"].mean_us == pytest.approx(bundle["dgemm"]["cpu"].time_s * 1e6)
    assert gemm["cuda1"].mean_us == pytest.approx(bundle["dgemm"]["cuda"].time_s * 1e6)
    assert gemm["cpu0"].dev_us == pytest.approx(gemm["cpu0"].mean_us * bundle["dgemm"]["cpu"].rel_std)


@pytest.fixture(scope="module")
def starpu_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("starpu")
    write_starpu_dir(load_cluster("hetero-3"), out, (320, 960))
    return out


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Path:
    """tests/data/starpu_probe.c built against StarPU-SimGrid (static)."""
    pc = STARPU_SIMGRID / "lib/pkgconfig"
    if not (pc / "starpu-1.4.pc").exists():
        pytest.skip("StarPU-SimGrid not built (.deps/starpu-simgrid): run `make setup`")
    env = {**os.environ, "PKG_CONFIG_PATH": str(pc)}
    flags = subprocess.run(["pkg-config", "--static", "--cflags", "--libs", "starpu-1.4"], env=env, check=True,
                           capture_output=True, text=True).stdout.split()
    exe = tmp_path_factory.mktemp("probe") / "starpu_probe"
    subprocess.run(["cc", "-O1", "-o", str(exe), str(ROOT / "tests/data/starpu_probe.c"), *flags], check=True,
                   capture_output=True)
    return exe


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("machine, symbol, b, ncpu, ncuda", [
    ("chifflet", "dgemm", 960, 26, 2),
    ("chifflet", "dgetrf_nopiv", 320, 26, 0),  # CPU-only codelet: CUDA workers are not asked
    ("chetemi", "dtrsm", 960, 20, 0),
])
def test_starpu_simgrid_uses_generated_models(tmp_path: Path, starpu_dir: Path, probe: Path,
                                              machine: str, symbol: str, b: int, ncpu: int, ncuda: int) -> None:
    sampling = starpu_dir / machine / "sampling"
    before = _digest(sampling)
    env = {**os.environ, "STARPU_HOME": str(tmp_path), "STARPU_HOSTNAME": machine,
           "STARPU_PERF_MODEL_DIR": str(sampling), "STARPU_SCHED": "dmdas"}
    env.pop("STARPU_CALIBRATE", None)
    cpu_only = [] if symbol in ("dgemm", "dtrsm") else ["cpu"]
    res = subprocess.run([str(probe), symbol, str(LU_KERNELS[symbol]), str(b), *cpu_only], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "not calibrated" not in res.stderr and "calibrating" not in res.stderr.lower()
    assert "no bus performance model" not in res.stderr
    workers = json.loads(res.stdout)["workers"]
    assert sum(w["type"] == "CPU" for w in workers) == ncpu  # one core per CUDA driver thread
    assert sum(w["type"] == "CUDA" for w in workers) == ncuda
    models = {c.device: c for c in read_model(sampling / "codelets/45" / f"{symbol}.{machine}")}
    want_fp = f"{square_tiles_footprint(b, LU_KERNELS[symbol]):08x}"
    for w in workers:
        assert w["footprint"] == want_fp
        kind = w["type"].lower()
        entry = next(e for e in models[kind].entries if f"{e.footprint:08x}" == want_fp)
        assert w["expected_us"] == pytest.approx(entry.mean_us, rel=1e-6)
        if kind == "cpu":  # data already in RAM: simulated time is the model's mean
            assert w["elapsed_us"] == pytest.approx(entry.mean_us, rel=0.02)
    assert _digest(sampling) == before, "StarPU rewrote the models (recalibration)"


def test_smpirun_platform_assembles_and_loads(starpu_dir: Path) -> None:
    """Assemble the platform as tools/starpu_smpirun does with -hostfile-platform (from each node's
    machine type's bus platform, as the starpu-simgrid engine links them); SimGrid loads it."""
    from testbed.run.engines.starpu_simgrid import machine_of

    xslt = STARPU_SIMGRID / "share/starpu/starpu_smpi.xslt"
    if not xslt.exists() or not shutil.which("xsltproc") or not PLATFORM_INFO.exists():
        pytest.skip("needs StarPU-SimGrid, xsltproc and build/simulator/platform_info")
    hosts = (starpu_dir / "hostfile").read_text().split()
    parts = ["<?xml version='1.0'?>", '<!DOCTYPE platform SYSTEM "http://simgrid.gforge.inria.fr/simgrid/simgrid.dtd">',
             '<platform version="4">', '<AS id="ASroot" routing="None">']
    parts += [ln for ln in (starpu_dir / "cluster.xml").read_text().splitlines()[2:] if "platform" not in ln]
    for i, h in enumerate(hosts):
        node = subprocess.run(["xsltproc", "--novalid", "--stringparam", "ASname", f"StarPU-MPI{i}", str(xslt),
                               str(starpu_dir / machine_of(starpu_dir, h) / "sampling/bus" /
                                   f"{machine_of(starpu_dir, h)}.platform.v4.xml")],
                              check=True, capture_output=True, text=True).stdout.splitlines()
        parts += [ln for ln in node if "network/" not in ln][3:-1]
    parts += ["</AS>", "</platform>"]
    xml = starpu_dir / "assembled.xml"
    xml.write_text("\n".join(parts) + "\n")
    res = subprocess.run([str(PLATFORM_INFO), str(xml), "chetemi-1", "chifflet-1",
                          "StarPU-MPI2-RAM", "StarPU-MPI2-CUDA1"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    names = {h["name"] for h in data["hosts"]}
    assert {"StarPU-MPI0-CPU19", "StarPU-MPI2-CPU27", "StarPU-MPI2-CUDA1"} <= names
    assert "StarPU-MPI0-CUDA0" not in names
    assert data["routes"][0]["links"] == ["chetemi-1.eth", "hetero-3.switch", "chifflet-1.eth"]
