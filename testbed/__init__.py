"""Simulation testbed for task-based runtimes on NUMA, multi-GPU clusters."""

from pathlib import Path

__version__ = "0.1.0"

#: Root of the source tree (the testbed is used from a checkout).
ROOT = Path(__file__).resolve().parent.parent
