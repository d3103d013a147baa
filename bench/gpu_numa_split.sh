#!/usr/bin/env bash
# Factor A on the real StarPU with a GPU, in one time-boxed call on a GPU node: the node described
# as two NUMA nodes, its GPU on NUMA 0 (platforms/machines/gpunode_numa2.yaml; docs/numa-split.md,
# "With a GPU on one NUMA node"), apps/lu at A = -1 and +1, StarPU's own counts against numasim's:
#
#   bash bench/gpu_numa_split.sh OUT                 # on the GPU node (16 cores + CUDA)
#   REHEARSAL=1 bash bench/gpu_numa_split.sh OUT     # the same steps on a machine without CUDA
#
# As for bench/gpu_device.sh: first, where the tree is, `bash bench/gpu_device_prepare.sh` (fills the
# ignored folder .device/: StarPU's source, Debian's FxT packages, and the wheels of jsonschema,
# which the testbed needs and the GPU node's Python lacks); the call carries .device/ and
# build/simulator/numasim (numasim's counts need no GPU: where numasim does not run, its step is
# skipped with the reason and the same command runs anywhere afterwards). The steps should take
# about 6 minutes on 16 cores + one H100/H200 (StarPU's build with CUDA about 1 minute); BUDGET_S
# (480 s) bounds them.
#
# Steps, in order (each under `timeout`; a failed or timed-out step is recorded and the next ones
# still run; bench/device_steps.sh):
#   node       node.txt (bench/gpu_device.sh's step)
#   fxt, starpu  the native StarPU with CUDA and FxT, built on the node (bench/gpu_device.sh's steps;
#              with STARPU_REUSE, check_starpu_reused instead)
#   apps       apps/lu and its FxT reader against that StarPU (bench/gpu_device.sh's step)
#   wheels     jsonschema for the node's Python, from DEVICE_DIR/wheels, when it lacks it
#   describe   the split description as hwloc XML (testbed/describe/hwloc_xml.py), checked against
#              the node's PUs: results/hwloc-<machine>.xml
#   calibrate  StarPU's bus and codelet models on that topology: CAL_REPS runs at A = -1 and +1 with
#              STARPU_CALIBRATE=1
#   real       bench/numa_split_counts.py --engines real: RUNS runs at A = -1 and +1 of apps/lu on the
#              split topology (--topology described, --generate-on-main-ram, --memory-counts): RAM
#              memory nodes, replicas per memory node, copies per node pair, the allocations per
#              thread kind (on a RAM node with CUDA workers: pinned, cudaHostAlloc), LU tasks per
#              worker, makespans: results/numa-split/{counts.json,table.md}
#   gpu        StarPU ran its CUDA worker there: a GPU memory node in every run, LU tasks on it
#              (skipped in a rehearsal, with the reason)
#   numasim    the same counts and makespans from numasim on the same description, merged into the
#              table (--engines numasim --merge); skipped, with the reason and the command that
#              does it elsewhere, where numasim does not run
#   summary    the table and the pinned allocations per thread kind, in the call's output
# Then OUT gets gpu_numa_split.log (these progress lines) and results.tar.gz (node.txt, steps.jsonl,
# calibrate.jsonl, numa-split/, the hwloc XML, StarPU's sampling/, logs/).
#
# Settings (environment):
#   REHEARSAL=1        no CUDA: this machine's split description (local_numa2-1), tiny sizes
#   CLUSTER            the split description's cluster (default gpunode_numa2-1; rehearsal local_numa2-1)
#   N, B, RUNS, CAL_REPS  matrix order, tile size, counted runs and calibration runs per level of A
#   DEVICE_DIR=DIR     bench/gpu_device_prepare.sh's folder (default .device)
#   STARPU_REUSE=DIR   an installed native StarPU with FxT: no build
#   NUMASIM=FILE       numasim (default build/simulator/numasim)
#   WORK=DIR           scratch folder (default build/gpu-numa-split)
#   BUDGET_S=S         wall-clock budget of all steps (default 480 s); LIMIT_<step>=S another time box
#   STEPS="a b ..."   run only these steps (the others are recorded as skipped)
#   PYTHON             the Python that runs the testbed (default python3)
set -uo pipefail
SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
ROOT="$(cd "$(dirname "$SELF")/.." && pwd)"
TAG=gpu_numa_split
source "$ROOT/bench/device_steps.sh"  # the step driver shared with bench/gpu_device.sh

