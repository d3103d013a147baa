"""dtrsm / dgemm duration ratios at b = 960 in the LU models StarPU ships (docs/kernel-rates.md).

    python -m bench.kernel_ratios [--b 960]

Reads tools/perfmodels/sampling/codelets/45/starpu_dlu_lu_model_{gemm,trsm_ll,trsm_ru}.<machine>
of StarPU's source (.deps/src/starpu-1.4.10, put there by envs/setup.sh) and prints, per machine and worker, the mean dgemm time
and the trsm_ll / gemm and trsm_ru / gemm ratios: the spread of the CPU dtrsm range and the value
and range of the GPU dtrsm time of chifflet-public.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

from testbed import ROOT

CODELETS = ROOT / ".deps" / "src" / "starpu-1.4.10" / "tools" / "perfmodels" / "sampling" / "codelets" / "45"
MACHINES = ("attila", "idgraf", "mirage", "sirocco")


def history_means(path: Path) -> dict[str, dict[int, float]]:
    """{arch: {size: mean_us}} of the history tables (`# hash size flops mean (us) ...` rows after
    each `# Model for <arch>` comment). A tolerant reader: some shipped files have non-linear
    regression lines that testbed/starpu/perfmodel_files.py (strict) refuses, and only the
    history tables are needed here."""
    out: dict[str, dict[int, float]] = {}
    arch, table = None, False
    for line in path.read_text().splitlines():
        m = re.match(r"# Model for (\S+)", line)
        if m:
            arch, table = m.group(1), False
        elif line.startswith("# hash"):
            table = arch is not None
        elif table and line and not line.startswith("#"):
            f = line.split()
            out.setdefault(arch, {})[int(f[1])] = float(f[3])
        else:
            table = False
    return out


def ratios(b: int) -> list[dict]:
    """One row per machine and worker kind (cpu, cuda): dgemm ms, trsm_ll/gemm, trsm_ru/gemm
    (min, max and mean over the workers of that kind)."""
    tile = b * b * 8
    rows = []
    for machine in MACHINES:
        means = {k: history_means(CODELETS / f"starpu_dlu_lu_model_{k}.{machine}") for k in ("gemm", "trsm_ll", "trsm_ru")}
        for kind in ("cpu", "cuda"):
            archs = sorted(a for a in means["gemm"] if a.startswith(kind) and 3 * tile in means["gemm"][a])
            per = {k: [means[k][a][2 * tile] / means["gemm"][a][3 * tile] for a in archs
                       if 2 * tile in means[k].get(a, {})] for k in ("trsm_ll", "trsm_ru")}
            if not archs or not per["trsm_ll"] or not per["trsm_ru"]:
                continue
            rows.append({"machine": machine, "kind": kind, "workers": len(archs),
                         "dgemm_ms": statistics.mean(means["gemm"][a][3 * tile] for a in archs) / 1e3,
                         **{f"{k}_{f.__name__}": f(v) for k, v in per.items() for f in (min, max, statistics.mean)}})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--b", type=int, default=960)
    args = ap.parse_args(argv)
    if not CODELETS.is_dir():
        print(f"error: {CODELETS.relative_to(ROOT)}: StarPU's source is not there (make setup)", file=sys.stderr)
        return 2
    print("machine kind workers dgemm_ms trsm_ll/gemm(min-max,mean) trsm_ru/gemm(min-max,mean)")
    for r in ratios(args.b):
        print(f"{r['machine']} {r['kind']} {r['workers']} {r['dgemm_ms']:.2f} "
              f"{r['trsm_ll_min']:.3f}-{r['trsm_ll_max']:.3f},{r['trsm_ll_mean']:.3f} "
              f"{r['trsm_ru_min']:.3f}-{r['trsm_ru_max']:.3f},{r['trsm_ru_mean']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
