"""Stage 2, platforms: numasim SimGrid XML, StarPU-SimGrid inputs, the platform cache, StarPU bus platforms."""
