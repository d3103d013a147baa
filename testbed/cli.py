"""The `testbed` command line: one subcommand per step of the workflow.

Each subcommand lives in its own module, which exposes
``add_arguments(parser)`` and ``run(args) -> int``; this file only wires them, and holds what
every command shares (docs/interfaces.md, "Command-line conventions"): `--version`, `-v`/`-q`
(status and progress on stderr through `logging`, data on stdout), every default shown in
`--help`, and the error contract (bad input: one line, exit 2; a failed tool or the
environment: one line, exit 1).
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading

from testbed.common import logs
from testbed.common.arguments import Parser
from testbed.common.atomic import sweep_output_folders
from testbed.common.errors import InputError

#: subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "platform": ("testbed.platform.platform_cmd", "describe machines, generate SimGrid/hwloc/StarPU platforms"),
    "simulate": ("testbed.run.simulate", "run the LU once with an engine (numasim, starpu-simgrid, real)"),
    "design": ("testbed.study.design", "write the design table of an experiment"),
    "campaign": ("testbed.run.campaign", "run a batch of design rows, append to runs"),
    "analyze": ("testbed.analyze.analyze", "linear model, ANOVA and plots of a runs.csv"),
    "report": ("testbed.report.report", "assemble the HTML/Markdown report"),
    "calibrate": ("testbed.calibrate.calibrate", "calibrate a machine into a calibration bundle"),
    "sensitivity": ("testbed.study.sensitivity", "sensitivity of makespans and factor effects to the machine parameters"),
    "trace-paje": ("testbed.traces.paje", "a numasim trace (task + transfer CSVs) as a Paje file (pj_dump, ViTE)"),
    "trace-starvz": ("testbed.traces.starvz", "a task trace as StarVZ phase-1 input (worker states, tasks, DAG)"),
    "compare-traces": ("testbed.traces.compare_traces", "two task traces side by side: kernel durations, idle time, plots"),
    "trace-pair": ("testbed.traces.trace_pair", "traced reruns of an experiment's all-default and best configurations, compared"),
    "diagnose": ("testbed.traces.diagnostics", "a traced run's diagnostics: kernel durations per NUMA node and GPU, "
                                               "area bound, copies against estimates, overheads (CSV)"),
    "explain": ("testbed.study.explain", "mechanism ledger of a factor effect or interaction: each modelled "
                                         "mechanism switched off in turn, paired on seeds"),
    "workflow": ("testbed.study.workflow", "snakemake with the same arguments, its --configfile files checked first"),
}


#: Options whose value is a path the command writes (docs/interfaces.md §7): their folders are
#: swept of what killed processes left (common/atomic.py sweep_stale) before the command runs.
OUTPUT_OPTIONS = ("out", "trace", "transfers", "events", "paje", "cluster_out")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's "(default: X)" after every option's help, but not for defaults that say nothing
    (None, False of a flag, an empty list) or when the help already states its default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = (action.help or "").strip()
        if _says_nothing(action.default) or "default" in text:
            return text
        return f"{text} (default: %(default)s)"


def _says_nothing(default: object) -> bool:
    return default is None or default is False or default == [] or default == argparse.SUPPRESS


def _defaults_shown(parser: argparse.ArgumentParser) -> None:
    """HelpFormatter on `parser` and on the parsers of its subcommands, and a help string on every
    argument with a default."""
    parser.formatter_class = HelpFormatter
    for action in parser._actions:
        if not action.help and not _says_nothing(action.default):
            action.help = "default: %(default)s"  # argparse prints help only where there is some
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _defaults_shown(sub)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only `command`'s module is imported (pandas, scipy, ... cost seconds)."""
    parser = Parser(prog="testbed", description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    parser.add_argument("--version", action=_Version,
                        help="print the version and the commit, and exit")
    loud = parser.add_mutually_exclusive_group()
    loud.add_argument("-v", "--verbose", action="store_const", const=1, dest="verbosity", default=0,
                      help="also debug detail on stderr")
    loud.add_argument("-q", "--quiet", action="store_const", const=-1, dest="verbosity",
                      help="no status or progress on stderr, only warnings and errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(_run=module.run)
    _defaults_shown(parser)
    return parser


class _Version(argparse.Action):
    """`--version`: the version and the commit, computed only when asked (git costs a few ms)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from testbed.common.version import version_line

        print(version_line())
        parser.exit()


class Terminated(BaseException):
    """SIGTERM (a batch scheduler's cancel, `kill`): raised where the process is, so outputs are
    cleaned up as for Ctrl-C (common/atomic.py removes what an exception interrupts) and a running
    numasim or StarPU child is killed by subprocess.run on the way out. A BaseException, as
    KeyboardInterrupt is: `except Exception` (logging's emit, for one) must not swallow it."""


def _terminate(signum, frame) -> None:
    raise Terminated


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    in_main_thread = threading.current_thread() is threading.main_thread()  # signal.signal needs it
    previous = signal.signal(signal.SIGTERM, _terminate) if in_main_thread else None
    try:
        return _main(argv)
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str]) -> int:
    command = next((a for a in argv if not a.startswith("-")), None)
    rest: list[str] = []
    if command == "workflow":  # everything after it is snakemake's, its options included
        split = argv.index(command) + 1
        argv, rest = argv[:split], argv[split:]
    try:
        args = build_parser(command).parse_args(argv)
        if command == "workflow":
            args.snakemake_args = rest
        logs.setup(args.verbosity)
        sweep_output_folders(getattr(args, dest, None) for dest in OUTPUT_OPTIONS)
        return int(args._run(args) or 0)
    except InputError as exc:
        print(f"error: {exc.message()}", file=sys.stderr)
        return 2
    except IsADirectoryError as exc:  # a directory given where the command reads or writes a file
        print(f"error: {exc.filename}: expected a file, got a directory", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # a tool or engine failed: its message, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # the environment: disk full, permissions, a missing build
        print(f"error: {os_error_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: outputs were cleaned up on the way out (common/atomic.py)
        print(f"error: testbed {command}: interrupted" if command else "error: interrupted", file=sys.stderr)
        return 130
    except Terminated:  # SIGTERM, the same clean-up; 128 + 15 as a shell reports it
        print(f"error: testbed {command}: terminated" if command else "error: terminated", file=sys.stderr)
        return 143


def os_error_line(exc: OSError) -> str:
    """`<path>: <reason>` of an OSError, on one line."""
    if exc.strerror is None:  # raised with a message of its own (paths.binary)
        return " ".join(str(exc).split())
    where = [str(f) for f in (exc.filename, exc.filename2) if f is not None]
    return ": ".join([" -> ".join(where), exc.strerror] if where else [exc.strerror])


if __name__ == "__main__":
    sys.exit(main())
