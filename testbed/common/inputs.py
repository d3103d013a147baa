"""Input files, checked before they are read (docs/interfaces.md §7).

A path the user gives must name a regular file (a link is followed to one): a directory, a
device (`ln -s /dev/zero runs.csv`: read until memory runs out), a FIFO or a socket is refused,
and so is a file above the size limit of its kind, before a byte is read; the read itself stops
at the limit (a file that grows meanwhile). Errors name the path as the user gave it, not where
a link leads, and say which option or key gave it: one line, exit 2.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from testbed.common.errors import InputError

MiB = 1 << 20
#: Limits per kind of input, far above what the testbed writes and far below what fills memory.
#: Measured: the study's design table (3,840 runs) is 0.5 MB and a traced study-scale run
#: (g5k-lille-21, N = 96000, b = 960) writes 38 MB of tasks and 25 MB of transfers; the hwloc
#: XML of a chifflet node is 18 kB; a generated StarPU history model 7 kB.
TABLE_BYTES = 256 * MiB  # runs.csv, design.csv, batch tables, traces
XML_BYTES = 64 * MiB  # hwloc XML, SimGrid platforms
MODEL_BYTES = 16 * MiB  # StarPU's history models and bus files


def check_input_file(path: str | Path, key: str | None, what: str, limit: int = TABLE_BYTES) -> Path:
    """`path` as a Path, when it names a regular file of at most `limit` bytes; else InputError
    naming `path` as given and `key` (the option or key that gave it)."""
    given = str(path)
    try:
        st = os.stat(path)  # follows links: what would be read
    except FileNotFoundError:
        if os.path.islink(path):
            raise InputError(given, key, f"{what} (a link to a missing file, {os.readlink(path)!r})") from None
        raise InputError(given, key, f"an existing file ({what})") from None
    except NotADirectoryError:
        raise InputError(given, key, f"an existing file ({what})") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(given, key, f"{what} (a link that loops)") from None
        raise
    if stat.S_ISDIR(st.st_mode):
        raise InputError(given, key, f"a file ({what}), got a directory")
    if not stat.S_ISREG(st.st_mode):
        kind = "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else \
            "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a regular file"
        raise InputError(given, key, f"a regular file ({what}), got {kind}")
    if st.st_size > limit:
        raise InputError(given, key, f"{what} of at most {limit // MiB} MiB, got {st.st_size / MiB:.0f} MiB")
    return Path(path)


def read_input_bytes(path: str | Path, key: str | None, what: str, limit: int = TABLE_BYTES) -> bytes:
    """The bytes of a checked input file (check_input_file), read up to `limit`."""
    check_input_file(path, key, what, limit)
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise InputError(str(path), key, f"{what} of at most {limit // MiB} MiB (it grew while read)")
    return data


def read_input_text(path: str | Path, key: str | None, what: str, limit: int = TABLE_BYTES) -> str:
    """The text of a checked input file, UTF-8 (a byte-order mark removed, as spreadsheet
    programs write one)."""
    data = read_input_bytes(path, key, what, limit)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(str(path), key, f"{what} in UTF-8 (byte {exc.start} is not)") from None


def check_repeated_inputs(option: str, paths: list[str | Path]) -> None:
    """Refuses the same file given twice to `option` (`./b0.csv` and `b0.csv`, a link and its
    target), naming both as given."""
    seen: dict[tuple[int, int], str] = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue  # missing or unreadable: the reader says so
        ident = (st.st_dev, st.st_ino)
        if ident in seen:
            also = "" if seen[ident] == str(path) else f", also as {seen[ident]!r}"
            raise InputError(str(path), option, f"each file once, given twice{also}")
        seen[ident] = str(path)
