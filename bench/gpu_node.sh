#!/usr/bin/env bash
# Real LU with CUDA on one GPU node: build the native StarPU with CUDA and apps/lu, check the
# factorization (residual) with getrf on the CPU and on the GPU, calibrate StarPU's codelet and
# bus models on the node, then time frozen-model runs. Everything it measured lands in OUT:
#
#   bash bench/gpu_node.sh OUT [STARPU_ORIG_TARBALL]
#
# OUT/node.txt (GPU, driver, CUDA, CPU), OUT/build.log, OUT/runs.jsonl (one apps/lu JSON line
# per run, plus variant/rep/phase), OUT/sampling.tar.gz (StarPU's sampling/{bus,codelets} of the
# node, named STARPU_HOSTNAME=$HOSTNAME_MODEL), OUT/machine_display.txt.
# Without apt or network (a cluster node, a container), pass Debian's StarPU orig tarball; the
# node needs gcc, make, an MPI (mpicc), hwloc and OpenBLAS/CBLAS headers and a CUDA toolkit.
# CHANGELOG.md's benchmark history ("GPU node") records a run and its numasim / StarPU-SimGrid predictions.
set -euo pipefail
OUT="${1:?usage: bench/gpu_node.sh OUT [STARPU_ORIG_TARBALL]}"
TARBALL="${2:-}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HOSTNAME_MODEL="${HOSTNAME_MODEL:-gpunode}"
SIZES="${SIZES:-9600 19200}"
REPS="${REPS:-5}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
log() { printf '[gpu_node %4ds] %s\n' "$SECONDS" "$*" >&2; }

{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,memory.total,driver_version,pci.bus_id --format=csv,noheader || true
  nvcc --version | tail -2 || true
  lscpu | grep -E '^(Model name|CPU\(s\)|Socket|NUMA node\(s\)|Thread)' || true
  for t in mpicc gcc make patch pkg-config; do printf '%s: %s\n' "$t" "$(command -v "$t" || echo MISSING)"; done
  for h in hwloc.h cblas.h; do printf '%s: %s\n' "$h" "$(echo "#include <$h>" | cpp -H -o /dev/null 2>&1 | head -1 || true)"; done
  echo "numa_balancing: $(cat /proc/sys/kernel/numa_balancing 2>/dev/null || echo n/a)"
} >"$OUT/node.txt" 2>&1
cat "$OUT/node.txt" >&2

log "building StarPU (native, CUDA) and apps/lu"
export TESTBED_APT=0 TESTBED_PYTHON=0 TESTBED_STARPU_BUILDS=native TESTBED_CUDA=yes
[ -n "$TARBALL" ] && export STARPU_SOURCE_TARBALL="$TARBALL"
if ! echo '#include <hwloc.h>' | cpp -o /dev/null >/dev/null 2>&1; then
  log "no hwloc headers: StarPU without hwloc (no NUMA discovery)"
  export STARPU_EXTRA_CONFIGURE_FLAGS="--without-hwloc"
fi
if ! { bash "$ROOT/envs/setup.sh" && make -C "$ROOT/apps/lu" BUILD="$ROOT/build" STARPU_DEPS="$ROOT/.deps" real; } >"$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log" >&2
  cp "$ROOT/.deps/build-native/config.log" "$OUT/config.log" 2>/dev/null || true
  exit 1
fi
LU="$ROOT/build/lu-real/lu"

# StarPU's calibration files live apart from OUT (only the tarball of them is a result).
export STARPU_HOME="$ROOT/build/gpu-node-starpu-home" STARPU_HOSTNAME="$HOSTNAME_MODEL" STARPU_SCHED=dmdas
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
rm -rf "$STARPU_HOME"
"$ROOT/.deps/starpu-native/bin/starpu_machine_display" >"$OUT/machine_display.txt" 2>&1 || true

run() { # phase variant rep args...
  local phase="$1" variant="$2" rep="$3"; shift 3
  local line
  line="$("$LU" "$@" | tail -1)"
  printf '%s\n' "$line" | sed "s/}\$/, \"phase\": \"$phase\", \"variant\": \"$variant\", \"rep\": $rep}/" >>"$OUT/runs.jsonl"
  log "$phase $variant $*: $(printf '%s' "$line" | grep -o '"makespan_s": [^,]*')"
}

log "correctness: residual with getrf on the CPU and on the GPU"
STARPU_CALIBRATE=1 run check getrf-cpu 0 --n 3840 --b 960 --check
STARPU_CALIBRATE=1 run check getrf-gpu 0 --n 3840 --b 960 --check --getrf-gpu

log "calibration runs (STARPU_CALIBRATE=1) until every entry has samples"
for n in $SIZES; do
  for rep in 1 2; do
    STARPU_CALIBRATE=1 run calibrate getrf-cpu "$rep" --n "$n" --b 960
    STARPU_CALIBRATE=1 run calibrate getrf-gpu "$rep" --n "$n" --b 960 --getrf-gpu
  done
done

log "timed runs, models frozen (STARPU_CALIBRATE=0), variants interleaved"
for rep in $(seq 1 "$REPS"); do
  for n in $SIZES; do
    STARPU_CALIBRATE=0 run timed getrf-cpu "$rep" --n "$n" --b 960
    STARPU_CALIBRATE=0 run timed getrf-gpu "$rep" --n "$n" --b 960 --getrf-gpu
  done
done
tar -czf "$OUT/sampling.tar.gz" -C "$STARPU_HOME/.starpu" sampling
log "done: $OUT"
