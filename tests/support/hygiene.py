"""What no committed file may hold: a path of the machine that wrote it."""

from __future__ import annotations

import re

#: top-level directories that hold a machine's checkouts, homes and temporary files (written as
#: names, so this file does not itself hold such a path)
MACHINE_DIRS = ("work", "root", "home", "tmp")
MACHINE_PATH = "(^|[^A-Za-z0-9_.~-])/(" + "|".join(MACHINE_DIRS) + ")/[A-Za-z0-9_.-]"


def machine_paths(text: str) -> list[str]:
    """The lines of `text` that name a path under one of MACHINE_DIRS."""
    return [line for line in text.splitlines() if re.search(MACHINE_PATH, line)]
