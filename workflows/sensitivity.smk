# Sensitivity of the predictions to the uncertain machine parameters: `snakemake sensitivity`
# (not part of `all`). Per experiment of config["sensitivity"]["experiments"], in
# results/sensitivity/<experiment>/: plan (parameters and ranges) -> Morris samples -> batches
# -> screening -> Sobol samples -> batches -> indices -> summary; the report then gets its
# section. A batch table is written atomically when its last sample ends: an interrupted run
# resumes with the missing batches only.
from testbed.describe.machines import cluster_source_files


wildcard_constraints:
    stage="morris|sobol",


rule sensitivity_plan:
    input:
        sources=lambda wildcards: cluster_source_files(
            EXPERIMENTS[wildcards.experiment]["cluster"]
        ),
    output:
        "results/sensitivity/{experiment}/plan.json",
    params:
        testbed=TESTBED,
        spec=lambda wildcards: json.dumps(
            {"experiment": EXPERIMENTS[wildcards.experiment], "sensitivity": SENSITIVITY},
            sort_keys=True,
        ),
    conda:
        "envs/testbed.yaml"
    log:
        "results/sensitivity/{experiment}/logs/plan.log",
    shell:
        "{params.testbed} sensitivity plan --spec {params.spec:q} --out {output} > {log} 2>&1"


rule sensitivity_samples:
    input:
        plan="results/sensitivity/{experiment}/plan.json",
        selected=lambda wildcards: (
            [f"results/sensitivity/{wildcards.experiment}/morris/selected.json"]
            if wildcards.stage == "sobol"
            else []
        ),
    output:
        "results/sensitivity/{experiment}/{stage}/samples.csv",
    params:
        testbed=TESTBED,
        selected=lambda wildcards, input: (
            f"--selected {input.selected}" if input.selected else ""
        ),
    conda:
        "envs/testbed.yaml"
    log:
        "results/sensitivity/{experiment}/logs/{stage}-samples.log",
    shell:
        "{params.testbed} sensitivity sample --plan {input.plan} --stage {wildcards.stage} "
        "{params.selected} --out {output} > {log} 2>&1"


rule sensitivity_batch:
    input:
        plan="results/sensitivity/{experiment}/plan.json",
        samples="results/sensitivity/{experiment}/{stage}/samples.csv",
    output:
        "results/sensitivity/{experiment}/{stage}/batches/batch-{batch}.csv",
    params:
        testbed=TESTBED,
    conda:
        "envs/testbed.yaml"
    log:
        "results/sensitivity/{experiment}/logs/{stage}-batch-{batch}.log",
    benchmark:
        "results/sensitivity/{experiment}/benchmarks/{stage}-batch-{batch}.tsv"
    threads: 1
    resources:
        runtime=60,
    shell:
        # progress of each sample on the terminal and in the log
        "{params.testbed} sensitivity batch --plan {input.plan} --stage {wildcards.stage} "
        "--samples {input.samples} --batch {wildcards.batch} --out {output} 2> >(tee {log} >&2)"


rule sensitivity_screening:
    input:
        plan="results/sensitivity/{experiment}/plan.json",
        samples="results/sensitivity/{experiment}/morris/samples.csv",
        batches=lambda wildcards: sensitivity_batches(wildcards.experiment, "morris"),
    output:
        outputs="results/sensitivity/{experiment}/morris/outputs.csv",
        indices="results/sensitivity/{experiment}/morris/indices.csv",
        selected="results/sensitivity/{experiment}/morris/selected.json",
    params:
        testbed=TESTBED,
        out=lambda wildcards, output: Path(output.selected).parent,
    conda:
        "envs/testbed.yaml"
    log:
        "results/sensitivity/{experiment}/logs/morris-analyze.log",
    shell:
        "{params.testbed} sensitivity analyze --plan {input.plan} --stage morris --samples {input.samples} "
        "--batches {input.batches} --out {params.out} > {log} 2>&1"


rule sensitivity_indices:
    input:
        plan="results/sensitivity/{experiment}/plan.json",
        samples="results/sensitivity/{experiment}/sobol/samples.csv",
        selected="results/sensitivity/{experiment}/morris/selected.json",
        batches=lambda wildcards: sensitivity_batches(wildcards.experiment, "sobol"),
    output:
        outputs="results/sensitivity/{experiment}/sobol/outputs.csv",
        indices="results/sensitivity/{experiment}/sobol/indices.csv",
    params:
        testbed=TESTBED,
        out=lambda wildcards, output: Path(output.indices).parent,
        morris=lambda wildcards, input: Path(input.selected).parent,
    conda:
        "envs/testbed.yaml"
    log:
        "results/sensitivity/{experiment}/logs/sobol-analyze.log",
    shell:
        "{params.testbed} sensitivity analyze --plan {input.plan} --stage sobol --samples {input.samples} "
        "--batches {input.batches} --morris {params.morris} --out {params.out} > {log} 2>&1"


rule sensitivity_summary:
    input:
        plan="results/sensitivity/{experiment}/plan.json",
        morris=rules.sensitivity_screening.output,
        sobol=rules.sensitivity_indices.output,
    output:
        json="results/sensitivity/{experiment}/summary.json",
        markdown="results/sensitivity/{experiment}/summary.md",
    params:
        testbed=TESTBED,
        out=lambda wildcards, output: Path(output.json).parent,
    conda:
        "envs/testbed.yaml"
    log:
        "results/sensitivity/{experiment}/logs/summary.log",
    shell:
        "{params.testbed} sensitivity summary --plan {input.plan} --morris {params.out}/morris "
        "--sobol {params.out}/sobol --out {params.out} > {log} 2>&1"


rule sensitivity:
    input:
        expand("results/sensitivity/{experiment}/summary.json", experiment=SENSITIVITY["experiments"]),
        "results/report/report.html",
