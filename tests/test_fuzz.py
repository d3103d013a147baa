"""Bounded, deterministic fuzzing of the input boundaries: machine and cluster YAML
(`testbed platform`, then a run on what it wrote), StarPU perf-model files (both readers:
testbed.starpu.perfmodel_files and numasim through `testbed simulate`), numasim's run JSON, and
runs.csv (`testbed analyze`).

Each mutated input must give exit 0 with valid output, or exit 2 with at most 3 lines on stderr
starting with "error: " — never a signal, an uncaught exception (a traceback from the CLI), exit
1 (kept for environment faults), or a run past its time limit. The seed is fixed: a failure
names its case, and `FUZZ_ONLY=<target>:<case>` replays one case.

Cost (2 shared cores): about a minute and a half for the whole file; `FUZZ_SCALE=4` runs four
times as many cases of each target.
"""

from __future__ import annotations

import json
import math
import os
import random
import resource
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.experiments import synthetic_runs
from support.fuzzing import (
    CASE_LIMIT_S,
    NASTY_TEXT,
    Hang,
    cli,
    deadline,
    mutate_bytes,
    run_cases,
    simulate_ok,
    verdict,
)

from testbed import ROOT
from testbed.cli import main
from testbed.common import paths
from testbed.common.errors import InputError

DATA = ROOT / "simulator" / "tests" / "data"
# FUZZ_NUMASIM=build/simulator-asan/numasim runs the run-JSON cases on the ASan+UBSan build
# (`make test-cpp-asan` configures it; `cmake --build build/simulator-asan --target numasim`).
# A sanitizer report exits 1, so it fails the case; ASan's notice about SimGrid's context
# switches is not numasim's output and is left out of the line count.
NUMASIM = Path(os.environ.get("FUZZ_NUMASIM") or paths.NUMASIM)
ASAN_NOTICE = ("WARNING: ASan is ignoring requested __asan_handle_no_return", "False positive error reports may follow",
               "For details see https://github.com/google/sanitizers/issues/189")

pytestmark = [pytest.mark.skipif(not paths.NUMASIM.exists(), reason="numasim not built (make build)"),
              pytest.mark.usefixtures("private_cache"),  # caches in each test's directory
              pytest.mark.slow]

NASTY_VALUES: list[Any] = [math.nan, math.inf, -math.inf, -1, 0, -0.0, 0.5, 1e-320, 1e300, 2**31, 2**63, 2**64 + 1,
                           "abc", "", None, True, False, [], {}, [1, 2], {"x": 1}, "x" * 5000]


def mutate_yaml(rng: random.Random, data: bytes) -> bytes:
    """A structural mutation when `data` still reads as YAML (half the time), else a textual one."""
    if rng.random() < 0.5:
        try:
            tree = yaml.safe_load(data)
        except yaml.YAMLError:
            tree = None
        if isinstance(tree, (dict, list)):
            return yaml.safe_dump(mutate_tree(rng, tree), sort_keys=False, allow_unicode=True).encode()
    return mutate_bytes(rng, data, NASTY_TEXT)


def leaf_paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += leaf_paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += leaf_paths(v, prefix + (i,))
    return out


def mutate_tree(rng: random.Random, tree: Any) -> Any:
    """One structural mutation: a node replaced by a nasty value, removed, duplicated, or given an
    unknown sibling key."""
    paths_ = [p for p in leaf_paths(tree) if p]
    if not paths_:
        return rng.choice(NASTY_VALUES)
    path = rng.choice(paths_)
    parent = tree
    for k in path[:-1]:
        parent = parent[k]
    last = path[-1]
    kind = rng.randrange(4)
    if kind == 0 or kind == 3 and not isinstance(parent, dict):
        parent[last] = rng.choice(NASTY_VALUES)
    elif kind == 1:
        del parent[last]
    elif kind == 2:
        if isinstance(parent, list):
            parent.insert(last, json.loads(json.dumps(parent[last], default=str)))
        else:
            parent[f"{last}_copy"] = parent[last]
    else:
        parent["unknown_key"] = rng.choice(NASTY_VALUES)
    return tree




