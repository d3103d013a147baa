# All experiments -> results/report/report.html (self-contained) and report.md.
# The sensitivity section of an experiment is added when its results/sensitivity summary
# exists; `all` never waits for (nor reruns) the sensitivity analysis, `sensitivity` does.


rule report:
    input:
        tables=expand(
            "results/{experiment}/{name}",
            experiment=EXPERIMENTS,
            name=["design.csv", "anova.csv", "summary.csv", "model.json", "best.json"],
        ),
        figures=expand("results/{experiment}/figures", experiment=EXPERIMENTS),
        platforms=all_platform_dirs,
        reference=[config["report"]["reference"]] if config["report"]["reference"] else [],
        sensitivity=sensitivity_summaries,
        # traced default-vs-best reruns (rule trace_pair): numasim is the only engine writing traces
        traces=[f"results/{e}/traces" for e, spec in EXPERIMENTS.items() if spec["engine"] == "numasim"],
        # mechanism ledgers of the largest terms (rule explain), numasim's mechanisms
        ledgers=[
            f"results/{e}/ledger"
            for e, spec in EXPERIMENTS.items()
            if spec["engine"] == "numasim" and config["report"]["explain"]["terms"] > 0
        ],
    output:
        html=report("results/report/report.html", category="Report"),
        markdown="results/report/report.md",
    params:
        testbed=TESTBED,
        experiments=" ".join(f"--experiment {e}=results/{e}" for e in EXPERIMENTS),
        title=config["report"]["title"],
        reference=lambda wildcards, input: (
            f"--reference {input.reference}" if input.reference else ""
        ),
        out=lambda wildcards, output: Path(output.html).parent,
        sensitivity=sensitivity_args,
    conda:
        "envs/testbed.yaml"
    log:
        "results/logs/report.log",
    shell:
        "{params.testbed} report {params.experiments} --title {params.title:q} {params.reference} "
        "--platforms-dir results/platforms {params.sensitivity} --out {params.out} > {log} 2>&1"
