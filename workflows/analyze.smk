# runs.csv -> tidy tables (the expensive step: model fit) -> figures (cheap: reads the tables).


rule analyze_tables:
    input:
        "results/{experiment}/runs.csv",
    output:
        anova="results/{experiment}/anova.csv",
        markdown="results/{experiment}/anova.md",
        html="results/{experiment}/anova.html",
        summary="results/{experiment}/summary.csv",
        effects="results/{experiment}/effects.csv",
        residuals="results/{experiment}/residuals.csv",
        model="results/{experiment}/model.json",
        best="results/{experiment}/best.json",
    params:
        testbed=TESTBED,
        p_max=config["analysis"]["p_max"],
        min_variance=config["analysis"]["min_variance_pct"],
        out=lambda wildcards, output: Path(output.anova).parent,
    conda:
        "envs/testbed.yaml"
    log:
        "results/{experiment}/logs/analyze_tables.log",
    shell:
        "{params.testbed} analyze {input} --out {params.out} --stage tables "
        "--p-max {params.p_max} --min-variance {params.min_variance} > {log} 2>&1"


rule analyze_plots:
    input:
        runs="results/{experiment}/runs.csv",
        anova="results/{experiment}/anova.csv",
        effects="results/{experiment}/effects.csv",
        residuals="results/{experiment}/residuals.csv",
        model="results/{experiment}/model.json",
    output:
        report(
            directory("results/{experiment}/figures"),
            patterns=["{name}.png"],
            category="{experiment}",
            labels={"figure": "{name}"},
        ),
    params:
        testbed=TESTBED,
        boxplots=boxplot_args,
        out=lambda wildcards, input: Path(input.model).parent,
    conda:
        "envs/testbed.yaml"
    log:
        "results/{experiment}/logs/analyze_plots.log",
    shell:
        "{params.testbed} analyze {input.runs} --out {params.out} --stage plots "
        "{params.boxplots} --figures {output} > {log} 2>&1"


rule explain:
    input:
        design="results/{experiment}/design.csv",
        anova="results/{experiment}/anova.csv",
    output:
        report(
            directory("results/{experiment}/ledger"),
            patterns=["{name}.png"],
            category="{experiment}",
            labels={"figure": "mechanism ledger: {name}"},
        ),
    params:
        testbed=TESTBED,
        top=config["report"]["explain"]["terms"],
        seeds=config["report"]["explain"]["seeds"],
    threads: lambda wildcards: workflow.resource_settings.cores or 1
    conda:
        "envs/testbed.yaml"
    log:
        "results/{experiment}/logs/explain.log",
    shell:
        "{params.testbed} explain --design {input.design} --anova {input.anova} --top {params.top} "
        "--seeds {params.seeds} --jobs {threads} --out {output} > {log} 2>&1"


rule trace_pair:
    input:
        design="results/{experiment}/design.csv",
        best="results/{experiment}/best.json",
        platform=platform_dirs,
    output:
        report(
            directory("results/{experiment}/traces"),
            patterns=["{name}.png"],
            category="{experiment}",
            labels={"figure": "traces: {name}"},
        ),
    params:
        testbed=TESTBED,
        platform=lambda wildcards, input: (
            f"--platform-dir {input.platform}" if input.platform else ""
        ),
        extra=" ".join(f"--extra {x}" for x in config["report"].get("traced_extra", ["A=1"])),
    conda:
        "envs/testbed.yaml"
    log:
        "results/{experiment}/logs/trace_pair.log",
    shell:
        "{params.testbed} trace-pair --design {input.design} --best {input.best} {params.platform} "
        "{params.extra} --out {output} > {log} 2>&1"
