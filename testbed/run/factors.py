"""The study's factors A-G as StarPU variables, computed per machine type.

`config/factors.yaml` holds the rules; this module evaluates them against the
machine descriptions (platforms/machines/*.yaml). Convention for clusters that
mix machine types (StarPU variables are per process, hence per MPI rank):
``env_for_node(machine, factors)`` gives one machine type's variables, and
testbed/run/resolve.py combines them over a cluster with the user's variables (the one
resolution of a run's environment).

Core ids are hwloc logical PU indexes, as StarPU's ``*_CPUID`` variables expect.
`starpu_placement` replays StarPU 1.4.10's binding algorithm on a machine so
that the mapping can be checked against what StarPU would actually do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from testbed import ROOT
from testbed.common.errors import InputError
from testbed.common.yaml_input import load_yaml

FACTORS_FILE = ROOT / "config" / "factors.yaml"
LETTERS = tuple("ABCDEFG")
LEVELS = (-1, 1)


@dataclass(frozen=True)
class Layout:
    """What the factor rules need from a machine description."""

    name: str
    core_numa: tuple[int, ...]  # NUMA node of each logical core, in hwloc logical order
    threads_per_core: int = 1
    gpu_numa: tuple[int, ...] = ()  # NUMA node of CUDA device j
    nic_numa: tuple[int, ...] = ()  # NUMA node of NIC l
    core_os: tuple[int, ...] = ()  # core id in the machine description of each logical core

    @property
    def ncores(self) -> int:
        return len(self.core_numa)

    @property
    def numa_nodes(self) -> int:
        return len(set(self.core_numa))

    def cores_of_numa(self, k: int) -> list[int]:
        return [c for c, n in enumerate(self.core_numa) if n == k]

    def pu(self, core: int) -> int:
        """Logical PU of a logical core's first hardware thread (topology.c:898-931)."""
        return core * self.threads_per_core


@dataclass
class Placement:
    """Where one node's threads run (logical core ids)."""

    main: int | None
    mpi: int | None
    gpu_drivers: list[int] = field(default_factory=list)
    cpu_workers: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- config


@cache
def _load_config(path: str) -> dict[str, Any]:
    data = load_yaml(path)
    if not isinstance(data, dict) or not isinstance(data.get("factors"), dict):
        raise InputError(path, "factors", "a mapping of factor letters")
    for letter in LETTERS:
        f = data["factors"].get(letter)
        if not isinstance(f, dict) or "default" not in f or "enabled" not in f:
            raise InputError(path, f"factors.{letter}", "a mapping with `default` and `enabled` levels")
    return data


def load_config(path: str | Path = FACTORS_FILE) -> dict[str, Any]:
    return _load_config(str(path))


def check_factors(factors: dict[str, int], source: str = "--factors") -> dict[str, int]:
    """All seven letters with their level; missing letters are at the default (-1)."""
    out = {letter: -1 for letter in LETTERS}
    for key, level in factors.items():
        letter = str(key).upper()
        if letter not in LETTERS:
            raise InputError(source, str(key), f"a factor letter among {', '.join(LETTERS)}")
        if level not in LEVELS or isinstance(level, bool):
            raise InputError(source, letter, f"level -1 or 1, got {level!r}")
        out[letter] = int(level)
    return out


# --------------------------------------------------------------------------- machines


def layout_of(machine: Any) -> Layout:
    """The factor-relevant topology of a machine (a Machine object, a name or a path)."""
    if isinstance(machine, Layout):
        return machine
    if isinstance(machine, (str, Path)):
        machine = _load_machine(machine)
    if hasattr(machine, "layout"):  # the loader may expose it directly
        return machine.layout() if callable(machine.layout) else machine.layout
    return _layout_from_fields(machine)


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _value(x: Any) -> Any:
    """Machine descriptions wrap numbers as {value, source}; unwrap."""
    return x.get("value") if isinstance(x, dict) and "value" in x else x


