"""Machine and cluster descriptions: load, validate, and expose them as plain objects.

A machine type lives in ``platforms/machines/<name>.yaml`` (schema
``testbed/describe/schemas/machine.schema.json``); a cluster in
``platforms/clusters/<name>.yaml`` lists node groups in rank order. Every
physical quantity in these files is ``{value, source}`` or ``{value, derived}``;
this module checks that, the schema, and the cross references (NUMA nodes named
by GPUs, NICs, sockets and links exist) and raises ``InputError(file, key,
expected)`` on the first problem.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from testbed import ROOT
from testbed.common.errors import InputError
from testbed.common.paths import CLUSTERS, MACHINES
from testbed.common.yaml_input import load_yaml
from testbed.starpu.sampling_dir import ModelDir, from_machine_yaml

SCHEMAS = Path(__file__).resolve().parent / "schemas"


# --------------------------------------------------------------------------- objects


@dataclass(frozen=True)
class NumaNode:
    index: int
    socket: int
    cores: tuple[int, ...]  # OS indices of the physical cores
    memory_bytes: int
    memory_bandwidth_Bps: float
    memory_latency_s: float
    core_bandwidth_Bps: float


@dataclass(frozen=True)
class InterSocketLink:
    numa_nodes: tuple[int, int]
    bandwidth_Bps: float
    latency_s: float


@dataclass(frozen=True)
class Gpu:
    index: int
    model: str
    numa_node: int
    memory_bytes: int
    flops: float
    pcie_bandwidth_Bps: float
    pcie_latency_s: float
    task_overhead_s: float = 0.0  # host time of StarPU's CUDA worker per task (0: not described)
    # StarPU's allocation calls with this GPU (0: not described; numasim then charges nothing):
    # cudaMalloc / cudaFree of one tile, cudaHostAlloc per MiB of pinned host memory.
    malloc_s: float = 0.0
    free_s: float = 0.0
    pinned_alloc_s_per_mib: float = 0.0
    # share of a pinned allocation during which the node's GPUs are held (docs/pinned-allocations.md)
    pinned_alloc_gpu_stall: float = 1.0


@dataclass(frozen=True)
class Nic:
    index: int
    name: str
    model: str
    numa_node: int
    bandwidth_Bps: float
    pcie_bandwidth_Bps: float
    pcie_latency_s: float


@dataclass(frozen=True)
class BwLat:
    bandwidth_Bps: float
    latency_s: float


@dataclass
class Machine:
    name: str
    path: Path
    cpu_model: str
    frequency_hz: float
    threads_per_core: int
    core_flops: float
    l3_cache_bytes: int | None
    sockets: list[list[int]]  # socket -> NUMA node indices
    numa_nodes: list[NumaNode]
    inter_socket_links: list[InterSocketLink]
    gpus: list[Gpu]
    nics: list[Nic]
    gpu_peer: dict[str, BwLat]
    kernels: Path | None
    raw: dict[str, Any] = field(repr=False)
    # Host->GPU and GPU->host rates when the host buffer is on another socket (None: only the
    # inter-socket link's own figures apply).
    gpu_remote_dma: tuple[float, float] | None = None
    # NIC DMA reading (tx) and writing (rx) a buffer on another socket than the NIC's (None: only
    # the inter-socket link's own figures apply).
    nic_remote_dma: tuple[float, float] | None = None
    # A real machine's raw StarPU sampling directory read instead of the generated models
    # (`perfmodels:`, testbed/starpu/sampling_dir.py); None: the models generated from `kernels:`.
    perfmodels: ModelDir | None = None

    @property
    def cores(self) -> list[int]:
        """OS indices of all physical cores, in NUMA order."""
        return [c for n in self.numa_nodes for c in n.cores]

    @property
    def ncores(self) -> int:
        return len(self.cores)

    def numa_of_core(self, core: int) -> int:
        for n in self.numa_nodes:
            if core in n.cores:
                return n.index
        raise KeyError(core)

    def socket_of_numa(self, numa: int) -> int:
        return self.numa_nodes[numa].socket


@dataclass(frozen=True)
class Node:
    name: str
    machine: Machine
    rank: int


@dataclass
class Network:
    link_bandwidth_Bps: float
    link_latency_s: float
    switch_bandwidth_Bps: float
    switch_latency_s: float


@dataclass
class Cluster:
    name: str
    path: Path
    nodes: list[Node]
    network: Network
    raw: dict[str, Any] = field(repr=False)

    @property
    def machines(self) -> dict[str, Machine]:
        """Machine types of the cluster, in order of first appearance."""
        out: dict[str, Machine] = {}
        for n in self.nodes:
            out.setdefault(n.machine.name, n.machine)
        return out


# --------------------------------------------------------------------------- validation


@cache
def _schema(name: str) -> dict:
    return json.loads((SCHEMAS / name).read_text())


def key_path(parts: list[Any] | tuple[Any, ...]) -> str:
    """`['gpus', 0, 'numa_node']` -> `gpus[0].numa_node`."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out or "(top level)"


