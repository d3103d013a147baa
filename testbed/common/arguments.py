"""The command line's parser: argparse, with the testbed's error contract (docs/interfaces.md §7).

argparse prints its multi-line usage block on a mistake; here every mistake is one line
`error: testbed COMMAND: <argparse's message> (testbed COMMAND --help)`, exit 2, and two more
mistakes argparse lets through are refused:

* an empty value (`--out ''`, `--trace ''`, an empty positional): argparse stores it and the
  commands read "" as "not given" (writing into the current directory, no trace);
* a single-valued option given twice (`--n 1 --n 2`, `--factors` twice): argparse keeps the
  last one silently. Options meant to repeat say so (`action="append"`).
"""

from __future__ import annotations

import argparse


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose subcommand parsers are of the same class (add_subparsers uses
    type(self)), so the rules hold for every command and sub-subcommand."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)
        self._given: set[str] = set()

    def parse_known_args(self, args=None, namespace=None):
        self._given = set()
        return super().parse_known_args(args, namespace)

    def _get_values(self, action: argparse.Action, arg_strings: list[str]):
        if action.option_strings or action.nargs != argparse.PARSER:  # a subcommand's own arguments
            for text in arg_strings:
                if text == "" or text.isspace():
                    raise argparse.ArgumentError(action, "expected a value, got an empty string")
        return super()._get_values(action, arg_strings)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"error: {self.prog}: {' '.join(message.split())} ({self.prog} --help)\n")


class _StoreOnce(argparse._StoreAction):
    """argparse's `store`, refusing a second occurrence of the same option."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if option_string is not None:
            given = getattr(parser, "_given", None)
            if given is not None:
                if self.dest in given:
                    raise argparse.ArgumentError(self, "given twice (it takes one value)")
                given.add(self.dest)
        super().__call__(parser, namespace, values, option_string)
