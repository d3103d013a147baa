#!/bin/sh
# Submit a Snakemake job script to OAR: CORES cores of one node for RUNTIME minutes;
# print the job id (what the cluster-generic executor expects on stdout).
#   oar-submit.sh RUNTIME_MINUTES CORES "RULE WILDCARDS..." JOBSCRIPT
set -eu
minutes=$1
cores=$2
# job name: the rule and its wildcards, e.g. campaign_batch_batch-003_experiment-lille21
name=$(printf '%s' "$3" | sed 's/, */ /g; s/=/-/g' | tr -c 'A-Za-z0-9.-' '_')
jobscript=$4
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
mkdir -p results/logs/oar
out=$(oarsub -l "/nodes=1/core=$cores,walltime=$walltime" -n "$name" \
	-O "results/logs/oar/$name-%jobid%.out" -E "results/logs/oar/$name-%jobid%.err" "$wrapper")
id=$(printf '%s\n' "$out" | sed -n 's/^OAR_JOB_ID=\([0-9]*\).*/\1/p')
if [ -z "$id" ]; then
	printf 'error: oarsub: expected OAR_JOB_ID=<id> in its output, got:\n%s\n' "$out" >&2
	exit 1
fi
echo "$id"