def _schema_error(file: Path, err: jsonschema.ValidationError) -> InputError:
    path = list(err.absolute_path)
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        patterns = [re.compile(p) for p in err.schema.get("patternProperties", {})]
        extra = sorted(k for k in set(err.instance) - set(allowed) if not any(p.search(k) for p in patterns))
        return InputError(file, key_path(path + [extra[0]]), f"one of the known keys ({', '.join(allowed)})")
    if err.validator == "required":
        missing = [k for k in err.validator_value if k not in err.instance]
        return InputError(file, key_path(path + [missing[0]]), "this key to be present")
    if err.validator == "not" and isinstance(err.instance, dict) and {"range", "spread"} <= set(err.instance):
        return InputError(file, key_path(path + ["spread"]), "either `range` or `spread`, not both")
    if err.validator in ("minItems", "maxItems", "type") and "range" in path[-2:]:
        at = path[: len(path) - path[::-1].index("range")]
        return InputError(file, key_path(at), f"[lo, hi], two numbers, got {err.instance!r}")
    bound = err.validator in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")
    if bound and any(p in ("range", "spread") for p in path if isinstance(p, str)):
        if path[-1] == "spread":
            return InputError(file, key_path(path), f"a spread below 1 (the quantity must stay positive), got {err.instance!r}")
        sign = "> 0" if err.validator == "exclusiveMinimum" else ">= 0"
        return InputError(file, key_path(path), f"a bound {sign} (the quantity must be {sign}), got {err.instance!r}")
    if err.validator == "type":
        want = err.validator_value if isinstance(err.validator_value, str) else " or ".join(err.validator_value)
        if want == "object" and path and isinstance(err.instance, (int, float)):
            want = "a mapping {value: ..., source: ...} or {value: ..., derived: ...}"
        return InputError(file, key_path(path), f"{want}, got {_shown(err.instance)}")
    return InputError(file, key_path(path), f"{err.message}" if path or isinstance(err.instance, dict) else
                      f"a mapping (a {file.suffix or 'YAML'} description), got {_shown(err.instance)}")


def _shown(value: Any) -> str:
    """A value for an error message: short scalars as written; a long text (a file that is not a
    description at all, /etc/passwd) by its type only, never its contents."""
    if isinstance(value, (dict, list)):
        return f"a {'mapping' if isinstance(value, dict) else 'list'}"
    text = repr(value)
    return text if len(text) <= 40 else f"a {type(value).__name__} of {len(text)} characters"


# JSON Schema counts 16.0 and 1e300 as integers; an index or count read from YAML as a float then
# broke the generators (`1 << 1e300` in hwloc_xml.bitmap). Here an integer is a Python int.
_StrictValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, x: isinstance(x, int) and not isinstance(x, bool)))

#: Magnitudes a quantity may have, by the unit its key ends with: far beyond any machine, far
#: inside what the generators and SimGrid represent (1e-320 s reached SimGrid as a denormal it
#: could not parse; numasim aborted on 1e-300 bandwidths). 0 stays allowed where the schema allows it.
_MAGNITUDES = (("_Bps", 1e3, 1e15, "bytes/s"), ("_s", 1e-15, 1e4, "seconds"), ("_bytes", 1.0, 2.0**60, "bytes"),
               ("_hz", 1e3, 1e12, "Hz"), ("flops", 1e3, 1e18, "flop/s"))
