"""numasim's results stay the same when only its speed changes.

A few run descriptions on the study's cluster (g5k-lille-21, b = 960): reduced scale (30 x 30
tiles) over several factor levels, seeds and both tile mappings, compared through their whole
summary (every field but wall_s) and the SHA-256 of their task trace and transfer CSV (every
task's worker, start and end to the nanosecond; the columns of the recording, HASHED_COLUMNS); and one run at the study's scale (100 x 100
tiles, 338,350 tasks, heterogeneity-aware mapping), compared through its summary. Every value
recorded must be the same; fields added to the summary since are not compared. The expected
values (tests/data/numasim_identity.json) were written by the numasim of the last model change
before the last work on its speed, on the machine descriptions and models of their writing; a change of these
values is a change of the model (numasim's or its inputs'), not of its speed: regenerate them
only for an intended change of behaviour, and say which in the commit:

    .venv/bin/python tests/test_numasim_identity.py build/simulator/numasim
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.common import paths  # noqa: E402

GOLDEN = ROOT / "tests" / "data" / "numasim_identity.json"
CLUSTER = "g5k-lille-21"
B = 960

# name: (tiles per side, factor levels at +1, seed, mapping, trace hashed)
CASES: dict[str, tuple[int, str, int, str, bool]] = {
    "het30-default-s1": (30, "", 1, "heterogeneous", True),
    "het30-ABCE-s2": (30, "ABCE", 2, "heterogeneous", True),
    "het30-AE-s3": (30, "AE", 3, "heterogeneous", True),
    "het30-D-s4": (30, "D", 4, "heterogeneous", True),
    "bc30-FG-s5": (30, "FG", 5, "block-cyclic", True),
    "het100-default-s1": (100, "", 1, "heterogeneous", False),
}


def platform(out: Path) -> Path:
    from testbed.describe.machines import load_cluster
    from testbed.platform.platform_cmd import generate

    generate(load_cluster(CLUSTER), out, (B,))
    return out


def run_case(numasim: Path, pdir: Path, name: str, workdir: Path) -> dict:
    """Runs one case; returns its summary without wall_s, plus the CSVs' digests when hashed."""
    from testbed.run.engines import RunSpec
    from testbed.run.engines.numasim import run_description
    from testbed.run.resolve import resolve_run_env

    nt, levels, seed, mapping, hashed = CASES[name]
    factors = {x: (1 if x in levels else -1) for x in "ABCDEFG"}
    dist = {"kind": "heterogeneous"} if mapping == "heterogeneous" else {"kind": "block-cyclic", "p": 3, "q": 7}
    spec = RunSpec(engine="numasim", cluster=CLUSTER, n=nt * B, b=B, factors=factors,
                   **resolve_run_env(CLUSTER, factors, {}, "dmdas").spec_fields(), seed=seed,
                   distribution=dist, platform_dir=pdir)
    work = workdir / name
    work.mkdir(parents=True, exist_ok=True)
    desc = run_description(spec, pdir, work)
    if hashed:
        desc["trace"] = str(work / "trace.csv")
        desc["transfers"] = str(work / "transfers.csv")
    run_file = work / "run.json"
    run_file.write_text(json.dumps(desc, indent=1))
    proc = subprocess.run([str(numasim), str(run_file)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    summary.pop("wall_s", None)
    if hashed:
        for key in ("trace", "transfers"):
            summary[f"{key}_sha256"] = hashlib.sha256(recorded_columns(work / f"{key}.csv", key)).hexdigest()
    return summary


#: the columns of each CSV when the expected values were written: columns added since are not
#: hashed, as summary fields added since are not compared
HASHED_COLUMNS = {
    "trace": "ResourceId,Start,End,Duration,Value,JobId,Node,WorkerNuma,WorkerMemNode,OperandNuma,Priority,Step,"
             "X,Y,OperandPages,RemoteBytes",
    "transfers": "Start,End,Bytes,Src,Dst,Links,Estimate,Calibrated,Thread",
}


def recorded_columns(path: Path, key: str) -> bytes:
    """The CSV's bytes cut to HASHED_COLUMNS[key] (no cell holds a comma), in their order."""
    lines = path.read_bytes().split(b"\n")
    header = lines[0].decode().split(",")
    wanted = HASHED_COLUMNS[key].split(",")
    missing = [c for c in wanted if c not in header]
    assert not missing, f"{path.name} lacks the recorded columns {missing}"
    keep = [header.index(c) for c in wanted]
    if keep == list(range(len(header))):
        return path.read_bytes()
    return b"\n".join(b",".join(line.split(b",")[i] for i in keep) if line else line for line in lines)


pytestmark = pytest.mark.skipif(not paths.NUMASIM.exists(), reason="numasim not built (make build)")


@pytest.fixture(scope="module")
def lille(tmp_path_factory) -> Path:
    return platform(tmp_path_factory.mktemp("identity") / "platform")


def differences(got: dict, expected: dict, where: str = "") -> list[str]:
    """Every recorded value that is not the same (fields added to the summary since are not compared)."""
    out = []
    for key, want in expected.items():
        have = got.get(key)
        if isinstance(want, dict) and isinstance(have, dict):
            out += differences(have, want, f"{where}{key}.")
        elif have != want:
            out.append(f"{where}{key}: {have!r}, recorded {want!r}")
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_results_are_the_recorded_ones(lille: Path, tmp_path: Path, name: str) -> None:
    expected = json.loads(GOLDEN.read_text())["cases"][name]
    got = run_case(paths.NUMASIM, lille, name, tmp_path)
    assert not differences(got, expected), differences(got, expected)


def main(argv: list[str]) -> int:
    import tempfile

    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    numasim = Path(argv[0]).resolve()
    commit = subprocess.run([str(numasim), "--version"], capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="identity-") as tmp:
        pdir = platform(Path(tmp) / "platform")
        cases = {name: run_case(numasim, pdir, name, Path(tmp)) for name in CASES}
    GOLDEN.write_text(json.dumps({"written_by": commit, "cases": cases}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN.relative_to(ROOT)} ({len(cases)} cases, {commit})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
