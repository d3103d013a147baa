"""Stage 4, studies: design tables of experiments, sensitivity to the machine parameters."""
