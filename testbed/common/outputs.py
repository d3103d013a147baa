"""The rule every command that writes files follows before it writes (docs/interfaces.md).

* `check_distinct(inputs, outputs)`: an output path that is one of the command's inputs, or
  another output of the same command, is refused (InputError, exit 2, one line naming the
  option and the path as the user gave it). Paths are compared resolved (`./x` and `x`, a
  symbolic link and its target) and by inode (hard links); an output *directory* that
  the command replaces whole must not hold an input, and a file an output directory
  receives (`members`) must not be an input either.
* `file_lock(path)`: an exclusive lock (fcntl) on `path`'s lock file `.NAME.lock`, for a
  read-modify-write of `path` by concurrent processes (campaign batches into one table,
  the ownership registries of testbed/common/atomic.py). The lock file is removed on
  release; a process that locked a lock file removed meanwhile locks the new one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from testbed.common.errors import InputError


@dataclass(frozen=True)
class Out:
    """An output of a command: `option` (as the user types it), the path as given, its kind:
    "file" (written whole), "dir" (a directory replaced whole) or "members" (the files
    `names` written inside a directory whose other files are left alone)."""

    option: str
    path: str | Path | None
    kind: str = "file"
    names: tuple[str, ...] = field(default=())


def _real(path: str | Path) -> str:
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def _same(a: str | Path, b: str | Path) -> bool:
    if _real(a) == _real(b):
        return True
    with contextlib.suppress(OSError):
        return os.path.samefile(a, b)
    return False


def _inside(path: str | Path, directory: str | Path) -> bool:
    """`path` (resolved) is `directory` (resolved) or below it."""
    p, d = _real(path), _real(directory)
    return p == d or p.startswith(d.rstrip(os.sep) + os.sep)


def _given(option: str, path: str | Path) -> str:
    return f"{option} {path}" if option else str(path)


def check_distinct(inputs: Iterable[tuple[str, str | Path | None]], outputs: Iterable[Out]) -> None:
    """Refuse an output that is an input or another output of the same command (see above).
    Inputs and outputs that were not given (None or "") are skipped."""
    ins = [(opt, p) for opt, p in inputs if p not in (None, "")]
    outs = [o for o in outputs if o.path not in (None, "")]
    for i, out in enumerate(outs):
        targets = [Path(out.path) / n for n in out.names] if out.kind == "members" else [Path(out.path)]
        for opt, p in ins:
            clash = (any(_same(t, p) for t in targets)
                     or (out.kind == "dir" and _inside(p, out.path)))
            if clash:
                raise InputError(out.path, out.option, f"a path other than the input {_given(opt, p)} "
                                 "(the same file: it would be overwritten; choose another path)")
        for other in outs[:i]:
            other_targets = ([Path(other.path) / n for n in other.names] if other.kind == "members"
                             else [Path(other.path)])
            clash = (any(_same(t, o) for t in targets for o in other_targets)
                     or (other.kind == "dir" and any(_inside(t, other.path) for t in targets))
                     or (out.kind == "dir" and any(_inside(o, out.path) for o in other_targets)))
            if clash:
                raise InputError(out.path, out.option, f"a path other than the output {_given(other.option, other.path)} "
                                 "of the same command (one would overwrite the other; choose another path)")


def lock_path(path: str | Path) -> Path:
    p = Path(path)
    return p.parent / f".{p.name}.lock"


@contextlib.contextmanager
def file_lock(path: str | Path) -> Iterator[None]:
    """Hold an exclusive lock for `path` (its directory must exist) while the block runs."""
    lock = lock_path(path)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX)
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(lock))
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            break
        os.close(fd)  # removed by its previous holder: lock the current one
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)
