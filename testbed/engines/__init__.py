"""Engines that run one LU: each module exposes ``run(spec: RunSpec) -> dict``.

The returned dict holds at least ``makespan_s`` and ``tasks``; ``testbed.simulate``
adds the common fields (engine, cluster, n, b, factors, env, seed, wall_s).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ENGINES = {
    "numasim": "testbed.engines.numasim",
    "starpu-simgrid": "testbed.engines.starpu_simgrid",
    "real": "testbed.engines.real",
}


@dataclass
class RunSpec:
    """Everything one run needs; `env` already holds the factors' StarPU variables."""

    engine: str
    cluster: str
    n: int
    b: int
    env: dict[str, str] = field(default_factory=dict)
    factors: dict[str, int] = field(default_factory=dict)
    seed: int = 1
    distribution: dict = field(default_factory=lambda: {"kind": "block-cyclic"})
    variability: bool = True
    check: bool = False  # real engine: compute the residual ||A - LU|| / ||A||
    symbols: str | None = None  # perf-model symbol set: chameleon | starpu-lu (auto-detected if None)
    trace: Path | None = None
    transfers: Path | None = None
    platform_dir: Path | None = None  # output of `testbed platform`; generated if None
    workdir: Path | None = None  # scratch directory for the engine
