"""A small file system to fill (the full-disk cases of the output tests)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest


def fill(fs: Path) -> None:
    """Write to `fs` until it is full."""
    chunk = b"\0" * 4096
    with open(fs / "filler", "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    with pytest.raises(OSError):  # not even a byte more
        with open(fs / "probe", "wb", buffering=0) as fh:
            fh.write(chunk)
    (fs / "probe").unlink(missing_ok=True)
