"""Engine `numasim`: writes the run description (docs/interfaces.md §4), runs the binary."""

from __future__ import annotations

import json
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from testbed import ROOT, paths
from testbed.engines import RunSpec
from testbed.errors import InputError
from testbed.factors import env_per_machine


def machine_types(platform_xml: Path) -> list[str]:
    """Machine types named by the node zones (zone prop `machine`)."""
    found: set[str] = set()
    for zone in ET.parse(platform_xml).getroot().iter("zone"):
        for prop in zone.findall("prop"):
            if prop.get("id") == "machine":
                found.add(prop.get("value", ""))
    return sorted(found)


def platform_dir(spec: RunSpec) -> Path:
    d = spec.platform_dir or ROOT / "results" / "platforms" / spec.cluster
    if not (d / "numasim.xml").exists():
        raise InputError(d / "numasim.xml", "platform", f"a numasim platform (run `testbed platform --cluster {spec.cluster} --out {d}`)")
    return d


def run_description(spec: RunSpec, pdir: Path) -> dict:
    xml = pdir / "numasim.xml"
    perfmodels = {m: str(pdir / "starpu" / m / "sampling") for m in machine_types(xml)}
    dist = dict(spec.distribution)
    if dist.get("kind") == "heterogeneous":
        if "path" not in dist:
            raise InputError(None, "distribution", "a generated distribution file for 'heterogeneous' (testbed/distribution.py)")
    if dist.get("kind") == "file":
        dist["path"] = str(Path(dist["path"]).resolve())
    desc: dict = {
        "platform": str(xml.resolve()),
        "perfmodels": perfmodels,
        "workload": {"kind": "lu", "n": spec.n, "b": spec.b, "distribution": dist},
        "env": dict(spec.env),
        # Variables that differ between machine types (factors B, C, D on a mixed cluster).
        "env_per_machine": env_per_machine(spec.cluster, spec.factors),
        "seed": spec.seed,
        "variability": spec.variability,
    }
    if spec.trace:
        desc["trace"] = str(Path(spec.trace).resolve())
    if spec.transfers:
        desc["transfers"] = str(Path(spec.transfers).resolve())
    return desc


def run_binary(desc: dict, workdir: Path | None = None) -> dict:
    """Runs numasim on a run description; bad input surfaces as InputError."""
    binary = paths.binary(paths.NUMASIM, "numasim")
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        run_file = Path(tmp) / "run.json"
        run_file.write_text(json.dumps(desc, indent=1, sort_keys=True))
        proc = subprocess.run([str(binary), str(run_file)], capture_output=True, text=True)
    if proc.returncode == 2:
        msg = proc.stderr.strip().removeprefix("error: ")
        raise InputError(None, None, msg.split("expected ", 1)[-1] if "expected " in msg else msg) from None
    if proc.returncode != 0:
        raise RuntimeError(f"numasim failed ({proc.returncode}): {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def run(spec: RunSpec) -> dict:
    return run_binary(run_description(spec, platform_dir(spec)), spec.workdir)
