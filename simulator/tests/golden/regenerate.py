#!/usr/bin/env python3
"""Rewrite the expected output (`> ` lines) of a tesh file from the commands' current output.

    python simulator/tests/golden/regenerate.py BUILD_DIR [TESH_FILE]

Each `$ ` command runs under `sh -c` with ${bindir} = BUILD_DIR, ${srcdir} = simulator/ and
${python} = this interpreter, as ctest's golden_lu runs it; its stdout replaces the `> ` lines
that follow it. Every other line is kept. Regenerate only for an intended change of behaviour,
and say which in the commit: `git diff` of the file is the review.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SRCDIR = Path(__file__).resolve().parents[2]


def regenerate(tesh: Path, bindir: Path) -> str:
    out: list[str] = []
    for line in tesh.read_text().splitlines():
        if line.startswith("> "):
            continue
        out.append(line)
        if line.startswith("$ "):
            cmd = (line[2:].replace("${bindir}", str(bindir)).replace("${srcdir}", str(SRCDIR))
                   .replace("${python}", sys.executable))
            proc = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                sys.exit(f"error: {tesh}: `{line[2:]}` exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
            out.extend(f"> {x}" for x in proc.stdout.splitlines())
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__, file=sys.stderr)
        return 2
    bindir = Path(argv[0]).resolve()
    tesh = Path(argv[1]) if len(argv) > 1 else SRCDIR / "tests" / "golden" / "lu.tesh"
    text = regenerate(tesh, bindir)
    tesh.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
