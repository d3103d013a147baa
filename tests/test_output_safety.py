"""Outputs never destroy what they did not write, and a failed write leaves nothing behind.

The data-loss cases once found, each reproduced: `--out` onto a directory or a file that another
command (or the user) wrote is refused and left intact; a rerun replaces its own output; a full
disk or a read-only file system is one line, exit 1, with the previous output intact and no
temporary file left (Python writers and numasim). The full disk is a small tmpfs mounted here
(root only: skipped with the reason otherwise).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support.experiments import synthetic_runs
from support.filesystem import fill

from testbed import ROOT
from testbed.cli import main
from testbed.common import paths

SPEC = {"name": "syn", "cluster": "g5k-lille-21", "engine": "real",
        "workload": {"n": 960, "b": 192, "distribution": {"kind": "block-cyclic"}},
        "factors": {f: [-1, 1] for f in "ABCD"}, "repetitions": 3, "seed": 1, "batches": 2}
PLATFORM = ["platform", "--cluster", "chifflet-1", "--out"]
DATA = ROOT / "simulator" / "tests" / "data"
MARKER = ".testbed-output"  # names the command that wrote a directory output (docs/interfaces.md)
REGISTRY = ".testbed-files"  # lists the files testbed commands wrote in a directory (docs/interfaces.md)
needs_numasim = pytest.mark.skipif(not paths.NUMASIM.exists(), reason="numasim not built (make build)")


# ------------------------------------------------------------------ helpers
def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every entry under `root` (directories as None) with its content."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def leftovers(folder: Path) -> list[str]:
    """Temporary files or folders of the atomic writers (Python and numasim) in `folder`."""
    return [p.name for p in folder.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def results_dir(tmp_path: Path) -> Path:
    """What `testbed platform --out results` used to delete: a runs table and batch tables."""
    results = tmp_path / "results"
    (results / "batches").mkdir(parents=True)
    synthetic_runs("AB", reps=2).to_csv(results / "runs.csv", index=False)
    (results / "batches" / "batch-000.csv").write_text("experiment,batch\nsyn,0\n")
    return results


# ------------------------------------------------------------------ --out never replaces what it did not write
def test_platform_out_onto_a_results_dir_is_refused(tmp_path: Path, capsys) -> None:
    """`platform --cluster chifflet-1 --out results` deleted runs.csv and the batch tables."""
    results = results_dir(tmp_path)
    before = snapshot(results)
    assert main([*PLATFORM, str(results)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"error: {results}: --out: expected" in line and "runs.csv" in line
    assert snapshot(results) == before
    assert leftovers(tmp_path) == []


def test_platform_out_onto_a_file_is_refused(tmp_path: Path, capsys) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("mine\n")
    assert main([*PLATFORM, str(target)]) == 2
    assert "found a file" in one_error_line(capsys.readouterr().err)
    assert target.read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_platform_rerun_replaces_its_own_output(tmp_path: Path, capsys) -> None:
    out = tmp_path / "platform"
    assert main([*PLATFORM, str(out)]) == 0
    assert (out / MARKER).read_text().startswith("testbed platform\n")
    # a file an earlier version of the output wrote (its marker lists it) goes with the rerun
    (out / "stale.txt").write_text("left by an earlier version of the output\n")
    with open(out / MARKER, "a") as fh:
        fh.write("stale.txt\n")
    assert main([*PLATFORM, str(out)]) == 0
    assert not (out / "stale.txt").exists() and (out / "numasim.xml").is_file()
    # an output written before the marker existed is recognised by its layout
    (out / MARKER).unlink()
    assert main([*PLATFORM, str(out)]) == 0
    # an empty directory (Snakemake may leave one) is fine too
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([*PLATFORM, str(empty)]) == 0 and (empty / "summary.json").is_file()
    assert leftovers(tmp_path) == []


def test_platform_out_onto_another_commands_output_is_refused(tmp_path: Path, experiment_dir: Path, capsys) -> None:
    figures = tmp_path / "figures"
    shutil.copytree(experiment_dir / "figures", figures)
    before = snapshot(figures)
    assert main([*PLATFORM, str(figures)]) == 2
    assert "output of `testbed analyze`" in one_error_line(capsys.readouterr().err)
    assert snapshot(figures) == before


def test_machine_yaml_out_replaces_only_a_generated_file(tmp_path: Path, capsys) -> None:
    """--describe-local --out FILE: a hand-written machine description is not overwritten."""
    from testbed.describe.hwloc_xml import write_topology
    from testbed.describe.machines import load_machine

    xml = tmp_path / "chifflet.xml"
    write_topology(load_machine("chifflet"), xml)
    mine = tmp_path / "mine.yaml"
    shutil.copy(ROOT / "platforms" / "machines" / "chifflet.yaml", mine)
    before = mine.read_bytes()
    assert main(["platform", "--describe-local", "--hwloc-xml", str(xml), "--out", str(mine)]) == 2
    assert "not replaced" in one_error_line(capsys.readouterr().err)
    assert mine.read_bytes() == before
    generated = tmp_path / "gen.yaml"
    for _ in range(2):  # a rerun replaces its own file
        assert main(["platform", "--describe-local", "--hwloc-xml", str(xml), "--out", str(generated)]) == 0
    assert generated.read_text().startswith("# Generated by `testbed platform --describe-local`")
    assert main(["platform", "--describe-local", "--hwloc-xml", str(xml), "--out", str(tmp_path)]) == 2
    assert leftovers(tmp_path) == []


def test_report_writes_inside_and_keeps_unrelated_files(tmp_path: Path, experiment_dir: Path, capsys) -> None:
    """`report --out DIR` deleted the other files of DIR."""
    out = results_dir(tmp_path)
    before = snapshot(out)
    for _ in range(2):
        assert main(["report", "--experiment", f"syn={experiment_dir}", "--out", str(out),
                     "--platforms-dir", str(tmp_path / "none")]) == 0
    after = snapshot(out)
    assert {k: v for k, v in after.items() if k in before} == before
    assert sorted(set(after) - set(before)) == [REGISTRY, "report.html", "report.md"]
    target = tmp_path / "report-file"
    target.write_text("mine\n")
    assert main(["report", "--experiment", f"syn={experiment_dir}", "--out", str(target)]) == 2
    assert target.read_text() == "mine\n"


def test_analyze_figures_into_an_unrelated_dir_is_refused(tmp_path: Path, experiment_dir: Path, capsys) -> None:
    """`analyze --figures DIR` deleted the other files of DIR."""
    runs = experiment_dir / "runs.csv"
    mine = tmp_path / "pictures"
    mine.mkdir()
    (mine / "holiday.png").write_bytes(b"\x89PNG not a figure of ours")
    before = snapshot(mine)
    assert main(["analyze", str(runs), "--out", str(experiment_dir), "--stage", "plots", "--figures", str(mine)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"{mine}: --figures: expected" in line and "holiday.png" in line
    assert snapshot(mine) == before
    # --figures onto the tables directory itself (runs.csv, tables, ...): refused before any work
    tables = tmp_path / "tables"
    tables.mkdir()
    shutil.copy(runs, tables / "runs.csv")
    before = snapshot(tables)
    assert main(["analyze", str(tables / "runs.csv"), "--out", str(tables), "--figures", str(tables)]) == 2
    assert snapshot(tables) == before
    # the tables step writes inside its directory: runs.csv and other files stay
    (tables / "notes.md").write_text("mine\n")
    assert main(["analyze", str(tables / "runs.csv"), "--out", str(tables), "--stage", "tables"]) == 0
    assert (tables / "notes.md").read_text() == "mine\n" and (tables / "anova.csv").is_file()
    # a rerun replaces its own figures
    figures = tmp_path / "figures"
    for boxplot in ("A", "B"):
        assert main(["analyze", str(runs), "--out", str(experiment_dir), "--stage", "plots",
                     "--boxplot", boxplot, "--figures", str(figures)]) == 0
    assert (figures / "boxplot_B.png").is_file() and not (figures / "boxplot_A.png").exists()
    assert leftovers(tmp_path) == [] and leftovers(experiment_dir) == []


def test_calibrate_out_onto_a_non_bundle_dir_is_refused(tmp_path: Path, capsys) -> None:
    results = results_dir(tmp_path)
    before = snapshot(results)
    assert main(["calibrate", "--machine", "local", "--out", str(results)]) == 2
    assert "calibration bundle" in one_error_line(capsys.readouterr().err)
    assert snapshot(results) == before


def test_file_out_onto_a_directory_is_refused(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "design.csv"
    folder.mkdir()
    (folder / "keep").write_text("x")
    assert main(["design", "--spec", json.dumps(SPEC), "--out", str(folder)]) == 2
    assert "found a directory" in one_error_line(capsys.readouterr().err)
    assert (folder / "keep").read_text() == "x" and leftovers(tmp_path) == []


# ------------------------------------------------------------------ environment faults: one line, exit 1
def test_platform_on_a_full_disk_keeps_the_previous_output(small_fs, capsys) -> None:
    fs = small_fs("4m")
    out = fs / "platform"
    assert main([*PLATFORM, str(out)]) == 0
    capsys.readouterr()
    before = snapshot(out)
    fill(fs)
    assert main([*PLATFORM, str(out)]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(f"error: {out}") and line.endswith("No space left on device")
    assert snapshot(out) == before
    assert sorted(p.name for p in fs.iterdir()) == ["filler", "platform"]


def test_analyze_and_report_on_a_full_disk(small_fs, experiment_dir: Path, capsys) -> None:
    fs = small_fs("2m")
    exp = fs / "syn"
    shutil.copytree(experiment_dir, exp)
    report = fs / "report"
    report_args = ["report", "--experiment", f"syn={exp}", "--out", str(report), "--platforms-dir", str(fs / "none")]
    assert main(report_args) == 0
    before_exp, before_report = snapshot(exp), snapshot(report)
    fill(fs)
    for args in (["analyze", str(exp / "runs.csv"), "--out", str(exp), "--stage", "tables"],
                 ["analyze", str(exp / "runs.csv"), "--out", str(exp), "--stage", "plots"],
                 report_args):
        capsys.readouterr()
        assert main(args) == 1, args
        assert one_error_line(capsys.readouterr().err).endswith("No space left on device")
    assert snapshot(exp) == before_exp and snapshot(report) == before_report
    assert leftovers(fs) == [] and leftovers(exp) == [] and leftovers(report) == []


def test_cli_on_a_full_disk_is_one_line_without_traceback(small_fs, tmp_path: Path) -> None:
    """The `testbed` command itself (not main()): exit 1, one line, no temporary file left."""
    fs = small_fs("1m")
    design = fs / "design.csv"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "testbed", "design", "--spec", json.dumps(SPEC), "--out", str(design)],
                   capture_output=True, env=env, check=True)
    previous = design.read_bytes()
    fill(fs)
    for args in (["design", "--spec", json.dumps(SPEC), "--out", str(design)],
                 [*PLATFORM, str(fs / "platform")]):
        p = subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, env=env, cwd=tmp_path)
        assert p.returncode == 1, p.stderr
        assert one_error_line(p.stderr).endswith("No space left on device")
    assert design.read_bytes() == previous
    assert sorted(p.name for p in fs.iterdir()) == [REGISTRY, "design.csv", "filler"]


def test_read_only_file_system_is_one_line(small_fs, capsys) -> None:
    fs = small_fs("4m")
    out = fs / "platform"
    assert main([*PLATFORM, str(out)]) == 0
    before = snapshot(out)
    subprocess.run(["mount", "-o", "remount,ro", str(fs)], check=True)
    capsys.readouterr()
    assert main([*PLATFORM, str(out)]) == 1
    assert one_error_line(capsys.readouterr().err).endswith("Read-only file system")
    assert snapshot(out) == before


# ------------------------------------------------------------------ numasim
def run_description(tmp_path: Path, **over) -> Path:
    d = {"platform": str(DATA / "tiny2.xml"), "perfmodels": {"tiny": str(DATA / "tiny_sampling")},
         "workload": {"kind": "lu", "n": 960, "b": 96, "distribution": {"kind": "block-cyclic", "p": 1, "q": 2}},
         "seed": 7, **over}
    f = tmp_path / "run.json"
    f.write_text(json.dumps(d))
    return f


def numasim(*args: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run([str(paths.NUMASIM), *args], stdout=stdout, stderr=subprocess.PIPE, text=True)


@needs_numasim
def test_numasim_out_on_a_full_disk(small_fs, tmp_path: Path) -> None:
    """`numasim --out` on a full disk wrote a 0-byte summary and exited 0."""
    run = run_description(tmp_path)
    fs = small_fs("256k")
    summary = fs / "summary.json"
    assert numasim(str(run), "--out", str(summary)).returncode == 0
    before = summary.read_bytes()
    fill(fs)
    for target in (summary, fs / "new.json"):
        p = numasim(str(run), "--out", str(target))
        assert p.returncode == 1
        assert one_error_line(p.stderr) == f"error: {target}: No space left on device"
    assert summary.read_bytes() == before and json.loads(before)["tasks"] == 385
    assert sorted(p.name for p in fs.iterdir()) == ["filler", "summary.json"]


@needs_numasim
@pytest.mark.parametrize("key", ["trace", "transfers", "events"])
def test_numasim_trace_on_a_full_disk_is_not_cut_silently(small_fs, tmp_path: Path, key: str) -> None:
    fs = small_fs("256k")
    fill(fs)
    target = fs / f"{key}.csv"
    p = numasim(str(run_description(tmp_path, **{key: str(target)})), "--out", str(tmp_path / "summary.json"))
    assert p.returncode == 1
    assert one_error_line(p.stderr) == f"error: {target}: No space left on device"
    assert sorted(p.name for p in fs.iterdir()) == ["filler"]
    assert not (tmp_path / "summary.json").exists()


@needs_numasim
def test_numasim_out_onto_a_full_device_and_stdout(tmp_path: Path) -> None:
    """A device is written in place (never replaced by a file) and its errors are seen."""
    run = run_description(tmp_path)
    with open("/dev/full", "w") as full:  # stdout on a full device: exit 1, not a lost summary
        p = numasim(str(run), stdout=full)
    assert p.returncode == 1 and one_error_line(p.stderr) == "error: stdout: No space left on device"
    device = tmp_path / "full"
    try:  # a private /dev/full: were it replaced by a file, nothing of the system's is lost
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 7))
        with open(device, "wb", buffering=0) as fh:
            fh.write(b"x")
    except PermissionError as exc:
        pytest.skip(f"cannot make a full device here: {exc}")
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    p = numasim(str(run), "--out", str(device))
    assert p.returncode == 1 and one_error_line(p.stderr) == f"error: {device}: No space left on device"
    assert stat.S_ISCHR(device.stat().st_mode)
    assert leftovers(tmp_path) == []


@needs_numasim
def test_numasim_out_errors(tmp_path: Path) -> None:
    run = run_description(tmp_path)
    p = numasim(str(run), "--out", str(tmp_path))  # a directory: bad input
    assert p.returncode == 2 and "--out: expected a file to write, found a directory" in one_error_line(p.stderr)
    missing = tmp_path / "no" / "summary.json"  # the environment
    p = numasim(str(run), "--out", str(missing))
    assert p.returncode == 1 and one_error_line(p.stderr) == f"error: {missing}: No such file or directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def _interrupted_after(real):
    """`tempfile.mkdtemp`/`mkstemp` that makes its temporary, then gets a signal (Ctrl-C)
    before the caller holds the name: the window between creation and assignment."""
    def make(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt
    return make


@pytest.mark.parametrize("kind", ["dir", "file", "members-fresh", "members-existing"])
def test_a_signal_between_a_temporary_and_its_name_leaves_nothing(kind: str, tmp_path: Path, monkeypatch) -> None:
    """Outputs nested in new folders (analyze's OUT/figures): the temporary and the folders
    made for it are removed, whenever the signal comes."""
    import tempfile

    from testbed.common import atomic

    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "note.txt").write_text("a user's file\n")
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    monkeypatch.setattr(tempfile, "mkdtemp", _interrupted_after(tempfile.mkdtemp))
    monkeypatch.setattr(tempfile, "mkstemp", _interrupted_after(tempfile.mkstemp))
    with pytest.raises(KeyboardInterrupt):
        if kind == "dir":
            with atomic.atomic_dir(tmp_path / "o" / "figures", None):
                pass
        elif kind == "file":
            with atomic.atomic_file(tmp_path / "o" / "deep" / "t.csv", option="--out") as fh:
                fh.write("x\n")
        elif kind == "members-fresh":
            with atomic.atomic_members(tmp_path / "o" / "tables", ["t.csv"]):
                pass
        else:
            with atomic.atomic_members(tmp_path / "kept", ["t.csv"]):
                pass
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before


def test_a_signal_between_the_figures_and_the_tables_leaves_no_analysis(tmp_path: Path, monkeypatch,
                                                                        capsys) -> None:
    """`analyze` puts the figures in, then the tables: a signal in between (here at the
    tables' registration) removes the new OUT/figures and OUT, so nothing half-written stays."""
    from testbed.common import atomic

    synthetic_runs("AB", reps=2).to_csv(tmp_path / "runs.csv", index=False)

    def interrupted(*args, **kwargs):
        assert (tmp_path / "o" / "figures" / "main_effects.png").is_file()  # the figures are in
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic, "register", interrupted)
    assert main(["analyze", str(tmp_path / "runs.csv"), "--out", str(tmp_path / "o")]) == 130
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["runs.csv"]
