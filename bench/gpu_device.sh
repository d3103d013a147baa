#!/usr/bin/env bash
# Everything a short device call measures on a GPU node, in one time-boxed script:
#
#   bash bench/gpu_device.sh OUT                 # on the GPU node (16 cores + CUDA)
#   REHEARSAL=1 bash bench/gpu_device.sh OUT     # the same steps on a machine without CUDA
#
# For a node that gets a copy of the working tree and nothing from the network: first, where the
# tree is, `bash bench/gpu_device_prepare.sh` (fills the ignored folder .device/, about 8 MB:
# StarPU's source and Debian's FxT packages); send .device/ with the tree; on the node, from the
# tree's root, `bash bench/gpu_device.sh "$OUT"`. On 16 cores + one H100 the steps should take
# about 5 minutes (StarPU's build with CUDA took 56 s there before FxT was added); BUDGET_S (450 s)
# bounds them, packing OUT takes seconds more.
#
# Steps, in order (each under `timeout`; a failed or timed-out step is recorded and the next
# ones still run; a step that the remaining budget cannot hold is skipped):
#   node       node.txt: lscpu, numactl -H, nvidia-smi (-q, topo), nvcc, OS, memory
#   fxt        Debian's libfxt2 + libfxt-dev (DEVICE_DIR, sha256 checked) unpacked with
#              `dpkg -x` into WORK/fxt, a private prefix; fxt.pc's prefix set to it; StarPU's
#              configure finds FxT through pkg-config (configure.ac, AC_ARG_WITH(fxt))
#   starpu     the native StarPU (envs/setup.sh: TESTBED_APT=0, the orig tarball of DEVICE_DIR,
#              CUDA, --with-fxt), checked: STARPU_USE_FXT and, with CUDA, STARPU_USE_CUDA
#   microbench the microbenchmarks that need no StarPU (numa_bench, hostalloc_stall, cuda_bench)
#   apps       apps/lu and starpu_task_overhead (the native StarPU)
#   hostallocstall  hostalloc_stall: pinned allocations (cudaHostAlloc, cudaFreeHost) in one thread
#              while another keeps the GPU busy, per setting of HOSTALLOC_RUNS; the GPU time lost,
#              the calls' own time (without CUDA: checks that it says so and exits 3)
#   variability  numa_bench: the b = B dgemm's spread on one core with the others idle (the
#              intrinsic spread, docs/kernel-variability.md) and with every core running it
#   bus        starpu_machine_display: StarPU's bus calibration on its first start
#   check      residual of apps/lu --check, getrf on the CPU and on the GPU (--getrf-gpu)
#   calibrate  STARPU_CALIBRATE=1 runs: StarPU's codelet models of the node
#   trace      one run per size and variant with STARPU_FXT_TRACE=1, models frozen
#   convert    starpu_fxt_tool, then testbed/traces/fxt_trace.py: the testbed's task table
#   cudabench  cuda_bench per tile size: cudaMalloc, cudaFree, pinned cudaHostAlloc and
#              cudaFreeHost, H2D/D2H copies
#   overhead   starpu_task_overhead: host time of StarPU's CUDA worker per task (pipeline 1, 2)
#   runs       timed apps/lu runs, models frozen, variants interleaved (last: earlier
#              measurements of the node hold such runs already)
#   numa       numa_bench remote-vs-local dgemm/dtrsm/dgetrf_nopiv, all cores busy (only with
#              two or more NUMA nodes, or NUMA_BENCH=force)
# Then OUT gets at most 8 files: gpu_device.log (these progress lines), results.tar.gz
# (node.txt, steps.jsonl, runs.jsonl, csv files, StarPU's sampling/, logs/, the converted traces)
# and one fxt-<N>.tar.xz per size (starpu_fxt_tool's outputs and the raw FxT files; .tar.gz
# where xz is missing), each at most 15 MiB. OUT is filled even when a step fails or the script
# is interrupted.
#
# Settings (environment):
#   REHEARSAL=1        no CUDA: tiny sizes, CUDA steps and --getrf-gpu skipped with a message
#   DEVICE_DIR=DIR     bench/gpu_device_prepare.sh's folder (default .device)
#   STARPU_REUSE=DIR   an installed native StarPU with FxT: no build (steps fxt and starpu skip)
#   WORK=DIR           scratch folder (default build/gpu-device)
#   BUDGET_S=S         wall-clock budget of all steps (default 450 s; packing OUT comes after)
#   LIMIT_<step>=S     another time box for a step (e.g. LIMIT_starpu=2400 on 2 cores)
#   STEPS="a b ..."   run only these steps (the others are recorded as skipped), e.g.
#                      STEPS="node microbench hostallocstall variability cudabench summary"
#                      for a short call that needs no StarPU
#   HOSTALLOC_RUNS     hostalloc_stall's settings, "b:depth:op_ms ..." (default: the tiles b = 960
#                      and 1920 beside 0.5 ms operations kept 2 ahead, then b = 960 beside 5 ms ones)
#   SIZES, B, CHECK_N, REPS, CAL_REPS, TRACE_SIZES, NUMA_BENCH=auto|force|no, NUMA_B, NUMA_REPS,
#   NUMA_KERNELS, VAR_REPS, PYTHON (sizes and repetitions; defaults below, smaller in a rehearsal)
set -uo pipefail
SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
ROOT="$(cd "$(dirname "$SELF")/.." && pwd)"
TAG=gpu_device
# device_settings, log, skip, check_settings, start_call, step, finish_call: the driver shared with
# bench/gpu_numa_split.sh
source "$ROOT/bench/device_steps.sh"

