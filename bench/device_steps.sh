# The step driver of the one-call device scripts (bench/gpu_device.sh, bench/gpu_numa_split.sh),
# sourced by them. Each step is the script itself run again as `SELF --step NAME ARGS` under
# `timeout`, within the call's wall-clock budget; a failed or timed-out step is recorded and the
# next ones still run. What the sourcing script sets first (ROOT, then device_settings sets the rest):
#   SELF, ROOT  the script and the tree  TAG      the log's name and its lines' prefix
#   WORK      scratch folder             RES      WORK/results (steps.jsonl, logs/)   LOGS  RES/logs
#   OUT       the call's output folder   BUDGET_S the budget in seconds              STEPS "all" or names
# A step's own time box can be changed with LIMIT_<step>=S.

device_settings() { # work budget_s: the settings both scripts share, with the defaults of WORK and BUDGET_S
  export REHEARSAL="${REHEARSAL:-0}"
  export DEVICE_DIR="${DEVICE_DIR:-$ROOT/.device}"
  export WORK="${WORK:-$1}"
  export BUDGET_S="${BUDGET_S:-$2}"
  export STARPU_REUSE="${STARPU_REUSE:-}"
  export PYTHON="${PYTHON:-python3}"
  export STEPS="${STEPS:-all}"
}

use_private_fxt() { # FXT_PREFIX: the private FxT prefix (step fxt) for pkg-config (StarPU's configure,
  # the apps' Makefiles) and the loader; FXT_LIBDIR is empty while there is none
  FXT_LIBDIR="$(ls -d "$FXT_PREFIX"/usr/lib/*-linux-gnu 2>/dev/null | head -1)"
  if [ -n "$FXT_LIBDIR" ]; then
    export PKG_CONFIG_PATH="$FXT_LIBDIR/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    export LD_LIBRARY_PATH="$FXT_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
}

log() { printf '[%s %4ds] %s\n' "$TAG" "$SECONDS" "$*" | tee -a "$WORK/$TAG.log" >&2; }
skip() { # step reason: a visible message and a line in steps.jsonl
  log "SKIP $1: $2"
  printf '{"step": "%s", "status": "skipped", "reason": "%s"}\n' "$1" "${2//\"/\'}" >>"$RES/steps.jsonl"
}

check_settings() { # all_steps var...: REHEARSAL 0 or 1, STARPU_REUSE an installed StarPU, STEPS among
  # all_steps, each var (and LIMIT_*) a positive integer, WORK a scratch folder; else one line on
  # stderr and exit 2
  local all="$1" s v; shift
  case "$REHEARSAL" in 0|1) ;; *) echo "error: REHEARSAL=$REHEARSAL: expected 0 or 1" >&2; exit 2 ;; esac
  if [ -n "$STARPU_REUSE" ] && [ ! -f "$STARPU_REUSE/lib/pkgconfig/starpu-1.4.pc" ]; then
    echo "error: STARPU_REUSE=$STARPU_REUSE: expected an installed StarPU 1.4 (lib/pkgconfig/starpu-1.4.pc)" >&2; exit 2
  fi
  if [ "$STEPS" != all ]; then
    for s in $STEPS; do
      [[ " $(echo $all) " == *" $s "* ]] || { echo "error: STEPS: $s: expected all or steps among: $(echo $all)" >&2; exit 2; }
    done
  fi
  for v in BUDGET_S "$@" $(compgen -v LIMIT_); do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "error: $v=${!v}: expected a positive integer" >&2; exit 2; }
  done
  case "$(realpath -m "$WORK")" in /|"$ROOT"|"$HOME") echo "error: WORK=$WORK: expected a scratch folder (it is emptied first)" >&2; exit 2 ;; esac
}

start_call() { # files...: OUT made absolute and cleared of an earlier call's files, WORK emptied
  mkdir -p "$OUT" && OUT="$(cd "$OUT" && pwd)" || exit 2
  local f
  for f in "$TAG.log" results.tar.gz results.tmp.tar.gz "$@"; do rm -f "$OUT"/$f; done
  rm -rf "$WORK" && mkdir -p "$LOGS" || exit 2
  : >"$WORK/$TAG.log"
}

step() { # name limit_s [args]: runs `SELF --step name args` under timeout within the budget
  local name="$1" limit="$2"; shift 2
  local tag="$name${1:+-$*}" left=$((BUDGET_S - SECONDS)) t0=$SECONDS rc=0 status
  tag="${tag// /-}"
  local own="LIMIT_$name"; limit="${!own:-$limit}"  # LIMIT_<step>=S: another time box
  if [ "$STEPS" != all ] && [[ " $STEPS " != *" $name "* ]]; then skip "$tag" "not in STEPS=$STEPS"; return 0; fi
  if [ "$left" -lt 5 ]; then
    log "SKIP $tag: budget of $BUDGET_S s spent"
    printf '{"step": "%s", "status": "budget", "reason": "budget of %d s spent"}\n' "$tag" "$BUDGET_S" >>"$RES/steps.jsonl"
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit="$left"
  log "step $tag (limit $limit s)"
  timeout -k 5 "$limit" bash "$SELF" --step "$name" "$@" >>"$LOGS/$tag.log" 2>&1 || rc=$?
  case "$rc" in 0) status=ok ;; 124|137) status=timeout ;; *) status=failed ;; esac
  printf '{"step": "%s", "status": "%s", "rc": %d, "seconds": %d, "limit_s": %d}\n' \
    "$tag" "$status" "$rc" $((SECONDS - t0)) "$limit" >>"$RES/steps.jsonl"
  if [ "$status" = ok ]; then log "step $tag: ok ($((SECONDS - t0)) s)"
  else log "step $tag: $status (rc $rc, $((SECONDS - t0)) s); last lines of logs/$tag.log:"
       tail -5 "$LOGS/$tag.log" | sed 's/^/    /' | tee -a "$WORK/$TAG.log" >&2
  fi
  # What is there so far, in OUT already: a call killed before the end still brings it back.
  cp "$WORK/$TAG.log" "$OUT/$TAG.log" && tar -czf "$OUT/results.tmp.tar.gz" -C "$WORK" results \
    && mv -f "$OUT/results.tmp.tar.gz" "$OUT/results.tar.gz"
  return "$rc"
}

starpu_steps() { # the call's StarPU: built on the node (steps fxt, starpu), or STARPU_REUSE's checked
  if [ -n "$STARPU_REUSE" ]; then
    skip fxt "STARPU_REUSE=$STARPU_REUSE: StarPU already built (with the FxT it was built with)"
    skip starpu "STARPU_REUSE=$STARPU_REUSE"
    step check_starpu_reused 20
  else
    step fxt 30
    step starpu 300
  fi
}

finish_call() { # the closing line and exit status: 1 when a step failed, timed out or ran out of budget
  local failed
  failed="$(grep -cv '"status": "\(ok\|skipped\)"' "$RES/steps.jsonl")"
  log "steps: $(grep -c '"status": "ok"' "$RES/steps.jsonl") ok, $failed failed, timed out or out of budget, $(grep -c '"status": "skipped"' "$RES/steps.jsonl") skipped"
  exit $((failed > 0))
}
