"""`testbed platform`: generate every platform file of a cluster, or describe this machine.

    testbed platform --cluster NAME --out DIR
        DIR/numasim.xml                       SimGrid v4.1 platform for numasim
        DIR/hwloc/<machine>.xml               hwloc topology per machine type
        DIR/starpu/<machine>/sampling/        StarPU-SimGrid bus files + codelet models
        DIR/starpu/sampling/                  the same for every node name (starpu_smpirun)
        DIR/starpu/cluster.xml, hostfile      for starpu_smpirun -platform/-hostfile
        DIR/summary.json                      nodes (name, machine, rank) and counts
    testbed platform --describe-local --out platforms/machines/local.yaml
    testbed platform --from-calibration calibration/NAME --out platforms/machines/NAME.yaml
        (testbed/from_calibration.py: every value cites the bundle; lists what it lacks)
    testbed platform --from-starpu SAMPLING --host NAME --out DIR
        a one-node platform directory from StarPU's own sampling directory of a real node
        (testbed/platform_from_starpu.py)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from testbed.atomic import atomic_dir, atomic_file
from testbed.errors import InputError
from testbed.hwloc_xml import describe_local, write_topology
from testbed.machines import Cluster, load_cluster
from testbed.platform_xml import expected_counts, write_platform
from testbed.starpu_sampling import DEFAULT_TILE_SIZES, write_starpu_dir


def generate(cluster: Cluster, out: Path, tile_sizes: tuple[int, ...] = DEFAULT_TILE_SIZES) -> None:
    missing = [m.name for m in cluster.machines.values() if m.kernels is None]
    if missing:
        raise InputError(cluster.machines[missing[0]].path, "kernels",
                         "a calibration bundle for the StarPU models (run `testbed calibrate` or add `kernels:`)")
    with atomic_dir(out) as tmp:
        write_platform(cluster, tmp / "numasim.xml")
        (tmp / "hwloc").mkdir()
        for name, machine in cluster.machines.items():
            write_topology(machine, tmp / "hwloc" / f"{name}.xml")
        write_starpu_dir(cluster, tmp / "starpu", tile_sizes)
        summary = {
            "cluster": cluster.name,
            "source": str(cluster.path),
            "nodes": [{"name": n.name, "machine": n.machine.name, "rank": n.rank} for n in cluster.nodes],
            "machines": {name: str(m.path) for name, m in cluster.machines.items()},
            "tile_sizes": list(tile_sizes),
            **expected_counts(cluster),
        }
        (tmp / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


def _tile_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(None, "--tile-sizes", f"comma-separated positive integers, got {text!r}") from None
    if not sizes or min(sizes) <= 0:
        raise InputError(None, "--tile-sizes", f"comma-separated positive integers, got {text!r}")
    return sizes


def add_arguments(p: argparse.ArgumentParser) -> None:
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--cluster", help="cluster name (platforms/clusters/NAME.yaml) or path")
    what.add_argument("--describe-local", action="store_true", help="write a machine YAML from this machine's hwloc topology")
    what.add_argument("--from-calibration", metavar="BUNDLE", default=None,
                      help="write a machine YAML from a calibration bundle (calibration/NAME)")
    what.add_argument("--from-starpu", metavar="SAMPLING", default=None,
                      help="write a one-node platform directory from StarPU's sampling directory of a node")
    p.add_argument("--host", default=None, help="(--from-starpu) the node's STARPU_HOSTNAME in SAMPLING")
    p.add_argument("--out", required=True, help="output directory (--cluster) or machine YAML file (--describe-local)")
    p.add_argument("--tile-sizes", default=",".join(map(str, DEFAULT_TILE_SIZES)),
                   help="tile sizes written into the StarPU history models")
    p.add_argument("--hwloc-xml", default=None, help="(--describe-local) read this hwloc XML instead of running lstopo")
    p.add_argument("--kernels", default=None, help="(--describe-local) calibration bundle to reference")


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if args.from_starpu:
        from testbed.platform_from_starpu import write_platform_dir

        if not args.host:
            raise InputError(None, "--host", "the STARPU_HOSTNAME the sampling directory's files are named by")
        summary = write_platform_dir(Path(args.from_starpu), args.host, out)
        print(f"wrote {out} (one node {args.host}, models {summary['symbols']})", file=sys.stderr)
        return 0
    if args.from_calibration:
        from testbed.from_calibration import write_machine

        missing = write_machine(Path(args.from_calibration), out)
        print(f"wrote {out}; not provided by the bundle (needs_calibration placeholders):", file=sys.stderr)
        for m in missing:
            print(f"  {m}", file=sys.stderr)
        return 0
    if args.describe_local:
        if args.hwloc_xml:
            xml = Path(args.hwloc_xml).read_bytes()
        else:
            xml = subprocess.run(["lstopo", "--of", "xml"], check=True, capture_output=True).stdout
        text = describe_local(xml, name=out.stem, kernels=args.kernels)
        with atomic_file(out) as fh:
            fh.write(text)
        print(f"wrote {out}", file=sys.stderr)
        return 0
    cluster = load_cluster(args.cluster)
    generate(cluster, out, _tile_sizes(args.tile_sizes))
    print(f"wrote {out} ({len(cluster.nodes)} nodes, machines: {', '.join(cluster.machines)})", file=sys.stderr)
    return 0