#: Largest core OS index: a machine of 2^31 cores built a 2^31-bit hwloc bitmap (a hang).
MAX_CORE_INDEX = 65535
#: Nodes of one cluster: the generated platform routes every pair of nodes (n^2 routes).
MAX_CLUSTER_NODES = 1024


def _check_magnitude(file: Path, path: list[Any], q: dict) -> None:
    key = path[-1] if path and isinstance(path[-1], str) else ""
    if key == "cores":
        for i, c in enumerate(q["value"]):
            if not 0 <= c <= MAX_CORE_INDEX:
                raise InputError(file, f"{key_path(path)}.value[{i}]", f"a core OS index in 0..{MAX_CORE_INDEX}, got {c!r}")
        return
    for suffix, lo, hi, unit in _MAGNITUDES:
        if key.endswith(suffix):
            numbers = [("value", q["value"])] + [(f"range[{i}]", v) for i, v in enumerate(q.get("range", []))]
            for sub, v in numbers:
                if isinstance(v, (int, float)) and not isinstance(v, bool) and v != 0 and not lo <= abs(v) <= hi:
                    raise InputError(file, f"{key_path(path)}.{sub}", f"a plausible quantity of {unit} "
                                                                       f"({lo:g} to {hi:g}), got {v!r}")
            return


def _validate(file: Path, data: Any, schema_name: str) -> None:
    validator = _StrictValidator(_schema(schema_name))
    errors = sorted(validator.iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.validator))
    if errors:
        raise _schema_error(file, jsonschema.exceptions.best_match(errors))
    _check_quantities(file, data, [])


def _check_quantities(file: Path, node: Any, path: list[Any]) -> None:
    """Each quantity states where it comes from: exactly one of `source` or `derived`; an
    uncertainty range, if any, is valid (check_range)."""
    if isinstance(node, dict):
        if "value" in node:
            has = [k for k in ("source", "derived") if k in node]
            if len(has) != 1:
                raise InputError(file, key_path(path), "exactly one of `source` (a citation) or `derived` (how it was computed)")
            check_range(file, key_path(path), node)
            _check_magnitude(file, path, node)
            return
        for k, v in node.items():
            _check_quantities(file, v, path + [k])
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _check_quantities(file, v, path + [i])


def quantity_range(q: dict) -> tuple[float, float] | None:
    """The uncertainty range [lo, hi] of a quantity (`range`, or `spread` relative to the
    value), or None when it has none. Assumes check_range passed."""
    if "range" in q:
        lo, hi = q["range"]
        return float(lo), float(hi)
    if "spread" in q:
        v, s = float(q["value"]), float(q["spread"])
        return (v * (1 - s), v * (1 + s)) if v >= 0 else (v * (1 + s), v * (1 - s))
    return None


def check_range(file: str | Path, key: str, q: dict, positive: bool = False) -> None:
    """An uncertainty range must be finite, hold the value (lo <= value <= hi), say why
    (`range_reason`), and stay positive where the quantity must be (`positive`; the
    schemas check that for machine and cluster files)."""
    has = [k for k in ("range", "spread") if k in q]
    if not has:
        if "range_reason" in q:
            raise InputError(file, f"{key}.range_reason", "a `range: [lo, hi]` or `spread` that it explains")
        return
    if len(has) == 2:
        raise InputError(file, f"{key}.spread", "either `range` or `spread`, not both")
    value = q.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(file, f"{key}.{has[0]}", f"a range only on a finite number, the value is {value!r}")
    raw = q[has[0]]
    if has[0] == "range":
        if (not isinstance(raw, list) or len(raw) != 2
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in raw)):
            raise InputError(file, f"{key}.range", f"[lo, hi], two numbers, got {raw!r}")
    elif isinstance(raw, bool) or not isinstance(raw, (int, float)) or not raw > 0:
        raise InputError(file, f"{key}.spread", f"a relative spread > 0, got {raw!r}")
    lo, hi = quantity_range(q)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise InputError(file, f"{key}.{has[0]}", f"finite bounds, got [{lo!r}, {hi!r}]")
    if not lo <= value <= hi:
        raise InputError(file, f"{key}.{has[0]}", f"lo <= value <= hi, got [{lo:g}, {hi:g}] around {value:g}")
    if positive and lo <= 0:
        raise InputError(file, f"{key}.{has[0]}", f"a positive lower bound (the quantity must be > 0), got {lo:g}")
    if not isinstance(q.get("range_reason"), str) or not q["range_reason"].strip():
        raise InputError(file, f"{key}.range_reason", "the reason of the range (spread of the sources, measured sibling, repetitions)")


