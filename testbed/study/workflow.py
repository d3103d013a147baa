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
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
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
    try:
        with config_notice_held():
            cli.main(argv)
    except SystemExit as exc:  # snakemake's main always ends this way
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0
