"""Write outputs atomically, and never over what the command did not write.

* `atomic_file(path)`: a temporary sibling renamed over `path` only if the block succeeds.
* `atomic_dir(path, command)`: a directory that the command owns entirely. It holds a
  marker file (`MARKER`) naming the command; an existing `path` is replaced only when it
  is empty or a previous output of the same command, otherwise the command is refused
  (InputError, exit 2) before it writes anything.
* `atomic_members(path, names)`: files written *inside* an existing directory (the
  others in it are left alone), all renamed in only if the block succeeds.

A failure (disk full, permissions) removes the temporary files, and the directories it
created for the output, and leaves the previous output as it was; the OSError it raises
names the output path (the CLI prints it as one line, exit 1). Temporary names carry the
process id and host (`.NAME.tmp-PID-HOST-*`): nothing runs when a process is killed
(SIGKILL), so what it left is removed by the next process that writes in that folder
(`sweep_stale`: temporaries of this host whose process is gone), whatever its command.

Ownership: a directory output's marker lists every file the command wrote in it, and a
rerun that finds any other file there is refused (a note a user put in it survives). A
file written under a user's option (`option` given: --out, --trace, ...) is listed in the
registry `REGISTRY` of its directory; an existing file of that name is replaced only when
the registry lists it (or `recognise` knows it for an output written before registries
existed), otherwise the command is refused before it writes anything.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from testbed.common.errors import InputError
from testbed.common.outputs import file_lock

#: File in a directory output naming the command that wrote it (first line: `testbed <command>`),
#: then, after the line FILES_HEADER, the path of every file and folder it wrote there.
MARKER = ".testbed-output"
FILES_HEADER = "# files:"
#: File in a directory listing the files that testbed commands wrote in it (a line per write: name, size, mtime).
REGISTRY = ".testbed-files"


def _tag() -> str:
    """`PID-HOST` of this process, in the names of its temporary files."""
    return f"{os.getpid()}-{re.sub(r'[^A-Za-z0-9]', '', socket.gethostname())[:24] or 'host'}"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


#: Names of this module's temporaries: `.NAME.tmp-PID-HOST-*` (a file or folder being written),
#: `.NAME.old-PID-HOST-*` (a replaced folder on its way out), `.tmp-PID-HOST-*` (the scratch
#: folder of atomic_members inside its output); groups: PID, HOST.
TEMPORARY = re.compile(r"\.(?:.+\.(?:tmp|old)|tmp)-(\d+)-([A-Za-z0-9]+)-")

#: Folders this process has swept: a command writing many files in one folder reads it once.
_swept: set[str] = set()


def _stale(name: str, host: str) -> bool:
    """`name` is a temporary of a process of this host that is gone (killed while writing)."""
    m = TEMPORARY.match(name)
    return m is not None and m[2] == host and not _alive(int(m[1]))


def _sweep(parent: Path, prefix: str = "") -> None:
    """Remove `parent/<prefix>...`, the temporaries of processes of this host that are gone."""
    host = _tag().partition("-")[2]
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            if entry.name.startswith(prefix) and _stale(entry.name, host):
                _remove_entry(entry)


def sweep_stale(folder: str | Path) -> None:
    """Remove from `folder` every temporary that a killed process of this host left there, once
    per process and folder: called by the writers below and, for each output option, when a
    command starts (testbed/cli.py). Another host's temporaries (a shared file system) are kept:
    whether their process lives cannot be known from here."""
    key = os.path.abspath(folder)
    if key in _swept:
        return
    _swept.add(key)
    _sweep(Path(folder))


def sweep_output_folders(paths: Iterable[str | Path | None]) -> None:
    """`sweep_stale` the folder of each output path, and the path itself where it is a folder
    (what a command writes inside its --out)."""
    for given in paths:
        if given:
            path = Path(given)
            sweep_stale(path.parent)
            if path.is_dir() and not path.is_symlink():
                sweep_stale(path)


def _remove_entry(entry: Path) -> None:
    """Remove a temporary file or folder (links are removed, not followed)."""
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            entry.unlink()


def _make_dir(directory: Path, option: str | None, created: list[Path]) -> None:
    """mkdir -p `directory`, listing in `created` (deepest first) the folders it is about to
    make: a signal arriving mid-way still leaves the caller the list to remove."""
    d = directory
    while not (d.exists() or d.is_symlink()) and d != d.parent:
        created.append(d)
        d = d.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise InputError(directory, option, "a directory, found a file") from None


def _remove_own(parent: Path, prefix: str) -> None:
    """Remove `parent/<prefix>PID-HOST-*` of this process: a temporary that a signal left
    between its creation and the assignment of its name."""
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            if entry.name.startswith(f"{prefix}{_tag()}-"):
                _remove_entry(entry)


def _remove_made(created: list[Path]) -> None:
    """Remove the folders `_make_dir` created, where still empty: a failure leaves no empty output."""
    for d in created:
        with contextlib.suppress(OSError):
            d.rmdir()


def stamp(path: str | Path) -> str:
    """What identifies a file as written (size and modification time in ns): an edit, or
    another file put in its place, changes it; a copy that keeps times (cp -a, rsync -a) does not."""
    st = os.lstat(path)
    return f"{st.st_size}\t{st.st_mtime_ns}"


def registered(directory: str | Path) -> dict[str, list[str]]:
    """Files testbed commands wrote in `directory` (its REGISTRY): name -> stamps of its
    last writes (a file edited or replaced since is no longer the testbed's; the previous
    stamp stays valid while a concurrent writer renames its new file in)."""
    reg = Path(directory) / REGISTRY
    if reg.is_symlink() or not reg.is_file():
        return {}
    out: dict[str, list[str]] = {}
    for line in reg.read_text(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0] and not line.startswith("#"):
            out.setdefault(parts[0], []).append(f"{parts[1]}\t{parts[2]}")
    return out


#: stamps kept per file name in a REGISTRY
KEEP_STAMPS = 4


def register(directory: str | Path, files: dict[str, str]) -> None:
    """Add `files` (name -> stamp) to the REGISTRY of `directory` (locked: concurrent
    writers add theirs)."""
    reg = Path(directory) / REGISTRY
    with file_lock(reg):
        known = registered(directory)
        if all(known.get(n, [None])[-1] == st for n, st in files.items()):
            return
        for name, st in files.items():
            known[name] = [x for x in known.get(name, []) if x != st][-(KEEP_STAMPS - 1):] + [st]
        tmpname = None
        try:
            fd, tmpname = tempfile.mkstemp(prefix=f".{REGISTRY}.tmp-{_tag()}-", dir=directory)
            with os.fdopen(fd, "w") as fh:
                fh.write("# files written here by testbed commands (name, size, mtime in ns): a rerun may "
                         "replace them while unchanged; no other file here is replaced\n")
                fh.writelines(f"{n}\t{st}\n" for n in sorted(known) for st in known[n])
            os.chmod(tmpname, 0o644)
            os.replace(tmpname, reg)
        except BaseException:
            if tmpname is None:
                _remove_own(Path(directory), f".{REGISTRY}.tmp-")
            else:
                with contextlib.suppress(OSError):
                    os.unlink(tmpname)
            raise


def owned_file(path: Path) -> bool:
    """`path` is a file a testbed command wrote, unchanged since (listed in its directory's REGISTRY)."""
    try:
        return stamp(path) in registered(path.parent).get(path.name, [])
    except OSError:
        return False


def check_output_file(path: str | Path, option: str | None, recognise: Callable[[Path], bool] | None = None) -> None:
    """Refuse `path` as a file output unless it is absent or a file a testbed command wrote
    (listed in the REGISTRY of its directory, or known to `recognise`)."""
    p = Path(path)
    if p.is_symlink():
        raise InputError(p, option, "a file for the testbed to write, found a symbolic link (not replaced)")
    _refuse_directory(p, option)
    if not p.exists() or owned_file(p) or (recognise is not None and recognise(p)):
        return
    raise InputError(p, option, f"a new file or one a testbed command wrote there (listed in {REGISTRY}); "
                                "this one is not (not replaced; remove it or choose another path)")


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


def _manifest(path: Path) -> set[str] | None:
    """What the marker of directory `path` lists as written by its command (None: a marker
    written before the list existed)."""
    lines = (path / MARKER).read_text(errors="replace").splitlines()
    if FILES_HEADER not in lines:
        return None
    return {ln for ln in lines[lines.index(FILES_HEADER) + 1:] if ln}


def _entries(path: Path) -> list[str]:
    """Every file, folder and link below `path`, relative (links are not followed)."""
    out = []
    for root, dirs, files in os.walk(path):
        rel = Path(root).relative_to(path)
        out += [(rel / n).as_posix() for n in dirs + files]
    return out


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
        foreign = sorted(set(_entries(p)) - (_manifest(p) or set()) - {MARKER})
        if _manifest(p) is not None and foreign:
            raise InputError(p, option, f"a previous output of `testbed {command}` holding only what it wrote; it "
                                        f"also holds {_listing(foreign)} (not replaced; move them out or choose "
                                        "another path)")
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
    sweep_stale(final.parent)
    created: list[Path] = []
    tmp: Path | None = None
    try:  # from the first folder made: a signal anywhere leaves nothing behind
        _make_dir(final.parent, option, created)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-{_tag()}-", dir=final.parent))
        tmp.chmod(0o755)  # mkdtemp makes it private; outputs are ordinary folders
        yield tmp
        if command is not None:
            listing = "".join(f"{e}\n" for e in sorted(_entries(tmp)))
            (tmp / MARKER).write_text(f"testbed {command}\n# written by this command: a rerun may replace this "
                                      f"directory unless it holds other files than these\n{FILES_HEADER}\n{listing}")
            check_output_dir(final, command, option, legacy)  # nothing appeared meanwhile
        _swap_in(tmp, final)
    except BaseException as exc:
        if tmp is None:
            _remove_own(final.parent, f".{final.name}.tmp-")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        _remove_made(created)
        if isinstance(exc, OSError):
            _name_path(exc, final, tmp)
        raise
    _sweep(final.parent, f".{final.name}.tmp-")
    _sweep(final.parent, f".{final.name}.old-")


def _swap_in(tmp: Path, final: Path) -> None:
    """Rename `tmp` to `final`; a previous `final` is removed only once `tmp` is in place."""
    if not final.exists():
        tmp.rename(final)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-{_tag()}-", dir=final.parent))
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
def atomic_file(path: str | Path, mode: str = "w", option: str | None = None,
                recognise: Callable[[Path], bool] | None = None) -> Iterator:
    """Yield a file object whose content replaces `path` only if the block succeeds.

    With `option` (a path the user named), `path` must pass `check_output_file` (before and
    after the block) and is registered as the testbed's once written."""
    final = Path(path)
    _refuse_directory(final, option)
    if option is not None:
        check_output_file(final, option, recognise)
    sweep_stale(final.parent)
    created: list[Path] = []
    tmpname: str | None = None
    try:  # from the first folder made: a signal anywhere leaves nothing behind
        _make_dir(final.parent, option, created)
        fd, tmpname = tempfile.mkstemp(prefix=f".{final.name}.tmp-{_tag()}-", dir=final.parent)
        with os.fdopen(fd, mode) as fh:
            yield fh
        os.chmod(tmpname, 0o644)  # mkstemp makes it private; outputs are ordinary files
        if option is not None:
            check_output_file(final, option, recognise)  # nothing appeared meanwhile
            register(final.parent, {final.name: stamp(tmpname)})
        os.replace(tmpname, final)
    except BaseException as exc:
        if tmpname is None:
            _remove_own(final.parent, f".{final.name}.tmp-")
        else:
            with contextlib.suppress(OSError):
                os.unlink(tmpname)
        _remove_made(created)
        if isinstance(exc, OSError):
            if exc.filename == tmpname:
                exc.filename, exc.filename2 = str(final), None
            _name_path(exc, final)
        raise
    _sweep(final.parent, f".{final.name}.tmp-")


@contextlib.contextmanager
def atomic_members(directory: str | Path, names: Iterable[str], option: str = "--out") -> Iterator[Path]:
    """Yield a scratch directory; the files `names` written there replace those of
    `directory` only if the block succeeds. Other files of `directory` are never touched,
    and an existing file of a name in `names` only when a testbed command wrote it
    (`check_output_file`). An absent `directory` appears only once complete (the scratch
    directory, beside it, is renamed to it): a kill leaves no partial `directory`."""
    out = Path(directory)
    names = list(names)
    if (out.exists() or out.is_symlink()) and not out.is_dir():
        raise InputError(out, option, "a directory, found a file (not replaced)")
    for name in names:
        check_output_file(out / name, option)
    fresh = not out.exists()
    sweep_output_folders([out])
    where, prefix = (out.parent, f".{out.name}.tmp-") if fresh else (out, ".tmp-")
    created: list[Path] = []
    tmp: Path | None = None
    try:  # from the first folder made: a signal anywhere leaves nothing behind
        _make_dir(where, option, created)
        tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}{_tag()}-", dir=where))
        yield tmp
        stamps = {name: stamp(tmp / name) for name in names}
        if fresh and not out.exists():
            for entry in tmp.iterdir():  # only the named files go in
                if entry.name in names:
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
            register(tmp, stamps)
            tmp.chmod(0o755)  # mkdtemp makes it private; outputs are ordinary folders
            tmp.rename(out)
        else:
            for name in names:
                check_output_file(out / name, option)  # nothing appeared meanwhile
            register(out, stamps)
            for name in names:  # renames within one file system: they do not fail for space
                os.replace(tmp / name, out / name)
    except BaseException as exc:
        if tmp is None:
            _remove_own(where, prefix)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        _remove_made(created)
        if isinstance(exc, OSError):
            _name_path(exc, out, tmp)
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    _sweep(out, ".tmp-")
    _sweep(out.parent, f".{out.name}.tmp-")