# ------------------------------------------------------------------ settings
device_settings "$ROOT/build/gpu-device" 450
export NUMA_BENCH="${NUMA_BENCH:-auto}"
export HOSTALLOC_RUNS="${HOSTALLOC_RUNS:-960:2:0.5 1920:2:0.5 960:2:5}"
ALL_STEPS="node fxt starpu check_starpu_reused microbench apps hostallocstall variability bus check calibrate
  trace convert cudabench overhead runs numa summary"
if [ "$REHEARSAL" = 1 ]; then
  export SIZES="${SIZES:-960 1920}" B="${B:-480}" CHECK_N="${CHECK_N:-1920}" REPS="${REPS:-1}"
  export CAL_REPS="${CAL_REPS:-1}" NUMA_B="${NUMA_B:-96}" NUMA_REPS="${NUMA_REPS:-3}" CUDA=no
  export VAR_REPS="${VAR_REPS:-5}"
  export NUMA_KERNELS="${NUMA_KERNELS:-dgemm}"
else
  export SIZES="${SIZES:-4800 9600 19200}" B="${B:-960}" CHECK_N="${CHECK_N:-3840}" REPS="${REPS:-3}"
  export CAL_REPS="${CAL_REPS:-2}" NUMA_B="${NUMA_B:-960}" NUMA_REPS="${NUMA_REPS:-20}" CUDA=yes
  export VAR_REPS="${VAR_REPS:-40}"
fi
export TRACE_SIZES="${TRACE_SIZES:-$SIZES}" NUMA_KERNELS="${NUMA_KERNELS:-dgemm dtrsm dgetrf_nopiv}"
export FXT_PREFIX="$WORK/fxt"
export PREFIX="${STARPU_REUSE:-$ROOT/.deps/starpu-native}"
export BUILD_DIR="$WORK/build" RES="$WORK/results" LOGS="$WORK/results/logs"
export LU="$WORK/build/lu-real/lu" MB="$WORK/build/microbench"
# StarPU's runs: calibration files under WORK (only their tarball is a result), dmdas as before.
export STARPU_HOME="$WORK/starpu-home" STARPU_HOSTNAME="${HOSTNAME_MODEL:-gpunode}" STARPU_SCHED=dmdas
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
use_private_fxt
have_cuda() { [ "$CUDA" = yes ]; }

lu_run() { # phase variant rep n [extra apps/lu args]: one apps/lu run, its JSON line in runs.jsonl
  local phase="$1" variant="$2" rep="$3" n="$4" line; shift 4
  local args=(--n "$n" --b "$B" "$@")
  [ "$variant" = getrf-gpu ] && args+=(--getrf-gpu)
  local t0 t1; t0="$(date +%s.%N)"
  line="$("$LU" "${args[@]}" 2>>"$LOGS/lu.stderr" | tail -1)"
  t1="$(date +%s.%N)"
  local process_s; process_s="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
  case "$line" in  # process_s: the whole process (start-up, generation, shutdown)
    \{*\}) printf '%s\n' "$line" | sed "s/}\$/, \"phase\": \"$phase\", \"variant\": \"$variant\", \"rep\": $rep, \"process_s\": $process_s}/" \
             >>"$RES/runs.jsonl"
           echo "$phase $variant n=$n rep=$rep: $(printf '%s' "$line" | grep -o '"makespan_s": [^,]*') (process $process_s s)" ;;
    *) echo "$phase $variant n=$n rep=$rep: no JSON line (stderr in logs/lu.stderr)"; return 1 ;;
  esac
}
variants() { if have_cuda; then echo "getrf-cpu getrf-gpu"; else echo "getrf-cpu"; fi; }

