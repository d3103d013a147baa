"""The one-call device scripts (bench/gpu_device.sh, bench/gpu_numa_split.sh) run as a device call
would run them, rehearsed on a machine without CUDA, and what they leave in OUT read back."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path


def rehearse(script: Path, tmp_path: Path, python: str, **env: str) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """`REHEARSAL=1 bash script OUT` with WORK and OUT under tmp_path; (process, OUT, WORK)."""
    out, work = tmp_path / "out", tmp_path / "work"
    full = {**os.environ, "REHEARSAL": "1", "WORK": str(work), "PYTHON": python, **env}
    proc = subprocess.run(["bash", str(script), str(out)], capture_output=True, text=True, env=full, timeout=600)
    return proc, out, work


def members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def jsonl(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.decode().splitlines() if line.strip()]


def assert_refused(proc: subprocess.CompletedProcess, out: Path, work: Path, message: str) -> None:
    """A bad setting: exit 2, one line on stderr beginning with `message`, nothing written."""
    assert proc.returncode == 2
    assert proc.stderr.strip() == message or proc.stderr.startswith(message)
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists() and not work.exists()