def _layout_from_fields(machine: Any) -> Layout:
    """Read a machine description (docs/interfaces.md §1, machine.schema.json).

    hwloc numbers cores logically in tree order, so logical core k is the k-th
    core met walking `numa_nodes` in order and each node's `cores` in order.
    """
    for attr in ("data", "raw", "doc", "description"):
        inner = getattr(machine, attr, None)
        if isinstance(inner, dict) and "numa_nodes" in inner:
            machine = inner
            break
    name = str(_get(machine, "name", "?"))
    numa = _get(machine, "numa_nodes")
    if not numa:
        raise InputError(name, "numa_nodes", "a list of NUMA nodes with their cores")
    core_numa: list[int] = []
    core_os: list[int] = []
    for k, node in enumerate(numa):
        cores = _value(_get(node, "cores"))
        if not isinstance(cores, (list, tuple)) or not cores:
            raise InputError(name, f"numa_nodes[{k}].cores", "a non-empty list of core ids")
        core_numa += [k] * len(cores)
        core_os += [int(c) for c in cores]
    cpu = _get(machine, "cpu") or {}
    tpc = int(_value(_get(cpu, "threads_per_core", 1)) or 1)
    return Layout(
        name=name,
        core_numa=tuple(core_numa),
        threads_per_core=tpc,
        gpu_numa=tuple(int(_value(_get(g, "numa_node"))) for g in (_get(machine, "gpus") or [])),
        nic_numa=tuple(int(_value(_get(n, "numa_node"))) for n in (_get(machine, "nics") or [])),
        core_os=tuple(core_os),
    )


def _load_machine(name_or_path: str | Path) -> Any:
    from testbed.describe.machines import load_machine

    return load_machine(name_or_path)


def cluster_machines(cluster: Any) -> list[Any]:
    """Distinct machine types of a cluster, in rank order."""
    from testbed.describe.machines import load_cluster

    c = load_cluster(cluster) if isinstance(cluster, (str, Path)) else cluster
    seen: dict[str, Any] = {}
    for node in c.nodes:
        seen.setdefault(node.machine.name, node.machine)
    return list(seen.values())


# --------------------------------------------------------------------------- rules


def _applicable(layout: Layout, needs: dict[str, int] | None) -> str | None:
    """None if the factor applies to this machine, else why not."""
    for what, n in (needs or {}).items():
        have = {"numa_nodes": layout.numa_nodes, "gpus": len(layout.gpu_numa), "nics": len(layout.nic_numa)}[what]
        if have < n:
            return f"needs {n} {what.replace('_', ' ')}, machine has {have}"
    return None


def _thread_rules(cfg: dict[str, Any], layout: Layout, levels: dict[str, int], notes: list[str]) -> dict[str, Any]:
    rules = dict(cfg["baseline"]["threads"])
    for letter in LETTERS:
        f = cfg["factors"][letter]
        why_not = _applicable(layout, f.get("needs"))
        level = f["enabled" if levels[letter] == 1 else "default"]
        if why_not:
            if levels[letter] == 1:
                notes.append(f"{letter} not applicable on {layout.name}: {why_not}; left at default")
            continue
        rules.update(level.get("threads") or {})
    return rules