# ------------------------------------------------------------------ steps (run as `SELF --step NAME`)
step_node() {
  {
    echo "date: $(date -u +%FT%TZ)"; echo "rehearsal: $REHEARSAL"; uname -a; cat /etc/os-release 2>/dev/null | head -2
    echo "nproc: $(nproc)"; free -g
    echo "numa_balancing: $(cat /proc/sys/kernel/numa_balancing 2>/dev/null || echo n/a)"
    echo "governor: $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo n/a)"
    echo "== lscpu"; lscpu
    echo "== lscpu -e"; lscpu -e
    echo "== numactl -H"; numactl -H 2>&1 || echo "numactl: missing"
    echo "== nvidia-smi"; nvidia-smi 2>&1 || echo "nvidia-smi: missing"
    echo "== nvidia-smi topo -m"; nvidia-smi topo -m 2>&1 || true
    echo "== nvcc"; nvcc --version 2>&1 || echo "nvcc: missing"
    echo "== tools"; for t in gcc mpicc make patch pkg-config dpkg xz "$PYTHON"; do
      printf '%s: %s\n' "$t" "$(command -v "$t" || echo MISSING)"; done
    gcc --version | head -1
    echo "== environment"; env | grep -E '^(STARPU|CUDA|OMPI|OPENBLAS|OMP)_' | sort
  } >"$RES/node.txt" 2>&1
  nvidia-smi -q >"$RES/nvidia-smi-q.txt" 2>&1 || true
  grep -E '^(Model name|CPU\(s\)|Socket|NUMA node\(s\))' "$RES/node.txt" || true
}

