"""Write outputs atomically, and never over what the command did not write.

* `atomic_file(path)`: a temporary sibling renamed over `path` only if the block succeeds.
* `atomic_dir(path, command)`: a directory that the command owns entirely. It holds a
  marker file (`MARKER`) naming the command; an existing `path` is replaced only when it
  is empty or a previous output of the same command, otherwise the command is refused
  (InputError, exit 2) before it writes anything.
* `atomic_members(path, names)`: files written *inside* an existing directory (the
  others in it are left alone), all renamed in only if the block succeeds.

A failure (disk full, permissions) removes the temporary files and leaves the previous
output as it was; the OSError it raises names the output path (the CLI prints it as one
line, exit 1).
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from testbed.common.errors import InputError

#: File in a directory output naming the command that wrote it (first line: `testbed <command>`).
MARKER = ".testbed-output"


def _name_path(exc: OSError, path: Path, tmp: Path | None = None) -> None:
    """Name the output in `exc`: write errors (ENOSPC at write or close) carry no file
    name, others name a file in the temporary directory `tmp` that is gone now."""
    if exc.filename is None:
        exc.filename = str(path)
    elif tmp is not None:
        with contextlib.suppress(ValueError):
            exc.filename = str(path / Path(exc.filename).relative_to(tmp))


def output_owner(path: str | Path) -> str | None:
    """The command named by the marker of directory `path`, or None."""
    marker = Path(path) / MARKER
    if not marker.is_file():
        return None
    first = marker.read_text(errors="replace").partition("\n")[0].strip()
    return first.removeprefix("testbed ").strip() or None


def _listing(names: list[str], limit: int = 4) -> str:
    shown = ", ".join(sorted(names)[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_output_dir(path: str | Path, command: str, option: str = "--out",
                     legacy: tuple[str, ...] = ()) -> None:
    """Refuse `path` as the directory output of `testbed <command>` unless it is absent,
    empty, or a previous output of that command: its marker names the command, or (an
    output written before markers existed) it holds `legacy[0]` and only names matching
    the `legacy` patterns."""
    p = Path(path)
    if p.is_symlink() or (p.exists() and not p.is_dir()):
        kind = "a symbolic link" if p.is_symlink() else "a file"
        raise InputError(p, option, f"a directory for `testbed {command}` to write, found {kind} (not replaced)")
    if not p.exists():
        return
    names = [e.name for e in p.iterdir()]
    if not names:
        return
    owner = output_owner(p)
    if owner == command:
        return
    if owner is not None:
        raise InputError(p, option, f"a new directory or a previous output of `testbed {command}`, "
                                    f"found the output of `testbed {owner}` (not replaced; choose another path)")
    if legacy and legacy[0] in names and all(any(fnmatch.fnmatchcase(n, pat) for pat in legacy) for n in names):
        return
    raise InputError(p, option, f"a new or empty directory, or a previous output of `testbed {command}`; "
                                f"it holds {_listing(names)} (not replaced; remove them or choose another path)")


@contextlib.contextmanager
def atomic_dir(path: str | Path, command: str | None, option: str = "--out",
               legacy: tuple[str, ...] = ()) -> Iterator[Path]:
    """Yield a temporary directory that replaces `path` only if the block succeeds.

    With `command`, `path` must pass `check_output_dir` (checked before and after the
    block) and the new directory gets the marker. `command=None` is for a sub-directory
    of an output the caller already owns (a calibration bundle's `sampling/bus`)."""
    final = Path(path)
    if command is not None:
        check_output_dir(final, command, option, legacy)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise InputError(final.parent, option, "a directory, found a file") from None
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; outputs are ordinary folders
        yield tmp
        if command is not None:
            (tmp / MARKER).write_text(f"testbed {command}\n"
                                      "# written by this command: a rerun may replace this directory\n")
            check_output_dir(final, command, option, legacy)  # nothing appeared meanwhile
        _swap_in(tmp, final)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            _name_path(exc, final, tmp)
        raise


def _swap_in(tmp: Path, final: Path) -> None:
    """Rename `tmp` to `final`; a previous `final` is removed only once `tmp` is in place."""
    if not final.exists():
        tmp.rename(final)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
    old.rmdir()  # a free name on the same file system
    final.rename(old)
    try:
        tmp.rename(final)
    except BaseException:
        old.rename(final)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _refuse_directory(final: Path, option: str | None) -> None:
    if final.is_dir():
        raise InputError(final, option, "a file to write, found a directory (not replaced)")


@contextlib.contextmanager
def atomic_file(path: str | Path, mode: str = "w", option: str | None = None) -> Iterator:
    """Yield a file object whose content replaces `path` only if the block succeeds."""
    final = Path(path)
    _refuse_directory(final, option)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise InputError(final.parent, option, "a directory, found a file") from None
    fd, tmpname = tempfile.mkstemp(prefix=f".{final.name}.tmp-", dir=final.parent)
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
        os.chmod(tmpname, 0o644)  # mkstemp makes it private; outputs are ordinary files
        os.replace(tmpname, final)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmpname)
        if isinstance(exc, OSError):
            if exc.filename == tmpname:
                exc.filename, exc.filename2 = str(final), None
            _name_path(exc, final)
        raise


@contextlib.contextmanager
def atomic_members(directory: str | Path, names: Iterable[str], option: str = "--out") -> Iterator[Path]:
    """Yield a scratch directory inside `directory` (created if absent); the files `names`
    written there replace those of `directory` only if the block succeeds. Other files of
    `directory` are never touched."""
    out = Path(directory)
    names = list(names)
    if (out.exists() or out.is_symlink()) and not out.is_dir():
        raise InputError(out, option, "a directory, found a file (not replaced)")
    for name in names:
        _refuse_directory(out / name, option)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise InputError(out, option, "a directory, found a file") from None
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=out))
    try:
        yield tmp
        for name in names:  # renames within one file system: they do not fail for space
            os.replace(tmp / name, out / name)
    except BaseException as exc:
        if isinstance(exc, OSError):
            _name_path(exc, out, tmp)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
