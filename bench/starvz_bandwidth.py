"""The StarVZ export's per-node MPI bandwidth against the node's NIC (bench/RESULTS.md).

Runs numasim with its transfer log, exports it with `testbed trace-starvz`, and compares each MPI
thread's `Bandwidth In/Out (MB/s)` with the capacity of the node's link to the network (its NIC's
bandwidth, at most the cluster's host link): the largest sample, the share of the busy time above
the capacity, and the bytes the variables carry against the log's. The same figures for the sum
of each message's average rate (bytes / duration, StarPU's FxT tool's way), computed here from
the log, for comparison. Prints one JSON object (and writes it to --out).

    .venv/bin/python bench/starvz_bandwidth.py --cluster g5k-lille-21 --n 28800 --b 960 \\
        --distribution heterogeneous --seed 1
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
BW = ("Bandwidth In (MB/s)", "Bandwidth Out (MB/s)")


def _value(v) -> float:
    return float(v["value"] if isinstance(v, dict) else v)


def capacities(cluster: str) -> list[float]:
    """Each rank's link to the network, MB/s: its machine's NICs, at most the cluster's host link
    (ranks in the cluster file's node order)."""
    spec = yaml.safe_load((ROOT / "platforms" / "clusters" / f"{cluster}.yaml").read_text())
    link = _value(spec["network"]["link_bandwidth_Bps"])
    out = []
    for group in spec["nodes"]:
        machine = yaml.safe_load((ROOT / "platforms" / "machines" / f"{group['machine']}.yaml").read_text())
        nic = sum(_value(n["bandwidth_Bps"]) for n in machine.get("nics", [])) or link
        out += [min(nic, link) / 1e6] * int(group.get("count", 1))
    return out


def summary(series: dict[tuple[str, str], list[tuple[float, float, float]]], cap: list[float]) -> dict:
    """series: (rank, direction) -> [(start ms, end ms, MB/s)]."""
    peak, where = max((v, k) for k, rows in series.items() for _, _, v in rows)
    busy = sum(e - s for rows in series.values() for s, e, v in rows if v > 0)
    over = sum(e - s for (rank, _), rows in series.items() for s, e, v in rows if v > cap[int(rank)] * (1 + 1e-9))
    carried = sum(v * (e - s) for rows in series.values() for s, e, v in rows) / 1e3  # MB
    return {"max_MBps": round(peak, 1), "at": f"{where[0]}_mpict {where[1]}",
            "max_over_capacity": round(peak / cap[int(where[0])], 4),
            "busy_share_above_capacity": round(over / busy, 4), "MB": round(carried, 3)}


def exported(out: Path) -> dict[tuple[str, str], list[tuple[float, float, float]]]:
    series = defaultdict(list)
    with gzip.open(out / "paje.variable.csv.gz", "rt") as fh:
        for line in fh.read().splitlines()[1:]:
            _, res, type_, start, end, _, value = (f.strip() for f in line.split(","))
            if res.endswith("_mpict") and type_ in BW:
                series[(res.split("_")[0], type_.split()[1])].append((float(start), float(end), float(value)))
    return series


def averages(transfers: Path, rank_of: dict[str, int]) -> dict[tuple[str, str], list[tuple[float, float, float]]]:
    """The sum of the messages' bytes / duration under way, per rank and direction."""
    t = pd.read_csv(transfers)
    changes = defaultdict(list)
    for s, e, b, src, dst in zip(t["Start"], t["End"], t["Bytes"], t["Src"], t["Dst"], strict=True):
        a, z = rank_of[src.split(".")[0]], rank_of[dst.split(".")[0]]
        if a == z or e <= s:
            continue
        r = 0.001 * b / ((e - s) * 1e3)
        for key in ((str(a), "Out"), (str(z), "In")):
            changes[key] += [(s * 1e3, r), (e * 1e3, -r)]
    series = {}
    for key, deltas in changes.items():
        deltas.sort()
        total, rows = 0.0, []
        for (at, d), (nxt, _) in zip(deltas, [*deltas[1:], (deltas[-1][0], 0)], strict=True):
            total += d
            if nxt > at:  # rounding leaves a residue where the last message ended: 0 (as the export's 6 decimals)
                rows.append((at, nxt, total if total > 1e-6 else 0.0))
        series[key] = rows
    return series


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cluster", default="g5k-lille-21")
    p.add_argument("--n", type=int, default=28800)
    p.add_argument("--b", type=int, default=960)
    p.add_argument("--distribution", default="heterogeneous")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    cap = capacities(args.cluster)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        run = subprocess.run([sys.executable, "-m", "testbed", "simulate", "--engine", "numasim", "--cluster",
                              args.cluster, "--n", str(args.n), "--b", str(args.b), "--distribution",
                              args.distribution, "--seed", str(args.seed), "--trace", str(d / "tasks.csv"),
                              "--transfers", str(d / "transfers.csv")], capture_output=True, text=True, check=True)
        result = json.loads(run.stdout)
        subprocess.run([sys.executable, "-m", "testbed", "trace-starvz", str(d / "tasks.csv"), "--b", str(args.b),
                        "--transfers", str(d / "transfers.csv"), "--out", str(d / "sv")], capture_output=True,
                       check=True)
        tasks = pd.read_csv(d / "tasks.csv", usecols=["ResourceId", "Node"])
        rank_of = {r.split(".")[0]: int(n) for r, n in zip(tasks["ResourceId"], tasks["Node"], strict=True)}
        log = pd.read_csv(d / "transfers.csv")
        mpi = [rank_of[s.split(".")[0]] != rank_of[t.split(".")[0]] for s, t in zip(log["Src"], log["Dst"], strict=True)]
        report = {"cluster": args.cluster, "n": args.n, "b": args.b, "distribution": args.distribution,
                  "seed": args.seed, "makespan_s": result["makespan_s"], "mpi_messages": result["mpi_messages"],
                  "capacity_MBps": sorted(set(cap)),
                  "log_MB_in_plus_out": round(2 * float(log["Bytes"][mpi].sum()) / 1e6, 3),
                  "export": summary(exported(d / "sv"), cap),
                  "sum_of_averages": summary(averages(d / "transfers.csv", rank_of), cap)}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
