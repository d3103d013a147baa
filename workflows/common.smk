# Shared by workflows/*.smk: the resolved experiments (scale overrides applied)
# and the input functions that depend on them.
import json
import shlex
import sys

from testbed.study.design import resolve_experiment, validate_config
from testbed.common.errors import InputError

# Every config mistake is found here, while the Snakefile is read: one line naming the file
# (config/config.yaml, or --config where the value came from the command line), the key and
# the expectation, exit 2, before any DAG or job. Snakemake would print the exception with its
# traceback and exit 1; a SystemExit passes through it untouched.
def _config_source():
    """Where the config came from, as the user wrote it: the files, then the --config values."""
    settings = workflow.config_settings
    files = [str(f) for f in settings.configfiles] if settings.configfiles else ["config/config.yaml"]
    return " + ".join(files + (["--config"] if settings.config else []))


CONFIG_SOURCE = _config_source()
try:
    config = validate_config(config, CONFIG_SOURCE, cli_strings=True)
    SCALE = config["scale"]
    #: experiment name -> resolved experiment (what `testbed design --spec` receives)
    EXPERIMENTS = {
        e["name"]: resolve_experiment(config, e["name"], SCALE, CONFIG_SOURCE)
        for e in config["experiments"]
    }
except InputError as exc:
    print(f"error: {exc.message()}", file=sys.stderr)
    sys.exit(2)


# How rules run the testbed CLI: the interpreter snakemake runs under, as `python -m testbed`, so
# `.venv/bin/snakemake` runs the venv's testbed whether or not the venv is activated (a bare
# `testbed` is looked up on PATH: exit status 127 without it, or another install's). With
# `--sdm conda` a job runs in workflows/envs/testbed.yaml's environment: its own python.
from snakemake.settings.types import DeploymentMethod

if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
    TESTBED = "python -m testbed"
else:
    TESTBED = f"{shlex.quote(sys.executable)} -m testbed"


def batch_names(experiment):
    """Zero-padded batch numbers of an experiment (batch-000.csv sorts first)."""
    width = max(3, len(str(EXPERIMENTS[experiment]["batches"] - 1)))
    return [f"{i:0{width}d}" for i in range(EXPERIMENTS[experiment]["batches"])]


def batch_files(wildcards):
    return expand(
        "results/{experiment}/batches/batch-{batch}.csv",
        experiment=wildcards.experiment,
        batch=batch_names(wildcards.experiment),
    )


def platform_dirs(wildcards):
    """The generated platform of the experiment cluster (workflows/platforms.smk)."""
    return [f"results/platforms/{EXPERIMENTS[wildcards.experiment]['cluster']}"]


def all_platform_dirs(wildcards):
    clusters = sorted({e["cluster"] for e in EXPERIMENTS.values()})
    return [f"results/platforms/{c}" for c in clusters]


def boxplot_args(wildcards):
    """--boxplot options for the factor subsets that the experiment crosses."""
    crossed = {f for f, lv in EXPERIMENTS[wildcards.experiment]["factors"].items() if len(lv) == 2}
    subsets = [s for s in config["analysis"]["boxplots"] if set(s) <= crossed]
    return " ".join(f"--boxplot {','.join(s)}" for s in subsets)


# ---- sensitivity (workflows/sensitivity.smk) and the report's section of it
SENSITIVITY = config["sensitivity"]


def sensitivity_batches(experiment, stage):
    """Batch tables of one stage (as many as config sensitivity.<stage>.batches)."""
    count = SENSITIVITY[stage]["batches"]
    width = max(3, len(str(count - 1)))
    return [
        f"results/sensitivity/{experiment}/{stage}/batches/batch-{i:0{width}d}.csv"
        for i in range(count)
    ]


def sensitivity_summaries(wildcards):
    """Summaries the report waits for: those of `snakemake sensitivity` only."""
    targets = workflow.dag_settings.targets if workflow.dag_settings else ()
    if "sensitivity" not in targets:
        return []
    return [f"results/sensitivity/{e}/summary.json" for e in config["sensitivity"]["experiments"]]


def sensitivity_args(wildcards, input):
    """--sensitivity NAME=DIR for each experiment with a summary (made now or before)."""
    found = [
        e
        for e in config["sensitivity"]["experiments"]
        if f"results/sensitivity/{e}/summary.json" in input.sensitivity
        or Path(f"results/sensitivity/{e}/summary.json").exists()
    ]
    return " ".join(f"--sensitivity {e}=results/sensitivity/{e}" for e in found)
