# Design table -> runs in batches (one Snakemake job each) -> results/<experiment>/runs.csv.
# A batch table is written atomically when its last run ends: an interrupted
# campaign resumes by running only the batches whose table is missing.


rule design:
    output:
        "results/{experiment}/design.csv",
    params:
        testbed=TESTBED,
        spec=lambda wildcards: json.dumps(EXPERIMENTS[wildcards.experiment], sort_keys=True),
    conda:
        "envs/testbed.yaml"
    log:
        "results/{experiment}/logs/design.log",
    shell:
        "{params.testbed} design --spec {params.spec:q} --out {output} > {log} 2>&1"


rule campaign_batch:
    input:
        design="results/{experiment}/design.csv",
        platform=platform_dirs,
    output:
        "results/{experiment}/batches/batch-{batch}.csv",
    params:
        testbed=TESTBED,
        platform=lambda wildcards, input: (
            f"--platform-dir {input.platform}" if input.platform else ""
        ),
    conda:
        "envs/testbed.yaml"
    log:
        "results/{experiment}/logs/batch-{batch}.log",
    # wall time, memory and I/O of each batch job (snakemake's benchmark table, one row)
    benchmark:
        "results/{experiment}/benchmarks/batch-{batch}.tsv"
    threads: 1
    # one batch job under a batch executor (profiles/slurm): one core, the minutes of its
    # runs (study scale: 30 runs of 1-3 s), memory of one numasim run (100 MB at study scale)
    resources:
        runtime=120,
        mem_mb=1000,
    shell:
        # progress of each run on the terminal and in the log
        "{params.testbed} campaign --design {input.design} --batch {wildcards.batch} "
        "{params.platform} --out {output} 2> >(tee {log} >&2)"


rule runs:
    input:
        batch_files,
    output:
        "results/{experiment}/runs.csv",
    params:
        testbed=TESTBED,
    conda:
        "envs/testbed.yaml"
    log:
        "results/{experiment}/logs/runs.log",
    shell:
        "{params.testbed} campaign --merge {input} --out {output} > {log} 2>&1"
