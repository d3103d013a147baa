#!/usr/bin/env bash
# Runs a command of the project (default: make test) with Guix's packages: three profiles under
# .guix/ (tools.scm; native.scm and simgrid.scm, one per StarPU flavour, which collide in one),
# the pinned channels of channels.scm, then the command in a shell of the tools profile with the
# StarPU prefixes and apt off (envs/setup.sh builds no StarPU and installs only the venv).
# UNTESTED: no Guix here (channels.scm).
#   bash envs/guix/run.sh [COMMAND...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
GUIX=(guix time-machine -C "$ROOT/envs/guix/channels.scm" --)
command -v guix >/dev/null || { echo "envs/guix/run.sh: error: guix not found on PATH" >&2; exit 2; }
mkdir -p "$ROOT/.guix"
for p in tools native simgrid; do
  echo "[guix] profile .guix/$p from envs/guix/$p.scm"
  "${GUIX[@]}" package --profile="$ROOT/.guix/$p" --manifest="$ROOT/envs/guix/$p.scm"
done
[ "$#" -gt 0 ] || set -- make test
cd "$ROOT"
# the tools profile's variables (PATH, PKG_CONFIG_PATH, C_INCLUDE_PATH, LIBRARY_PATH, ...)
# shellcheck disable=SC1091
GUIX_PROFILE="$ROOT/.guix/tools" . "$ROOT/.guix/tools/etc/profile"
export TESTBED_APT=0 STARPU_NATIVE_PREFIX="$ROOT/.guix/native" STARPU_SIMGRID_PREFIX="$ROOT/.guix/simgrid"
export SSL_CERT_DIR="$ROOT/.guix/tools/etc/ssl/certs"   # pip, in envs/setup.sh
exec "$@"
