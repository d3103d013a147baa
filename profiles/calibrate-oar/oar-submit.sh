#!/bin/sh
# Submit a Snakemake job script to OAR on one whole node of the machine type;
# print the job id (what the cluster-generic executor expects on stdout).
#   oar-submit.sh MACHINE RUNTIME_MINUTES JOBSCRIPT
set -eu
machine=$1
minutes=$2
jobscript=$3
walltime=$(printf '%d:%02d:00' $((minutes / 60)) $((minutes % 60)))
# OAR starts a job with the user's login environment, not the submitting shell's: the
# job gets this shell's PATH and PYTHONPATH (the venv's snakemake and testbed), as sbatch's
# --export=ALL does on SLURM.
q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
wrapper="$jobscript.oar"
{
	echo '#!/bin/sh'
	echo "export PATH=$(q "$PATH")"
	if [ -n "${PYTHONPATH:-}" ]; then echo "export PYTHONPATH=$(q "$PYTHONPATH")"; fi
	echo "exec $(q "$jobscript")"
} >"$wrapper"
chmod u+x "$jobscript" "$wrapper"
mkdir -p results/logs
out=$(oarsub -l "nodes=1,walltime=$walltime" -p "cluster='$machine'" -n "calibrate-$machine" \
	-O "results/logs/oar-%jobid%.out" -E "results/logs/oar-%jobid%.err" "$wrapper")
id=$(printf '%s\n' "$out" | sed -n 's/^OAR_JOB_ID=\([0-9]*\).*/\1/p')
if [ -z "$id" ]; then
	printf 'error: oarsub: expected OAR_JOB_ID=<id> in its output, got:\n%s\n' "$out" >&2
	exit 1
fi
echo "$id"
