# Platforms: results/platforms/<cluster>/ = numasim.xml, hwloc/, starpu/, summary.json
# (see platforms/README.md). Regenerated when the cluster, one of its machines, or a
# calibration bundle they use changes.
from testbed.describe.machines import cluster_source_files


rule platforms:
    input:
        cluster="platforms/clusters/{cluster}.yaml",
        sources=lambda wildcards: cluster_source_files(wildcards.cluster),
    output:
        platform=directory("results/platforms/{cluster}"),
    params:
        testbed=TESTBED,
    log:
        "results/logs/platforms/{cluster}.log",
    conda:
        "envs/testbed.yaml"
    shell:
        "{params.testbed} platform --cluster {input.cluster} --out {output.platform} > {log} 2>&1"