def _resolve(name_or_path: str | Path, folder: Path, relative_to: Path | None = None) -> Path:
    """A name of `folder` (NAME -> folder/NAME.yaml) or a path to a YAML file; a path without the
    .yaml suffix (`../../etc/passwd`) is refused before it is read."""
    s = str(name_or_path)
    if "/" in s and not s.endswith((".yaml", ".yml")):
        raise InputError(s, None, f"a known name of {folder.name}/ or a path to a .yaml file")
    if s.endswith((".yaml", ".yml")) or "/" in s:
        p = Path(s)
        if not p.is_absolute() and relative_to is not None and (relative_to / p).exists():
            p = relative_to / p
        return p
    return folder / f"{s}.yaml"


def _v(q: dict) -> Any:
    return q["value"]


# --------------------------------------------------------------------------- loaders


def _numa_nodes(data: Any, file: Path) -> list[NumaNode]:
    """The NUMA nodes, each in exactly one socket, cores in exactly one node."""
    nnuma = len(data["numa_nodes"])
    socket_of: dict[int, int] = {}
    for s, sock in enumerate(data["sockets"]):
        for j, k in enumerate(sock["numa_nodes"]):
            if k >= nnuma:
                raise InputError(file, f"sockets[{s}].numa_nodes[{j}]", f"a NUMA node index < {nnuma}, got {k}")
            if k in socket_of:
                raise InputError(file, f"sockets[{s}].numa_nodes[{j}]", f"NUMA node {k} in only one socket")
            socket_of[k] = s
    for k in range(nnuma):
        if k not in socket_of:
            raise InputError(file, "sockets", f"every NUMA node in a socket; NUMA node {k} is in none")

    seen: dict[int, int] = {}
    numa_nodes = []
    for k, n in enumerate(data["numa_nodes"]):
        for c in _v(n["cores"]):
            if c in seen:
                raise InputError(file, f"numa_nodes[{k}].cores", f"distinct core OS indices; {c} is also in NUMA node {seen[c]}")
            seen[c] = k
        numa_nodes.append(
            NumaNode(
                index=k,
                socket=socket_of[k],
                cores=tuple(_v(n["cores"])),
                memory_bytes=int(_v(n["memory_bytes"])),
                memory_bandwidth_Bps=float(_v(n["memory_bandwidth_Bps"])),
                memory_latency_s=float(_v(n["memory_latency_s"])),
                core_bandwidth_Bps=float(_v(n["core_bandwidth_Bps"])),
            )
        )
    return numa_nodes


def _kernels_dir(data: Any, file: Path) -> Path | None:
    """The calibration bundle of the kernel times (`kernels:`), relative to the repository."""
    if "kernels" not in data:
        return None
    kernels = Path(data["kernels"])
    if not kernels.is_absolute():
        kernels = ROOT / kernels
    if not (kernels / "kernels.yaml").is_file():
        raise InputError(file, "kernels", f"a calibration bundle directory containing kernels.yaml, got {data['kernels']!r}")
    return kernels


def _check_loaded_latency(data: Any, file: Path) -> None:
    curve = (data.get("numa") or {}).get("loaded_latency")
    if curve is not None:
        points = curve["value"]
        if any(b[0] <= a[0] or b[1] < a[1] for a, b in zip(points, points[1:], strict=False)):
            raise InputError(file, "numa.loaded_latency.value",
                             f"[utilisation, latency ratio] points with increasing utilisations and non-decreasing "
                             f"ratios, got {points}")


