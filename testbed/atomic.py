"""Write outputs atomically: a failed step leaves no half-written file or folder."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temporary directory that replaces `path` only if the block succeeds."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; outputs are ordinary folders
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(final)


@contextlib.contextmanager
def atomic_file(path: str | Path, mode: str = "w") -> Iterator:
    """Yield a file object whose content replaces `path` only if the block succeeds."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmpname = tempfile.mkstemp(prefix=f".{final.name}.tmp-", dir=final.parent)
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
        os.chmod(tmpname, 0o644)  # mkstemp makes it private; outputs are ordinary files
        os.replace(tmpname, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmpname)
        raise
