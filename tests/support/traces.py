"""A tiny numasim run with its task and transfer traces."""

from __future__ import annotations

from pathlib import Path

from testbed import ROOT
from testbed.run.engines.numasim import run_binary

DATA = ROOT / "simulator" / "tests" / "data"


def run_tiny(out: Path, seed: int) -> tuple[Path, Path, dict]:
    tasks, transfers = out / f"tasks-{seed}.csv", out / f"transfers-{seed}.csv"
    result = run_binary({
        "platform": str(DATA / "tiny2.xml"),
        "perfmodels": {"tiny": str(DATA / "tiny_sampling")},
        "workload": {"kind": "lu", "n": 960, "b": 96, "distribution": {"kind": "block-cyclic", "p": 1, "q": 2}},
        "env": {"STARPU_SCHED": "dmdas"},
        "seed": seed,
        "variability": True,
        "trace": str(tasks),
        "transfers": str(transfers),
    })
    return tasks, transfers, result
