"""A real machine's raw StarPU sampling directory, used as a machine type's perf models.

StarPU writes its calibration under `$STARPU_HOME/.starpu/sampling` (or STARPU_PERF_MODEL_DIR):
`codelets/45/<symbol>.<host>` and `bus/<host>.{bandwidth,latency,affinity,config,platform.v4.xml,...}`,
`<host>` being STARPU_HOSTNAME or the machine's host name (src/core/perfmodel/perfmodel.c
_starpu_set_per_arch_model_file / src/core/perfmodel/perfmodel_bus.c get_bus_path; src/common/utils.c
_starpu_gethostname). A directory copied from a cluster holds the files of one or several host
names (e.g. dgemm.chifflet-3). `testbed simulate --perfmodel-dir MACHINE=DIR[:HOST]` and the
machine YAML key `perfmodels: {dir, hostname}` make the numasim and starpu-simgrid engines read
one host's files there instead of the models `testbed platform` generated for that machine type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from testbed.common.errors import InputError

#: A host name as StarPU writes it into file names (a hostfile entry's characters).
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class ModelDir:
    """The files of host `host` in the StarPU sampling directory `dir`."""

    dir: Path
    host: str

    def model(self, symbol: str) -> Path:
        return self.dir / "codelets" / "45" / f"{symbol}.{self.host}"

    @property
    def bus_platform(self) -> Path:
        """StarPU-SimGrid's per-node platform (src/core/perfmodel/perfmodel_bus.c)."""
        return self.dir / "bus" / f"{self.host}.platform.v4.xml"

    def as_json(self) -> dict[str, str]:
        return {"dir": str(self.dir), "host": self.host}


def model_hosts(sampling: Path) -> list[str]:
    """Host names of the model files in `<sampling>/codelets/45` (`<symbol>.<host>`; StarPU's
    symbols have no '.', host names may)."""
    models = sampling / "codelets" / "45"
    if not models.is_dir():
        return []
    return sorted({p.name.split(".", 1)[1] for p in models.iterdir() if p.is_file() and "." in p.name})


def model_dir(sampling: str | Path, host: str | None, file: str | Path | None, key: str) -> ModelDir:
    """The checked ModelDir of `sampling` (absolute) and `host`; `host` None: the one host name
    the directory holds. Errors name `file` (None: the command line) and `key`."""
    path = Path(sampling).expanduser().resolve()
    models = Path(sampling) / "codelets" / "45"  # in messages: the directory as the user gave it
    if not (path / "codelets" / "45").is_dir():
        raise InputError(file, key, f"a StarPU sampling directory (with codelets/45/), got {str(sampling)!r}")
    hosts = model_hosts(path)
    if host is None:
        if len(hosts) != 1:
            raise InputError(file, key, f"a host name (several or none in {models}: "
                                        f"{', '.join(hosts) or 'none'}; give DIR:HOSTNAME / `hostname:`)")
        host = hosts[0]
    if not HOST_NAME.fullmatch(host):
        raise InputError(file, key, f"a host name (letters, digits, '.', '_', '-'), got {host!r}")
    if host not in hosts:
        raise InputError(file, key, f"a host name with model files in {models} "
                                    f"({', '.join(hosts) or 'none'}), got {host!r}")
    return ModelDir(path, host)


def parse_option(items: list[str]) -> dict[str, ModelDir]:
    """`--perfmodel-dir MACHINE=DIR[:HOSTNAME]` (repeatable) -> {machine type: ModelDir}."""
    out: dict[str, ModelDir] = {}
    for item in items:
        machine, eq, rest = item.partition("=")
        machine = machine.strip()
        if not eq or not machine or not rest:
            raise InputError(None, "--perfmodel-dir", f"MACHINE=DIR or MACHINE=DIR:HOSTNAME, got {item!r}")
        if machine in out:
            raise InputError(None, f"--perfmodel-dir {machine}", "one directory per machine type")
        sampling, colon, host = rest.rpartition(":")
        if not colon or "/" in host:  # no host given (or a ':' inside the directory's path)
            sampling, host = rest, ""
        out[machine] = model_dir(sampling, host or None, None, f"--perfmodel-dir {machine}")
    return out


def from_machine_yaml(data: dict, file: Path, root: Path) -> ModelDir | None:
    """The machine YAML key `perfmodels: {dir, hostname}` (dir relative to the repository root,
    as `kernels:`), checked; None when absent."""
    entry = data.get("perfmodels")
    if entry is None:
        return None
    sampling = Path(entry["dir"]).expanduser()
    return model_dir(sampling if sampling.is_absolute() else root / sampling, entry.get("hostname"), file,
                     "perfmodels")
