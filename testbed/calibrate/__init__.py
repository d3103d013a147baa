"""Calibration of a real machine into a bundle: the steps, the bundle's files, its summary and validation."""