step_fxt() {
  [ -f "$DEVICE_DIR/SHA256SUMS" ] || { echo "error: $DEVICE_DIR/SHA256SUMS missing (bench/gpu_device_prepare.sh)"; return 2; }
  (cd "$DEVICE_DIR" && sha256sum -c --quiet SHA256SUMS) || { echo "error: $DEVICE_DIR: sha256 mismatch"; return 2; }
  rm -rf "$FXT_PREFIX" && mkdir -p "$FXT_PREFIX"
  local deb
  for deb in "$DEVICE_DIR"/libfxt2_*.deb "$DEVICE_DIR"/libfxt-dev_*.deb; do
    [ -f "$deb" ] || { echo "error: $deb missing"; return 2; }
    if command -v dpkg >/dev/null; then dpkg -x "$deb" "$FXT_PREFIX" || return 1
    else ar p "$deb" data.tar.xz | tar -xJ -C "$FXT_PREFIX" || return 1  # a .deb is an ar archive
    fi
  done
  local pc; pc="$(ls "$FXT_PREFIX"/usr/lib/*-linux-gnu/pkgconfig/fxt.pc)" || return 1
  sed -i "s|^prefix=.*|prefix=$FXT_PREFIX/usr|" "$pc"
  PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags --libs fxt
  [ -f "$FXT_PREFIX/usr/include/fxt/fxt.h" ] && ls "$FXT_PREFIX"/usr/lib/*-linux-gnu/libfxt.so.2
}

step_starpu() {
  local tarball; tarball="$(ls "$DEVICE_DIR"/starpu_*.orig.tar.gz)" || return 2
  # A worktree's .deps may be a symbolic link to another checkout: dangling in a copy of the tree.
  if [ -L "$ROOT/.deps" ] && [ ! -e "$ROOT/.deps" ]; then rm -f "$ROOT/.deps"; echo "removed the dangling link .deps"; fi
  local rc=0
  TESTBED_APT=0 TESTBED_PYTHON=0 TESTBED_STARPU_BUILDS=native TESTBED_CUDA="$CUDA" \
    STARPU_SOURCE_TARBALL="$tarball" bash "$ROOT/envs/setup.sh" || rc=$?
  cp "$ROOT/.deps/build-native.log" "$LOGS/starpu-build.log" 2>/dev/null
  if [ "$rc" != 0 ]; then
    cp "$ROOT/.deps/build-native/config.log" "$LOGS/starpu-config.log" 2>/dev/null
    tail -40 "$ROOT/.deps/build-native.log" 2>/dev/null
    return "$rc"
  fi
  check_starpu
}

check_starpu() { # the prefix has FxT (and CUDA on the device) and finds libfxt
  local h="$PREFIX/include/starpu/1.4/starpu_config.h"
  cp "$h" "$RES/starpu_config.h"
  grep -q 'define STARPU_USE_FXT 1' "$h" || { echo "error: $h: StarPU without FxT"; return 1; }
  if have_cuda; then grep -q 'define STARPU_USE_CUDA 1' "$h" || { echo "error: $h: StarPU without CUDA"; return 1; }; fi
  [ -x "$PREFIX/bin/starpu_fxt_tool" ] || { echo "error: $PREFIX/bin/starpu_fxt_tool missing"; return 1; }
  local deps; deps="$(ldd "$PREFIX/lib/libstarpu-1.4.so")"
  echo "$deps" | grep -E 'fxt|cuda|not found'
  ! echo "$deps" | grep -q 'not found' || return 1
  # With the private FxT, the loader takes its libfxt (LD_LIBRARY_PATH), not another one.
  if [ -n "$FXT_LIBDIR" ] && [ -z "$STARPU_REUSE" ]; then
    echo "$deps" | grep -q "libfxt.so.2 => $FXT_LIBDIR/" || { echo "error: libfxt not taken from $FXT_LIBDIR"; return 1; }
  fi
}

step_microbench() { # the microbenchmarks that need no StarPU
  local rc=0
  make -C "$ROOT/calibration/microbench" BUILD="$BUILD_DIR" all || rc=1
  if have_cuda; then make -C "$ROOT/calibration/microbench" BUILD="$BUILD_DIR" cuda_bench || rc=1; fi
  return "$rc"
}

step_apps() {
  local rc=0
  make -C "$ROOT/apps/lu" BUILD="$BUILD_DIR" STARPU_NATIVE_PREFIX="$PREFIX" real || rc=1
  make -C "$ROOT/calibration/microbench" BUILD="$BUILD_DIR" STARPU_NATIVE="$PREFIX" starpu_task_overhead || rc=1
  [ -x "$LU" ] || rc=1
  return "$rc"
}

step_check_starpu_reused() { check_starpu; }

step_bus() { "$PREFIX/bin/starpu_machine_display" >"$RES/machine_display.txt" 2>&1; local rc=$?; cat "$RES/machine_display.txt"; return $rc; }

step_check() {
  local v rc=0 res
  for v in $(variants); do STARPU_CALIBRATE=1 lu_run check "$v" 0 "$CHECK_N" --check || rc=1; done
  # The residual of every check run: below 1e-12 (double precision, diagonally dominant matrix).
  res="$(grep '"phase": "check"' "$RES/runs.jsonl" | grep -o '"residual": [^,}]*' | cut -d' ' -f2)"
  echo "residuals: $res"
  [ -n "$res" ] && echo "$res" | awk '{ if (!($1 < 1e-12)) bad = 1 } END { exit bad }' || rc=1
  return "$rc"
}

step_calibrate() {
  local n rep v rc=0
  for n in $SIZES; do for rep in $(seq 1 "$CAL_REPS"); do for v in $(variants); do
    STARPU_CALIBRATE=1 lu_run calibrate "$v" "$rep" "$n" || rc=1
  done; done; done
  return "$rc"
}

step_trace() { # N: one run per variant with FxT (converted later, step convert)
  local n="$1" v rc=0 raw
  for v in $(variants); do
    raw="$WORK/fxt-raw/$n-$v"
    rm -rf "$raw" && mkdir -p "$raw"
    STARPU_CALIBRATE=0 STARPU_FXT_TRACE=1 STARPU_FXT_PREFIX="$raw/" lu_run trace "$v" 0 "$n" || rc=1
    ls -l "$raw"
  done
  return "$rc"
}

step_convert() { # N: starpu_fxt_tool of the build that wrote the files, then the testbed's task and
  # transfer tables (testbed/traces/fxt_trace.py; no machine description: WorkerNuma -1)
  local n="$1" raw rc=0
  for raw in "$WORK/fxt-raw/$n"-*; do
    [ -d "$raw" ] || continue
    PYTHONPATH="$ROOT" "$PYTHON" - "$PREFIX/bin/starpu_fxt_tool" "$raw" "$WORK/traces/$(basename "$raw")" <<'EOF' || rc=1
import sys
from pathlib import Path
from testbed.traces import fxt_trace
tool, raw, work = (Path(a) for a in sys.argv[1:4])
out = fxt_trace.convert(tool, raw, work)
n = fxt_trace.write_tables(out, ["gpunode"], [None], work / "trace.csv", work / "transfers.csv")
print(f"{raw.name}: {n} tasks -> {work / 'trace.csv'}")
EOF
  done
  return "$rc"
}

step_cudabench() {
  local b rc=0
  for b in 240 480 960 1920 2880; do
    "$MB/cuda_bench" --bytes $((b * b * 8)) --reps 40 >"$WORK/cb.csv" || rc=1
    if [ -f "$RES/cuda_bench.csv" ]; then tail -n +2 "$WORK/cb.csv" >>"$RES/cuda_bench.csv"; else cp "$WORK/cb.csv" "$RES/cuda_bench.csv"; fi
  done
  cat "$RES/cuda_bench.csv"
  return "$rc"
}

step_hostallocstall() { # a pinned allocation in one thread beside a GPU another thread keeps busy
  # (calibration/microbench/hostalloc_stall.c, docs/pinned-allocations.md): tiles of b = 960 and
  # 1920, StarPU's pipeline depth 2; without CUDA it must say why it measures nothing (status 3)
  # (b = 960, 5 ms: about a GTX 1080 Ti's b = 960 dgemm, the study's GPU task, so that two queued
  # operations outlast the call: a device that keeps running what is queued loses nothing then,
  # one held during the call loses about the call).
  local run b depth op rc=0
  if ! have_cuda; then
    "$MB/hostalloc_stall" --bytes $((B * B * 8)) --reps 3
    rc=$?; echo "hostalloc_stall without CUDA: status $rc (3 expected)"; [ "$rc" = 3 ]; return $?
  fi
  for run in $HOSTALLOC_RUNS; do
    IFS=: read -r b depth op <<<"$run"
    "$MB/hostalloc_stall" --bytes $((b * b * 8)) --reps 30 --depth "$depth" --op-ms "$op" >"$WORK/hs.csv" || rc=1
    if [ -f "$RES/hostalloc_stall.csv" ]; then tail -n +2 "$WORK/hs.csv" >>"$RES/hostalloc_stall.csv"; else cp "$WORK/hs.csv" "$RES/hostalloc_stall.csv"; fi
  done
  cat "$RES/hostalloc_stall.csv"
  return "$rc"
}

step_variability() { # one core alone (the intrinsic spread), then every core running the kernel
  local load rc=0
  for load in alone all; do
    "$MB/numa_bench" kernel --kernel dgemm --b "$B" --reps "$VAR_REPS" --load "$load" >"$WORK/var.csv" || rc=1
    if [ -f "$RES/variability.csv" ]; then tail -n +2 "$WORK/var.csv" >>"$RES/variability.csv"; else cp "$WORK/var.csv" "$RES/variability.csv"; fi
  done
  cat "$RES/variability.csv"
  return "$rc"
}

step_overhead() {
  local p rc=0
  for p in 1 2; do
    STARPU_NCPU=0 STARPU_CUDA_PIPELINE=$p "$MB/starpu_task_overhead" --tasks 20000 >"$WORK/ov.csv" || rc=1
    if [ -f "$RES/task_overhead.csv" ]; then tail -n +2 "$WORK/ov.csv" >>"$RES/task_overhead.csv"; else cp "$WORK/ov.csv" "$RES/task_overhead.csv"; fi
  done
  cat "$RES/task_overhead.csv"
  return "$rc"
}

step_runs() {
  local n rep v rc=0
  for rep in $(seq 1 "$REPS"); do for n in $SIZES; do for v in $(variants); do
    STARPU_CALIBRATE=0 lu_run timed "$v" "$rep" "$n" || rc=1
  done; done; done
  return "$rc"
}

step_numa() {
  local k rc=0
  "$MB/numa_bench" topology >"$RES/numa_topology.txt" || rc=1
  for k in $NUMA_KERNELS; do
    echo "# kernel $k b=$NUMA_B reps=$NUMA_REPS load=all" >>"$RES/numa_bench.csv"
    "$MB/numa_bench" kernel --kernel "$k" --b "$NUMA_B" --reps "$NUMA_REPS" --load all >>"$RES/numa_bench.csv" || rc=1
  done
  cat "$RES/numa_bench.csv"
  return "$rc"
}

step_summary() { # the numbers a reader of the call's output wants first (the files hold all)
  "$PYTHON" - "$RES" <<'EOF'
import csv, json, statistics, sys
from pathlib import Path
res = Path(sys.argv[1])
runs = [json.loads(line) for line in (res / "runs.jsonl").read_text().splitlines() if line.strip()] \
    if (res / "runs.jsonl").is_file() else []
for r in runs:
    if r["phase"] == "check":
        print(f"check {r['variant']} n={r['n']}: residual {r.get('residual')}, {r.get('tasks_on_cuda')} tasks on CUDA")
cells = {}
for r in runs:
    if r["phase"] in ("timed", "trace"):
        cells.setdefault((r["phase"], r["n"], r["variant"]), []).append(r["makespan_s"])
for (phase, n, variant), ms in sorted(cells.items()):
    print(f"{phase} n={n} {variant}: makespan mean {statistics.mean(ms):.4f} s [{min(ms):.4f}, {max(ms):.4f}] ({len(ms)})")
if (res / "cuda_bench.csv").is_file():  # median seconds per operation, per size
    by_size = {}
    for row in csv.DictReader((res / "cuda_bench.csv").read_text().splitlines()):
        if row["what"] == "what":  # the header again (files of several runs put together)
            continue
        by_size.setdefault(row["bytes"], []).append(f"{row['what']} {float(row['median_s']) * 1e6:.1f}")
    for size, cells in by_size.items():
        print(f"cuda_bench {size} B (median us): " + ", ".join(cells))
if (res / "hostalloc_stall.csv").is_file():  # pinned allocation beside a busy GPU, median us
    by_run = {}
    for row in csv.DictReader((res / "hostalloc_stall.csv").read_text().splitlines()):
        if row["what"] == "what":
            continue
        by_run.setdefault((row["bytes"], row["depth"], row["op_ms"]), {})[row["what"]] = float(row["median_s"])
    for (size, depth, op), m in by_run.items():
        print(f"hostalloc_stall {size} B, depth {depth}, {op} ms operations (median us): "
              + ", ".join(f"{what} {v * 1e6:.1f}" for what, v in m.items()))
        # the share of the call the device is held (docs/pinned-allocations.md), from the medians
        for call in ("alloc", "free"):
            if m.get(f"{call}_busy") and f"gpu_lost_{call}" in m and "gpu_lost_base" in m:
                share = (m[f"gpu_lost_{call}"] - m["gpu_lost_base"]) / m[f"{call}_busy"]
                print(f"  device held during {call}: {min(max(share, 0.0), 1.0):.2f} of the call")
if (res / "variability.csv").is_file():  # the dgemm's spread, alone and with every core busy
    for row in csv.DictReader((res / "variability.csv").read_text().splitlines()):
        if row["kernel"] == "kernel":
            continue
        print(f"variability {row['kernel']} b={row['b']} load {row['load']}: median {float(row['median_s']) * 1e3:.2f} ms, "
              f"rel_std {float(row['rel_std']):.4f} ({row['calls']} calls, {row['threads_measured']} threads)")
if (res / "task_overhead.csv").is_file():
    for row in csv.DictReader((res / "task_overhead.csv").read_text().splitlines()):
        if row["pipeline"] == "pipeline":
            continue
        print(f"task_overhead pipeline {row['pipeline']}: {float(row['per_task_s']) * 1e6:.2f} us per task")
EOF
}

if [ "${1:-}" = --step ]; then shift; name="$1"; shift; "step_$name" "$@"; exit $?; fi

# ------------------------------------------------------------------ driver
OUT="${1:?usage: bench/gpu_device.sh OUT   (REHEARSAL=1 for a machine without CUDA)}"
case "$NUMA_BENCH" in auto|force|no) ;; *) echo "error: NUMA_BENCH=$NUMA_BENCH: expected auto, force or no" >&2; exit 2 ;; esac
check_settings "$ALL_STEPS" B CHECK_N REPS CAL_REPS NUMA_B NUMA_REPS VAR_REPS
for run in $HOSTALLOC_RUNS; do
  [[ "$run" =~ ^[1-9][0-9]*:[1-9][0-9]*:[0-9]+(\.[0-9]+)?$ ]] || { echo "error: HOSTALLOC_RUNS: $run: expected b:depth:op_ms (e.g. 960:2:0.5)" >&2; exit 2; }
done
for n in $SIZES $TRACE_SIZES; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] && [ $((n % B)) = 0 ] || { echo "error: SIZES/TRACE_SIZES: $n: expected a multiple of B=$B" >&2; exit 2; }
done
start_call 'fxt-*.tar.xz' 'fxt-*.tar.gz'

pack() { # OUT: at most 8 files, each under 15 MiB
  trap - EXIT INT TERM
  local limit=$((15 << 20)) n f
  [ -d "$STARPU_HOME/.starpu/sampling" ] && cp -r "$STARPU_HOME/.starpu/sampling" "$RES/sampling" \
    && rm -rf "$RES/sampling/debug"
  mkdir -p "$RES/traces"
  for d in "$WORK"/traces/*/; do
    [ -d "$d" ] || continue
    mkdir -p "$RES/traces/$(basename "$d")"
    cp "$d"/trace.csv "$d"/transfers.csv "$RES/traces/$(basename "$d")/" 2>/dev/null
  done
  log "packing $OUT"
  cp "$WORK/gpu_device.log" "$RES/gpu_device.log"
  tar -czf "$OUT/results.tar.gz" -C "$WORK" results
  # FxT: the raw files (starpu_fxt_tool reads them again anywhere) and starpu_fxt_tool's
  # tasks.rec, paje.trace, data.rec, ...; trace.rec, dag.dot and trace.html are left out (derived).
  export XZ_OPT="-6 -T0 --block-size=8MiB"  # blocks: all cores compress one file
  local z=J ext=xz
  command -v xz >/dev/null || { z=z; ext=gz; log "no xz: the FxT files go as .tar.gz"; }
  for n in $TRACE_SIZES; do
    [ -d "$WORK/fxt-raw" ] && ls -d "$WORK"/fxt-raw/"$n"-* >/dev/null 2>&1 || continue
    f="$OUT/fxt-$n.tar.$ext"
    local parts=(--exclude=trace.rec --exclude=dag.dot --exclude=trace.html)
    for drop in none paje.trace prof_file_; do
      [ "$drop" = none ] || { log "$(basename "$f") over 15 MiB: again without $drop*"; parts+=("--exclude=$drop*"); }
      (cd "$WORK" && tar -c${z}f "$f" "${parts[@]}" fxt-raw/"$n"-* $(ls -d traces/"$n"-*/fxt-tool 2>/dev/null))
      [ "$(stat -c %s "$f")" -gt "$limit" ] || break
    done
    [ "$(stat -c %s "$f")" -le "$limit" ] || { log "$(basename "$f") still over 15 MiB: left out"; rm -f "$f"; }
  done
  log "done: $(cd "$OUT" && ls -s --block-size=K | tr '\n' ' ')"
  cp "$WORK/gpu_device.log" "$OUT/gpu_device.log"
}
trap pack EXIT
trap 'log "interrupted"; exit 130' INT TERM

