"""Bad input, one row per case: argument mistakes, StarPU variables, empty values, repeated
options, directories and devices given as files, numasim's --cfg and memory limit, schemas and
configs that used to be accepted, interrupts (docs/interfaces.md §7).

Each row runs `testbed` in a folder of its own and expects the contract: exit 2 and one line
`error: ...` naming what was wrong (the option, key or path as the user gave it), nothing left
in the folder but what the row put there; or, where the input is valid, exit 0. Beside
tests/test_fuzz.py, which mutates valid inputs at random, these are the cases found by hand.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from support.experiments import synthetic_runs
from support.schedulers import popen_interruptible

from testbed import ROOT
from testbed.cli import main
from testbed.common import paths
from testbed.study.design import design_table

needs_numasim = pytest.mark.skipif(not paths.NUMASIM.exists(), reason="numasim not built (make build)")
SIM = ["simulate", "--engine", "numasim", "--cluster", "chifflet-1", "--n", "960", "--b", "192"]
NUMASIM_SPEC = {"name": "syn", "cluster": "chifflet-1", "engine": "numasim",
                "workload": {"n": 960, "b": 192, "distribution": {"kind": "block-cyclic"}},
                "factors": {"A": [-1, 1]}, "repetitions": 2, "seed": 1, "batches": 1}


def cli(argv: list[str]) -> tuple[int, str]:
    """`testbed ARGV` in this process: (exit status, stderr)."""
    rc, _, err = cli_streams(argv)
    return rc, err


def cli_streams(argv: list[str]) -> tuple[int, str, str]:
    """`testbed ARGV` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse
            rc = exc.code if isinstance(exc.code, int) else 2
    return rc, out.getvalue(), err.getvalue()


