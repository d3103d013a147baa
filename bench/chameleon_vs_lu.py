"""Chameleon's own LU against apps/lu, on the same sizes, through the testbed's engines.

Three comparisons, each side run by `testbed.run.simulate.simulate` (the code experiments use):

1. real: `--engine real` on this machine (cluster local-1), apps/lu against Chameleon's LU
   (app chameleon: apps/chameleon_lu, which does what chameleon_dtesting -o getrf_nopiv does;
   the figures of bench/RESULTS.md were measured with chameleon_dtesting itself), alternated,
   REPS runs each per size; Chameleon's residual check on one extra run per size.
2. starpu-simgrid: the same two programs under StarPU-SimGrid on chifflet-1 with STARPU_NCUDA=0
   (the Chameleon SimGrid build has CPU codelets only), the generated models; deterministic.
3. numasim on each program's models: `testbed calibrate --app lu|chameleon` on this machine
   (codelet models only matter here; the bundles go to --work), then numasim on local-1 with
   `--perfmodel-dir local=<bundle>/sampling` against the real medians of that program.

Needs an installed Chameleon of both flavours and apps/chameleon_lu built against them
(chameleon_app.driver). Usage:

    .venv/bin/python bench/chameleon_vs_lu.py [--reps 5] [--work DIR] [--out bench/results/chameleon_vs_lu.json]

Prints the markdown tables recorded in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import tempfile
from pathlib import Path

from testbed import ROOT
from testbed.run.engines import RunSpec, chameleon_app
from testbed.run.simulate import simulate
from testbed.starpu.sampling_dir import ModelDir

REAL_SIZES = ((960, 192), (1920, 192), (2880, 192))
SIMGRID_SIZES = ((9600, 960), (19200, 960))
CAL_B = 192


def real_runs(work: Path, reps: int) -> list[dict]:
    rows = []
    for n, b in REAL_SIZES:
        spans: dict[str, list[float]] = {"lu": [], "chameleon": []}
        for rep in range(reps):
            for app in ("lu", "chameleon"):  # alternated: drifts of the machine hit both alike
                out = simulate(RunSpec(engine="real", app=app, cluster="local-1", n=n, b=b, seed=rep + 1,
                                       env={"STARPU_HOME": str(work / "home")}, workdir=work))
                spans[app].append(out["makespan_s"])
        check = simulate(RunSpec(engine="real", app="chameleon", cluster="local-1", n=n, b=b, check=True,
                                 env={"STARPU_HOME": str(work / "home")}, workdir=work))
        lu, ch = statistics.median(spans["lu"]), statistics.median(spans["chameleon"])
        rows.append({"n": n, "b": b, "lu_s": spans["lu"], "chameleon_s": spans["chameleon"], "lu_median_s": lu,
                     "chameleon_median_s": ch, "ratio": ch / lu, "chameleon_residual": check["residual"],
                     "chameleon_check_passed": check["check_passed"], "threads": check["threads"]})
        print(f"real N={n} b={b}: apps/lu {lu:.4f} s, Chameleon {ch:.4f} s (x{ch / lu:.3f}), "
              f"residual {check['residual']:.2e}", flush=True)
    return rows


def simgrid_runs(work: Path) -> list[dict]:
    rows = []
    for n, b in SIMGRID_SIZES:
        res = {app: simulate(RunSpec(engine="starpu-simgrid", app=app, cluster="chifflet-1", n=n, b=b,
                                     env={"STARPU_NCUDA": "0"}, workdir=work))
               for app in ("lu", "chameleon")}
        lu, ch = res["lu"]["makespan_s"], res["chameleon"]["makespan_s"]
        rows.append({"n": n, "b": b, "lu_s": lu, "chameleon_s": ch, "ratio": ch / lu,
                     "wall_lu_s": res["lu"]["wall_s"], "wall_chameleon_s": res["chameleon"]["wall_s"]})
        print(f"starpu-simgrid chifflet-1 (CPU only) N={n} b={b}: apps/lu {lu:.3f} s, Chameleon {ch:.3f} s (x{ch / lu:.4f})",
              flush=True)
    return rows


def numasim_on_models(work: Path, real: list[dict]) -> list[dict]:
    from testbed.calibrate import calibrate as cal

    rows = []
    for app in ("lu", "chameleon"):
        bundle = work / f"cal-{app}" / "local"
        opts = cal.Options(machine="local", out=bundle, tile_sizes=[CAL_B], reps=3, bw_mb=32, bw_reps=2, lu_nt=10,
                           max_rounds=40, history_max_error=1000, lu_reps=1, paired_runs=0, app=app)
        cal.calibrate(opts, log=lambda line: None)
        models = {"local": ModelDir(bundle / "sampling", "local")}
        for r in real:
            sim = simulate(RunSpec(engine="numasim", cluster="local-1", n=r["n"], b=r["b"], workdir=work,
                                   perfmodel_dirs=models))
            measured = r[f"{app}_median_s"]
            rows.append({"app": app, "n": r["n"], "b": r["b"], "numasim_s": sim["makespan_s"], "real_median_s": measured,
                         "error": sim["makespan_s"] / measured - 1})
            print(f"numasim on {app}'s models N={r['n']}: {sim['makespan_s']:.4f} s vs real {measured:.4f} s "
                  f"({100 * (sim['makespan_s'] / measured - 1):+.1f} %)", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "chameleon_vs_lu.json"))
    args = ap.parse_args()
    chameleon = {f: str(chameleon_app.installed_chameleon(f)) for f in ("native", "simgrid")}
    for f in chameleon:
        chameleon_app.driver(f)  # built against it, before anything runs
    with tempfile.TemporaryDirectory(prefix="chameleon-vs-lu-", dir=args.work) as tmp:
        work = Path(tmp)
        real = real_runs(work, args.reps)
        sg = simgrid_runs(work)
        models = numasim_on_models(work, real)
    doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": platform.node(), "cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0],
           "chameleon_prefixes": {f: Path(p).name for f, p in chameleon.items()}, "reps": args.reps,
           "real": real, "starpu_simgrid": sg, "numasim_on_models": models}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print("\n| N | b | apps/lu real (median) | Chameleon real (median) | Chameleon / apps/lu | Chameleon residual |")
    print("|---|---|---|---|---|---|")
    for r in real:
        print(f"| {r['n']} | {r['b']} | {r['lu_median_s']:.4f} s | {r['chameleon_median_s']:.4f} s | {r['ratio']:.3f} "
              f"| {r['chameleon_residual']:.1e} ({'passed' if r['chameleon_check_passed'] else 'FAILED'}) |")
    print("\n| N | b | apps/lu StarPU-SimGrid | Chameleon StarPU-SimGrid | ratio |")
    print("|---|---|---|---|---|")
    for r in sg:
        print(f"| {r['n']} | {r['b']} | {r['lu_s']:.3f} s | {r['chameleon_s']:.3f} s | {r['ratio']:.4f} |")
    print("\n| models of | N | numasim | real median | error |")
    print("|---|---|---|---|---|")
    for r in models:
        print(f"| {r['app']} | {r['n']} | {r['numasim_s']:.4f} s | {r['real_median_s']:.4f} s | {100 * r['error']:+.1f} % |")


if __name__ == "__main__":
    main()
