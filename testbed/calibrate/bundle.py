"""A calibration bundle's derived files, read back: codelet models as table rows, NUMA
microbenchmark rows and matrices, kernels.yaml (docs/interfaces.md §8).

Read by the calibration itself (kernels.yaml, numa/matrix-*.csv), by its summary and by its
validation; the model files are parsed by testbed.starpu.perfmodel_files.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import yaml

from testbed.common.atomic import atomic_file
from testbed.starpu.lu_codelets import APP_CODELETS, BY_SYMBOL, CHAMELEON_GENERATION, LU_CODELETS
from testbed.starpu.perfmodel_files import read_model

#: Chameleon's LU symbols, in the calibration's order.
LU_SYMBOLS = tuple(c.symbol for c in LU_CODELETS)
# StarPU considers a history entry calibrated after this many samples
# (STARPU_CALIBRATE_MINIMUM, default 10: src/core/perfmodel/perfmodel_history.c).
CALIBRATE_MINIMUM = 10


def read_history(model: Path) -> list[dict]:
    """History entries of a StarPU model file (perfmodel_history.c format 45, read by
    testbed.starpu.perfmodel_files): arch (`cpu0`, `cuda0`, ...), footprint, size (bytes), mean (us),
    dev (us), n. CPU combinations come first."""
    if not model.exists():
        return []
    rows = [{"arch": f"{c.device}{c.devid}", "footprint": f"{e.footprint:08x}", "size": e.size,
             "mean_us": e.mean_us, "dev_us": e.dev_us, "n": e.nsample} for c in read_model(model) for e in c.entries]
    return sorted(rows, key=lambda r: not r["arch"].startswith("cpu"))


def calibrated(models: Path, machine: str, b: int, cuda: bool = False, app: str = "lu") -> bool:
    """Every entry of tile b of the program's codelets (APP_CODELETS: apps/lu's or Chameleon's)
    has STARPU_CALIBRATE_MINIMUM samples, and with CUDA every kernel that has a CUDA
    implementation in that program has a CUDA entry."""
    for codelet in APP_CODELETS[app]:
        sym = codelet.symbol
        size = codelet.size_bytes(b)
        entries = [e for e in read_history(models / f"{sym}.{machine}") if e["size"] == size]
        if not entries or min(e["n"] for e in entries) < CALIBRATE_MINIMUM:
            return False
        if cuda and codelet.cuda and not any(e["arch"].startswith("cuda") for e in entries):
            return False
    return True



def read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.open())) if path.exists() else []


def numa_rows(out: Path) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for f in sorted((out / "numa" / "raw").glob("*.csv")):
        rows += read_csv(f)
    return rows


def write_matrices(out: Path, rows: list[dict[str, str]]) -> list[Path]:
    """One CSV per kernel, b and load: rows thread node, columns data node."""
    written = []
    groups: dict[tuple[str, str, str], list[dict[str, str]]] = {}
    for r in rows:
        groups.setdefault((r["kernel"], r["b"], r["load"]), []).append(r)
    for (kernel, b, load), cells in groups.items():
        nodes = sorted({int(c["thread_node"]) for c in cells} | {int(c["data_node"]) for c in cells})
        by = {(int(c["thread_node"]), int(c["data_node"])): c for c in cells}
        path = out / "numa" / f"matrix-{kernel}-b{b}-{load}.csv"
        with atomic_file(path) as fh:
            w = csv.writer(fh)
            w.writerow(["quantity", "thread_node", *[f"data_node_{d}" for d in nodes]])
            for qty in ("median_s", "gflops", "factor"):
                for t in nodes:
                    vals = []
                    for d in nodes:
                        c = by.get((t, d))
                        local = by.get((t, t))
                        if c is None:
                            vals.append("")
                        elif qty == "factor":
                            vals.append(f"{float(c['median_s']) / float(local['median_s']):.4f}" if local else "")
                        else:
                            vals.append(c[qty])
                    w.writerow([qty, t, *vals])
        written.append(path)
    return written


def codelet_table(out: Path, machine: str) -> list[dict[str, object]]:
    table = []
    scopes = [("all", out / "sampling" / "codelets" / "45")]
    scopes += [(p.name.removeprefix("codelets-"), p / "45") for p in sorted(out.glob("codelets-numa*")) if p.is_dir()]
    for scope, d in scopes:
        for sym in (*LU_SYMBOLS, CHAMELEON_GENERATION.symbol):  # a calibration of Chameleon has dplgsy
            for e in read_history(d / f"{sym}.{machine}"):
                b = round((e["size"] / 8 / BY_SYMBOL[sym].buffers) ** 0.5)
                table.append({"scope": scope, "arch": e["arch"], "symbol": sym, "b": b, "mean_s": e["mean_us"] * 1e-6,
                              "dev_s": e["dev_us"] * 1e-6, "rel_std": e["dev_us"] / e["mean_us"] if e["mean_us"] else 0,
                              "n": e["n"]})
    return table


def _kernel_timing(out: Path, machine: str, sym: str, arch: str, ref: int, flops: str, mine: dict) -> dict | None:
    """time_s/exponent/rel_std of one kernel on one arch at the reference tile, citing the model."""
    if ref not in mine:
        return None
    r = mine[ref]
    src = (f"calibration/{out.name}/sampling/codelets/45/{sym}.{machine}, {arch}_impl0 history entry b={ref} "
           f"(StarPU mean over n={r['n']})")
    if len(mine) >= 2:
        lo = min(mine)
        expo = math.log(float(mine[ref]["mean_s"]) / float(mine[lo]["mean_s"])) / math.log(ref / lo)
        exponent = {"value": round(expo, 3), "derived": f"log-log slope of the b={lo} and b={ref} means of {src.split(',')[0]}"}
    elif sym in ("dplrnt", CHAMELEON_GENERATION.symbol):
        exponent = {"value": 2, "derived": "one tile size calibrated: generating b^2 entries, time assumed proportional to b^2"}
    else:
        exponent = {"value": 3, "derived": f"one tile size calibrated: time assumed proportional to the flop count {flops}"}
    return {"time_s": {"value": float(r["mean_s"]), "source": src}, "exponent": exponent,
            "rel_std": {"value": round(float(r["rel_std"]), 4), "source": src + ", dev/mean"}}


def write_kernels_yaml(out: Path, machine: str, codelets: list[dict[str, object]]) -> bool:
    """Kernel times at the largest calibrated tile, citing the bundle (format of
    calibration/*-public/kernels.yaml, read through machine descriptions)."""
    rows = [r for r in codelets if r["scope"] == "all"]
    if not rows:
        return False
    ref = max(int(r["b"]) for r in rows)
    kernels: dict[str, dict] = {}
    # The CPU models and those of the first GPU (machine descriptions have one figure per GPU model).
    for arch, key in (("cpu0", "cpu"), ("cuda0", "cuda")):
        for sym in LU_SYMBOLS:
            measured = sym
            if sym == "dplrnt" and not any(r["symbol"] == sym for r in rows):
                measured = CHAMELEON_GENERATION.symbol  # a calibration of Chameleon times its generation
            timing = _kernel_timing(out, machine, measured, arch, ref, BY_SYMBOL[sym].flops,
                                    {int(r["b"]): r for r in rows if r["symbol"] == measured and r["arch"] == arch})
            if timing:
                kernels.setdefault(sym, {"flops": BY_SYMBOL[sym].flops})[key] = timing
    doc = {"bundle": out.name, "kind": "measured", "machine": machine, "reference_tile": ref, "kernels": kernels}
    with atomic_file(out / "kernels.yaml") as fh:
        fh.write(f"# Measured by `testbed calibrate --machine {machine}`; see summary.md and provenance.yaml.\n")
        yaml.safe_dump(doc, fh, sort_keys=False)
    return True
