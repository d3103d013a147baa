"""Synthetic experiments the tests analyse, and the small experiment specs they run."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd

from testbed.analyze.runs_table import RUN_COLUMNS

#: true model: intercept 100, main effects, 2- and 3-factor interactions (coded -1/+1)
TRUE = {"A": 5.0, "C": -3.0, "A:B": 2.0, "B:D": -1.2, "A:B:C": 1.5, "B:C:D": -0.8}


def synthetic_runs(factors: str = "ABCD", reps: int = 3, sigma: float = 1.0, seed: int = 0,
                   coefficients: dict[str, float] = TRUE, intercept: float = 100.0) -> pd.DataFrame:
    """A runs table of a full 2^k design whose makespan follows `coefficients` plus N(0, sigma) noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for levels in itertools.product([-1, 1], repeat=len(factors)):
        lv = dict(zip(factors, levels, strict=False))
        mean = intercept + sum(c * math.prod(lv[f] for f in t.split(":"))
                               for t, c in coefficients.items() if set(t.split(":")) <= set(factors))
        for rep in range(1, reps + 1):
            rows.append({
                "experiment": "synthetic", "run": len(rows), "order": len(rows), "batch": 0,
                "config": "".join(f.lower() for f in factors if lv[f] == 1) or "(1)", "repetition": rep,
                "seed": len(rows) + 1, "engine": "real", "cluster": "local-1", "n": 960, "b": 192,
                "distribution": '{"kind": "block-cyclic"}', "env": "{}", "variability": True,
                "makespan_s": mean + rng.normal(0, sigma), "wall_s": 0.5, "tasks": 55, **lv,
            })
    return pd.DataFrame(rows)[RUN_COLUMNS + list(factors)]


SPEC = {"name": "syn", "cluster": "g5k-lille-21", "engine": "real",
        "workload": {"n": 960, "b": 192, "distribution": {"kind": "block-cyclic"}},
        "factors": {f: [-1, 1] for f in "ABCD"}, "repetitions": 3, "seed": 1, "batches": 2}


#: two factors given as raw StarPU variables (config/factors.yaml targets the study's nodes)
TINY = {
    "name": "tiny", "cluster": "local-1", "engine": "real",
    "workload": {"n": 960, "b": 192, "distribution": {"kind": "block-cyclic"}},
    "factors": {"E": [-1, 1], "S": [-1, 1]},
    "factor_env": {"E": {"low": {"STARPU_SCHED_BETA": "1"}, "high": {"STARPU_SCHED_BETA": "10"}},
                   "S": {"low": {"STARPU_SCHED": "dmdas"}, "high": {"STARPU_SCHED": "eager"}}},
    "design": {"type": "full", "generators": []}, "repetitions": 1, "seed": 3, "randomize": True,
    "batches": 2, "env": {"STARPU_SILENT": "1"}, "variability": True,
}
