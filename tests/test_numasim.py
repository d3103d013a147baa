"""numasim binary and engine wrapper on the hand-written tiny platforms (simulator/tests/data)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from testbed import ROOT
from testbed.common import paths
from testbed.common.errors import InputError
from testbed.run.engines.numasim import run_binary

DATA = ROOT / "simulator" / "tests" / "data"

pytestmark = pytest.mark.skipif(not paths.NUMASIM.exists(), reason="numasim not built (make build)")


def desc(**over) -> dict:
    d = {
        "platform": str(DATA / "tiny2.xml"),
        "perfmodels": {"tiny": str(DATA / "tiny_sampling")},
        "workload": {"kind": "lu", "n": 960, "b": 96, "distribution": {"kind": "block-cyclic", "p": 1, "q": 2}},
        "env": {"STARPU_SCHED": "dmdas"},
        "seed": 7,
        "variability": True,
    }
    d.update(over)
    return d


def test_lu_two_nodes_counts_and_links() -> None:
    out = run_binary(desc())
    assert out["tasks"] == 10 + 90 + 285
    assert out["tasks_by_kind"] == {"getrf": 10, "trsm": 90, "gemm": 285}
    assert out["mpi_messages"] > 0
    assert out["bytes_by_link_class"]["eth"] == 2 * out["bytes_by_link_class"]["switch"]


def test_deterministic_given_seed_and_seed_matters() -> None:
    a, b, c = run_binary(desc()), run_binary(desc()), run_binary(desc(seed=8))
    for r in (a, b, c):
        r.pop("wall_s")
    assert a == b
    assert a["makespan_s"] != c["makespan_s"]


def test_trace_and_transfers_csv(tmp_path: Path) -> None:
    trace, transfers = tmp_path / "tasks.csv", tmp_path / "transfers.csv"
    run_binary(desc(trace=str(trace), transfers=str(transfers)))
    rows = trace.read_text().splitlines()
    assert rows[0].startswith("ResourceId,Start,End,Duration,Value,JobId,Node,WorkerNuma")
    assert len(rows) == 1 + 385
    t = transfers.read_text().splitlines()
    assert any("n1.eth c.switch n2.eth" in line for line in t[1:])


@pytest.mark.parametrize(
    "over",
    [
        {"env": {"STARPU_SCHED": "nosuch"}},
        {"env": {"STARPU_USE_NUMA": "yes"}},
        {"perfmodels": {"other": str(DATA / "tiny_sampling")}},
        {"symbols": {"gemm": "no_such_symbol"}},
    ],
)
def test_bad_input_is_one_clear_error(over: dict) -> None:
    with pytest.raises(InputError):
        run_binary(desc(**over))


def test_cli_exit_code_and_message(tmp_path: Path) -> None:
    f = tmp_path / "run.json"
    f.write_text(json.dumps(desc(env={"STARPU_SCHED": "heft"})))
    p = subprocess.run([str(paths.NUMASIM), str(f)], capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.startswith("error: ") and "STARPU_SCHED" in p.stderr
    assert p.stdout == ""


def test_cli_bad_starpu_value_names_the_variable(tmp_path):
    """A bad STARPU_* value reaches the user as one line naming the variable, exit 2."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "testbed", "simulate", "--engine", "numasim", "--cluster", "chifflet-1",
         "--n", "1920", "--b", "960", "--env", "STARPU_SCHED_BETA=abc"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    # checked as StarPU parses it, before numasim runs (testbed/starpu/variables.py, every engine)
    assert proc.stderr.strip() == "error: --env STARPU_SCHED_BETA: expected a finite number >= 0, got 'abc'"


def test_cli_relative_platform_dir_finds_its_models(tmp_path):
    """A relative --platform-dir is the user's directory, not the engine's temporary one."""
    import subprocess
    import sys

    def testbed(*args):
        return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, cwd=tmp_path)

    assert testbed("platform", "--cluster", "chifflet-1", "--out", "pc").returncode == 0
    (tmp_path / "pc/starpu/chifflet/sampling/codelets/45/dgemm.chifflet").unlink()
    proc = testbed("simulate", "--engine", "numasim", "--cluster", "chifflet-1", "--n", "1920", "--b", "960",
                   "--platform-dir", "pc")
    assert proc.returncode == 2
    assert str(tmp_path / "pc/starpu/chifflet/sampling/codelets/45/dgemm.chifflet") in proc.stderr
    assert "symbol 'dgemm'" in proc.stderr


def test_simgrid_options_pass_through(tmp_path):
    """`testbed simulate --cfg KEY:VALUE` reaches SimGrid: its Paje tracing writes a trace."""
    import subprocess
    import sys

    def testbed(*args):
        return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, cwd=tmp_path)

    trace = tmp_path / "sg.trace"
    proc = testbed("simulate", "--engine", "numasim", "--cluster", "chifflet-1", "--n", "1920", "--b", "960",
                   "--cfg", "tracing:yes", "--cfg", f"tracing/filename:{trace}", "--cfg", "tracing/platform:yes",
                   "--cfg", "tracing/platform/topology:no")
    assert proc.returncode == 0, proc.stderr
    assert "PajeDefineContainerType" in trace.read_text()
    bad = testbed("simulate", "--engine", "numasim", "--cluster", "chifflet-1", "--n", "1920", "--b", "960",
                  "--cfg", "tracing")
    assert bad.returncode == 2 and "--cfg" in bad.stderr
    # numasim's actors change its sleep heap from their own context (simulator/src/sleep.hpp)
    parallel = testbed("simulate", "--engine", "numasim", "--cluster", "chifflet-1", "--n", "1920", "--b", "960",
                       "--cfg", "contexts/nthreads:2")
    assert parallel.returncode == 2
    assert "--cfg=contexts/nthreads: expected 1" in parallel.stderr
