"""`testbed workflow [SNAKEMAKE ARGUMENTS]`: snakemake, with its config files checked first.

Snakemake reads the files of `--configfile` (and a profile's `configfile:`) in its command-line
layer (snakemake/cli.py `args_to_api` → `load_configfile`), before the Snakefile runs: a
missing file ends in a 26-line FileNotFoundError traceback, a garbled one in "Config file is not
valid JSON or YAML" without the file's name, both with exit status 1. The embedded
config/config.yaml is checked by the Snakefile itself. This command parses the arguments with
snakemake's own parser (cli.py `parse_args`, so abbreviations and profiles count), reads every
config file with the project's YAML reader (common/yaml_input.py: size, nesting, aliases,
duplicate keys) and refuses a bad one in one line naming it, exit 2; then it runs snakemake
with the same arguments (cli.py `main`), whose exit status it returns. The contents are
validated by the Snakefile (workflows/common.smk), as for any config; snakemake's notice that
the Snakefile's config "is extended by additional config specified via the command line" is
held back until snakemake goes on, so that a config the Snakefile refuses ends in its one
error line alone. An empty config file (snakemake: a WorkflowError on stdout, exit 1) is
refused like any file that is not a mapping.

Snakemake's own lock (.snakemake/locks/) is checked, then written: two runs started at the same
instant in one working directory can both pass the check, then both fail or overwrite each
other's outputs. Before snakemake starts, this command takes a lock of its own, flock(2) on
.snakemake/testbed-workflow.lock, held until snakemake ends (the kernel releases it when the
process dies, even on SIGKILL); a second run meanwhile is refused in one line, exit 1. Dry runs
and the modes that run no job (--lint, --dag, --summary, ...) take no lock, as in snakemake.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import io
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from testbed.common.errors import InputError
from testbed.common.yaml_input import load_yaml


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("snakemake_args", nargs="*", metavar="SNAKEMAKE_ARGUMENT",
                        help="snakemake's arguments, options included, as they would follow `snakemake` "
                             "(`testbed workflow --help` prints snakemake's help)")


def check_config_files(files: list[Path], option: str = "--configfile") -> None:
    """InputError for the first of `files` that is not a readable YAML (or JSON) mapping."""
    for file in files:
        document = load_yaml(file)
        if not isinstance(document, dict):
            got = "an empty file" if document is None else f"a {type(document).__name__}"
            raise InputError(file, None, f"a mapping of config keys at the top level ({option}), got {got}")


class HoldConfigNotice(logging.Filter):
    """On snakemake's logger: holds its "Config file … is extended by additional config" notice
    until the next record passes (snakemake goes on), then lets it out first; a run the
    Snakefile stops (sys.exit after its error line) never shows it."""

    NOTICE = "by additional config specified via the command line"

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self.logger = logger
        self.held: logging.LogRecord | None = None
        self.released = False

    def filter(self, record: logging.LogRecord) -> bool:
        if self.released:
            return True
        if self.held is None:
            if self.NOTICE in str(record.msg):
                self.held = record
                return False
            return True
        held, self.held, self.released = self.held, None, True
        self.logger.handle(held)
        return True


@contextlib.contextmanager
def config_notice_held() -> Iterator[None]:
    from snakemake.logging import logger

    hold = HoldConfigNotice(logger)
    logger.addFilter(hold)
    try:
        yield
    finally:
        logger.removeFilter(hold)


#: The lock of `testbed workflow` in the working directory, held while snakemake runs (never
#: removed: removing a flock(2) file lets a third run lock another file of the same name).
LOCK = Path(".snakemake") / "testbed-workflow.lock"

#: snakemake's options under which it runs no job (it then takes no lock of its own either)
NO_JOBS = ("dryrun", "nolock", "lint", "list_rules", "list_target_rules", "dag", "rulegraph", "filegraph",
           "d3dag", "summary", "detailed_summary", "list_changes", "list_input_changes", "list_params_changes",
           "list_untracked", "print_compilation")


class WorkflowBusy(Exception):
    """Another `testbed workflow` holds the lock of this working directory."""


@contextlib.contextmanager
def workflow_lock(workdir: Path) -> Iterator[None]:
    """Hold LOCK of `workdir` exclusively, or raise WorkflowBusy at once."""
    path = workdir / LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WorkflowBusy(f"another run of this workflow is under way in {workdir} (it holds {LOCK}); "
                               "wait for it to end") from None
        yield
    finally:
        os.close(fd)


def runs_jobs(parsed: argparse.Namespace) -> bool:
    """snakemake would run jobs (and lock the working directory) with these arguments."""
    return not any(getattr(parsed, option, None) for option in NO_JOBS)


class ArgumentMistake(Exception):
    """snakemake refused its arguments; the message is its error, on one line."""


def _parse(cli, argv: list[str]) -> argparse.Namespace:
    """snakemake's arguments parsed by snakemake. Its argparse mistakes (120 lines of usage, then
    the error) and its option types' CliException (a traceback in snakemake's main) become one
    ArgumentMistake."""
    from snakemake.exceptions import CliException

    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            return cli.parse_args(argv)[1]
    except CliException as exc:
        raise ArgumentMistake(" ".join(str(exc).split())) from None
    except SystemExit as exc:
        lines = [line for line in captured.getvalue().splitlines() if line.strip()]
        if exc.code == 2 and lines:
            raise ArgumentMistake(lines[-1].split("error: ", 1)[-1]) from None
        sys.stderr.write(captured.getvalue())  # --version, --help (on stdout), anything else
        raise


def run(args: argparse.Namespace) -> int:
    from snakemake import cli

    argv = list(args.snakemake_args)
    try:
        parsed = _parse(cli, argv)
    except ArgumentMistake as exc:
        print(f"error: snakemake arguments: {exc}", file=sys.stderr)
        return 2
    check_config_files([Path(f) for f in parsed.configfile or []])
    workdir = Path(parsed.directory or ".").absolute()
    try:
        with workflow_lock(workdir) if runs_jobs(parsed) else contextlib.nullcontext(), config_notice_held():
            cli.main(argv)
    except WorkflowBusy as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except SystemExit as exc:  # snakemake's main always ends this way
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0
