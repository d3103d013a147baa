"""Status and progress on stderr through `logging`; data stays on stdout.

Every module logs to ``logging.getLogger(__name__)`` (under "testbed"); the CLI installs one
handler on the "testbed" logger: INFO by default, WARNING with ``-q``, DEBUG with ``-v``. Warnings
keep their "warning: " prefix; errors are printed by the CLI itself (one line, exit 2 or 1). A
module used as a library (bench scripts, tests) without the CLI logs only warnings, through
Python's last-resort handler.
"""

from __future__ import annotations

import logging
import sys


class _Stderr(logging.StreamHandler):
    """A handler writing to whatever sys.stderr is when a record is emitted (tests swap it)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:  # StreamHandler.__init__ assigns it
        pass


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.levelno >= logging.WARNING:
            return f"{record.levelname.lower()}: {text}"
        if record.levelno <= logging.DEBUG:
            return f"debug: {text}"
        return text


_HANDLER: logging.Handler | None = None


def setup(verbosity: int) -> None:
    """`verbosity` -1 (-q: warnings only), 0 (progress and status), 1 (-v: also debug detail)."""
    global _HANDLER
    logger = logging.getLogger("testbed")
    if _HANDLER is not None:
        logger.removeHandler(_HANDLER)
    _HANDLER = _Stderr()
    _HANDLER.setFormatter(_Format())
    logger.addHandler(_HANDLER)
    logger.setLevel(logging.WARNING if verbosity < 0 else logging.DEBUG if verbosity > 0 else logging.INFO)
