"""Traces of numasim runs: reading, Paje and StarVZ export, comparisons, traced reruns."""