# ------------------------------------------------------------------ targets
CLUSTER_TAIL = (ROOT / "platforms" / "clusters" / "chifflet-1.yaml").read_text().split("network:", 1)[1]


def test_machine_and_cluster_yaml(tmp_path):
    machine = (ROOT / "platforms" / "machines" / "chifflet.yaml").read_bytes()
    cluster = f"name: fuzz\norder: as listed\nnodes:\n  - {{machine: chifflet.yaml, count: 1}}\nnetwork:{CLUSTER_TAIL}".encode()

    def case(i: int, rng: random.Random) -> str | None:
        d = tmp_path / f"c{i}"
        d.mkdir()
        m, c = machine, cluster
        for _ in range(rng.choice([1, 1, 2, 3])):
            if rng.random() < 0.8:
                m = mutate_yaml(rng, m)
            else:
                c = mutate_yaml(rng, c)
        (d / "chifflet.yaml").write_bytes(m)  # a machine file is named after its machine
        (d / "c.yaml").write_bytes(c)
        out = d / "out"
        rc, _, err = cli(["platform", "--cluster", str(d / "c.yaml"), "--out", str(out), "--tile-sizes", "960"])

        def valid() -> str | None:
            try:
                ET.parse(out / "numasim.xml")
            except (OSError, ET.ParseError) as e:
                return f"exit 0 but no valid numasim.xml: {e}"
            # What the platform says must also run (numasim once aborted later on such values).
            rc2, out2, err2 = cli(["simulate", "--engine", "numasim", "--cluster", str(d / "c.yaml"),
                                   "--platform-dir", str(out), "--n", "1920", "--b", "960"])
            problem = verdict(rc2, err2, lambda: simulate_ok(out2))
            return f"simulate after platform: {problem}" if problem else None

        return verdict(rc, err, valid)

    run_cases("machine", 400, case)


@pytest.fixture(scope="module")
def platform_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fuzz") / "pc"
    assert main(["platform", "--cluster", "chifflet-1", "--out", str(out), "--tile-sizes", "960"]) == 0
    return out


def test_perf_models(tmp_path, platform_dir):
    from testbed.starpu.perfmodel_files import read_model

    codelets = Path("starpu") / "chifflet" / "sampling" / "codelets" / "45"
    models = sorted(p.name for p in (platform_dir / codelets).iterdir())
    numbers = ["nan", "-nan", "inf", "-1", "0", "-0", "1e400", "1e-320", "abc", "", "99999999999999999999",
               "0x10", "1.5", "2147483648", "-2147483649", "\xff"]

    def case(i: int, rng: random.Random) -> str | None:
        pdir = tmp_path / f"p{i}"
        shutil.copytree(platform_dir, pdir)
        model = pdir / codelets / rng.choice(models)
        data = model.read_bytes()
        for _ in range(rng.choice([1, 1, 2])):
            if rng.random() < 0.6:  # a field of a line replaced: the values the readers check
                lines = data.split(b"\n")
                k = rng.randrange(len(lines))
                fields = lines[k].split(b"\t") if b"\t" in lines[k] else lines[k].split(b" ")
                fields[rng.randrange(len(fields))] = rng.choice(numbers).encode("latin-1")
                lines[k] = b"\t".join(fields)
                data = b"\n".join(lines)
            else:
                data = mutate_bytes(rng, data, numbers + ["\n", "#", "####################"])
        model.write_bytes(data)
        try:
            with deadline(CASE_LIMIT_S):
                read_model(model)
        except InputError:
            pass
        except Hang:
            return f"read_model: hang (> {CASE_LIMIT_S} s)"
        except Exception as e:  # noqa: BLE001
            return f"read_model: {type(e).__name__}: {str(e)[:200]}"
        rc, out, err = cli(["simulate", "--engine", "numasim", "--cluster", "chifflet-1", "--platform-dir", str(pdir),
                            "--n", "1920", "--b", "960"])
        return verdict(rc, err, lambda: simulate_ok(out))

    run_cases("perfmodel", 200, case)


