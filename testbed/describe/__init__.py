"""Stage 1, describe machines: machine/cluster YAML, hwloc topologies, GPUs, descriptions from calibration bundles."""
