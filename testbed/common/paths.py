"""Where the testbed's built parts live in a checkout (see Makefile).

StarPU comes from a prefix per flavour: STARPU_NATIVE_PREFIX and STARPU_SIMGRID_PREFIX when set
(an installed StarPU: a Guix profile, a module, a colleague's build), else the checkout's
.deps/starpu-{native,simgrid} that envs/setup.sh builds; for the native flavour, when .deps has
no such directory, the prefix pkg-config reports for starpu-1.4. apps/lu/Makefile resolves them the same way.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from testbed import ROOT
from testbed.common.errors import InputError

DEPS = ROOT / ".deps"
BUILD = ROOT / "build"
#: What makes a directory a StarPU 1.4 prefix (apps/lu builds against its pkg-config files).
STARPU_PC = Path("lib") / "pkgconfig" / "starpu-1.4.pc"
#: What a StarPU-SimGrid prefix has besides (the engine's launcher).
STARPU_SMPIRUN = Path("bin") / "starpu_smpirun"
NUMASIM = BUILD / "simulator" / "numasim"
PLATFORM_INFO = BUILD / "simulator" / "platform_info"
FLOW_TIMES = BUILD / "simulator" / "flow_times"
LU_REAL = BUILD / "lu-real" / "lu"
FXT_EVENTS = BUILD / "lu-real" / "fxt_events"  # apps/lu/fxt_events.c: every event of StarPU's FxT files
LU_SIMGRID = BUILD / "lu-simgrid" / "lu"
#: Chameleon's LU on the testbed's tile mapping (apps/chameleon_lu), one build per flavour made by
#: envs/setup.sh against the installed Chameleon of that flavour (testbed/run/engines/chameleon_app.py)
CHAMELEON_LU = {flavour: BUILD / f"chameleon-lu-{flavour}" / "chameleon_lu" for flavour in ("native", "simgrid")}
MACHINES = ROOT / "platforms" / "machines"
CLUSTERS = ROOT / "platforms" / "clusters"
CALIBRATION = ROOT / "calibration"


def prefix_variable(flavour: str) -> str:
    """The environment variable naming an installed StarPU of a flavour (native, simgrid)."""
    return f"STARPU_{flavour.upper()}_PREFIX"


def _pkg_config_prefix() -> Path | None:
    try:
        out = subprocess.run(["pkg-config", "--variable=prefix", "starpu-1.4"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    prefix = out.stdout.strip()
    return Path(prefix) if out.returncode == 0 and prefix and (Path(prefix) / STARPU_PC).exists() else None


def starpu_prefix(flavour: str) -> Path:
    """The StarPU prefix of a flavour: $STARPU_<FLAVOUR>_PREFIX, else .deps/starpu-<flavour>
    (when there is no such directory, native only: pkg-config's starpu-1.4)."""
    given = os.environ.get(prefix_variable(flavour))
    if given:
        return Path(given).resolve()
    default = DEPS / f"starpu-{flavour}"
    if flavour == "native" and not default.exists():
        return _pkg_config_prefix() or default
    return default


def starpu_file(flavour: str, relative: Path | str, what: str) -> Path:
    """A file of the StarPU prefix of a flavour, or a one-line error naming where the prefix came from."""
    path = starpu_prefix(flavour) / relative
    if path.exists():
        return path
    var = prefix_variable(flavour)
    if os.environ.get(var):
        raise InputError(None, f"{var}={os.environ[var]}", f"an installed StarPU 1.4 ({flavour} flavour) with "
                         f"{relative} ({what}); {path} is missing")
    raise FileNotFoundError(f"{what} not installed: {path} is missing (run envs/setup.sh, or set {var} to an "
                            "installed StarPU)")


STARPU_SIMGRID = starpu_prefix("simgrid")
STARPU_NATIVE = starpu_prefix("native")


def binary(path: Path, what: str) -> Path:
    """Return a built binary, or fail with the command that builds it."""
    override = os.environ.get(f"TESTBED_{path.name.upper()}")
    p = Path(override) if override else path
    if not p.exists():
        raise FileNotFoundError(f"{what} not built: {p} is missing (run `make build`)")
    return p
