"""The output rules of every command that writes files (testbed/common/outputs.py, atomic.py).

Table-driven: each case is a command line that used to destroy data or leave debris, run in
a folder of user files; a refusal is exit 2, one line naming the option and the path as the
user gave it, and the folder exactly as it was (nothing written, not even a temporary file).
Then the cases that are not refusals: batches merged into one table (sequential and
concurrent processes), a failed analysis over an earlier one, leftovers of a killed analysis,
no empty output folder on a full disk. Last, a property run: random command lines over a tree
of user files; nothing the user owns changes (FUZZ_SCALE=5 runs 1,000 command lines).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.experiments import synthetic_runs
from support.filesystem import fill

from testbed import ROOT
from testbed.cli import main
from testbed.common import paths
from testbed.study.design import design_table

SPEC = {"name": "syn", "cluster": "g5k-lille-21", "engine": "real",
        "workload": {"n": 960, "b": 192, "distribution": {"kind": "block-cyclic"}},
        "factors": {f: [-1, 1] for f in "AB"}, "repetitions": 2, "seed": 1, "batches": 2}
#: a numasim design of 2 batches of 2 runs (chifflet-1: one node, runs in a second)
NUMASIM_SPEC = {**SPEC, "engine": "numasim", "cluster": "chifflet-1", "workload": {"n": 960, "b": 192},
                "factors": {"A": [-1, 1]}, "repetitions": 2, "batches": 2}
TASKS = """ResourceId,Start,End,Value,Node,WorkerNuma,WorkerMemNode,JobId,Step,X,Y
n0.cpu0,0.0,0.1,dgetrf_nopiv,0,0,n0.numa0,1,0,0,0
n0.cpu1,0.1,0.3,dtrsm,0,0,n0.numa0,2,0,1,0
n0.cpu0,0.3,0.4,dgemm,0,0,n0.numa0,3,0,1,1
"""
SIMULATE = ["simulate", "--engine", "numasim", "--cluster", "chifflet-1", "--n", "960", "--b", "192"]
needs_numasim = pytest.mark.skipif(not paths.NUMASIM.exists(), reason="numasim not built (make build)")
SCALE = float(os.environ.get("FUZZ_SCALE", "1"))


# ------------------------------------------------------------------ helpers
def snapshot(root: Path) -> dict[str, str]:
    """Every entry under `root`: files by content hash, links by target, folders by name."""
    out = {}
    for p in sorted(root.rglob("*")):
        key = str(p.relative_to(root))
        if p.is_symlink():
            out[key] = "-> " + os.readlink(p)
        elif p.is_file():
            out[key] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[key] = "dir"
    return out


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def runs_csv(path: Path, **kw) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    synthetic_runs("AB", reps=2, **kw).to_csv(path, index=False)
    return path


def analysed(d: Path, name: str = "res") -> Path:
    """A results folder analysed by `testbed analyze` (tables and figures)."""
    res = d / name
    runs_csv(res / "runs.csv")
    design_table(SPEC).to_csv(res / "design.csv", index=False)
    assert main(["analyze", str(res / "runs.csv"), "--out", str(res)]) == 0
    return res


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ------------------------------------------------------------------ refusals, one case per command line
@dataclass
class Case:
    #: builds the case's files in the folder (the current directory) and returns the command line
    make: Callable[[Path], list[str]]
    #: what the error line names (option and path as given)
    says: tuple[str, ...]
    numasim: bool = False


def _config(d: Path) -> None:
    shutil.copy(ROOT / "config" / "config.yaml", d / "my.yaml")


def _design(d: Path) -> None:
    design_table(NUMASIM_SPEC).to_csv(d / "d.csv", index=False)


def _batches(d: Path) -> None:
    runs = synthetic_runs("AB", reps=2)
    runs["batch"] = runs["run"] % 2
    for b in (0, 1):
        runs[runs["batch"] == b].to_csv(d / f"b{b}.csv", index=False)


def _hwloc(d: Path) -> None:
    from testbed.describe.hwloc_xml import write_topology
    from testbed.describe.machines import load_machine

    write_topology(load_machine("chifflet"), d / "h.xml")


def _platform_with_note(d: Path) -> list[str]:
    assert main(["platform", "--cluster", "chifflet-1", "--out", "P"]) == 0
    write(d / "P" / "note.md", "my notes on this platform\n")
    return ["platform", "--cluster", "chifflet-1", "--out", "P"]


CASES = {
    # an output that is one of the command's inputs, or another output of the same command
    "design --config my.yaml --out my.yaml": Case(
        lambda d: (_config(d), ["design", "--config", "my.yaml", "--experiment", "lille21", "--out", "my.yaml"])[1],
        ("error: my.yaml: --out: expected a path other than the input --config my.yaml",)),
    "design --config ./my.yaml --out my.yaml": Case(
        lambda d: (_config(d), ["design", "--config", "./my.yaml", "--experiment", "lille21", "--out", "my.yaml"])[1],
        ("my.yaml: --out:", "--config ./my.yaml")),
    "design --out a symbolic link to --config": Case(
        lambda d: (_config(d), os.symlink("my.yaml", d / "link.yaml"),
                   ["design", "--config", "my.yaml", "--experiment", "lille21", "--out", "link.yaml"])[2],
        ("link.yaml: --out:", "--config my.yaml")),
    "design --out a hard link of --config": Case(
        lambda d: (_config(d), os.link(d / "my.yaml", d / "hard.yaml"),
                   ["design", "--config", "my.yaml", "--experiment", "lille21", "--out", "hard.yaml"])[2],
        ("hard.yaml: --out:", "--config my.yaml")),
    "campaign --design d.csv --out d.csv": Case(
        lambda d: (_design(d), ["campaign", "--design", "d.csv", "--batch", "0", "--out", "d.csv"])[1],
        ("d.csv: --out:", "--design d.csv")),
    "campaign --merge b0.csv b1.csv --out b0.csv": Case(
        lambda d: (_batches(d), ["campaign", "--merge", "b0.csv", "b1.csv", "--out", "b0.csv"])[1],
        ("b0.csv: --out:", "--merge b0.csv")),
    "simulate --cluster c.yaml --trace c.yaml": Case(
        lambda d: (shutil.copy(ROOT / "platforms" / "clusters" / "chifflet-1.yaml", d / "c.yaml"),
                   [*SIMULATE[:4], "c.yaml", *SIMULATE[5:], "--trace", "c.yaml"])[1],
        ("c.yaml: --trace:", "--cluster c.yaml")),
    "simulate --trace x.csv --paje x.csv": Case(
        lambda d: [*SIMULATE, "--trace", "x.csv", "--paje", "x.csv"], ("x.csv: --paje:", "--trace x.csv"),
        numasim=True),
    "simulate --trace same.csv --transfers same.csv": Case(
        lambda d: [*SIMULATE, "--trace", "same.csv", "--transfers", "same.csv"],
        ("same.csv: --transfers:", "--trace same.csv"), numasim=True),
    "trace-paje t.csv --out t.csv": Case(
        lambda d: (write(d / "t.csv", TASKS), ["trace-paje", "t.csv", "--out", "t.csv"])[1],
        ("t.csv: --out:", "input t.csv")),
    "trace-starvz sv/entities.csv --out sv": Case(
        lambda d: (write(d / "sv" / "entities.csv", TASKS), ["trace-starvz", "sv/entities.csv", "--b", "96", "--out", "sv"])[1],
        ("sv: --out:", "input sv/entities.csv")),
    "compare-traces c/compare.md u.csv --out c": Case(
        lambda d: (write(d / "c" / "compare.md", TASKS), write(d / "u.csv", TASKS),
                   ["compare-traces", "c/compare.md", "u.csv", "--out", "c"])[2],
        ("c: --out:", "input c/compare.md")),
    "analyze runs.csv --out R --figures R": Case(
        lambda d: (runs_csv(d / "runs.csv"), ["analyze", "runs.csv", "--out", "R", "--figures", "R"])[1],
        ("R: --figures:", "--out R")),
    "platform --describe-local --out m.yaml --cluster-out m.yaml": Case(
        lambda d: (_hwloc(d), ["platform", "--describe-local", "--hwloc-xml", "h.xml", "--out", "m.yaml",
                               "--cluster-out", "m.yaml"])[1],
        ("m.yaml: --cluster-out:", "--out m.yaml")),
    "sensitivity sample --plan p.json --out p.json": Case(
        lambda d: (_config(d), main(["sensitivity", "plan", "--config", "my.yaml", "--experiment", "lille21",
                                     "--out", "p.json"]),
                   ["sensitivity", "sample", "--plan", "p.json", "--stage", "morris", "--out", "p.json"])[2],
        ("p.json: --out:", "--plan p.json")),
    "report --reference R/report.md --out R": Case(
        lambda d: (analysed(d, "E"), write(d / "R" / "report.md", "term,estimate\nA,1\n"),
                   ["report", "--experiment", "syn=E", "--reference", "R/report.md", "--out", "R",
                    "--platforms-dir", "none"])[2],
        ("R: --out:", "--reference R/report.md")),
    # never replace or delete a file the testbed did not write
    "platform rerun over a note the user put in the platform": Case(
        _platform_with_note, ("P: --out:", "note.md")),
    "analyze --stage tables over the user's anova.csv": Case(
        lambda d: (runs_csv(d / "R" / "runs.csv"), write(d / "R" / "anova.csv", "my own anova\n"),
                   ["analyze", "R/runs.csv", "--out", "R", "--stage", "tables"])[2],
        ("R/anova.csv: --out:", "not replaced")),
    "design --out over the user's file": Case(
        lambda d: (write(d / "notes.csv", "mine\n"), ["design", "--spec", json.dumps(SPEC), "--out", "notes.csv"])[1],
        ("notes.csv: --out:", "not replaced")),
    "trace-starvz --out over the user's entities.csv": Case(
        lambda d: (write(d / "t.csv", TASKS), write(d / "sv" / "entities.csv", "mine\n"),
                   ["trace-starvz", "t.csv", "--b", "96", "--out", "sv"])[2],
        ("sv/entities.csv: --out:", "not replaced")),
    "simulate --trace over the user's file": Case(
        lambda d: (write(d / "mine.csv", "mine\n"), [*SIMULATE, "--trace", "mine.csv"])[1],
        ("mine.csv: --trace:", "not replaced")),
    # a failed analysis leaves the previous one as it was
    "analyze --boxplot Z over an earlier analysis of other runs": Case(
        lambda d: (analysed(d), runs_csv(d / "res" / "runs.csv", seed=5),
                   ["analyze", "res/runs.csv", "--out", "res", "--boxplot", "Z"])[2],
        ("analysis.boxplots",)),
    "analyze --boxplot Z into a new folder": Case(
        lambda d: (runs_csv(d / "runs.csv"), ["analyze", "runs.csv", "--out", "new/R", "--boxplot", "Z"])[1],
        ("analysis.boxplots",)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_refused_and_nothing_written(name: str, tmp_path: Path, monkeypatch, capsys) -> None:
    case = CASES[name]
    if case.numasim and not paths.NUMASIM.exists():
        pytest.skip("numasim not built (make build)")
    monkeypatch.chdir(tmp_path)
    argv = case.make(tmp_path)
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert main(argv) == 2, argv
    line = one_error_line(capsys.readouterr().err)
    for part in case.says:
        assert part in line, line
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------ batches into one table
def _writer(out: str, batch: int) -> None:
    from testbed.run.campaign import write_batch

    runs = synthetic_runs("AB", reps=4)
    runs["batch"] = runs["run"] % 8
    write_batch(Path(out), runs[runs["batch"] == batch].to_dict("records"))


def test_concurrent_batches_into_one_table_are_all_kept(tmp_path: Path) -> None:
    """Eight processes write their batch into one table at once: every row is kept."""
    out = tmp_path / "runs.csv"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(out), b)) for b in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    from testbed.analyze.runs_table import read_runs

    runs = read_runs(out)
    assert sorted(runs["run"]) == list(range(16)) and sorted(set(runs["batch"])) == list(range(8))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".") and p.name != ".testbed-files"] == []


@needs_numasim
def test_campaign_batches_with_one_out_are_merged(tmp_path: Path, capsys) -> None:
    """`campaign --batch 0` then `--batch 1` with the same --out: both batches' rows are there;
    a rerun of batch 0 replaces its rows, and a user's file as --out is refused before running."""
    design = tmp_path / "design.csv"
    assert main(["design", "--spec", json.dumps(NUMASIM_SPEC), "--out", str(design)]) == 0
    out = tmp_path / "runs.csv"
    for batch in (0, 1, 0):
        assert main(["campaign", "--design", str(design), "--batch", str(batch), "--out", str(out)]) == 0
    from testbed.analyze.runs_table import read_runs

    runs = read_runs(out)
    assert sorted(runs["run"]) == list(range(4)) and sorted(runs["batch"]) == [0, 0, 1, 1]
    assert list(runs["order"]) == sorted(runs["order"])