def parse_machine(data: Any, file: Path) -> Machine:
    """Validate a machine mapping (as read from `file`) and build a Machine."""
    _validate(file, data, "machine.schema.json")
    numa_raw = data["numa_nodes"]
    nnuma = len(numa_raw)

    numa_nodes = _numa_nodes(data, file)

    def check_numa(key: str, k: int) -> int:
        if not 0 <= k < nnuma:
            raise InputError(file, key, f"an existing NUMA node index (0..{nnuma - 1}), got {k}")
        return k

    links = []
    for i, link in enumerate(data.get("inter_socket_links", [])):
        a, b = (check_numa(f"inter_socket_links[{i}].numa_nodes", k) for k in link["numa_nodes"])
        if a == b:
            raise InputError(file, f"inter_socket_links[{i}].numa_nodes", "two different NUMA nodes")
        links.append(InterSocketLink((a, b), float(_v(link["bandwidth_Bps"])), float(_v(link["latency_s"]))))
    _check_connected(file, nnuma, links)

    gpus = [
        Gpu(
            index=j,
            model=g["model"],
            numa_node=check_numa(f"gpus[{j}].numa_node", g["numa_node"]),
            memory_bytes=int(_v(g["memory_bytes"])),
            flops=float(_v(g["flops"])),
            pcie_bandwidth_Bps=float(_v(g["pcie_bandwidth_Bps"])),
            pcie_latency_s=float(_v(g["pcie_latency_s"])),
            task_overhead_s=float(_v(g["task_overhead_s"])) if "task_overhead_s" in g else 0.0,
            malloc_s=float(_v(g["malloc_s"])) if "malloc_s" in g else 0.0,
            free_s=float(_v(g["free_s"])) if "free_s" in g else 0.0,
            pinned_alloc_s_per_mib=float(_v(g["pinned_alloc_s_per_mib"])) if "pinned_alloc_s_per_mib" in g else 0.0,
            pinned_alloc_gpu_stall=float(_v(g["pinned_alloc_gpu_stall"])) if "pinned_alloc_gpu_stall" in g else 1.0,
        )
        for j, g in enumerate(data.get("gpus", []))
    ]
    nics = [
        Nic(
            index=k,
            name=n["name"],
            model=n.get("model", ""),
            numa_node=check_numa(f"nics[{k}].numa_node", n["numa_node"]),
            bandwidth_Bps=float(_v(n["bandwidth_Bps"])),
            pcie_bandwidth_Bps=float(_v(n["pcie_bandwidth_Bps"])),
            pcie_latency_s=float(_v(n["pcie_latency_s"])),
        )
        for k, n in enumerate(data["nics"])
    ]
    if data.get("gpu_peer") and not gpus:
        raise InputError(file, "gpu_peer", "no GPU-to-GPU figures on a machine without gpus (or the gpus it has)")
    gpu_peer = {
        k: BwLat(float(_v(v["bandwidth_Bps"])), float(_v(v["latency_s"]))) for k, v in data.get("gpu_peer", {}).items()
    }
    kernels = _kernels_dir(data, file)
    _check_loaded_latency(data, file)
    cpu = data["cpu"]
    return Machine(
        name=data["name"],
        path=file,
        cpu_model=cpu["model"],
        frequency_hz=float(_v(cpu["frequency_hz"])),
        threads_per_core=int(_v(cpu["threads_per_core"])),
        core_flops=float(_v(cpu["core_flops"])),
        l3_cache_bytes=int(_v(cpu["l3_cache_bytes"])) if "l3_cache_bytes" in cpu else None,
        sockets=[list(s["numa_nodes"]) for s in data["sockets"]],
        numa_nodes=numa_nodes,
        inter_socket_links=links,
        gpus=gpus,
        nics=nics,
        gpu_peer=gpu_peer,
        kernels=kernels,
        gpu_remote_dma=((float(_v(data["gpu_remote_dma"]["h2d_bandwidth_Bps"])),
                         float(_v(data["gpu_remote_dma"]["d2h_bandwidth_Bps"]))) if "gpu_remote_dma" in data else None),
        nic_remote_dma=((float(_v(data["nic_remote_dma"]["tx_bandwidth_Bps"])),
                         float(_v(data["nic_remote_dma"]["rx_bandwidth_Bps"]))) if "nic_remote_dma" in data else None),
        perfmodels=from_machine_yaml(data, file, ROOT),
        raw=data,
    )


