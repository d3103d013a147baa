#!/bin/sh
# Status of an OAR job for Snakemake's cluster-generic executor:
# prints running, success or failed.   oar-status.sh JOBID
set -eu
info=$(oarstat -f -j "$1" 2>/dev/null || true)
state=$(printf '%s\n' "$info" | sed -n 's/^ *state = //p')
code=$(printf '%s\n' "$info" | sed -n 's/^ *exit_code = \([0-9-]*\).*/\1/p')
case "$state" in
Terminated) if [ "${code:-0}" = 0 ]; then echo success; else echo failed; fi ;;
Error) echo failed ;;
"") echo failed ;; # unknown to OAR: lost
*) echo running ;; # Waiting, Launching, Running, Finishing, Hold, toLaunch, ...
esac
