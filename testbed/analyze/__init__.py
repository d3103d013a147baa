"""Stage 5, analysis: runs tables, linear models, ANOVA, plots."""