def _check_connected(file: Path, nnuma: int, links: list[InterSocketLink]) -> None:
    """Every NUMA node must be reachable from NUMA 0, else routes cannot exist."""
    reach = {0}
    changed = True
    while changed:
        changed = False
        for link in links:
            a, b = link.numa_nodes
            if (a in reach) != (b in reach):
                reach |= {a, b}
                changed = True
    if len(reach) != nnuma:
        missing = sorted(set(range(nnuma)) - reach)
        raise InputError(file, "inter_socket_links", f"links connecting every NUMA node; NUMA {missing} unreachable")


#: a cluster's `variant`: which value of a quantity with a `fitted` entry the machines take
VARIANTS = ("first-principles", "fitted")


def machine_data(file: Path, variant: str = "first-principles") -> dict[str, Any]:
    """A machine YAML as read, or with its fitted values in place (variant `fitted`): each
    quantity with `fitted: {value, observation, procedure}` takes that value, its range spans the
    first-principles value and the fitted one, and says so (the Standards' "fitted:")."""
    data = load_yaml(file)
    if variant == "first-principles":
        return data
    _validate(file, data, "machine.schema.json")  # the fitted entries as written

    def apply(node: Any) -> Any:
        if isinstance(node, dict):
            if "fitted" in node and "value" in node:
                q = {k: v for k, v in node.items() if k != "fitted"}
                f, first = node["fitted"], node["value"]
                q["value"] = f["value"]
                how = "source" if "source" in q else "derived"
                q[how] = f"fitted ({f['value']:g}) in place of the first-principles value, which is: {q[how]}"
                q.pop("spread", None)
                q["range"] = [min(first, f["value"]), max(first, f["value"])]
                q["range_reason"] = (f"fitted: {f['observation']}; procedure: {f['procedure']}; the first-principles "
                                     f"value {first:g} is the range's other end")
                return q
            return {k: apply(v) for k, v in node.items()}
        if isinstance(node, list):
            return [apply(v) for v in node]
        return node

    return apply(data)


def load_machine(path_or_name: str | Path, relative_to: Path | None = None,
                 variant: str = "first-principles") -> Machine:
    """Load `platforms/machines/NAME.yaml` (or a path) into a validated Machine (with its fitted
    values for variant `fitted`)."""
    file = _resolve(path_or_name, MACHINES, relative_to)
    if not file.is_file():
        raise InputError(file, None, _known_or_file("machine", MACHINES, path_or_name))
    data = machine_data(file, variant)
    machine = parse_machine(data, file)
    if machine.name != file.stem:
        raise InputError(file, "name", f"the file's base name {file.stem!r}, got {machine.name!r}")
    return machine


def _stamp(files: list[Path]) -> tuple:
    out = []
    for f in files:
        try:
            st = f.stat()
        except OSError:
            return ()
        out.append((str(f), st.st_mtime_ns, st.st_size))
    return tuple(out)


#: load_cluster's results, per resolved cluster file: (stamp of every file it read, Cluster).
_CLUSTERS: dict[str, tuple[tuple, Cluster]] = {}


def load_cluster(path_or_name: str | Path) -> Cluster:
    """Load `platforms/clusters/NAME.yaml` (or a path) into a validated Cluster.

    Memoised per process: a batch of runs resolves each run's factors against the same cluster,
    and parsing and validating its YAML files took most of a small run's time. A hit is
    re-checked against the size and mtime of the cluster and machine files (a test or a user
    that rewrites one gets it reloaded). The Cluster is shared: callers must not modify it."""
    file = _resolve(path_or_name, CLUSTERS)
    hit = _CLUSTERS.get(str(file.resolve())) if file.is_file() else None
    if hit is not None and hit[0] and _stamp([Path(f) for f, _, _ in hit[0]]) == hit[0]:
        return hit[1]
    cluster = _load_cluster(file, path_or_name)
    read = [cluster.path] + ([Path(cluster.raw["base_file"])] if "base_file" in cluster.raw else [])
    _CLUSTERS[str(file.resolve())] = (_stamp(read + [m.path for m in cluster.machines.values()]), cluster)
    return cluster