def _limit_address_space() -> None:
    # A blow-up stays inside the case (std::bad_alloc, exit 1: a finding), not the machine.
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def test_numasim_run_json(tmp_path):
    base = {
        "platform": str(DATA / "tiny2.xml"),
        "perfmodels": {"tiny": str(DATA / "tiny_sampling")},
        "workload": {"kind": "lu", "n": 384, "b": 96, "distribution": {"kind": "block-cyclic", "p": 1, "q": 2}},
        "env": {"STARPU_SCHED": "dmdas", "STARPU_SCHED_BETA": "10", "STARPU_WORKERS_CPUID": "0-3"},
        "env_per_machine": {"tiny": {"TESTBED_NUMA_BALANCING": "0"}},
        "symbols": {"getrf": "dgetrf_nopiv", "trsm": "dtrsm", "gemm": "dgemm"},
        "seed": 7, "variability": True, "mpi": {"overhead_s": 1e-6}, "dag": "chameleon", "getrf_on_cuda": False,
    }
    json_tokens = ["NaN", "Infinity", "-Infinity", "1e400", "0x10", "-", "{", "}", "[", "]", ",", ":", '"', "\\u0000",
                   "\\ud800", "null", "true", "1e-320", "99999999999999999999999", "\x00", "\xff", " "]

    def case(i: int, rng: random.Random) -> str | None:
        if rng.random() < 0.5:
            text = json.dumps(mutate_tree(rng, json.loads(json.dumps(base))), allow_nan=True).encode()
        else:
            text = mutate_bytes(rng, json.dumps(base, indent=1).encode(), json_tokens)
        f = tmp_path / f"run{i}.json"
        f.write_bytes(text)
        try:
            # No address-space limit under ASan: its shadow memory alone reserves terabytes.
            proc = subprocess.run([str(NUMASIM), str(f)], capture_output=True, timeout=CASE_LIMIT_S,
                                  preexec_fn=None if "FUZZ_NUMASIM" in os.environ else _limit_address_space)
        except subprocess.TimeoutExpired:
            return f"hang (> {CASE_LIMIT_S} s)"
        if proc.returncode < 0:
            return f"signal {-proc.returncode}: {proc.stderr.decode(errors='replace')[-300:]}"
        out, err = proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
        err = "\n".join(ln for ln in err.splitlines() if not any(n in ln for n in ASAN_NOTICE))
        return verdict(proc.returncode, err, lambda: simulate_ok(out))

    run_cases("run_json", 500, case)


def test_runs_csv(tmp_path):
    base = synthetic_runs("ABC", reps=2)
    text = base.to_csv(index=False).encode()
    cells = ["", "nan", "inf", "-inf", "-1", "0", "1e400", "abc", "99999999999999999999", "\xff", '"', ",", "2",
             "1.5", "True", "{}", "{\"kind\": 1}",
             "1e-300", "1e300", "100", "0.001", "1"]  # valid values too: the analysis runs on odd data

    measured = [list(base.columns).index(c) for c in ("makespan_s", "wall_s")]

    def case(i: int, rng: random.Random) -> str | None:
        data = text
        for _ in range(rng.choice([1, 1, 2])):
            if rng.random() < 0.6:  # a cell replaced, often a measurement (what the analysis computes on)
                lines = data.split(b"\n")
                k = rng.randrange(len(lines))
                fields = lines[k].split(b",")
                col = rng.choice(measured) if rng.random() < 0.5 else rng.randrange(len(fields))
                fields[min(col, len(fields) - 1)] = rng.choice(cells).encode("latin-1")
                lines[k] = b",".join(fields)
                data = b"\n".join(lines)
            else:
                data = mutate_bytes(rng, data, cells + ["\n", "\r\n"])
        f = tmp_path / f"runs{i}.csv"
        f.write_bytes(data)
        out = tmp_path / f"a{i}"
        rc, _, err = cli(["analyze", str(f), "--out", str(out), "--stage", "tables"])

        def valid() -> str | None:
            if not (out / "anova.csv").is_file():
                return "exit 0 without anova.csv"
            return None

        return verdict(rc, err, valid)

    run_cases("runs_csv", 200, case)
