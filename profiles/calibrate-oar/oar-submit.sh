#!/bin/sh
# Submit a Snakemake job script to OAR on one whole node of the machine type;
# print the job id (what the cluster-generic executor expects on stdout).
#   oar-submit.sh MACHINE RUNTIME_MINUTES JOBSCRIPT
set -eu
machine=$1
minutes=$2
jobscript=$3
walltime=$(printf '%d:%02d:00' $((minutes / 60)) $((minutes % 60)))
chmod u+x "$jobscript"
out=$(oarsub -l "nodes=1,walltime=$walltime" -p "cluster='$machine'" -n "calibrate-$machine" \
	-O "results/logs/oar-%jobid%.out" -E "results/logs/oar-%jobid%.err" "$jobscript")
id=$(printf '%s\n' "$out" | sed -n 's/^OAR_JOB_ID=\([0-9]*\).*/\1/p')
if [ -z "$id" ]; then
	printf 'error: oarsub: expected OAR_JOB_ID=<id> in its output, got:\n%s\n' "$out" >&2
	exit 1
fi
echo "$id"
