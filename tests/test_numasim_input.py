"""numasim's run description is read strictly: JSON as RFC 8259 says (Debian's
nlohmann-json3 parses it), no duplicate keys, no unknown keys, no value of the wrong type taken
for a default. Each bad file gives exit 2 and one stderr line naming the file, the key and what
was expected; never a signal, a traceback or a run with a silently changed setting."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from testbed import ROOT
from testbed.common import paths

DATA = ROOT / "simulator" / "tests" / "data"

pytestmark = pytest.mark.skipif(not paths.NUMASIM.exists(), reason="numasim not built (make build)")


def good() -> dict:
    return {
        "platform": str(DATA / "tiny2.xml"),
        "perfmodels": {"tiny": str(DATA / "tiny_sampling")},
        "workload": {"kind": "lu", "n": 192, "b": 96, "distribution": {"kind": "block-cyclic", "p": 1, "q": 2}},
        "env": {"STARPU_SCHED": "dmdas"},
        "seed": 7,
        "variability": True,
    }


def numasim(tmp_path: Path, text: str | bytes) -> subprocess.CompletedProcess:
    f = tmp_path / "run.json"
    f.write_bytes(text.encode() if isinstance(text, str) else text)
    # TESTBED_NUMASIM (paths.binary) lets these cases be replayed on another build.
    return subprocess.run([str(paths.binary(paths.NUMASIM, "numasim")), str(f)], capture_output=True, timeout=60)


def one_line_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 2, (proc.returncode, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "run.json" in lines[0], err
    for w in words:
        assert w in lines[0], err
    assert proc.stdout == b""
    return lines[0]


def with_text(replace: str, by: str) -> str:
    text = json.dumps(good())
    assert replace in text
    return text.replace(replace, by, 1)


def test_good_description_runs(tmp_path):
    proc = numasim(tmp_path, json.dumps(good()))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["tasks"] > 0


@pytest.mark.parametrize("text,words", [
    (with_text('"seed": 7', '"seed": 7, "seed": 8'), ["seed", "once"]),                     # duplicate key
    (with_text('"n": 192', '"n": 192, "n": 96'), ["workload.n", "once"]),                   # nested duplicate
    (with_text('"seed": 7', '"seed": NaN'), ["JSON"]),                                      # not JSON
    (with_text('"seed": 7', '"seed": Infinity'), ["JSON"]),
    (with_text('"seed": 7', '"seed": 0x10'), ["JSON"]),                                     # hex
    (json.dumps(good()) + " {}", ["JSON"]),                                                  # trailing text
    (json.dumps(good()) + " garbage", ["JSON"]),
    (with_text('"n": 192', '"n": 1e400'), ["workload.n", "1e400"]),                         # overflow
    ("[" * 100000 + "]" * 100000, ["nested"]),                                               # deep nesting
    ("", ["JSON"]),
])
def test_not_strict_json_is_refused(tmp_path, text, words):
    one_line_error(numasim(tmp_path, text), *words)


def test_invalid_utf8_is_refused(tmp_path):
    one_line_error(numasim(tmp_path, with_text('"dmdas"', '"dmd\xff"').encode("latin-1")), "JSON")


@pytest.mark.parametrize("change,key", [
    ({"variabilty": False}, "variabilty"),                                      # typo: default stayed on
    ({"workload": {**good()["workload"], "nn": 5}}, "workload.nn"),
    ({"workload": {**good()["workload"], "distribution": {"kind": "block-cyclic", "pp": 2}}},
     "workload.distribution.pp"),
    ({"mpi": {"overhead": 1e-6}}, "mpi.overhead"),
])
def test_unknown_key_is_named_with_the_known_ones(tmp_path, change, key):
    line = one_line_error(numasim(tmp_path, json.dumps(good() | change)), key, "known key")
    assert "seed" in line or "kind" in line or "overhead_s" in line  # the expectation lists the keys


@pytest.mark.parametrize("change,key", [
    ({"seed": "abc"}, "seed"), ({"seed": 1.5}, "seed"), ({"seed": -1}, "seed"),
    ({"seed": 2**64 + 1}, "seed"),
    ({"variability": "yes"}, "variability"), ({"variability": 0}, "variability"),
    ({"trace": 5}, "trace"),
    ({"env": {"STARPU_SCHED": ["dmdas"]}}, "env.STARPU_SCHED"),
    ({"workload": {**good()["workload"], "distribution": {"kind": "block-cyclic", "p": 2147483648, "q": 1}}},
     "workload.distribution.p"),
    ({"workload": {**good()["workload"], "distribution": "block-cyclic"}}, "workload.distribution"),
    ({"mpi": {"overhead_s": -1}}, "mpi.overhead_s"),
    ({"env": {"STARPU_WORKERS_CPUID": "0-99999999999"}}, "env.STARPU_WORKERS_CPUID"),
    ({"env": {"STARPU_MPI_THREAD_CPUID": "4294967296"}}, "env.STARPU_MPI_THREAD_CPUID"),
    ({"env": {"STARPU_CUDA_PIPELINE": "4294967296"}}, "env.STARPU_CUDA_PIPELINE"),
])
def test_wrong_type_or_range_is_refused_not_defaulted(tmp_path, change, key):
    one_line_error(numasim(tmp_path, json.dumps(good() | change)), key)


def test_missing_platform_file_is_bad_input_not_an_environment_fault(tmp_path):
    """Found by tests/test_fuzz.py: SimGrid's "Unable to open" came out as exit 1."""
    one_line_error(numasim(tmp_path, json.dumps(good() | {"platform": str(tmp_path / "nosuch.xml")})),
                   "platform", "readable SimGrid platform file")
    one_line_error(numasim(tmp_path, json.dumps(good() | {"platform": str(tmp_path)})), "platform")


def test_perfmodels_directory_and_host(tmp_path):
    """`perfmodels` as {"dir", "host"}: a raw sampling directory whose files carry another host
    name (docs/interfaces.md §3.1); the same files give the same run as the plain form."""
    raw = tmp_path / "raw" / "codelets" / "45"
    raw.mkdir(parents=True)
    for f in (DATA / "tiny_sampling" / "codelets" / "45").glob("*.tiny"):
        (raw / f"{f.stem}.real-node-3").write_bytes(f.read_bytes())
    d = good()
    d["perfmodels"] = {"tiny": {"dir": str(tmp_path / "raw"), "host": "real-node-3"}}
    by_host, plain = numasim(tmp_path, json.dumps(d)), numasim(tmp_path, json.dumps(good()))
    assert by_host.returncode == 0, by_host.stderr
    assert json.loads(by_host.stdout)["makespan_s"] == json.loads(plain.stdout)["makespan_s"]
    d["perfmodels"]["tiny"]["host"] = "tiny"  # files of that host are not there
    missing = numasim(tmp_path, json.dumps(d))
    assert missing.returncode == 2 and b"raw/codelets/45/" in missing.stderr and b"on host 'tiny'" in missing.stderr
    d["perfmodels"]["tiny"] = {"dir": str(tmp_path / "raw"), "hostname": "real-node-3"}
    one_line_error(numasim(tmp_path, json.dumps(d)), "perfmodels.tiny.hostname")
    d["perfmodels"]["tiny"] = {"dir": str(tmp_path / "raw"), "host": "a/b"}
    one_line_error(numasim(tmp_path, json.dumps(d)), "perfmodels.tiny.host", "no '/'")
