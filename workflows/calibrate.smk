# Calibration of one machine type into a bundle calibration/<machine>/:
#   snakemake calibrate --config machine=NAME [calibration='{b: [192, 960], reps: 50}'] [hosts=A,B]
# hosts=A,B adds the MPI ping-pong between two nodes (network/pingpong.json; A,A = loopback).
# The bundle ends with validation.json: numasim on the derived machine vs the real LU.
# One job per machine type (a whole node: it binds threads to every core). The
# job is `testbed calibrate`, which skips the steps already done, so a job that
# was killed resumes where it stopped; a finished bundle makes the rule a no-op.
CALIBRATION_MACHINE = config.get("machine", "local")
CALIBRATION = config.get("calibration", {})
#: `testbed calibrate` options from config['calibration'] (b: list of tile sizes, reps, ...)
CALIBRATE_OPTIONS = " ".join(
    [f"--b {b}" for b in CALIBRATION.get("b", [192])]
    + [
        f"--{key.replace('_', '-')} {CALIBRATION[key]}"
        for key in ("reps", "bw_mb", "bw_reps", "lu_nt", "lu_reps", "max_rounds", "history_max_error", "unstable", "pingpong_reps",
                    "paired_runs")
        if key in CALIBRATION
    ]
    + ([f"--hosts {config['hosts']}"] if config.get("hosts") else [])
)
# A bundle of another machine (committed, or copied from elsewhere) would make the rule a silent
# no-op: stop with the bundle's and this machine's identity instead (testbed/calibrate/calibrate.py).
if "machine" in config:
    from testbed.calibrate.calibrate import check_same_machine

    check_same_machine(Path(f"calibration/{CALIBRATION_MACHINE}"), bool(config.get("allow_other_machine", False)))
#: Outputs beyond summary/provenance: their absence reruns the (resuming) calibration job.
CALIBRATION_EXTRA = ["validation.json"] + (["network/pingpong.json"] if config.get("hosts") else [])
# Threads of the calibration job: every core of a local run (--cores). A batch executor
# (profiles/calibrate-*) has no --cores: one, and the profile asks for the whole node. Read when
# the job is made, not when the workflow is parsed: --dag, --rulegraph, --report, --unlock and
# batch executors run without --cores (the rule's threads: below).



wildcard_constraints:
    machine=r"[A-Za-z][A-Za-z0-9_-]*",


rule calibrate:
    input:
        f"calibration/{CALIBRATION_MACHINE}/summary.md",
        [f"calibration/{CALIBRATION_MACHINE}/{f}" for f in CALIBRATION_EXTRA],


# The conda env holds the Python side only; the compiler, OpenBLAS, hwloc and the
# native StarPU build are the node's own (envs/setup.sh): they are what is calibrated.
rule calibration_bundle:
    output:
        summary="calibration/{machine}/summary.md",
        provenance="calibration/{machine}/provenance.yaml",
        extra=[f"calibration/{{machine}}/{f}" for f in CALIBRATION_EXTRA],
    log:
        "results/logs/calibrate-{machine}.log",
    params:
        testbed=TESTBED,
        options=CALIBRATE_OPTIONS,
    resources:
        runtime=240,
        calibration_node=1,
    threads: lambda wildcards: workflow.resource_settings.cores or 1
    conda:
        "envs/testbed.yaml"
    shell:
        "{params.testbed} calibrate --machine {wildcards.machine} --out calibration/{wildcards.machine} "
        "{params.options} > {log} 2>&1"
