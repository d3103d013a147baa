"""A one-node platform directory from a StarPU sampling directory recorded on a real node.

    testbed platform --from-starpu SAMPLING --host NAME --out DIR

SAMPLING is StarPU's own ``sampling/`` (``$STARPU_HOME/.starpu/sampling`` after runs with
``STARPU_HOSTNAME=NAME``): the bus calibration (``bus/NAME.{bandwidth,latency,config,
affinity,platform.v4.xml}``) and the codelet models (``codelets/45/<symbol>.NAME``). DIR gets
the layout `testbed platform --cluster` writes (docs/interfaces.md §3), so every engine runs
on it with ``testbed simulate --platform-dir DIR``:

* ``numasim.xml``: StarPU's bus platform rewritten by testbed/platform/starpu_bus_platform.py (the
  links and routes StarPU-SimGrid simulates, one RAM node);
* ``starpu/NAME/sampling/``: copies of the bus files and models (no file is changed);
* ``starpu/cluster.xml``, ``starpu/hostfile``: one SMPI host NAME for starpu_smpirun;
* ``summary.json`` with ``"kind": "starpu-sampling"``: no machine description stands behind
  it, so the factors (whose placement rules need the topology) cannot be applied; runs use
  StarPU's defaults plus the user's ``--env``.

StarPU's files carry no host-side costs of the CUDA worker. ``--gpu-cost KEY=SECONDS`` adds
one measured on the node to every GPU host of ``numasim.xml`` (numasim's platform properties,
docs/interfaces.md §2): ``task_overhead_s`` (the CUDA worker's host time per task,
calibration/microbench/starpu_task_overhead.c), ``task_gap_s`` (the part of it a pipeline of 2
does not hide: the gap between two back-to-back CUDA tasks of a real FxT trace) and
``first_call_{getrf,trsm,gemm}_s`` (the extra
time of a kernel's first task in a process, read from a real FxT trace by
bench/gpu_device_replay.py). StarPU-SimGrid reads StarPU's files and ignores them.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

from testbed.common.atomic import atomic_dir
from testbed.common.errors import InputError
from testbed.platform.starpu_bus_platform import NodeSource, build_platform, write_platform
from testbed.starpu.bus_files import BUS_SUFFIXES
from testbed.starpu.lu_codelets import SYMBOL_SETS
from testbed.starpu.sampling import detect_symbols

KIND = "starpu-sampling"
#: numasim's GPU host properties that --gpu-cost may set (simulator/src/platform.cpp)
GPU_COSTS = ("task_overhead_s", "task_gap_s", "first_call_getrf_s", "first_call_trsm_s", "first_call_gemm_s",
             "malloc_s", "free_s", "pinned_alloc_s_per_mib")


def parse_gpu_costs(items: list[str] | None, where: str = "--gpu-cost") -> dict[str, float]:
    """KEY=SECONDS items -> {key: seconds}; a bad one raises InputError naming it."""
    costs: dict[str, float] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        try:
            seconds = float(value) if sep else -1.0
        except ValueError:
            seconds = -1.0
        if key not in GPU_COSTS or not 0 <= seconds <= 1:
            raise InputError(None, f"{where} {item}", f"KEY=SECONDS with KEY one of {', '.join(GPU_COSTS)} "
                             "and SECONDS in [0, 1]")
        costs[key] = seconds
    return costs


def smpi_cluster_xml(host: str) -> str:
    """One SMPI host named like the machine: starpu_smpirun then reads its bus platform
    sampling/bus/<host>.platform.v4.xml (tools/starpu_smpirun.in)."""
    return ("<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM 'https://simgrid.org/simgrid.dtd'>\n"
            "<platform version=\"4.1\">\n"
            f" <zone id=\"{host}-cluster\" routing=\"Full\">\n  <host id=\"{host}\" speed=\"1Gf\"/>\n"
            " </zone>\n</platform>\n")


def write_platform_dir(sampling: Path, host: str, out: Path, gpu_costs: dict[str, float] | None = None) -> dict:
    """Writes DIR from SAMPLING (with GPU_COSTS properties on its GPU hosts); returns the summary."""
    gpu_costs = dict(gpu_costs or {})
    bad = sorted(set(gpu_costs) - set(GPU_COSTS))
    if bad:
        raise InputError(None, f"gpu cost {bad[0]}", f"one of {', '.join(GPU_COSTS)}")
    bus = sampling / "bus" / f"{host}.platform.v4.xml"
    if not bus.is_file():  # the mistake is the host name (--host) or the directory (--from-starpu)
        hosts = sorted(f.name.removesuffix(".platform.v4.xml") for f in (sampling / "bus").glob("*.platform.v4.xml"))
        if not hosts:
            raise InputError(str(sampling), "--from-starpu", "a StarPU sampling directory with bus platforms "
                                                              "(bus/<host>.platform.v4.xml: bus calibration)")
        raise InputError(str(sampling), "--host", f"a host with a bus platform there ({', '.join(hosts)}), got {host!r} "
                                                  f"(STARPU_HOSTNAME of the bus calibration)")
    symbols = detect_symbols(sampling, host)
    models = [sampling / "codelets" / "45" / f"{sym}.{host}" for sym, _, _ in SYMBOL_SETS[symbols].values()]
    with atomic_dir(out, "platform") as tmp:
        tree = build_platform([NodeSource(host, host, bus)], name=host)
        for h in tree.iter("host"):
            if h.find("prop[@id='kind'][@value='gpu']") is not None:
                for key, seconds in sorted(gpu_costs.items()):
                    ET.SubElement(h, "prop", id=key, value=repr(float(seconds)))
        write_platform(tree, tmp / "numasim.xml")
        dest = tmp / "starpu" / host / "sampling"
        (dest / "bus").mkdir(parents=True)
        (dest / "codelets" / "45").mkdir(parents=True)
        for suffix in BUS_SUFFIXES:
            src = sampling / "bus" / f"{host}.{suffix}"
            if src.is_file():
                shutil.copyfile(src, dest / "bus" / src.name)
        for model in models:
            shutil.copyfile(model, dest / "codelets" / "45" / model.name)
        (tmp / "starpu" / "cluster.xml").write_text(smpi_cluster_xml(host))
        (tmp / "starpu" / "hostfile").write_text(host + "\n")
        summary = {
            "kind": KIND,
            "cluster": host,
            "source": f"StarPU sampling directory {sampling.name}/ of host {host}",
            "symbols": symbols,
            "nodes": [{"name": host, "machine": host, "rank": 0}],
            **({"gpu_costs": gpu_costs} if gpu_costs else {}),
        }
        (tmp / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def summary_of(platform_dir: Path) -> dict:
    """summary.json of a platform directory ({} when it has none)."""
    path = Path(platform_dir) / "summary.json"
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError):
        raise InputError(path, "summary", "the JSON summary written by `testbed platform`") from None


def is_starpu_sampling(platform_dir: Path | None) -> bool:
    return platform_dir is not None and summary_of(platform_dir).get("kind") == KIND
