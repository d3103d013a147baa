"""The command-line conventions every command follows (docs/interfaces.md §11): `--version` with
the commit, every default in `--help`, status on stderr through logging (`-q` silences it, `-v`
adds detail), data on stdout, unknown names answered with the known ones, a directory where a
file is expected refused as bad input; `numasim --version` and `numasim --help` alike."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import ROOT, __version__
from testbed.cli import COMMANDS, HelpFormatter, build_parser
from testbed.common import paths


def run_testbed(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "testbed", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def git_describe() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=12"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_version_names_the_version_and_the_commit() -> None:
    proc = run_testbed("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"testbed {__version__} (commit {git_describe()})\n"


def subparsers(parser: argparse.ArgumentParser):
    """`parser` and every parser below it (commands, sensitivity's steps)."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from subparsers(sub)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_default_is_in_the_help(command: str) -> None:
    """Each option with a default that means something (not None, not an unset flag, not an
    empty list) shows it in `--help`; argparse's ArgumentDefaultsHelpFormatter alone skips the
    options without a help string (`--seed` of simulate, `--bw-reps` of calibrate were)."""
    top = build_parser(command)
    for parser in subparsers(top):
        assert issubclass(parser.formatter_class, HelpFormatter), parser.prog
        text = "".join(parser.format_help().split())  # argparse may break a long default anywhere
        for action in parser._actions:
            if action.default in (None, False, [], argparse.SUPPRESS) or not action.option_strings:
                continue
            formatter = parser._get_formatter()
            shown = " ".join(formatter._expand_help(action).split())
            assert "default" in shown, f"{parser.prog} {action.option_strings[0]}: no default in {shown!r}"
            assert "".join(shown.split()) in text, f"{parser.prog} {action.option_strings[0]}: help not printed"


def test_help_shows_the_seed_default() -> None:
    proc = run_testbed("simulate", "--help")
    assert proc.returncode == 0
    assert "--seed SEED default: 1 " in " ".join(proc.stdout.split())


def test_status_on_stderr_data_on_stdout_and_quiet(tmp_path: Path) -> None:
    """`testbed platform` writes a directory: its "wrote" line is status (stderr), stdout stays
    empty; `-q` leaves stderr empty too, and the output is the same."""
    loud = run_testbed("platform", "--cluster", "chifflet-1", "--out", str(tmp_path / "a"))
    assert loud.returncode == 0, loud.stderr
    assert loud.stdout == ""
    assert loud.stderr.startswith(f"wrote {tmp_path / 'a'}"), loud.stderr
    quiet = run_testbed("-q", "platform", "--cluster", "chifflet-1", "--out", str(tmp_path / "b"))
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == "", quiet.stderr
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(p.name for p in (tmp_path / "b").iterdir())


def test_verbose_adds_debug_detail_and_keeps_stdout_json(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TESTBED_CACHE", str(tmp_path / "cache"))
    args = ("simulate", "--engine", "numasim", "--cluster", "chifflet-1", "--n", "1920", "--b", "960")
    verbose, plain = run_testbed("-v", *args), run_testbed(*args)
    assert verbose.returncode == 0 and plain.returncode == 0, verbose.stderr + plain.stderr
    assert json.loads(verbose.stdout)["makespan_s"] == json.loads(plain.stdout)["makespan_s"] > 0
    assert "debug: simulate:" in verbose.stderr and "debug:" not in plain.stderr


def test_quiet_and_verbose_exclude_each_other() -> None:
    proc = run_testbed("-q", "-v", "--version")
    assert proc.returncode == 2 and "not allowed with argument" in proc.stderr


def test_unknown_cluster_lists_the_known_ones() -> None:
    proc = run_testbed("simulate", "--engine", "numasim", "--cluster", "no-such-cluster", "--n", "1920", "--b", "960")
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    known = sorted(p.stem for p in (ROOT / "platforms" / "clusters").glob("*.yaml"))
    assert f"a known cluster ({', '.join(known)})" in lines[0] and "'no-such-cluster'" in lines[0]


def test_analyze_of_a_directory_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    proc = run_testbed("analyze", str(tmp_path / "runs"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert proc.stderr == f"error: {tmp_path / 'runs'}: expected a file (a runs table (CSV)), got a directory\n"
    assert not (tmp_path / "out").exists()


def numasim(*args: str) -> subprocess.CompletedProcess:
    if not paths.NUMASIM.exists():
        pytest.skip(f"numasim not built ({paths.NUMASIM}): make build-simulator")
    return subprocess.run([str(paths.NUMASIM), *args], capture_output=True, text=True, timeout=60)


def test_numasim_version_names_its_commit() -> None:
    """The commit recorded at configure time: this checkout's HEAD when the build is current
    (`-dirty` and later commits may differ from the working tree's state, so only the hash)."""
    proc = numasim("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("numasim (commit ") and "SimGrid version 3." in proc.stdout
    commit = proc.stdout.split("(commit ")[1].split(")")[0]
    assert commit != "unknown"
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert head.startswith(commit.removesuffix("-dirty")) or subprocess.run(
        ["git", "-C", str(ROOT), "merge-base", "--is-ancestor", commit.removesuffix("-dirty"), "HEAD"]).returncode == 0


def test_numasim_help_describes_arguments_and_simgrid_options() -> None:
    proc = numasim("--help")
    assert proc.returncode == 0, proc.stderr
    for needle in ("RUN.json", "--out SUMMARY.json", "--version", "--cfg=KEY:VALUE", "contexts/stack-size:512",
                   "contexts/nthreads", "--log=", "--cfg-help", "exit status"):
        assert needle in proc.stdout, needle


def test_numasim_hands_simgrid_help_pages_to_simgrid() -> None:
    """`--cfg-help` is SimGrid's list of configuration items (sg_config_cmd_line): it names
    network/model, and numasim's own stack-size setting is the default it shows."""
    proc = numasim("--cfg-help")
    assert proc.returncode == 0, proc.stderr
    assert "network/model" in proc.stdout and "contexts/stack-size" in proc.stdout


def test_numasim_without_arguments_is_one_error_line() -> None:
    """An argument mistake, as testbed's: one line naming it and pointing at --help, exit 2."""
    proc = numasim()
    assert proc.returncode == 2
    assert proc.stderr == "error: numasim: missing argument RUN.json (the run description) (numasim --help)\n"
