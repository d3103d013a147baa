#!/usr/bin/env python3
"""One tile sent to k nodes: the broadcast's time under each StarPU-MPI backend numasim models.

The LU's first value of A(0,0) is read by the k ranks that own the row panel A(0,1..k)
(a tile distribution written here: A(0,0) and every tile below the first row on rank 0, A(0,n)
on rank n), so it is one bag of k cooperative sends (docs/network-model.md, "Cooperative sends").
Every other message goes to rank 0 (its gemms read the row panel), on links the broadcast does not
use, except a forwarder's own uplink: the table counts such messages that start before that
forwarder's last forward ends (`overlap`; the run description gives every node one CPU worker and no GPU, so a
receiver's trsm outlasts its forwarding). The broadcast's time is from its first send's start to
its last reception's end (numasim's transfer log); `1 copy` is the k = 1 case (one message alone).

Backends: `mpi` (StarPU's MPI backend: the owner sends every copy at once), `nmad` with
NewMadeleine's `binomial` tree (the default) and its `chain`. For reference, the ideal times of
a store-and-forward tree with no overlap: ⌈log2(k + 1)⌉ copies (binomial), k copies (chain), and
k copies sharing one link (flat).

Usage: .venv/bin/python bench/nmad_broadcast.py [--k 1 2 4 8 16 20] [--b 480 960 1920] [--out FILE]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.run.engines import RunSpec  # noqa: E402

CLUSTER = "g5k-lille-21"  # 21 nodes on 10 GbE: bags of up to 20 receivers
VARIANTS = {"mpi": ("mpi", None), "nmad binomial": ("nmad", "binomial"), "nmad chain": ("nmad", "chain")}


def distribution(k: int, path: Path) -> int:
    """A(0,n) on rank n (n = 1..k), every other tile on rank 0; returns NT = k + 1."""
    nt = k + 1
    rows = [" ".join(str(n) for n in range(nt))] + [" ".join("0" * nt)] * (nt - 1)
    path.write_text("\n".join(rows) + "\n")
    return nt


def broadcast(transfers: Path) -> dict:
    """The bag's messages: the first message's source is the owner; every message not to it is the bag's."""
    rows = []
    with transfers.open() as fh:
        for r in csv.DictReader(fh):
            src, dst = r["Src"].split(".")[0], r["Dst"].split(".")[0]
            if src != dst:
                rows.append((float(r["Start"]), float(r["End"]), src, dst))
    rows.sort()
    owner = rows[0][2]
    bag = [r for r in rows if r[3] != owner]
    start, end = min(r[0] for r in bag), max(r[1] for r in bag)
    busy: dict[str, float] = {}  # forwarder -> end of its last forward (its uplink's share of the bag)
    for r in bag:
        if r[2] != owner:
            busy[r[2]] = max(busy.get(r[2], 0.0), r[1])
    overlap = sum(1 for r in rows if r[3] == owner and r[2] in busy and r[0] < busy[r[2]])
    return {"time_s": end - start, "copies": len(bag), "forwarders": len(busy), "overlap": overlap,
            "copies_from_owner": sum(1 for r in bag if r[2] == owner)}


def run(k: int, b: int, backend: str, tree: str | None, pdir: Path, work: Path) -> dict:
    dist = work / f"bcast-{k}.dist"
    nt = distribution(k, dist)
    log = work / "transfers.csv"
    spec = RunSpec(engine="numasim", cluster=CLUSTER, n=nt * b, b=b, seed=1, variability=False,
                   env={"STARPU_SCHED": "dmdas", "STARPU_NCPU": "1", "STARPU_NCUDA": "0"},
                   distribution={"kind": "file", "path": str(dist)}, mpi_backend=backend,
                   platform_dir=pdir, transfers=log, workdir=work)
    from testbed.run.engines import numasim

    desc = numasim.run_description(spec, pdir, work)
    if tree:
        desc["mpi"]["tree"] = tree
    numasim.run_binary(desc, work)
    return broadcast(log)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", nargs="*", type=int, default=[1, 2, 4, 8, 16, 20])
    ap.add_argument("--b", nargs="*", type=int, default=[480, 960, 1920])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    from testbed.describe.machines import load_cluster
    from testbed.platform.platform_cmd import generate

    results = []
    with tempfile.TemporaryDirectory(prefix="nmad-bcast-") as tmp:
        work = Path(tmp)
        pdir = work / "platform"
        generate(load_cluster(CLUSTER), pdir, tuple(args.b))
        for b in args.b:
            one = run(1, b, "mpi", None, pdir, work)["time_s"]
            for k in args.k:
                row = {"b": b, "bytes": b * b * 8, "k": k, "one_copy_s": one}
                for name, (backend, tree) in VARIANTS.items():
                    row[name] = run(k, b, backend, tree, pdir, work)
                results.append(row)
                print(f"b={b} k={k}: " + ", ".join(f"{n} {row[n]['time_s'] * 1e3:.2f} ms" for n in VARIANTS),
                      file=sys.stderr)
    print("| tile | k | 1 copy (ms) | mpi (ms) | nmad binomial (ms) | ideal ⌈log2(k+1)⌉ copies | "
          "nmad chain (ms) | ideal k copies | binomial / mpi | overlap |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        one, k = r["one_copy_s"] * 1e3, r["k"]
        mpi, bino, chain = (r[n]["time_s"] * 1e3 for n in VARIANTS)
        over = sum(r[n]["overlap"] for n in VARIANTS)
        print(f"| {r['b']}² ({r['bytes'] / 1e6:.2f} MB) | {k} | {one:.2f} | {mpi:.2f} | {bino:.2f} | "
              f"{math.ceil(math.log2(k + 1)) * one:.2f} | {chain:.2f} | {k * one:.2f} | {bino / mpi:.2f} | {over} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
