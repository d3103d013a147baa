#!/usr/bin/env python3
"""numasim against an older build of itself at the study's scale: how much faster, and how far apart the results.

g5k-lille-21 (`testbed platform`), N = 96000, b = 960 (338,350 tasks), heterogeneity-aware mapping
(the campaign's), dmdas, variability on. Two checks:

* results: every run description of a set of seeds and factor levels, with both binaries: which
  fields of the summary differ (every field the old binary prints but wall_s, as printed) and the
  makespans' relative difference. A change that keeps the results shows none; one that moves them
  (validated instead, bench/RESULTS.md) shows by how much on each run description;
* speed: the all-default run description, old and new binary alternately (old, new, old, new...),
  `--pairs` times each after one warm-up of each; per run the user+sys CPU time of the child
  (getrusage), its wall time and peak RSS. The ratio is taken pair by pair (old / new CPU time),
  so that a drift of the machine's speed cancels; its median is the figure.

The old binary: `--old PATH`, or built from `--old-commit` (default 7c43ff8, before the speed
work) in a scratch git worktree outside the repository (`--scratch`, default under the system's
temporary directory), reused when already built there. Each binary runs the platform its own
commit's generator writes (the old one through the scratch worktree's testbed package; with
`--old PATH`, the new platform for both).

Usage: .venv/bin/python bench/numasim_vs_old.py [--pairs 5] [--old-commit 17c4d3c | --old PATH]
           [--out bench/results/numasim_vs_old.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NEW = ROOT / "build" / "simulator" / "numasim"
CLUSTER = "g5k-lille-21"
# (factor levels at +1, seed): the identity set; the first is also the timed one.
IDENTITY = [("", 1), ("", 2), ("A", 2), ("E", 3), ("ABCE", 1), ("D", 4), ("FG", 5), ("AE", 6)]


def build_old(commit: str, scratch: Path) -> Path:
    """numasim at `commit`, built in a git worktree at `scratch` (outside the repository)."""
    binary = scratch / "build" / "simulator" / "numasim"
    if binary.exists():
        return binary
    if not scratch.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(scratch), commit], check=True)
    build = scratch / "build" / "simulator"
    subprocess.run(["cmake", "-S", str(scratch / "simulator"), "-B", str(build), "-G", "Ninja",
                    "-DCMAKE_BUILD_TYPE=Release"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(build), "--target", "numasim"], check=True)
    return binary


def old_platform(scratch: Path, out: Path) -> bool:
    """The platform as the old commit's own generator writes it (its testbed package, in the
    scratch worktree), so that the old binary runs what it ran then; False when it cannot."""
    code = ("import sys; from pathlib import Path; from testbed.describe.machines import load_cluster; "
            "from testbed.platform.platform_cmd import generate; "
            f"generate(load_cluster({CLUSTER!r}), Path(sys.argv[1]), (960,))")
    env = dict(os.environ, PYTHONPATH=str(scratch))
    proc = subprocess.run([sys.executable, "-c", code, str(out)], cwd=scratch, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"warning: the old commit's platform generator failed ({proc.stderr.strip()[-300:]}): "
              "the old binary runs the new platform", file=sys.stderr)
    return proc.returncode == 0


def timed(binary: Path, run_file: Path) -> dict:
    """One child under os.wait4: its own CPU time and peak RSS."""
    t0 = time.monotonic()
    proc = subprocess.Popen([str(binary), str(run_file)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{binary} failed ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
    proc.stderr.close()
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall, "max_rss_mb": usage.ru_maxrss / 1024}


def summary_of(binary: Path, run_file: Path) -> dict:
    """The summary as flat dotted keys, without wall_s."""
    proc = subprocess.run([str(binary), str(run_file)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{binary} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    flat: dict = {}

    def walk(x: dict, prefix: str) -> None:
        for k, v in x.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            else:
                flat[prefix + k] = v

    walk(json.loads(proc.stdout), "")
    flat.pop("wall_s", None)
    return flat


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=5, help="timed runs of each binary, alternated (default 5)")
    p.add_argument("--old", type=Path, default=None, help="the old numasim binary (else built from --old-commit)")
    p.add_argument("--old-commit", default="17c4d3c")
    p.add_argument("--scratch", type=Path, default=None,
                   help="where the old commit is checked out and built (default: a folder of the temporary directory)")
    p.add_argument("--nt", type=int, default=100)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "numasim_vs_old.json")
    args = p.parse_args(argv)
    if not NEW.exists():
        print(f"error: {NEW} is missing (run `make build-simulator`)", file=sys.stderr)
        return 2
    scratch = args.scratch or Path(tempfile.gettempdir()) / f"numasim-old-{args.old_commit}"
    old = args.old or build_old(args.old_commit, scratch)
    from testbed.common.atomic import atomic_file
    from testbed.describe.machines import load_cluster
    from testbed.platform.platform_cmd import generate
    from testbed.run.engines import RunSpec
    from testbed.run.engines.numasim import run_description
    from testbed.run.resolve import resolve_run_env

    identity = []
    with tempfile.TemporaryDirectory(prefix="bench-vs-old-") as tmp:
        pdir = Path(tmp) / "platform"
        generate(load_cluster(CLUSTER), pdir, (960,))
        # The old binary runs its own commit's platform (the generator changes too: the switch's
        # links), when the old commit is checked out (--old-commit) and its generator runs here.
        pdir_old = Path(tmp) / "platform-old"
        own_old_platform = args.old is None and old_platform(scratch, pdir_old)
        runs = []
        for levels, seed in IDENTITY:
            factors = {x: (1 if x in levels else -1) for x in "ABCDEFG"}
            spec = RunSpec(engine="numasim", cluster=CLUSTER, n=args.nt * 960, b=960, factors=factors,
                           **resolve_run_env(CLUSTER, factors, {}, "dmdas").spec_fields(), seed=seed,
                           distribution={"kind": "heterogeneous"}, platform_dir=pdir)
            work = Path(tmp) / f"{levels or 'default'}-s{seed}"
            work.mkdir()
            run_file = work / "run.json"
            run_file.write_text(json.dumps(run_description(spec, pdir, work), indent=1))
            run_old = run_file
            if own_old_platform:
                run_old = work / "run-old.json"
                spec_old = dataclasses.replace(spec, platform_dir=pdir_old)
                run_old.write_text(json.dumps(run_description(spec_old, pdir_old, work), indent=1))
            runs.append((levels or "(all default)", seed, run_file, run_old))
        for levels, seed, run_file, run_old in runs:
            # Every value the old binary prints (fields added to the summary since are not compared).
            a, b = summary_of(old, run_old), summary_of(NEW, run_file)
            differ = sorted(k for k in a if b.get(k) != a[k])
            rel = b["makespan_s"] / a["makespan_s"] - 1
            identity.append({"factors": levels, "seed": seed, "identical": not differ, "different": differ,
                             "fields": len(a), "makespan_s": b["makespan_s"], "old_makespan_s": a["makespan_s"],
                             "makespan_rel_diff": rel})
            print(f"results {levels} seed {seed}: {len(a) - len(differ)} of {len(a)} fields the same "
                  f"(makespan {a['makespan_s']} / {b['makespan_s']} s, {100 * rel:+.2f} %)", flush=True)
        run_file, run_old = runs[0][2], runs[0][3]
        timed(old, run_old), timed(NEW, run_file)  # warm-up (page cache, the platform's files)
        pairs = []
        for i in range(args.pairs):
            o, n = timed(old, run_old), timed(NEW, run_file)
            pairs.append({"old": o, "new": n, "ratio_cpu": o["cpu_s"] / n["cpu_s"]})
            print(f"pair {i + 1}: old {o['cpu_s']:.2f} s CPU ({o['wall_s']:.2f} s wall), new {n['cpu_s']:.2f} s CPU "
                  f"({n['wall_s']:.2f} s wall): {o['cpu_s'] / n['cpu_s']:.2f}x", flush=True)

    def med(who: str, key: str) -> float:
        return statistics.median(x[who][key] for x in pairs)

    record = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": platform.node(),
        "nproc": os.cpu_count(), "loadavg_after": os.getloadavg(), "cluster": CLUSTER, "n": args.nt * 960,
        "b": 960, "distribution": "heterogeneous", "old": f"numasim of {args.old_commit}" if args.old is None else old.name, "old_commit": args.old_commit,
        "old_platform": "its own commit's" if own_old_platform else "the new one",
        "identity": identity, "all_identical": all(x["identical"] for x in identity), "pairs": pairs,
        "median_ratio_cpu": statistics.median(x["ratio_cpu"] for x in pairs),
        "median_cpu_s": {"old": med("old", "cpu_s"), "new": med("new", "cpu_s")},
        "median_wall_s": {"old": med("old", "wall_s"), "new": med("new", "wall_s")},
        "max_rss_mb": {"old": max(x["old"]["max_rss_mb"] for x in pairs),
                       "new": max(x["new"]["max_rss_mb"] for x in pairs)},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(args.out) as fh:
        json.dump(record, fh, indent=1)
    worst = max(abs(x["makespan_rel_diff"]) for x in identity)
    print(f"identical results: {record['all_identical']} ({len(identity)} run descriptions, largest makespan "
          f"difference {100 * worst:.2f} %); "
          f"CPU time old / new, median of {args.pairs} pairs: {record['median_ratio_cpu']:.2f}x "
          f"(medians {record['median_cpu_s']['old']:.2f} / {record['median_cpu_s']['new']:.2f} s); "
          f"peak RSS {record['max_rss_mb']['old']:.0f} / {record['max_rss_mb']['new']:.0f} MB -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
