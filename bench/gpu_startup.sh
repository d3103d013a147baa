#!/usr/bin/env bash
# Is GPU start-up cost inside the measured LU makespan? CUDA >= 12.2 loads kernel modules
# lazily by default (CUDA_MODULE_LOADING=LAZY): the first cuBLAS/cuSOLVER call of each kernel
# of a process pays the load, and apps/lu starts a new process per run, so a short run pays
# it inside its factorization. Runs apps/lu (real build with CUDA, models frozen) with LAZY and
# EAGER loading, interleaved, and appends one JSON line per run to OUT/startup.jsonl.
#
#   bash bench/gpu_startup.sh OUT STARPU_HOME_WITH_MODELS [HOSTNAME]
#
# STARPU_HOME_WITH_MODELS holds .starpu/sampling/{bus,codelets} of the node (bench/gpu_node.sh).
set -euo pipefail
OUT="${1:?usage: bench/gpu_startup.sh OUT STARPU_HOME [HOSTNAME]}"
HOME_MODELS="${2:?usage: bench/gpu_startup.sh OUT STARPU_HOME [HOSTNAME]}"
HOST="${3:-gpunode}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SIZES="${SIZES:-9600 19200}"
REPS="${REPS:-3}"
mkdir -p "$OUT"
export STARPU_HOME="$HOME_MODELS" STARPU_HOSTNAME="$HOST" STARPU_SCHED=dmdas STARPU_CALIBRATE=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
for rep in $(seq 1 "$REPS"); do
  for n in $SIZES; do
    for getrf in cpu gpu; do
      for loading in LAZY EAGER; do
        args=(--n "$n" --b 960)
        [ "$getrf" = gpu ] && args+=(--getrf-gpu)
        line="$(CUDA_MODULE_LOADING=$loading "$ROOT/build/lu-real/lu" "${args[@]}" | tail -1)"
        printf '%s\n' "$line" | sed "s/}\$/, \"loading\": \"$loading\", \"variant\": \"getrf-$getrf\", \"rep\": $rep}/" \
          >>"$OUT/startup.jsonl"
        printf '%s n=%s getrf-%s: %s\n' "$loading" "$n" "$getrf" "$(printf '%s' "$line" | grep -o '"makespan_s": [^,]*')" >&2
      done
    done
  done
done