# ------------------------------------------------------------------ a failed or killed analysis
def test_failed_analysis_keeps_the_previous_one(tmp_path: Path) -> None:
    """Makespans of 1e308 (the figures fail): the earlier tables and figures stay as they were."""
    res = analysed(tmp_path)
    huge = synthetic_runs("AB", reps=2)
    huge["makespan_s"] = 1e308 * (1 - huge["run"] % 3 / 10)
    huge.to_csv(tmp_path / "huge.csv", index=False)
    before = snapshot(tmp_path)
    p = subprocess.run([sys.executable, "-m", "testbed", "analyze", str(tmp_path / "huge.csv"), "--out", str(res)],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode != 0, p.stdout
    assert snapshot(tmp_path) == before


KILL_IN_FIGURES = """
import os, signal, sys
from testbed.analyze import analyze
def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
analyze.plot_boxplot = killed
from testbed.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_analysis_killed_in_its_figures_leaves_nothing_after_the_next_success(tmp_path: Path) -> None:
    res = tmp_path / "res"
    runs_csv(res / "runs.csv")
    argv = ["analyze", str(res / "runs.csv"), "--out", str(res)]
    p = subprocess.run([sys.executable, "-c", KILL_IN_FIGURES, *argv], env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == -signal.SIGKILL
    assert sorted(e.name for e in res.iterdir() if ".tmp-" in e.name)  # the kill left its temporary folders
    assert main(argv) == 0
    assert [e.name for e in res.rglob("*") if ".tmp-" in e.name or ".old-" in e.name] == []
    assert (res / "figures" / "main_effects.png").is_file()


@pytest.mark.parametrize("command", ["design", "analyze"])
def test_temporaries_of_dead_processes_are_removed_by_the_next_command_writing_there(command: str,
                                                                                     tmp_path: Path) -> None:
    """What a SIGKILL left in a folder (a `testbed platform`'s and a `testbed analyze`'s temporary
    folders, a temporary file) is removed when another command starts writing there; the
    temporaries of a live process, of another host, and a user's files are kept."""
    from testbed.common.atomic import _tag

    host = _tag().partition("-")[2]
    gone = subprocess.Popen(["true"])
    gone.wait()
    live = subprocess.Popen(["sleep", "120"])
    res = tmp_path / "res"
    runs_csv(res / "runs.csv")
    dead = [f".plat.tmp-{gone.pid}-{host}-a1b2", f".figures.tmp-{gone.pid}-{host}-c3d4",
            f".plat.old-{gone.pid}-{host}-e5f6", f".tmp-{gone.pid}-{host}-g7h8"]
    kept = [f".plat.tmp-{live.pid}-{host}-i9j0", f".plat.tmp-{gone.pid}-otherhost-k1l2", ".notes.tmp-draft",
            f"plat.tmp-{gone.pid}-{host}-mine"]
    try:
        for name in dead + kept[:2]:
            (res / name).mkdir()
            (res / name / "numasim.xml").write_text("<platform/>\n")
        (res / f".d.csv.tmp-{gone.pid}-{host}-m3n4").write_text("half a table")
        for name in kept[2:]:
            (res / name).write_text("the user's\n")
        if command == "design":
            argv = ["design", "--config", str(ROOT / "config" / "config.yaml"), "--experiment", "lille21",
                    "--out", str(res / "d.csv")]
        else:
            argv = ["analyze", str(res / "runs.csv"), "--stage", "tables", "--out", str(res)]
        assert main(argv) == 0
        left = sorted(e.name for e in res.iterdir() if ".tmp" in e.name or ".old-" in e.name)
        assert left == sorted(kept), left
    finally:
        live.kill()
        live.wait()


INTERRUPT_IN_PLOTS = """
import os, signal, sys
# SIGINT as a terminal delivers it: a test run started in the background by a non-interactive
# shell inherits SIGINT ignored (tests/support/schedulers.py popen_interruptible)
signal.signal(signal.SIGINT, signal.default_int_handler)
from testbed.traces import compare_traces
def interrupted(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)
compare_traces.plot_space_time = interrupted
from testbed.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_interrupted_comparison_leaves_no_out_folder(tmp_path: Path) -> None:
    """Ctrl-C while compare-traces (as trace-pair, a Snakemake job) draws: no --out folder is
    left for Snakemake to find incomplete."""
    tasks = write(tmp_path / "t.csv", TASKS)
    out = tmp_path / "traces"
    p = subprocess.run([sys.executable, "-c", INTERRUPT_IN_PLOTS, "compare-traces", str(tasks), str(tasks),
                        "--out", str(out)], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 130 and p.stderr == "error: testbed compare-traces: interrupted\n", p.stderr
    assert sorted(e.name for e in tmp_path.iterdir()) == ["t.csv"]


def test_no_empty_out_folder_on_a_full_disk(small_fs, tmp_path: Path, capsys) -> None:  # noqa: F811
    """analyze, report, trace-starvz and compare-traces into a new --out on a full disk: exit 1,
    one line, no folder left."""
    res = analysed(tmp_path)
    tasks = write(tmp_path / "t.csv", TASKS)
    fs = small_fs("2m")
    fill(fs)
    for argv in (["analyze", str(res / "runs.csv"), "--out", str(fs / "a" / "b")],
                 ["report", "--experiment", f"syn={res}", "--out", str(fs / "report"),
                  "--platforms-dir", str(tmp_path / "none")],
                 ["trace-starvz", str(tasks), "--b", "96", "--out", str(fs / "starvz")],
                 ["compare-traces", str(tasks), str(tasks), "--out", str(fs / "compare")]):
        capsys.readouterr()
        assert main(argv) == 1, argv
        assert one_error_line(capsys.readouterr().err).endswith("No space left on device")
        assert sorted(e.name for e in fs.iterdir()) == ["filler"], argv


# ------------------------------------------------------------------ property: nothing the user owns changes
def user_tree(root: Path) -> None:
    """Files a user keeps beside the testbed's outputs: a config, a design, runs tables,
    traces, notes, a results folder with their own anova.csv and figures, links."""
    _config(root)
    _design(root)
    _batches(root)
    runs_csv(root / "runs.csv")
    write(root / "t.csv", TASKS)
    write(root / "u.csv", TASKS)
    write(root / "notes.txt", "my notes\n")
    write(root / "res" / "anova.csv", "my own anova\n")
    runs_csv(root / "res" / "runs.csv")
    write(root / "res" / "figures" / "holiday.png", "not a figure of ours\n")
    write(root / "sv" / "entities.csv", "mine\n")
    write(root / "deep" / "er" / "x.csv", TASKS)
    os.symlink("notes.txt", root / "link.txt")
    os.symlink("res", root / "reslink")
    os.link(root / "runs.csv", root / "hard.csv")


#: names of paths a generated command line takes (existing user files, folders, links, new names)
USER_PATHS = ["my.yaml", "./my.yaml", "d.csv", "b0.csv", "b1.csv", "runs.csv", "hard.csv", "t.csv", "./t.csv",
              "u.csv", "notes.txt", "link.txt", "res", "reslink", "res/anova.csv", "res/runs.csv",
              "reslink/runs.csv", "res/figures", "res/figures/holiday.png", "sv", "sv/entities.csv", "deep",
              "deep/er/x.csv", "."]
NEW_PATHS = ["new.csv", "out/a.csv", "out", "out/b", "res/new", "deep/new.csv", "sv/new", "o.yaml", "P"]


def command_line(rng: random.Random) -> list[str]:
    def any_path() -> str:
        return rng.choice(USER_PATHS + NEW_PATHS)

    def inp(*prefer: str) -> str:
        if prefer and rng.random() < 0.7:
            return rng.choice(prefer)
        return rng.choice(USER_PATHS) if rng.random() < 0.8 else any_path()

    def csvs() -> list[str]:
        return [inp("b0.csv", "b1.csv", "runs.csv") for _ in range(rng.randint(1, 3))]

    kind = rng.choice(["design", "design-spec", "merge", "campaign", "analyze", "paje", "starvz", "compare",
                       "platform", "describe", "simulate", "report", "sensitivity"])
    out = rng.choice(NEW_PATHS) if rng.random() < 0.5 else any_path()
    if kind == "design":
        return ["design", "--config", inp("my.yaml"), "--experiment", "lille21", "--out", out]
    if kind == "design-spec":
        return ["design", "--spec", json.dumps(SPEC), "--out", out]
    if kind == "merge":
        return ["campaign", "--merge", *csvs(), "--out", out]
    if kind == "campaign":
        return ["campaign", "--design", inp("d.csv"), "--batch", "0", "--out", out]
    if kind == "analyze":
        extra = rng.choice([[], ["--stage", "tables"], ["--figures", any_path()], ["--boxplot", "Z"]])
        return ["analyze", inp("runs.csv", "res/runs.csv"), "--out", out, *extra]
    if kind == "paje":
        return ["trace-paje", inp("t.csv"), *rng.choice([[], ["--transfers", inp()]]), "--out", out]
    if kind == "starvz":
        return ["trace-starvz", inp("t.csv"), "--b", "96", "--out", out]
    if kind == "compare":
        return ["compare-traces", inp("t.csv"), inp("u.csv"), "--out", out]
    if kind == "platform":
        return ["platform", "--cluster", rng.choice(["chifflet-1", inp()]), "--out", out]
    if kind == "describe":
        return ["platform", "--describe-local", "--hwloc-xml", inp(), "--out", out,
                *rng.choice([[], ["--cluster-out", any_path()]])]
    if kind == "simulate":
        outs = rng.sample(["--trace", "--transfers", "--paje"], rng.randint(1, 3))
        return [*SIMULATE, *[x for o in outs for x in (o, any_path())]]
    if kind == "report":
        return ["report", "--experiment", f"syn={inp('res')}", "--reference", inp(), "--out", out]
    return ["sensitivity", "sample", "--plan", inp(), "--stage", "morris", "--out", out]


def test_random_command_lines_never_change_user_files(tmp_path: Path, monkeypatch, capsys) -> None:
    """FUZZ_SCALE x 200 seeded command lines, each in a fresh copy of the user tree half the
    time (else the same tree, so later commands meet earlier outputs): every file, link and
    folder the user had is there with the same content afterwards."""
    rng = random.Random(31)
    count = int(200 * SCALE)
    root = tmp_path / "tree"
    codes: dict[int, int] = {}
    expensive = ("simulate", "platform", "analyze", "compare-traces", "report", "campaign")
    for i in range(count):
        argv = command_line(rng)
        if argv[0] in expensive and rng.random() < 0.5:
            argv = command_line(rng)  # cheaper lines more often: the run stays within a minute
        if i % 25 == 0:
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            user_tree(root)
            owned = snapshot(root)
        monkeypatch.chdir(root)
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse
            code = int(exc.code or 0)
        except Exception as exc:  # noqa: BLE001 (a traceback is another matter: data safety here)
            code = f"exception {type(exc).__name__}"
        capsys.readouterr()
        codes[code] = codes.get(code, 0) + 1
        now = snapshot(root)
        changed = {k: (v, now.get(k)) for k, v in owned.items() if now.get(k) != v}
        assert not changed, (i, argv, changed)
    print(f"{count} command lines: exit codes {codes}")
    assert codes.get(0, 0) > count // 10 and codes.get(2, 0) > count // 4  # both writes and refusals tried
