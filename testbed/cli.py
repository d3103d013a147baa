"""The `testbed` command line: one subcommand per step of the workflow.

Each subcommand lives in its own module, which exposes
``add_arguments(parser)`` and ``run(args) -> int``; this file only wires them.
"""

from __future__ import annotations

import argparse
import importlib
import sys

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
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only `command`'s module is imported (pandas, scipy, ... cost seconds)."""
    parser = argparse.ArgumentParser(prog="testbed", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(command).parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except InputError as exc:
        print(f"error: {exc.message()}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # a tool or engine failed: its message, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # the environment: disk full, permissions, a missing build
        print(f"error: {os_error_line(exc)}", file=sys.stderr)
        return 1


def os_error_line(exc: OSError) -> str:
    """`<path>: <reason>` of an OSError, on one line."""
    if exc.strerror is None:  # raised with a message of its own (paths.binary)
        return " ".join(str(exc).split())
    where = [str(f) for f in (exc.filename, exc.filename2) if f is not None]
    return ": ".join([" -> ".join(where), exc.strerror] if where else [exc.strerror])


if __name__ == "__main__":
    sys.exit(main())
