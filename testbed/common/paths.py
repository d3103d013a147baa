"""Where the testbed's built parts live in a checkout (see Makefile)."""

from __future__ import annotations

import os
from pathlib import Path

from testbed import ROOT

DEPS = ROOT / ".deps"
BUILD = ROOT / "build"
STARPU_SIMGRID = DEPS / "starpu-simgrid"
STARPU_NATIVE = DEPS / "starpu-native"
NUMASIM = BUILD / "simulator" / "numasim"
PLATFORM_INFO = BUILD / "simulator" / "platform_info"
FLOW_TIMES = BUILD / "simulator" / "flow_times"
LU_REAL = BUILD / "lu-real" / "lu"
LU_SIMGRID = BUILD / "lu-simgrid" / "lu"
MACHINES = ROOT / "platforms" / "machines"
CLUSTERS = ROOT / "platforms" / "clusters"
CALIBRATION = ROOT / "calibration"


def binary(path: Path, what: str) -> Path:
    """Return a built binary, or fail with the command that builds it."""
    override = os.environ.get(f"TESTBED_{path.name.upper()}")
    p = Path(override) if override else path
    if not p.exists():
        raise FileNotFoundError(f"{what} not built: {p} is missing (run `make build`)")
    return p