log "start: REHEARSAL=$REHEARSAL SIZES=$SIZES B=$B REPS=$REPS budget $BUDGET_S s, work $WORK"
step node 30
starpu_steps
step microbench 60
step apps 90
step hostallocstall 60
step variability 60
step bus 90
step check 90
step calibrate 150
for n in $TRACE_SIZES; do step trace 60 "$n"; done
for n in $TRACE_SIZES; do step convert 60 "$n"; done
if have_cuda; then
  step cudabench 60
  step overhead 45
else
  skip cudabench "rehearsal: no CUDA (cuda_bench needs a CUDA device)"
  skip overhead "rehearsal: no CUDA (starpu_task_overhead needs a CUDA worker)"
  skip getrf-gpu "rehearsal: no CUDA (apps/lu --getrf-gpu needs cuSOLVER): getrf on the CPU only"
fi
step runs 150
nodes="$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)"
if [ "$NUMA_BENCH" = force ] || { [ "$NUMA_BENCH" = auto ] && [ "$nodes" -ge 2 ]; }; then
  step numa 90
else
  skip numa "$nodes NUMA node(s): no remote memory to measure (NUMA_BENCH=$NUMA_BENCH)"
fi
step summary 20 && sed 's/^/    /' "$LOGS/summary.log" | tee -a "$WORK/gpu_device.log" >&2
finish_call