def place(layout: Layout, levels: dict[str, int], cfg: dict[str, Any] | None = None) -> Placement:
    """Evaluate the thread rules: main, MPI, then GPU drivers; workers get the rest."""
    cfg = cfg or load_config()
    notes: list[str] = []
    rules = _thread_rules(cfg, layout, levels, notes)
    taken: list[int] = []

    def first_free(cores: list[int], what: str) -> int:
        for c in cores:
            if c not in taken:
                taken.append(c)
                return c
        raise InputError(layout.name, what, "a free core for the rule's placement")

    main_rule = rules["main"]
    if main_rule == "first_core":
        main = first_free([0], "main")
    elif isinstance(main_rule, dict) and "first_core_of_numa" in main_rule:
        main = first_free(layout.cores_of_numa(int(main_rule["first_core_of_numa"]))[:1], "main")
    else:
        raise InputError(FACTORS_FILE, "threads.main", f"first_core or {{first_core_of_numa: K}}, got {main_rule!r}")

    mpi_rule = rules["mpi"]
    if mpi_rule == "last_core":
        mpi = None  # decided after the workers: StarPU-MPI takes the core left over
    elif mpi_rule == "first_free_core_of_nic_numa":
        mpi = first_free(layout.cores_of_numa(layout.nic_numa[0]), "mpi")
    else:
        raise InputError(FACTORS_FILE, "threads.mpi", f"last_core or first_free_core_of_nic_numa, got {mpi_rule!r}")
    if mpi is None:
        mpi = first_free([c for c in reversed(range(layout.ncores))], "mpi")

    drivers: list[int] = []
    drv_rule = rules["gpu_drivers"]
    for j, numa in enumerate(layout.gpu_numa):
        if drv_rule == "first_free_cores":
            drivers.append(first_free(list(range(layout.ncores)), f"gpu{j} driver"))
        elif drv_rule == "first_free_core_of_gpu_numa":
            drivers.append(first_free(layout.cores_of_numa(numa), f"gpu{j} driver"))
        else:
            raise InputError(FACTORS_FILE, "threads.gpu_drivers",
                             f"first_free_cores or first_free_core_of_gpu_numa, got {drv_rule!r}")
    workers = [c for c in range(layout.ncores) if c not in taken]
    return Placement(main=main, mpi=mpi, gpu_drivers=drivers, cpu_workers=workers, notes=notes)


def _rule_value(rule: str, layout: Layout, p: Placement) -> str:
    if rule == "gpu_ids":
        return " ".join(str(j) for j in range(len(layout.gpu_numa)))
    if rule == "main_pu":
        return str(layout.pu(p.main))
    if rule == "mpi_pu":
        return str(layout.pu(p.mpi))
    if rule == "worker_list":
        # StarPU hands out this list in order: main thread (STARPU_MAIN_THREAD_BIND),
        # CUDA drivers, CPU workers; the leftover last entry is the MPI thread's
        # (topology.c:958-1041 `_starpu_get_next_bindid`).
        order = [p.main, *p.gpu_drivers, *p.cpu_workers, p.mpi]
        return " ".join(str(layout.pu(c)) for c in order)
    return rule  # a literal value


def env_for_node(machine: Any, factors: dict[str, int]) -> dict[str, str]:
    """All StarPU variables (and TESTBED_NUMA_BALANCING) for one machine type."""
    cfg = load_config()
    levels = check_factors(factors)
    layout = layout_of(machine)
    p = place(layout, levels, cfg)
    env: dict[str, str] = {k: str(v) for k, v in cfg["baseline"].get("env", {}).items()}
    if layout.ncores - len(layout.gpu_numa) - 2 < 1:
        # Too small for the study's two reserved cores (e.g. a 2-core laptop):
        # keep only the MPI thread's core so that one CPU worker remains.
        env.pop("STARPU_MAIN_THREAD_BIND", None)
    for letter in LETTERS:
        f = cfg["factors"][letter]
        if _applicable(layout, f.get("needs")):
            continue  # e.g. B on a machine without GPU: nothing to set
        level = f["enabled" if levels[letter] == 1 else "default"]
        env.update({k: str(v) for k, v in (level.get("env") or {}).items()})
        for var, rule in (level.get("env_rules") or {}).items():
            env[var] = _rule_value(str(rule), layout, p)
    return dict(sorted(env.items()))


def sysctl_for_factors(factors: dict[str, int]) -> dict[str, str]:
    """Kernel settings of a configuration (the `real` engine applies them if permitted)."""
    cfg = load_config()
    levels = check_factors(factors)
    out: dict[str, str] = {}
    for letter in LETTERS:
        level = cfg["factors"][letter]["enabled" if levels[letter] == 1 else "default"]
        out.update({k: str(v) for k, v in (level.get("sysctl") or {}).items()})
    return out


# --------------------------------------------------------------------------- StarPU replay


