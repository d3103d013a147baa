# Shared by workflows/*.smk: the resolved experiments (scale overrides applied)
# and the input functions that depend on them.
import json

from testbed.design import resolve_experiment, validate_config

config = validate_config(config, "config/config.yaml")
SCALE = config["scale"]
#: experiment name -> resolved experiment (what `testbed design --spec` receives)
EXPERIMENTS = {
    e["name"]: resolve_experiment(config, e["name"], SCALE, "config/config.yaml")
    for e in config["experiments"]
}
#: whether workflows/platforms.smk (generating results/platforms/CLUSTER) is there
HAVE_PLATFORMS = Path(workflow.basedir, "workflows", "platforms.smk").exists()


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
    """The generated platform of the experiment cluster, when platforms.smk is included."""
    if not HAVE_PLATFORMS:
        return []
    return [f"results/platforms/{EXPERIMENTS[wildcards.experiment]['cluster']}"]


def all_platform_dirs(wildcards):
    if not HAVE_PLATFORMS:
        return []
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
