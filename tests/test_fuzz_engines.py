"""Bad input fed to the two engines that run the real StarPU: StarPU-SimGrid reads the perf
models, the bus files, the SMPI platform and hostfile of `testbed platform`'s output itself, and
apps/lu (both builds) reads StarPU's variables and the tile-distribution file. Whatever the
damage, the contract of tests/test_fuzz.py holds: exit 0 with a finite positive makespan, or exit 2 with at most 3 lines
starting with "error: " - never a signal, a traceback, exit 1 or a hang.

Deterministic (fixed seed); `FUZZ_ONLY=<target>:<case>` replays one case, `FUZZ_SCALE` scales the
case counts. Cost on 2 shared cores: about a minute.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from support.fuzzing import NASTY_TEXT, cli, mutate_bytes, run_cases, simulate_ok, verdict

from testbed.cli import main
from testbed.common import paths

pytestmark = [pytest.mark.usefixtures("private_cache"), pytest.mark.slow]  # caches in each test's directory

needs_simgrid = pytest.mark.skipif(not paths.LU_SIMGRID.exists(), reason="apps/lu SimGrid build missing")
needs_real = pytest.mark.skipif(not paths.LU_REAL.exists(), reason="apps/lu native build missing")

SIMGRID_RUN = ["--engine", "starpu-simgrid", "--cluster", "chifflet-1", "--n", "1920", "--b", "960"]
REAL_RUN = ["--engine", "real", "--cluster", "local-1", "--n", "384", "--b", "192"]
NUMBERS = ["nan", "inf", "-1", "0", "-0", "1e400", "1e-320", "abc", "", "99999999999999999999", "0x10",
           "2147483648", "-2147483649", "\xff", "1 2", "0-", "-3-", "999999"]
#: StarPU variables an engine passes on: their values are what the user or a campaign gave.
VARIABLES = ["STARPU_NCPU", "STARPU_NCUDA", "STARPU_SCHED", "STARPU_SCHED_BETA", "STARPU_CUDA_PIPELINE",
             "STARPU_WORKERS_CPUID", "STARPU_WORKERS_CUDAID", "STARPU_MAIN_THREAD_CPUID", "STARPU_MPI_THREAD_CPUID",
             "STARPU_RESERVE_NCPU", "STARPU_USE_NUMA", "STARPU_PREFETCH", "STARPU_LIMIT_CUDA_MEM"]




@pytest.fixture(scope="module")
def platform_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fuzz-engines") / "pc"
    assert main(["platform", "--cluster", "chifflet-1", "--out", str(out), "--tile-sizes", "960"]) == 0
    return out


def simulate(*args: str) -> str | None:
    rc, out, err = cli(["simulate", *args])
    return verdict(rc, err, lambda: simulate_ok(out))


def damaged_copy(platform_dir: Path, tmp_path: Path, i: int, rng: random.Random, files: list[Path]) -> Path:
    """A copy of the platform output with one or two of `files` (relative paths) damaged."""
    pdir = tmp_path / f"p{i}"
    shutil.copytree(platform_dir, pdir, symlinks=True)
    for _ in range(rng.choice([1, 1, 2])):
        f = pdir / rng.choice(files)
        data = f.read_bytes()
        if rng.random() < 0.6 and data.strip():  # one whitespace-separated field replaced
            lines = data.split(b"\n")
            k = rng.randrange(len(lines))
            fields = lines[k].split(b"\t") if b"\t" in lines[k] else lines[k].split(b" ")
            fields[rng.randrange(len(fields))] = rng.choice(NUMBERS).encode("latin-1")
            lines[k] = (b"\t" if b"\t" in lines[k] else b" ").join(fields)
            data = b"\n".join(lines)
        else:
            data = mutate_bytes(rng, data, NUMBERS + ["\n", "#", "<", ">", '"'])
        f.unlink()  # a symbolic link is replaced by the damaged file, its target left intact
        f.write_bytes(data)
    return pdir


def starpu_files(platform_dir: Path, sub: str) -> list[Path]:
    root = platform_dir / "starpu" / "chifflet" / "sampling" / sub
    return sorted(p.relative_to(platform_dir) for p in root.rglob("*") if p.is_file())


@needs_simgrid
def test_starpu_simgrid_damaged_models_and_bus_files(tmp_path, platform_dir):
    """Perf models and bus files, which StarPU-SimGrid parses with its own readers."""
    files = starpu_files(platform_dir, "codelets") + starpu_files(platform_dir, "bus")

    def case(i: int, rng: random.Random) -> str | None:
        pdir = damaged_copy(platform_dir, tmp_path, i, rng, files)
        return simulate(*SIMGRID_RUN, "--platform-dir", str(pdir))

    run_cases("simgrid-sampling", 40, case)


@needs_simgrid
def test_starpu_simgrid_damaged_cluster_platform(tmp_path, platform_dir):
    """The SMPI platform and the hostfile (one rank per line)."""
    files = [Path("starpu") / "cluster.xml", Path("starpu") / "hostfile"]

    def case(i: int, rng: random.Random) -> str | None:
        pdir = damaged_copy(platform_dir, tmp_path, i, rng, files)
        return simulate(*SIMGRID_RUN, "--platform-dir", str(pdir))

    run_cases("simgrid-cluster", 20, case)


def env_case(rng: random.Random, variables: list[str] = VARIABLES) -> list[str]:
    args = []
    for _ in range(rng.choice([1, 1, 2])):
        value = rng.choice(NUMBERS + NASTY_TEXT + ["dmda", "eager", "lws", "nosuchsched", "0 0 0", "1 0"])
        args += ["--env", f"{rng.choice(variables)}={value}"]
    return args


@needs_simgrid
def test_starpu_simgrid_bad_variables(tmp_path, platform_dir):
    run_cases("simgrid-env", 25, lambda i, rng: simulate(*SIMGRID_RUN, "--platform-dir", str(platform_dir),
                                                          *env_case(rng)))


@needs_real
def test_real_bad_variables(tmp_path):
    """One CPU worker (STARPU_NCPU=2 less the MPI thread's reserved core): a valid worker count or reserve (STARPU_RESERVE_NCPU=0 frees the MPI
    thread's core) would oversubscribe the 2-core CI machine into a timeout, not an error; those
    variables go through the same check on the starpu-simgrid target."""
    counts = {"STARPU_NCPU", "STARPU_RESERVE_NCPU"}
    run_cases("real-env", 25, lambda i, rng: simulate(
        *REAL_RUN, "--env", "STARPU_NCPU=2", *env_case(rng, [v for v in VARIABLES if v not in counts])))


def distribution_file(tmp_path: Path, i: int, rng: random.Random, ranks: int) -> Path:
    """A tile-owner file for 2 x 2 tiles (docs/interfaces.md §5), damaged."""
    good = "".join(" ".join(str((r + c) % ranks) for c in range(2)) + "\n" for r in range(2)).encode()
    f = tmp_path / f"dist{i}.txt"
    f.write_bytes(mutate_bytes(rng, good, NUMBERS + ["\n", " ", "1", "7"]))
    return f


@needs_real
def test_real_bad_distribution_files(tmp_path):
    run_cases("real-distribution", 15, lambda i, rng: simulate(
        *REAL_RUN, "--distribution", str(distribution_file(tmp_path, i, rng, 1))))


@needs_simgrid
def test_starpu_simgrid_bad_distribution_files(tmp_path, platform_dir):
    run_cases("simgrid-distribution", 15, lambda i, rng: simulate(
        *SIMGRID_RUN, "--platform-dir", str(platform_dir), "--distribution", str(distribution_file(tmp_path, i, rng, 1))))


@needs_real
def test_real_settings_leaving_no_worker_are_bad_input():
    """STARPU_NCPU=1 with the baseline's reserved core leaves StarPU no CPU worker: apps/lu says so
    and the run is refused as input (exit 2), not reported as a failed run (it was exit 1)."""
    rc, _, err = cli(["simulate", *REAL_RUN, "--env", "STARPU_NCPU=1", "--env", "STARPU_RESERVE_NCPU=1"])
    assert rc == 2 and "at least one CPU worker" in err and len(err.strip().splitlines()) <= 3, err
