"""Shared by every stage: the error contract, atomic outputs, paths of the built parts, YAML input, commands."""
