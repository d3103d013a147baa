"""Stage 3, runs: one simulation (`simulate`), the engines, tile distributions, factors, caches, campaign batches."""
