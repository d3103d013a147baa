"""The version the CLI reports: the package's version and the commit of the checkout it runs from."""

from __future__ import annotations

import subprocess

from testbed import ROOT, __version__


def commit() -> str:
    """`git describe --always --dirty` of the checkout holding this package (the testbed runs from
    a checkout: an editable install or PYTHONPATH), or "unknown" outside one (no git, no .git)."""
    if not (ROOT / ".git").exists():
        return "unknown"
    try:
        proc = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=12"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else "unknown"


def version_line() -> str:
    """`testbed --version`'s line."""
    return f"testbed {__version__} (commit {commit()})"
