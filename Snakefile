# Entry point of `snakemake all`: platforms -> design -> campaign batches -> analysis -> report.
# `snakemake sensitivity`: the sensitivity of the predictions to the machine parameters (not in `all`).
# Rules live in workflows/*.smk; the embedded default is config/config.yaml
# (`snakemake --config scale=study` selects the full study size).
from snakemake.utils import min_version

from testbed.common.yaml_input import check_yaml_file

min_version("9.0")

# The embedded config through the project's YAML reader before snakemake's own loader reads it:
# an alias bomb, a duplicate key or a 20-digit integer is one line and exit 2, not minutes of
# memory growth (a --configfile given on the command line is read by snakemake before this file:
# `testbed workflow`, testbed/study/workflow.py, checks those first).
check_yaml_file("config/config.yaml")


configfile: "config/config.yaml"


# Validated by workflows/common.smk (testbed.study.design.validate_config): one line per mistake,
# where snakemake's validate() printed the whole schema.
include: "workflows/common.smk"


wildcard_constraints:
    experiment="|".join(EXPERIMENTS),
    batch=r"\d\d\d+",


include: "workflows/platforms.smk"
include: "workflows/calibrate.smk"
include: "workflows/experiments.smk"
include: "workflows/analyze.smk"
include: "workflows/report.smk"
include: "workflows/sensitivity.smk"


# Under a batch executor (profiles/slurm, profiles/oar) only the heavy jobs go to the queue:
# campaign and sensitivity batches (minutes of simulation) and a calibration (a whole node).
# The rest runs where snakemake runs (trace_pair: two runs, seconds to half a minute; explain: the
# mechanism ledger's paired runs, seconds at ci scale and minutes at the study's, on --local-cores).
localrules:
    all,
    explain,
    platforms,
    design,
    runs,
    analyze_tables,
    analyze_plots,
    trace_pair,
    report,
    calibrate,
    sensitivity_plan,
    sensitivity_samples,
    sensitivity_screening,
    sensitivity_indices,
    sensitivity_summary,
    sensitivity,


rule all:
    default_target: True
    input:
        "results/report/report.html",
        "results/report/report.md",
        expand("results/{experiment}/anova.csv", experiment=EXPERIMENTS),
