"""Content-addressed cache of generated platforms (`testbed platform --cluster` outputs).

A run without `--platform-dir` used to regenerate its cluster's platform (SimGrid XML, hwloc
files, StarPU models) in a scratch directory: ~0.5–1 s per run, more than numasim itself below
40 × 40 tiles. The output depends only on the cluster and machine YAML files, their kernel
bundles (`kernels.yaml`), the tile sizes and the generator's code, so it is generated once per
SHA-256 of those and reused:

    <cache>/platforms/<cluster>-<key>/        (cache = $TESTBED_CACHE or results/cache)

Concurrency: a missing entry is generated into a private temporary directory next to it and
renamed into place (rename(2) of a directory is atomic, and fails when the target exists); a
process that loses the race uses the winner's entry and removes its own. An entry is complete
once it exists (its files are written before the rename). `TESTBED_PLATFORM_CACHE=0` turns
the cache off (the platform is then generated into the run's work directory, as before).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from testbed import ROOT

#: Modules whose code shapes a generated platform: a change to any of them is a new key.
GENERATOR_MODULES = ("describe/machines", "platform/platform_cmd", "platform/platform_xml", "starpu/sampling",
                     "describe/hwloc_xml", "starpu/perfmodel_files", "starpu/bus_files", "starpu/lu_codelets")
#: Bumped when the layout of an entry changes.
FORMAT = "1"


def enabled() -> bool:
    return os.environ.get("TESTBED_PLATFORM_CACHE", "1") not in ("0", "no", "false", "")


def cache_root() -> Path:
    env = os.environ.get("TESTBED_CACHE")
    return Path(env) if env else ROOT / "results" / "cache"


def key(cluster: str | Path, tile_sizes: tuple[int, ...]) -> str:
    """SHA-256 of everything the generated platform depends on (hex)."""
    from testbed.describe.machines import cluster_source_files

    h = hashlib.sha256()
    h.update(f"format {FORMAT}\ntiles {','.join(map(str, sorted(set(tile_sizes))))}\n".encode())
    for f in cluster_source_files(cluster):
        p = Path(f)
        # The file's content and its name (a machine's name is its file's stem); not the
        # absolute path, so that copies of a checkout share keys.
        h.update(f"file {p.name} {p.stat().st_size}\n".encode())
        h.update(p.read_bytes())
    here = Path(__file__).resolve().parents[1]  # the testbed package
    for mod in GENERATOR_MODULES:
        src = (here / f"{mod}.py").read_bytes()
        h.update(f"module {mod} {len(src)}\n".encode())
        h.update(src)
    return h.hexdigest()


def cached_platform(cluster: str | Path, tile_sizes: tuple[int, ...]) -> Path:
    """The cache entry of this cluster and tile sizes, generated first if missing."""
    from testbed.describe.machines import load_cluster
    from testbed.platform.platform_cmd import generate

    c = load_cluster(cluster)
    entry = cache_root() / "platforms" / f"{c.name}-{key(cluster, tile_sizes)[:20]}"
    if (entry / "summary.json").is_file():
        return entry
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    try:
        generate(c, tmp / "platform", tuple(sorted(set(tile_sizes))))
        try:
            os.rename(tmp / "platform", entry)
        except OSError:
            if not (entry / "summary.json").is_file():  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return entry