def files_of(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


# ------------------------------------------------------------------ inputs the rows build
def runs_csv(d: Path, name: str = "runs.csv", **kw) -> Path:
    synthetic_runs("AB", reps=2, **kw).to_csv(d / name, index=False)
    return d / name


def constant_runs(d: Path) -> Path:
    runs = synthetic_runs("AB", reps=2)
    runs["makespan_s"] = 12.5
    runs.to_csv(d / "runs.csv", index=False)
    return d / "runs.csv"


def bom_runs(d: Path) -> Path:
    text = synthetic_runs("AB", reps=2).to_csv(index=False)
    (d / "runs.csv").write_bytes(b"\xef\xbb\xbf" + text.encode())
    return d / "runs.csv"


def design_csv(d: Path, reps: int = 2) -> Path:
    design_table({**NUMASIM_SPEC, "repetitions": reps}).to_csv(d / "d.csv", index=False)
    return d / "d.csv"


def machine_yaml(d: Path, base: str, edit: Callable[[dict], None], name: str = "mymachine") -> Path:
    """A copy of platforms/machines/BASE.yaml named `name`, changed by `edit`, and a one-node cluster of it."""
    data = yaml.safe_load((ROOT / "platforms" / "machines" / f"{base}.yaml").read_text())
    data["name"] = name
    if isinstance(data.get("kernels"), str):
        data["kernels"] = str(ROOT / data["kernels"])
    edit(data)
    (d / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    cluster = yaml.safe_load((ROOT / "platforms" / "clusters" / "chifflet-1.yaml").read_text())
    cluster["name"] = "mycluster"
    cluster["nodes"] = [{"machine": f"./{name}.yaml", "count": 1}]
    (d / "mycluster.yaml").write_text(yaml.safe_dump(cluster, sort_keys=False))
    return d / "mycluster.yaml"


def config_yaml(d: Path, edit: Callable[[dict], None]) -> Path:
    data = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    edit(data)
    (d / "my.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return d / "my.yaml"


def first_experiment(data: dict) -> dict:
    return data["experiments"][0]


def hwloc_xml(d: Path) -> Path:
    from testbed.describe.hwloc_xml import write_topology
    from testbed.describe.machines import load_machine

    write_topology(load_machine("chifflet"), d / "h.xml")
    return d / "h.xml"


@dataclass
class Row:
    #: builds the row's files in the folder (the current directory) and returns the command line
    make: Callable[[Path], list[str]]
    #: what the one error line must contain (None: the command must succeed)
    says: tuple[str, ...] | None
    #: what it must not contain
    never: tuple[str, ...] = ()
    numasim: bool = False
    #: nothing on stdout either (a tool's notice or error printed there)
    silent_stdout: bool = False
    #: environment variables of the row (TESTBED_CACHE inside the row's folder)
    env: dict[str, str] | None = None


def argv(*args: str) -> Callable[[Path], list[str]]:
    return lambda d: list(args)


ROWS: dict[str, Row] = {
    # ---- argument mistakes: one line, not argparse's usage block
    "simulate --n abc": Row(argv(*SIM[:-4], "--n", "abc", "--b", "192"), ("argument --n", "'abc'")),
    "unknown subcommand": Row(argv("frobnicate"), ("invalid choice: 'frobnicate'",)),
    "campaign --batch abc": Row(argv("campaign", "--design", "d.csv", "--batch", "abc", "--out", "o.csv"),
                                ("argument --batch", "'abc'")),
    "analyze --p-max x": Row(lambda d: ["analyze", str(runs_csv(d)), "--out", "o", "--p-max", "x"], ("--p-max",)),
    "design without --out": Row(argv("design", "--config", "config/config.yaml"), ("--out",)),
    "simulate --engine nope": Row(argv(*SIM[:1], "--engine", "nope"), ("argument --engine", "'nope'")),
    "simulate --bogus-option": Row(argv(*SIM, "--bogus-option"), ("unrecognized arguments: --bogus-option",)),
    "sensitivity step unknown": Row(argv("sensitivity", "frob"), ("invalid choice: 'frob'",)),
    # ---- repeated single-valued options: the last one used to win silently
    "--n 1 --n 2": Row(argv(*SIM, "--n", "1920"), ("argument --n", "given twice")),
    "--factors twice": Row(argv(*SIM, "--factors", "A=1", "--factors", "B=1"), ("argument --factors", "given twice")),
    "campaign --out twice": Row(argv("campaign", "--merge", "a.csv", "--out", "x.csv", "--out", "y.csv"),
                                ("argument --out", "given twice")),
    # ---- empty strings: were read as "not given"
    "simulate --trace ''": Row(argv(*SIM, "--trace", ""), ("argument --trace", "empty")),
    "simulate --transfers ''": Row(argv(*SIM, "--transfers", ""), ("argument --transfers", "empty")),
    "simulate --events ''": Row(argv(*SIM, "--events", ""), ("argument --events", "empty")),
    "trace-starvz --events ''": Row(argv("trace-starvz", "t.csv", "--b", "96", "--events", "", "--out", "o"),
                                    ("argument --events", "empty")),
    "simulate --paje ''": Row(argv(*SIM, "--paje", ""), ("argument --paje", "empty")),
    "simulate --platform-dir ''": Row(argv(*SIM, "--platform-dir", ""), ("argument --platform-dir", "empty")),
    "analyze --out ''": Row(lambda d: ["analyze", str(runs_csv(d)), "--out", ""], ("argument --out", "empty")),
    "analyze ''": Row(argv("analyze", "", "--out", "o"), ("argument runs", "empty")),
    "campaign --merge ... --out ''": Row(lambda d: ["campaign", "--merge", str(runs_csv(d)), "--out", ""],
                                        ("argument --out", "empty")),
    "design --out ''": Row(argv("design", "--config", "config/config.yaml", "--experiment", "lille21", "--out", ""),
                           ("argument --out", "empty")),
    "trace-starvz --out ''": Row(argv("trace-starvz", "t.csv", "--out", ""), ("argument --out", "empty")),
    "report --out ' '": Row(argv("report", "--experiment", "a=b", "--out", " "), ("argument --out", "empty")),
    # ---- StarPU variables StarPU-SimGrid refuses, refused by the numasim engine too
    "numasim STARPU_CALIBRATE=abc": Row(argv(*SIM, "--env", "STARPU_CALIBRATE=abc"), ("STARPU_CALIBRATE", "'abc'")),
    "numasim STARPU_NCPU=-1": Row(argv(*SIM, "--env", "STARPU_NCPU=-1"), ("STARPU_NCPU", "'-1'")),
    "numasim STARPU_WORKERS_CUDAID=": Row(argv(*SIM, "--env", "STARPU_WORKERS_CUDAID="), ("STARPU_WORKERS_CUDAID",)),
    "numasim STARPU_SILENT=yes": Row(argv(*SIM, "--env", "STARPU_SILENT=yes"), ("STARPU_SILENT",)),
    "numasim STARPU_PROFILING=-2": Row(argv(*SIM, "--env", "STARPU_PROFILING=-2"), ("STARPU_PROFILING",)),
    "numasim STARPU_MAIN_THREAD_CPUID=-1": Row(argv(*SIM, "--env", "STARPU_MAIN_THREAD_CPUID=-1"),
                                                ("STARPU_MAIN_THREAD_CPUID",)),
    "numasim STARPU_RESERVE_NCPU=-1": Row(argv(*SIM, "--env", "STARPU_RESERVE_NCPU=-1"), ("STARPU_RESERVE_NCPU",)),
    # ---- a directory or a device where a file is read; paths as the user gave them
    "platform --hwloc-xml DIR": Row(lambda d: ((d / "adir").mkdir(), ["platform", "--describe-local", "--hwloc-xml",
                                                                       "adir", "--out", "m.yaml"])[1],
                                    ("adir", "--hwloc-xml", "directory")),
    "platform --hwloc-xml missing": Row(argv("platform", "--describe-local", "--hwloc-xml", "nope.xml", "--out", "m.yaml"),
                                        ("nope.xml", "--hwloc-xml")),
    "campaign --design DIR": Row(lambda d: ((d / "adir").mkdir(), ["campaign", "--design", "adir", "--batch", "0",
                                                                    "--out", "o.csv"])[1], ("adir", "--design")),
    "simulate --platform-dir nope": Row(argv(*SIM, "--platform-dir", "nope"), ("nope: --platform-dir",),
                                        never=("--cluster", str(ROOT))),
    "simulate --platform-dir missing, no --cluster": Row(
        argv("simulate", "--engine", "numasim", "--platform-dir", "c1/nope", "--n", "1920", "--b", "192"),
        ("c1/nope: --platform-dir", "an existing directory written by `testbed platform`"), never=("--cluster",)),
    "simulate --platform-dir a file, no --cluster": Row(
        lambda d: ((d / "plat.txt").write_text("numasim.xml\n"),
                   ["simulate", "--engine", "numasim", "--platform-dir", "plat.txt", "--n", "1920", "--b", "192"])[1],
        ("plat.txt: --platform-dir", "got a file"), never=("--cluster", "existing")),
    "campaign --platform-dir a file": Row(
        lambda d: ((d / "plat.txt").write_text(""), design_csv(d),
                   ["campaign", "--design", "d.csv", "--batch", "0", "--out", "o.csv", "--platform-dir", "plat.txt"])[2],
        ("plat.txt: --platform-dir", "got a file")),
    "campaign --merge b.csv ./b.csv": Row(lambda d: ["campaign", "--merge", str(runs_csv(d, "b.csv").name), "./b.csv",
                                                     "--out", "o.csv"], ("./b.csv: --merge", "given twice")),
    "analyze link to a missing file": Row(lambda d: ((d / "runs.csv").symlink_to("gone.csv"),
                                                     ["analyze", "runs.csv", "--out", "o"])[1],
                                          ("runs.csv", "gone.csv")),
    "analyze /dev/zero": Row(lambda d: ((d / "runs.csv").symlink_to("/dev/zero"), ["analyze", "runs.csv", "--out", "o"])[1],
                             ("runs.csv", "device")),
    "campaign --merge /dev/zero": Row(lambda d: ((d / "b.csv").symlink_to("/dev/zero"),
                                                 ["campaign", "--merge", "b.csv", "--out", "o.csv"])[1],
                                      ("b.csv", "--merge", "device")),
    "platform --hwloc-xml /dev/urandom": Row(lambda d: ((d / "h.xml").symlink_to("/dev/urandom"),
                                                        ["platform", "--describe-local", "--hwloc-xml", "h.xml",
                                                         "--out", "m.yaml"])[1], ("h.xml", "--hwloc-xml", "device")),
    "trace-paje /dev/zero": Row(lambda d: ((d / "t.csv").symlink_to("/dev/zero"), ["trace-paje", "t.csv", "--out",
                                                                                   "t.paje"])[1], ("t.csv", "device")),
    # ---- the path and the option the user typed, not a link's target or an inner key
    "campaign --platform-dir a link to a directory without numasim.xml": Row(
        lambda d: ((d / "target").mkdir(), (d / "plink").symlink_to("target"), design_csv(d),
                   ["campaign", "--design", "d.csv", "--batch", "0", "--out", "o.csv", "--platform-dir", "plink"])[3],
        ("plink", "--platform-dir", "numasim.xml"), never=("target",)),
    "trace-pair --best missing": Row(lambda d: (design_csv(d), ["trace-pair", "--design", "d.csv", "--best", "nope.json",
                                                                "--out", "t"])[1], ("nope.json", "--best")),
    "platform --from-starpu DIR --host not in DIR": Row(
        lambda d: ((d / "samp" / "bus").mkdir(parents=True), (d / "samp" / "bus" / "real.platform.v4.xml").touch(),
                   ["platform", "--from-starpu", "samp", "--host", "nope", "--out", "P"])[2],
        ("samp", "--host", "(real)", "'nope'")),
    "platform --from-starpu DIR without bus platforms": Row(
        lambda d: ((d / "samp").mkdir(), ["platform", "--from-starpu", "samp", "--host", "nope", "--out", "P"])[1],
        ("samp", "--from-starpu", "bus platforms")),
    "simulate --perfmodel-dir chifflet=LINK:nope": Row(
        lambda d: ((d / "target" / "codelets" / "45").mkdir(parents=True),
                   (d / "target" / "codelets" / "45" / "dgemm.real").touch(), (d / "models").symlink_to("target"),
                   [*SIM, "--perfmodel-dir", "chifflet=models:nope"])[3],
        ("--perfmodel-dir", "models/codelets/45", "(real)", "'nope'"), never=("target",)),
    # ---- a distribution file read before a platform is generated or cached for the run
    "simulate --distribution DIR": Row(lambda d: ((d / "dist").mkdir(), [*SIM, "--distribution", "dist"])[1],
                                       ("dist", "--distribution", "directory"), env={"TESTBED_CACHE": "{dir}/cache"}),
    "simulate --distribution a link to 2 rows of 5": Row(
        lambda d: ((d / "t.txt").write_text("0 0\n0 0\n"), (d / "my.dist").symlink_to("t.txt"),
                   [*SIM, "--distribution", "my.dist"])[2],
        ("my.dist", "5 rows"), never=("t.txt",), env={"TESTBED_CACHE": "{dir}/cache"}),
    # ---- numasim: --cfg mistakes and sizes that cannot fit
    "simulate --cfg frob:1": Row(argv(*SIM, "--cfg", "frob:1"), ("--cfg", "frob"), never=("Existing config keys",),
                                 numasim=True),
    "simulate --cfg network/model:Nope": Row(argv(*SIM, "--cfg", "network/model:Nope"), ("--cfg", "network/model", "Nope"),
                                             numasim=True),
    "simulate --cfg tracing:": Row(argv(*SIM, "--cfg", "tracing:"), ("--cfg", "KEY:VALUE"), numasim=True),
    "4096 tiles per dimension": Row(argv(*SIM[:5], "--n", str(4096 * 192), "--b", "192"),
                                    ("workload.n/b", "tiles per dimension on this machine"), numasim=True),
    # ---- snakemake's config files and arguments, through `testbed workflow` (snakemake reads a
    # --configfile before the Snakefile runs: a traceback, or an error without the file's name)
    "workflow --configfile missing": Row(argv("workflow", "-n", "--configfile", "nope.yaml"),
                                         ("nope.yaml", "existing file")),
    "workflow --configfile garbled": Row(lambda d: ((d / "bad.yaml").write_text("a: [\n"),
                                                    ["workflow", "-n", "--configfile", "bad.yaml"])[1],
                                         ("bad.yaml", "valid YAML")),
    "workflow --configfile DIR": Row(lambda d: ((d / "adir").mkdir(), ["workflow", "--configfile", "adir"])[1],
                                     ("adir", "directory")),
    "workflow --configfile /dev/zero": Row(lambda d: ((d / "z.yaml").symlink_to("/dev/zero"),
                                                      ["workflow", "-n", "--configfiles", "z.yaml"])[1],
                                           ("z.yaml", "device")),
    "workflow --configfile=a list": Row(lambda d: ((d / "l.yaml").write_text("- 1\n"),
                                                   ["workflow", "-n", "--configfile=l.yaml"])[1],
                                        ("l.yaml", "mapping of config keys")),
    "workflow --configfile empty": Row(lambda d: ((d / "e.yaml").write_text("# nothing yet\n"),
                                                 ["workflow", "-n", "--configfile", "e.yaml"])[1],
                                       ("e.yaml", "empty file"), silent_stdout=True),
    "workflow --configfile the Snakefile refuses: its line alone": Row(
        lambda d: ((d / "b.yaml").write_text("analysis:\n  boxplots: [[Q]]\n"),
                   ["workflow", "-n", "--snakefile", str(ROOT / "Snakefile"), "--configfile", "b.yaml"])[1],
        ("b.yaml", "analysis.boxplots.0"), never=("is extended",), silent_stdout=True),
    "workflow --cores abc": Row(argv("workflow", "--cores", "abc"), ("snakemake arguments", "--cores")),
    "workflow --configf (ambiguous)": Row(argv("workflow", "--configf", "x.yaml"),
                                          ("snakemake arguments", "ambiguous option"), never=("usage",)),
    # ---- accepted nonsense
    "numa: hinting_fault_costs_s (typo)": Row(
        lambda d: ["platform", "--cluster", str(machine_yaml(d, "chetemi", lambda m: m["numa"].update(
            hinting_fault_costs_s=m["numa"].pop("hinting_fault_cost_s")))), "--out", "P"],
        ("numa.hinting_fault_costs_s",)),
    "numa: frobnicate": Row(
        lambda d: ["platform", "--cluster", str(machine_yaml(d, "chetemi", lambda m: m["numa"].update(
            frobnicate={"value": 1, "source": "x"}))), "--out", "P"], ("numa.frobnicate",)),
    "numa: a typo beside pattern keys (stall_fraction_*, remote_penalty_*)": Row(
        lambda d: ["platform", "--cluster", str(machine_yaml(d, "chetemi", lambda m: m["numa"].update(
            remote_penalty_dgemm_b960={"value": 1.05, "source": "x"},
            variability_remote={"value": 1, "source": "x"}))), "--out", "P"], ("numa.variability_remote",)),
    "gpu_peer on a machine without GPUs": Row(
        lambda d: ["platform", "--cluster", str(machine_yaml(d, "chetemi", lambda m: m.update(
            gpu_peer=yaml.safe_load((ROOT / "platforms/machines/chifflet.yaml").read_text())["gpu_peer"]))),
            "--out", "P"], ("gpu_peer",)),
    "cluster machine: ../../../../etc/passwd": Row(
        lambda d: (machine_yaml(d, "chetemi", lambda m: None),
                   (d / "c.yaml").write_text((d / "mycluster.yaml").read_text().replace(
                       "./mymachine.yaml", "../../../../../../../../etc/passwd")),
                   ["platform", "--cluster", "c.yaml", "--out", "P"])[2],
        ("c.yaml", "nodes[0].machine"), never=("root:",)),
    "cluster machine: a YAML that is not a mapping": Row(
        lambda d: (machine_yaml(d, "chetemi", lambda m: None),
                   (d / "mymachine.yaml").write_text("root:x:0:0:root:/root:/bin/bash " * 4 + "\n"),
                   ["platform", "--cluster", "mycluster.yaml", "--out", "P"])[2],
        ("mymachine.yaml",), never=("/bin/bash",)),
    "constant makespans": Row(lambda d: ["analyze", str(constant_runs(d)), "--out", "o"], ("makespan_s", "12.5")),
    "runs.csv with a UTF-8 byte-order mark": Row(lambda d: ["analyze", str(bom_runs(d)), "--out", "o"], None),
    "config env STARPU_SCHED_BETA: abc": Row(
        lambda d: ["design", "--config", str(config_yaml(d, lambda c: first_experiment(c).setdefault("env", {}).update(
            STARPU_SCHED_BETA="abc"))), "--experiment", "lille21", "--out", "d.csv"],
        ("env.STARPU_SCHED_BETA", "'abc'")),
    "config boxplots: [[Q]]": Row(
        lambda d: ["design", "--config", str(config_yaml(d, lambda c: c.setdefault("analysis", {}).update(
            boxplots=[["Q"]]))), "--experiment", "lille21", "--out", "d.csv"], ("analysis.boxplots.0", "Q")),
}


@pytest.mark.parametrize("name", list(ROWS))
def test_bad_input(name: str, tmp_path: Path, monkeypatch) -> None:
    row = ROWS[name]
    if row.numasim and not paths.NUMASIM.exists():
        pytest.skip("numasim not built (make build)")
    monkeypatch.chdir(tmp_path)
    if not (tmp_path / "config").exists():
        (tmp_path / "config").symlink_to(ROOT / "config")
    for var, value in (row.env or {}).items():
        monkeypatch.setenv(var, value.format(dir=tmp_path))
    argv_ = row.make(tmp_path)
    before = files_of(tmp_path)
    rc, out, err = cli_streams(argv_)
    if row.silent_stdout:
        assert out == "", out
    errors = [ln for ln in err.strip().splitlines() if ln.startswith("error: ")]
    assert "Traceback" not in err, err
    if row.says is None:
        assert rc == 0, err
        return
    assert rc == 2 and len(errors) == 1 and len(err.strip().splitlines()) == 1, f"exit {rc}: {err}"
    for part in row.says:
        assert part in errors[0], errors[0]
    for part in row.never:
        assert part not in errors[0], errors[0]
    assert files_of(tmp_path) == before, "the refusal left files behind"


# ------------------------------------------------------------------ numasim's own run description
def numasim_description(tmp_path: Path) -> dict:
    from testbed.run.engines import RunSpec, platform_dir_for
    from testbed.run.engines.numasim import run_description

    spec = RunSpec(engine="numasim", cluster="chifflet-1", n=960, b=192)
    return run_description(spec, platform_dir_for(spec, tmp_path), tmp_path)


@needs_numasim
@pytest.mark.parametrize("change,key", [
    (lambda r: r["env"].update(STARPU_NCPU=2), "env.STARPU_NCPU"),
    (lambda r: r["env"].update(STARPU_SCHED_BETA=0.5), "env.STARPU_SCHED_BETA"),
    (lambda r: r["env"].update(STARPU_CALIBRATE="abc"), "env.STARPU_CALIBRATE"),
    (lambda r: r["env"].update(STARPU_NCUDA="-1"), "env.STARPU_NCUDA"),
    (lambda r: r.update(env_per_machine={"chifflett": {"STARPU_NCPU": "2"}}), "env_per_machine.chifflett"),
], ids=["numeric env value", "numeric float env value", "STARPU_CALIBRATE=abc", "STARPU_NCUDA=-1",
        "env_per_machine naming no machine"])
def test_numasim_run_description_refuses(change, key: str, tmp_path: Path) -> None:
    desc = numasim_description(tmp_path)
    change(desc)
    run = tmp_path / "run.json"
    run.write_text(json.dumps(desc))
    proc = subprocess.run([str(paths.NUMASIM), str(run)], capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and key in lines[0], proc.stderr


@needs_numasim
@pytest.mark.parametrize("cfg", ["--cfg=frob:1", "--cfg=nocolon", "--cfg=network/model:Nope", "--cfg=cpu/optim:Fast",
                                 "--cfg=numasim/lone-flows:maybe"])
def test_numasim_cfg_is_one_line(cfg: str, tmp_path: Path) -> None:
    run = tmp_path / "run.json"
    run.write_text(json.dumps(numasim_description(tmp_path)))
    proc = subprocess.run([str(paths.NUMASIM), str(run), cfg], capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: --cfg"), proc.stderr
    if "=numasim/" in cfg:  # numasim's own option: its key and the values it takes
        assert "numasim/lone-flows: expected yes or no" in lines[0] and "'maybe'" in lines[0]


@needs_numasim
@pytest.mark.parametrize("args,says", [
    ([], "missing argument RUN.json"),
    (["RUN", "--out"], "argument --out: expected a file name"),
    (["RUN", "--out", ""], "argument --out: expected a file name"),
    (["RUN", "--out", "a.json", "--out", "b.json"], "argument --out: given twice"),
    (["RUN", "other.json"], "unexpected argument 'other.json'"),
    (["RUN", "--bogus"], "unrecognized argument '--bogus'"),
    (["RUN", "--cfg", "network/model:SMPI"], "argument --cfg: expected --cfg=KEY:VALUE in one argument"),
], ids=["no RUN.json", "--out without a value", "--out ''", "--out twice", "two run descriptions", "--bogus",
        "--cfg KEY:VALUE in two arguments"])
def test_numasim_argument_mistakes_are_one_line(args: list[str], says: str, tmp_path: Path) -> None:
    """numasim's own command line: one `error: numasim: ...` line naming the argument, exit 2, not
    its usage block; nothing simulated, nothing written."""
    run = tmp_path / "run.json"
    run.write_text(json.dumps(numasim_description(tmp_path)))
    before = files_of(tmp_path)
    proc = subprocess.run([str(paths.NUMASIM), *[str(run) if a == "RUN" else a for a in args]], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: numasim: "), proc.stderr
    assert says in lines[0] and proc.stdout == "", proc.stderr
    assert files_of(tmp_path) == before


@needs_numasim
@pytest.mark.parametrize("xml", ['<?xml version="1.0"?>\n<platform version="4.1">\n<zone id="z" routing="Full">\n',
                                 '<?xml version="1.0"?><platform version="4.1"><frobnicate/></platform>\n',
                                 "not XML at all\n"], ids=["truncated", "unknown element", "not XML"])
def test_numasim_malformed_platform_is_bad_input(xml: str, tmp_path: Path) -> None:
    """A platform file SimGrid cannot parse is the run description's mistake: one line naming the
    file, exit 2 (not 1, kept for the environment)."""
    desc = numasim_description(tmp_path)
    (tmp_path / "bad.xml").write_text(xml)
    desc["platform"] = str(tmp_path / "bad.xml")
    (tmp_path / "run.json").write_text(json.dumps(desc))
    proc = subprocess.run([str(paths.NUMASIM), str(tmp_path / "run.json")], capture_output=True, text=True, timeout=120)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert proc.returncode == 2 and len(errors) == 1 and "bad.xml" in errors[0], proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# ------------------------------------------------------------------ Ctrl-C
def interrupted(argv_: list[str], cwd: Path, after: Callable[[str], bool] | float,
                sig: int = signal.SIGINT) -> tuple[int, str]:
    """`testbed ARGV` in a process of its own, sent `sig` (SIGINT) once `after` (a stderr line
    test, or seconds); (exit status, stderr)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = popen_interruptible([sys.executable, "-m", "testbed", *argv_], cwd=cwd, env=env, text=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = []
    if callable(after):
        for line in proc.stderr:
            err.append(line)
            if after(line):
                break
    else:
        time.sleep(after)
    proc.send_signal(sig)
    _, rest = proc.communicate(timeout=120)
    return proc.returncode, "".join(err) + rest


@needs_numasim
@pytest.mark.parametrize("sig,rc_expected,word", [(signal.SIGINT, 130, "interrupted"),
                                                  (signal.SIGTERM, 143, "terminated")], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", ["campaign", "analyze", "platform"])
def test_ctrl_c_is_one_line_exit_130_and_leaves_nothing(command: str, sig: int, rc_expected: int, word: str,
                                                        tmp_path: Path) -> None:
    """Ctrl-C (SIGINT), or a scheduler's cancel (SIGTERM): one line, 130 or 143, nothing left."""
    if command == "campaign":
        design_csv(tmp_path, reps=40)
        argv_, after = ["campaign", "--design", "d.csv", "--batch", "0", "--out", "o.csv"], lambda ln: "run 1/" in ln
    elif command == "analyze":  # 384 runs of 7 factors: about 4 s here, so that 2 s falls inside the work
        synthetic_runs("ABCDEFG", reps=3).to_csv(tmp_path / "runs.csv", index=False)
        argv_, after = ["analyze", "runs.csv", "--out", "o"], 2.0
    else:  # 1,024 chifflet nodes: 20 s of generation on a 2-core machine, interrupted after 3
        cluster = yaml.safe_load((ROOT / "platforms" / "clusters" / "chifflet-1.yaml").read_text())
        cluster.update(name="big", nodes=[{"machine": "chifflet", "count": 1024}])
        (tmp_path / "big.yaml").write_text(yaml.safe_dump(cluster))
        argv_, after = ["platform", "--cluster", "big.yaml", "--out", "P"], 3.0
    before = files_of(tmp_path)
    rc, err = interrupted(argv_, tmp_path, after, sig)
    errors = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert rc == rc_expected and "Traceback" not in err and len(errors) == 1 and word in errors[0], err
    assert files_of(tmp_path) == before, "an interrupted command left files behind"


# ------------------------------------------------------------------ the workflow's dry run
@pytest.mark.parametrize("edit,key", [
    (lambda c: first_experiment(c).setdefault("env", {}).update(STARPU_SCHED_BETA="abc"),
     "experiments.lille21.env.STARPU_SCHED_BETA"),
    (lambda c: c.setdefault("analysis", {}).update(boxplots=[["Q"]]), "analysis.boxplots.0"),
], ids=["env STARPU_SCHED_BETA: abc", "boxplots: [[Q]]"])
def test_workflow_dry_run_refuses_the_config(edit, key: str, tmp_path: Path) -> None:
    """What every batch would fail on (or a plot silently dropped) stops `snakemake -n` at once."""
    from support.workflow import snakemake, workflow_copy

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    edit(config)
    proc = snakemake(workflow_copy(tmp_path, config), "-n", "--cores", "1", timeout=300)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert proc.returncode == 2 and len(errors) == 1 and key in errors[0], proc.stderr[-2000:]


def test_ctrl_c_during_a_calibration_keeps_the_finished_steps_only(tmp_path: Path) -> None:
    """Interrupted in a measurement: one line, exit 130; the steps done stay for the resume
    (testbed/calibrate/calibrate.py), the interrupted one leaves no file, partial or temporary."""
    argv_ = ["calibrate", "--machine", "local", "--out", "cal", "--b", "64", "--reps", "3"]
    rc, err = interrupted(argv_, tmp_path, lambda ln: ln.startswith("[run ] numa-dgemm-b64-all"))
    errors = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert rc == 130 and "Traceback" not in err and errors == ["error: testbed calibrate: interrupted"], err
    left = files_of(tmp_path)
    assert "cal/steps/numa-dgemm-b64-alone.json" in left and "cal/numa/raw/dgemm-b64-alone.csv" in left
    assert not [f for f in left if "dgemm-b64-all" in f or ".tmp" in f], sorted(left)


def test_a_full_disk_stops_a_calibration_leaving_nothing_or_a_bundle_it_resumes(tmp_path: Path, monkeypatch) -> None:
    """The disk fills during `testbed calibrate` (its writes monkeypatched to fail with ENOSPC from
    one step on): one line, exit 1, that says what is left. A bundle directory the run created,
    with no finished step, is removed; otherwise the finished steps are kept, the line says so,
    and the same command, once space is free, resumes after them."""
    import errno

    from testbed.calibrate import calibrate as cal

    real_atomic_file = cal.atomic_file
    disk = {"full_from": "one", "full": False}

    def atomic_file(path, *args, **kwargs):
        if disk["full"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_atomic_file(path, *args, **kwargs)

    def action(name: str):
        def run(ctx, out: Path, commands: list[str]) -> str:
            disk["full"] = disk["full"] or name == disk["full_from"]
            with cal.atomic_file(out) as fh:
                fh.write(f"{name}\n")
            return "done"
        return run

    monkeypatch.setattr(cal, "atomic_file", atomic_file)
    monkeypatch.setattr(cal, "numa_layout", lambda: [0])
    monkeypatch.setattr(cal, "steps_for", lambda opts, nnuma: [cal.Step(n, opts.out / f"{n}.txt", action(n))
                                                               for n in ("one", "two", "three")])
    monkeypatch.chdir(tmp_path)
    argv_ = ["calibrate", "--machine", "m", "--out", "cal"]

    def error_line() -> str:
        rc, err = cli(argv_)
        errors = [ln for ln in err.splitlines() if ln.startswith("error: ")]
        assert rc == 1 and len(errors) == 1 and "Traceback" not in err, err
        assert "No space left on device" in errors[0], errors[0]
        return errors[0]

    # full at the first step: nothing kept
    assert "nothing kept, cal removed" in error_line()
    assert files_of(tmp_path) == set()
    # full at the second: the first is kept, and the line says how to go on
    disk.update(full_from="two", full=False)
    line = error_line()
    assert "1 finished step kept in cal (one)" in line and "rerun the same command" in line, line
    left = files_of(tmp_path)
    assert {"cal/one.txt", "cal/steps/one.json"} <= left and not [f for f in left if "two" in f or ".tmp" in f], left
    # space freed until the third: the rerun skips the first, runs the second, keeps both
    disk.update(full_from="three", full=False)
    assert "2 finished steps kept in cal (one, two)" in error_line()
    assert (tmp_path / "cal" / "one.txt").read_text() == "one\n" and (tmp_path / "cal" / "two.txt").is_file()