# ------------------------------------------------------------------ settings
device_settings "$ROOT/build/gpu-numa-split" 480
export NUMASIM="${NUMASIM:-$ROOT/build/simulator/numasim}"
ALL_STEPS="node fxt starpu check_starpu_reused apps wheels describe calibrate real gpu numasim summary"
if [ "$REHEARSAL" = 1 ]; then
  export CLUSTER="${CLUSTER:-local_numa2-1}" N="${N:-1920}" B="${B:-192}" RUNS="${RUNS:-2}" CAL_REPS="${CAL_REPS:-1}"
  export CUDA=no
else
  export CLUSTER="${CLUSTER:-gpunode_numa2-1}" N="${N:-9600}" B="${B:-960}" RUNS="${RUNS:-3}" CAL_REPS="${CAL_REPS:-2}"
  export CUDA=yes
fi
export FXT_PREFIX="$WORK/fxt" PREFIX="${STARPU_REUSE:-$ROOT/.deps/starpu-native}"
export RES="$WORK/results" LOGS="$WORK/results/logs" SPLIT="$WORK/results/numa-split"
# The testbed's runs: this tree's package (and the wheels step's), apps/lu and its FxT reader as
# built by the apps step, StarPU's tools from PREFIX, numasim; StarPU's models under WORK.
export PYTHONPATH="$ROOT:$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
export TESTBED_LU="$WORK/build/lu-real/lu" TESTBED_FXT_EVENTS="$WORK/build/lu-real/fxt_events"
export TESTBED_NUMASIM="$NUMASIM" STARPU_NATIVE_PREFIX="$PREFIX"
export STARPU_HOME="$WORK/starpu-home" STARPU_HOSTNAME="${HOSTNAME_MODEL:-gpunode-numa2}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1

use_private_fxt

counts() { # engines [args]: bench/numa_split_counts.py on the split description, into SPLIT
  local engines="$1"; shift
  "$PYTHON" "$ROOT/bench/numa_split_counts.py" --cluster "$CLUSTER" --n "$N" --b "$B" --runs "$RUNS" \
    --engines "$engines" "$@" --out "$SPLIT"
}

# ------------------------------------------------------------------ steps (run as `SELF --step NAME`)
gpu_device_step() { bash "$ROOT/bench/gpu_device.sh" --step "$1"; }  # the same WORK, PREFIX, FXT
step_node() { gpu_device_step node; }
step_fxt() { gpu_device_step fxt; }
step_starpu() { gpu_device_step starpu; }
step_check_starpu_reused() { gpu_device_step check_starpu_reused; }
step_apps() { gpu_device_step apps && [ -x "$TESTBED_FXT_EVENTS" ]; }

