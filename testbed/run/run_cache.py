"""Resolved numasim run descriptions, cached per command line: `testbed simulate` without Python.

`testbed simulate --engine numasim` spends ~0.5 s (more on a loaded machine) before numasim
starts: importing jsonschema and lxml, parsing and validating the cluster and machine YAML
files, resolving the factors (config/factors.yaml) and finding the platform. Every one of
those depends only on the command line, on a few files and on this package's code, so the
result, the run description numasim reads (docs/interfaces.md §4), is kept under

    <cache>/runs/<sha256 of the command line and the code>/run.json   (+ meta.json)

with the files it was resolved from (path, size, mtime): a later identical command whose files
are unchanged runs numasim on that run.json directly, importing nothing but the standard
library. Runs that write files of their own (a heterogeneous distribution, `--trace`,
`--transfers`) are not cached. Writes are atomic (temporary file, rename), so concurrent
commands at worst resolve the same description twice. `TESTBED_PLATFORM_CACHE=0` turns this
cache off too (cache = $TESTBED_CACHE or results/cache, as testbed/platform/platform_cache.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

#: Command-line fields that determine the run description and the printed header.
KEY_FIELDS = ("engine", "cluster", "n", "b", "factors", "env", "sched", "seed", "no_variability",
              "distribution", "platform_dir", "symbols", "dag", "starpu_defaults", "getrf_gpu",
              "perfmodel_dir", "mpi_memory_node", "mpi_backend", "mechanism_off")


def _root() -> Path:
    env = os.environ.get("TESTBED_CACHE")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "results" / "cache"


def enabled() -> bool:
    return os.environ.get("TESTBED_PLATFORM_CACHE", "1") not in ("0", "no", "false", "")


def cacheable(args) -> bool:
    return (enabled() and args.engine == "numasim" and not args.trace and not args.transfers
            and not getattr(args, "events", None)
            # options checked (and refused or acted on) by the uncached path only
            and not any(getattr(args, k, None) for k in ("memory_counts", "topology", "generate_on_main_ram"))
            and not args.check and args.distribution == "block-cyclic")


def _code_hash() -> str:
    """The testbed package's source (any change may change a resolution)."""
    here = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for p in sorted(here.rglob("*.py")):
        h.update(p.relative_to(here).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def key(args) -> str:
    fields = {f: getattr(args, f, None) for f in KEY_FIELDS}
    if fields["platform_dir"]:
        fields["platform_dir"] = str(Path(fields["platform_dir"]).resolve())
    if fields["cluster"] and ("/" in fields["cluster"] or fields["cluster"].endswith((".yaml", ".yml"))):
        fields["cluster"] = str(Path(fields["cluster"]).resolve())
    fields["cwd"] = os.getcwd()  # relative paths in --distribution / --platform-dir
    text = json.dumps(fields, sort_keys=True) + _code_hash()
    return hashlib.sha256(text.encode()).hexdigest()


def _stamp(path: str | Path) -> list:
    st = os.stat(path)
    return [str(path), st.st_size, st.st_mtime_ns]


def lookup(args) -> tuple[Path, dict] | None:
    """(run.json, the header fields of the output) when cached and still valid."""
    entry = _root() / "runs" / key(args)
    try:
        meta = json.loads((entry / "meta.json").read_text())
        if any(_stamp(p) != [p, size, mtime] for p, size, mtime in meta["deps"]):
            return None
        return entry / "run.json", meta["header"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def store(args, desc: dict, header: dict, deps: list[str | Path]) -> Path:
    """Writes the entry; returns its run.json (run.json first, meta.json last: an entry is
    valid only once meta.json exists)."""
    entry = _root() / "runs" / key(args)
    entry.mkdir(parents=True, exist_ok=True)
    run_file = entry / "run.json"
    _write(run_file, json.dumps(desc, indent=1, sort_keys=True))
    meta = {"deps": [_stamp(Path(p).resolve()) for p in dict.fromkeys(str(d) for d in deps)], "header": header}
    _write(entry / "meta.json", json.dumps(meta, indent=1, sort_keys=True))
    return run_file