def _parse_cpuids(text: str, nhwpus: int) -> list[int]:
    """STARPU_WORKERS_CPUID syntax: ids and ranges `a-b` / `a-`, space or comma separated
    (topology.c:807-885); ids wrap modulo the number of PUs."""
    out: list[int] = []
    for tok in text.replace(",", " ").split():
        if "-" in tok:
            a, b = tok.split("-", 1)
            out += [v % nhwpus for v in range(int(a), (int(b) if b else nhwpus - 1) + 1)]
        else:
            out.append(int(tok) % nhwpus)
    return out


def starpu_placement(layout: Layout, env: dict[str, str], mpi: bool = True) -> Placement:
    """Replay StarPU 1.4.10's thread binding for `env` on `layout` (logical cores).

    Matched against src/core/topology.c (`_starpu_initialize_workers_bindid`,
    `_starpu_get_next_bindid`, `_starpu_init_machine_config`), src/core/workers.c
    (STARPU_RESERVE_NCPU, STARPU_MAIN_THREAD_BIND), src/drivers/cpu/driver_cpu.c
    (number of CPU workers) and mpi/src/starpu_mpi_init.c / mpi/mpi/starpu_mpi_mpi.c
    (MPI core reservation and binding). Assumes one driver thread per CUDA device
    (the default) and that the CUDA ids are explicit (no hwloc-preferred cores).
    """
    nht = layout.threads_per_core
    nhwpus = layout.ncores * nht
    if "STARPU_WORKERS_CPUID" in env:
        bindids = _parse_cpuids(env["STARPU_WORKERS_CPUID"], nhwpus)
    else:
        bindids = [layout.pu(c) for c in range(layout.ncores)]
    bound = [False] * len(bindids)
    current = 0

    def next_bindid(preferred_core: int | None) -> int:
        nonlocal current
        if preferred_core is not None:
            want = preferred_core * nht
            for i, b in enumerate(bindids):
                if b == want:
                    if not bound[i]:
                        bound[i] = True
                        return want
                    break
        i = next((i for i in range(current, len(bindids)) if not bound[i]), None)
        if i is None:  # StarPU starts over, overloading PUs
            bound[:] = [False] * len(bindids)
            i = 0
        bound[i] = True
        current = i
        return bindids[i]

    def getint(var: str) -> int:
        return int(env[var]) if var in env else -1

    reserve = getint("STARPU_RESERVE_NCPU")
    mpi_cpuid = getint("STARPU_MPI_THREAD_CPUID")
    if mpi and mpi_cpuid < 0 and getint("STARPU_NCPU") == -1 and reserve == -1:
        reserve = 1  # StarPU-MPI's own reservation, replaced by an explicit STARPU_RESERVE_NCPU
    main_cpuid = getint("STARPU_MAIN_THREAD_CPUID")
    if getint("STARPU_MAIN_THREAD_BIND") > 0:
        reserve = 1 if reserve == -1 else reserve + 1
        if main_cpuid < 0:
            main_cpuid = next_bindid(None)
        else:  # the main thread stays on the requested PU even when the bind id it reserves differs
            next_bindid(main_cpuid // nht)
    if mpi_cpuid >= 0:
        next_bindid(mpi_cpuid // nht)

    ncuda = len(layout.gpu_numa) if getint("STARPU_NCUDA") < 0 else min(getint("STARPU_NCUDA"), len(layout.gpu_numa))
    drivers = [next_bindid(None) // nht for _ in range(ncuda)]
    ncpu = getint("STARPU_NCPU")
    if ncpu < 0:
        ncpu = max(0, layout.ncores - ncuda - max(reserve, 0))
    else:  # an explicit count loses the reserved cores too (_starpu_topology_check_ndevices)
        ncpu = max(0, ncpu - max(reserve, 0))
    workers = [next_bindid(None) // nht for _ in range(ncpu)]
    if mpi and mpi_cpuid < 0:
        mpi_cpuid = next_bindid(None)
    return Placement(
        main=main_cpuid // nht if main_cpuid >= 0 else None,
        mpi=mpi_cpuid // nht if mpi and mpi_cpuid >= 0 else None,
        gpu_drivers=drivers,
        cpu_workers=workers,
    )