step_wheels() { # the testbed reads machine descriptions with jsonschema (testbed/describe/machines.py)
  if "$PYTHON" -c "import jsonschema, yaml, lxml" 2>/dev/null; then
    echo "$PYTHON has jsonschema, yaml and lxml: nothing to install"; return 0
  fi
  local wheels=("$DEVICE_DIR"/wheels/*.whl)
  [ -f "${wheels[0]}" ] || { echo "error: $PYTHON lacks jsonschema and $DEVICE_DIR/wheels has no wheel (bench/gpu_device_prepare.sh)"; return 2; }
  (cd "$DEVICE_DIR" && sha256sum -c --quiet SHA256SUMS) || { echo "error: $DEVICE_DIR: sha256 mismatch"; return 2; }
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" "${wheels[@]}" \
    && "$PYTHON" -c "import jsonschema" && echo "jsonschema installed into $WORK/site"
}

step_describe() { # the topology StarPU will load, kept with the results
  "$PYTHON" - "$CLUSTER" "$RES" <<'EOF'
import sys
from pathlib import Path
from testbed.describe.hwloc_xml import check_topology, write_topology
from testbed.describe.machines import load_cluster
cluster, res = sys.argv[1], Path(sys.argv[2])
for machine in {n.machine.name: n.machine for n in load_cluster(cluster).nodes}.values():
    path = res / f"hwloc-{machine.name}.xml"
    write_topology(machine, path)
    numa = check_topology(path.read_bytes(), path, "numa_nodes[].cores")
    print(f"{path.name}: {numa} NUMA nodes, GPUs on NUMA {[g.numa_node for g in machine.gpus]}")
EOF
}

step_calibrate() { # StarPU's bus calibration (first start on the topology) and codelet models
  local a rep rc=0 line
  for rep in $(seq 1 "$CAL_REPS"); do for a in -1 1; do
    line="$(STARPU_CALIBRATE=1 "$PYTHON" -m testbed -q simulate --engine real --cluster "$CLUSTER" --n "$N" --b "$B" \
      --factors "A=$a" --env STARPU_RESERVE_NCPU=0 --topology described --generate-on-main-ram --seed "$rep")" || rc=1
    [ -n "$line" ] && printf '%s\n' "$line" >>"$RES/calibrate.jsonl"
    echo "calibration A=$a rep $rep: $(printf '%s' "$line" | grep -o '"makespan_s": [^,]*')"
  done; done
  return "$rc"
}

step_real() { counts real; }

step_numasim() { # numasim needs no GPU; it needs its libraries (SimGrid) where it runs (see the driver)
  local merge=()
  [ -f "$SPLIT/counts.json" ] && merge=(--merge "$SPLIT/counts.json")
  counts numasim "${merge[@]}"
}

step_gpu() { # StarPU ran with its CUDA worker on the split topology: a GPU memory node, tasks on it
  "$PYTHON" - "$SPLIT/counts.json" <<'EOF'
import json, sys
runs = [r for name, rs in json.load(open(sys.argv[1]))["results"].items() if name.startswith("StarPU") for r in rs]
gpu = [r for r in runs if set(r["memory_nodes"]) - set(r["ram_memory_nodes"])]
cuda = sum(n for r in runs for w, n in r["lu"]["tasks_by_worker"].items() if w.startswith("cuda"))
print(f"{len(gpu)} of {len(runs)} StarPU runs with a GPU memory node; {cuda} LU tasks on the CUDA worker")
sys.exit(0 if runs and len(gpu) == len(runs) and cuda > 0 else 1)
EOF
}

step_summary() { # the table, then the pinned allocations per thread kind (RAM nodes, CUDA workers present)
  [ -f "$SPLIT/table.md" ] || { echo "no $SPLIT/table.md"; return 1; }
  cat "$SPLIT/table.md"
  echo "allocations on a RAM node per thread kind (pinned, cudaHostAlloc, where CUDA workers ran):"
  grep -E '^\| buffers allocated by .* on RAM' "$SPLIT/table.md" || echo "  none"
}

if [ "${1:-}" = --step ]; then shift; name="$1"; shift; "step_$name" "$@"; exit $?; fi

# ------------------------------------------------------------------ driver
OUT="${1:?usage: bench/gpu_numa_split.sh OUT   (REHEARSAL=1 for a machine without CUDA)}"
[ -f "$ROOT/platforms/clusters/$CLUSTER.yaml" ] || {
  echo "error: CLUSTER=$CLUSTER: expected a cluster of platforms/clusters/ (a split description, e.g. gpunode_numa2-1)" >&2; exit 2; }
check_settings "$ALL_STEPS" N B RUNS CAL_REPS
[ $((N % B)) = 0 ] || { echo "error: N=$N: expected a multiple of B=$B" >&2; exit 2; }
start_call

pack() { # OUT: the log and results.tar.gz (StarPU's models of the split topology with them)
  trap - EXIT INT TERM
  [ -d "$STARPU_HOME/.starpu/sampling" ] && cp -r "$STARPU_HOME/.starpu/sampling" "$RES/sampling" \
    && rm -rf "$RES/sampling/debug"
  log "packing $OUT"
  cp "$WORK/$TAG.log" "$RES/$TAG.log"
  tar -czf "$OUT/results.tar.gz" -C "$WORK" results
  log "done: $(cd "$OUT" && ls -s --block-size=K | tr '\n' ' ')"
  cp "$WORK/$TAG.log" "$OUT/$TAG.log"
}
trap pack EXIT
trap 'log "interrupted"; exit 130' INT TERM

log "start: REHEARSAL=$REHEARSAL CLUSTER=$CLUSTER N=$N B=$B RUNS=$RUNS CAL_REPS=$CAL_REPS budget $BUDGET_S s, work $WORK"
step node 30
starpu_steps
step apps 90
step wheels 60
step describe 30
step calibrate 150
step real 240
if [ "$CUDA" = yes ]; then
  step gpu 20
else
  skip gpu "rehearsal: no CUDA (the GPU of the split description needs a CUDA device): the counts are those of $CLUSTER, CPU workers only"
fi
if "$NUMASIM" --version >/dev/null 2>&1; then
  step numasim 120
else
  skip numasim "numasim does not run here ($("$NUMASIM" --version 2>&1 | head -1)): it needs no GPU; anywhere afterwards: bench/numa_split_counts.py --cluster $CLUSTER --n $N --b $B --runs $RUNS --engines numasim --merge results/numa-split/counts.json"
fi
step summary 20 && sed 's/^/    /' "$LOGS/summary.log" | tee -a "$WORK/$TAG.log" >&2
finish_call
