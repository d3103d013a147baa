"""The workflow in a scratch copy, run by the venv's snakemake."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from testbed import ROOT

SNAKEMAKE = Path(sys.executable).with_name("snakemake")
RULE_FILES = sorted(p.name for p in (ROOT / "workflows").glob("*.smk"))


def snakemake(cwd: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{SNAKEMAKE.parent}:{os.environ['PATH']}"}
    return subprocess.run([str(SNAKEMAKE), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def workflow_copy(tmp: Path, config: dict | None = None) -> Path:
    """The Snakefile and all rule files in a fresh directory."""
    (tmp / "workflows").mkdir(parents=True)
    (tmp / "config").mkdir()
    shutil.copy(ROOT / "Snakefile", tmp)
    for name in RULE_FILES:
        shutil.copy(ROOT / "workflows" / name, tmp / "workflows")
    shutil.copytree(ROOT / "workflows" / "envs", tmp / "workflows" / "envs")
    for inputs in ("platforms", "calibration"):  # read by the platforms rule
        (tmp / inputs).symlink_to(ROOT / inputs)
    shutil.copy(ROOT / "config" / "config.schema.yaml", tmp / "config")
    if config is None:
        shutil.copy(ROOT / "config" / "config.yaml", tmp / "config")
    else:
        (tmp / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    return tmp


def jobs(dry_run_output: str) -> dict[str, int]:
    table = dry_run_output.split("Job stats:")[1].split("\n\n")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}
