#!/usr/bin/env bash
# Install everything the testbed needs on Debian bookworm; idempotent.
#
#   bash envs/setup.sh            # full setup (apt, StarPU x2, venv)
#
# A second run only checks stamps and returns in seconds. Everything is installed
# under .deps/ (StarPU builds, sources) and .venv/ (Python), both git-ignored.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="$ROOT/.deps"
VENV="$ROOT/.venv"
STARPU_VERSION="1.4.10+dfsg-2"          # pinned Debian source version of StarPU
STARPU_SUITE="forky"                    # Debian suite whose pool serves that source
JOBS="$(nproc)"
mkdir -p "$DEPS"

say() { printf '\033[1m[setup %4ds]\033[0m %s\n' "$SECONDS" "$*"; }
die() { printf '\033[31m[setup] error:\033[0m %s\n' "$*" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

# ---------------------------------------------------------------- Debian packages
APT_PACKAGES=(
  build-essential g++ cmake ninja-build pkg-config make git
  libsimgrid-dev
  hwloc libhwloc-dev
  libopenblas-dev liblapacke-dev
  libopenmpi-dev openmpi-bin
  xsltproc libxml2-utils
  python3-venv python3-dev
  libgtest-dev
  dpkg-dev
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq || die "apt-get update failed: is the Debian registry reachable?"
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || die "apt-get install failed for: ${missing[*]} (registry unreachable or package unknown)"
else
  say "Debian packages: all present"
fi

# ---------------------------------------------------------------- StarPU sources
# The deb-src entry is derived from the machine's own bookworm sources (same URIs),
# pointing to the newer suite that carries StarPU 1.4.
SRC_LIST=/etc/apt/sources.list.d/testbed-starpu-src.sources
STARPU_SRC="$DEPS/src/starpu-${STARPU_VERSION%%+*}"
if [ ! -f "$DEPS/src/.fetched-$STARPU_VERSION" ]; then
  if [ ! -f "$SRC_LIST" ]; then
    uris="$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
    if [ -z "$uris" ] && [ -f /etc/apt/sources.list ]; then
      uris="$(awk '$1=="deb" && $3 ~ /^bookworm$/ {print $2; exit}' /etc/apt/sources.list)"
    fi
    [ -n "$uris" ] || die "cannot derive a deb-src URI from /etc/apt/sources.list(.d)"
    say "adding deb-src entry for suite $STARPU_SUITE (from existing URI)"
    printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "$uris" "$STARPU_SUITE" | $SUDO tee "$SRC_LIST" >/dev/null
    $SUDO apt-get update -qq || die "apt-get update failed after adding deb-src"
  fi
  say "fetching StarPU source $STARPU_VERSION"
  rm -rf "$DEPS/src" && mkdir -p "$DEPS/src"
  (cd "$DEPS/src" && apt-get source -qq --download-only "starpu=$STARPU_VERSION" >/dev/null) \
    || die "apt-get source starpu=$STARPU_VERSION failed (registry unreachable?)"
  (cd "$DEPS/src" && dpkg-source -x --skip-patches starpu_*.dsc "$STARPU_SRC" >/dev/null) \
    || die "unpacking StarPU source failed"
  touch "$DEPS/src/.fetched-$STARPU_VERSION"
else
  say "StarPU source $STARPU_VERSION: present"
fi

COMMON_FLAGS=(--enable-mpi --enable-maxcpus=64 --enable-maxnumanodes=4
  --disable-build-doc --disable-build-tests --disable-build-examples
  --disable-opencl --disable-fortran --disable-socl --disable-starpupy
  --disable-julia --disable-starpufft --disable-hip --disable-mlr
  --disable-openmp --disable-cuda)

build_starpu() { # name, extra configure flags...
  local name="$1"; shift
  local prefix="$DEPS/starpu-$name" build="$DEPS/build-$name"
  # The stamp names the version and the configure flags: changing either rebuilds.
  local flags_id; flags_id="$(printf '%s\n' "${COMMON_FLAGS[@]}" "$@" | sha256sum | cut -c1-12)"
  local stamp="$prefix/.built-$STARPU_VERSION-$flags_id"
  if [ -f "$stamp" ]; then say "StarPU ($name build): present"; return; fi
  say "building StarPU $STARPU_VERSION ($name build, $JOBS jobs) -> $prefix"
  rm -rf "$build" "$prefix"; mkdir -p "$build"
  local log="$DEPS/build-$name.log"
  ( cd "$build" && "$STARPU_SRC/configure" --prefix="$prefix" "${COMMON_FLAGS[@]}" "$@" ) >"$log" 2>&1 \
    || die "configure of StarPU ($name) failed, see $log"
  ( cd "$build" && make -j"$JOBS" && make install ) >>"$log" 2>&1 \
    || die "build of StarPU ($name) failed, see $log"
  touch "$stamp"
  say "StarPU ($name build) installed"
}
build_starpu simgrid --enable-simgrid --disable-shared
build_starpu native

# ---------------------------------------------------------------- Python
REQ="$ROOT/envs/requirements.txt"
PYSTAMP="$VENV/.installed-$(sha256sum "$REQ" "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)"
if [ ! -f "$PYSTAMP" ]; then
  say "creating Python venv in .venv with pinned requirements"
  [ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv "$VENV" || die "python3 -m venv failed"
  "$VENV/bin/pip" install -q --upgrade pip >/dev/null || die "pip cannot reach PyPI"
  "$VENV/bin/pip" install -q -r "$REQ" || die "pip install -r envs/requirements.txt failed (PyPI unreachable?)"
  "$VENV/bin/pip" install -q --no-deps -e "$ROOT" >"$VENV/testbed-install.log" 2>&1 || die "installing the testbed package failed"
  rm -f "$VENV"/.installed-*; touch "$PYSTAMP"
else
  say "Python venv: up to date"
fi
say "done"
