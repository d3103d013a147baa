"""The fuzzing machinery (tests/test_fuzz.py, tests/test_fuzz_engines.py): bounded, deterministic
mutations of input files, the CLI run in-process under a deadline, and the contract every outcome
must meet (exit 0 with valid output, or exit 2 with one error line)."""

from __future__ import annotations

import collections
import contextlib
import io
import json
import math
import os
import random
import signal
import traceback
from pathlib import Path
from typing import Callable

from testbed.cli import main

SEED = 19
SCALE = float(os.environ.get("FUZZ_SCALE", "1"))
ONLY = os.environ.get("FUZZ_ONLY")  # "<target>:<case>"
CASE_LIMIT_S = 30  # a hang: more than this for one small input

# Values that broke a boundary once, or sit on one: non-finite, signs, zero, sizes beyond 32 and 64
# bits, subnormals, wrong types, empty, non-UTF-8.
NASTY_TEXT = [".nan", ".inf", "-.inf", "nan", "inf", "NaN", "Infinity", "-1", "0", "-0", "1e400", "1.0e+400",
              "1e-320", "2147483648", "99999999999999999999", "0x1F", "abc", "''", '""', "~", "null", "true",
              "[]", "{}", "&a", "*a", "!!binary", "- ", ": ", "\t", "\\", "\x00", "\xff", "é"]


# ------------------------------------------------------------------ mutators
def mutate_bytes(rng: random.Random, data: bytes, tokens: list[str]) -> bytes:
    """One textual mutation: a byte changed, a span deleted or duplicated, lines swapped, a
    token inserted, the file truncated."""
    kind = rng.randrange(7)
    n = len(data)
    i = rng.randrange(max(n, 1))
    if kind == 0:
        return data[:i] + bytes([rng.randrange(256)]) + data[i + 1:]
    if kind == 1:
        return data[:i] + data[i + rng.randrange(1, 40):]
    if kind == 2:
        j = min(n, i + rng.randrange(1, 200))
        return data[:j] + data[i:j] + data[j:]
    if kind == 3:
        lines = data.split(b"\n")
        a, b = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[a], lines[b] = lines[b], lines[a]
        return b"\n".join(lines)
    if kind == 4:
        return data[:rng.randrange(n + 1)]
    tok = rng.choice(tokens).encode("utf-8", "surrogateescape") if kind == 5 else rng.choice(tokens).encode("latin-1", "replace")
    return data[:i] + tok + data[i:]


# ------------------------------------------------------------------ contract
class Hang(BaseException):
    """Raised by the alarm: not an Exception, so the CLI does not catch it."""


@contextlib.contextmanager
def deadline(seconds: float):
    def ring(signum, frame):
        raise Hang()

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def cli(argv: list[str]) -> tuple[int | str, str, str]:
    """`testbed ARGV` in this process: (exit status or what escaped, stdout, stderr). An exception
    escaping main() is what a user would see as a traceback."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), deadline(CASE_LIMIT_S):
            rc: int | str = main(argv)
    except SystemExit as e:  # argparse
        rc = e.code if isinstance(e.code, int) else 2
    except Hang:
        rc = f"hang (> {CASE_LIMIT_S} s)"
    except BaseException as e:  # noqa: BLE001 - the finding itself
        where = traceback.extract_tb(e.__traceback__)[-1]
        rc = f"traceback: {type(e).__name__}: {str(e)[:200]} ({Path(where.filename).name}:{where.lineno})"
    return rc, out.getvalue(), err.getvalue()


OUTCOMES: collections.Counter = collections.Counter()  # exit statuses of the current target


def verdict(rc: int | str, stderr: str, valid: Callable[[], str | None]) -> str | None:
    """None when the outcome keeps the contract, else what broke it."""
    OUTCOMES[rc if isinstance(rc, int) else "other"] += 1
    if isinstance(rc, str):
        return rc
    if rc == 0:
        return valid()
    lines = stderr.strip().splitlines()
    if rc != 2:
        return f"exit {rc}: {stderr.strip()[-300:]}"
    if not 1 <= len(lines) <= 3 or not any(ln.startswith(("error: ", "usage: ")) for ln in lines):
        return f"exit 2 but stderr is {len(lines)} lines: {stderr.strip()[:300]}"
    if "Traceback" in stderr:
        return "traceback on stderr"
    return None


def run_cases(target: str, count: int, case: Callable[[int, random.Random], str | None]) -> None:
    count = max(1, int(count * SCALE))
    failures = []
    cases = range(count)
    if ONLY:
        t, _, c = ONLY.partition(":")
        cases = [int(c)] if t == target else []
    OUTCOMES.clear()
    for i in cases:
        rng = random.Random(f"{SEED}:{target}:{i}")
        problem = case(i, rng)
        if problem:
            failures.append(f"{target}:{i}: {problem}")
    print(f"{target}: {count} cases, exit statuses {dict(OUTCOMES)}")
    assert not failures, f"{len(failures)} of {count} cases broke the contract:\n" + "\n".join(failures[:20])


def simulate_ok(stdout: str) -> str | None:
    try:
        out = json.loads(stdout)
    except ValueError:
        return f"exit 0 without a JSON object: {stdout[:200]!r}"
    m = out.get("makespan_s")
    if not (isinstance(m, (int, float)) and math.isfinite(m) and m > 0):
        return f"exit 0 with makespan {m!r}"
    return None