def _known_or_file(kind: str, folder: Path, given: str | Path) -> str:
    """What an unknown name should have been: the known names of `folder`, or a file."""
    known = sorted(p.stem for p in folder.glob("*.yaml"))
    return f"a known {kind} ({', '.join(known)}) or an existing {kind} file, got {str(given)!r}"


def _load_cluster(file: Path, given: str | Path | None = None) -> Cluster:
    if not file.is_file():
        raise InputError(file, None, _known_or_file("cluster", CLUSTERS, file if given is None else given))
    data = cluster_data(file)
    variant = data.get("variant", "first-principles")
    nodes: list[Node] = []
    counters: dict[str, int] = {}
    machines: dict[str, Machine] = {}
    if sum(group["count"] for group in data["nodes"]) > MAX_CLUSTER_NODES:
        raise InputError(file, "nodes", f"at most {MAX_CLUSTER_NODES} nodes in all (count)")
    for g, group in enumerate(data["nodes"]):
        ref = group["machine"]
        try:
            mfile = _resolve(ref, MACHINES, file.parent)
        except InputError as exc:
            raise InputError(file, f"nodes[{g}].machine", f"{exc.expected}, got {str(ref)[:80]!r}") from None
        if not mfile.is_file():
            raise InputError(file, f"nodes[{g}].machine", _known_or_file("machine", MACHINES, ref))
        machine = load_machine(mfile, variant=variant)
        if machine.name in machines and machines[machine.name].path.resolve() != mfile.resolve():
            raise InputError(file, f"nodes[{g}].machine", f"one definition per machine name; {machine.name!r} comes from two files")
        machines[machine.name] = machine
        for _ in range(group["count"]):
            counters[machine.name] = counters.get(machine.name, 0) + 1
            nodes.append(Node(f"{machine.name}-{counters[machine.name]}", machine, len(nodes)))
    net = data["network"]
    return Cluster(
        name=data["name"],
        path=file,
        nodes=nodes,
        network=Network(
            link_bandwidth_Bps=float(_v(net["link_bandwidth_Bps"])),
            link_latency_s=float(_v(net["link_latency_s"])),
            switch_bandwidth_Bps=float(_v(net["switch_bandwidth_Bps"])),
            switch_latency_s=float(_v(net["switch_latency_s"])),
        ),
        raw=data,
    )


def cluster_data(file: Path) -> dict[str, Any]:
    """A cluster YAML, validated; one with `base` takes that cluster's nodes, network and order
    (machine references relative to the base's file), keeping its own name, description and
    variant."""
    data = load_yaml(file)
    _validate(file, data, "cluster.schema.json")
    if "base" not in data:
        return data
    base_file = _resolve(data["base"], CLUSTERS, file.parent)
    if not base_file.is_file():
        raise InputError(file, "base", _known_or_file("cluster", CLUSTERS, data["base"]))
    base = load_yaml(base_file)
    _validate(base_file, base, "cluster.schema.json")
    if "base" in base:
        raise InputError(file, "base", f"a cluster without a base of its own ({base_file.name} has one)")
    merged = {**base, **{k: v for k, v in data.items() if k != "base"}}
    merged["base_file"] = str(base_file)
    for group in merged["nodes"]:  # machine references stay relative to the base's folder
        group["machine"] = str(_resolve(group["machine"], MACHINES, base_file.parent))
    return merged


def cluster_source_files(path_or_name: str | Path) -> list[str]:
    """Files a cluster's generated platform depends on: cluster (and its base), machine YAMLs,
    kernel bundles."""
    cluster = load_cluster(path_or_name)
    files = [str(cluster.path)] + ([cluster.raw["base_file"]] if "base_file" in cluster.raw else [])
    files += [str(m.path) for m in cluster.machines.values()]
    files += [str(m.kernels / "kernels.yaml") for m in cluster.machines.values() if m.kernels]
    return files
