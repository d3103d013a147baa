#!/usr/bin/env bash
# Install everything the testbed needs on Debian bookworm; idempotent.
#
#   bash envs/setup.sh            # full setup (apt, StarPU x2, venv)
#
# A second run only checks stamps and returns in seconds. Everything is installed
# under .deps/ (StarPU builds, sources) and .venv/ (Python), both git-ignored.
#
# Settings (environment variables):
#   TESTBED_APT=0                 no apt: Debian packages must be there already, and the
#                                 StarPU source comes from STARPU_SOURCE_TARBALL
#   STARPU_SOURCE_TARBALL=FILE    Debian's starpu_<version>.orig.tar.gz (sha256 checked)
#                                 instead of `apt-get source`
#   TESTBED_STARPU_BUILDS="simgrid native"   which StarPU builds to make ("none": none)
#   STARPU_NATIVE_PREFIX=DIR      use this installed native StarPU 1.4 (MPI, FxT for --trace)
#   STARPU_SIMGRID_PREFIX=DIR     use this installed StarPU-SimGrid 1.4 (MPI, static)
#                                 instead of building that flavour under .deps/ (checked:
#                                 lib/pkgconfig/starpu-1.4.pc, bin/starpu_smpirun for SimGrid);
#                                 the Makefiles and testbed/common/paths.py read the same variables
#   TESTBED_CUDA=auto|yes|no      native build with CUDA: auto = when nvcc is found
#   TESTBED_PYTHON=0              skip the Python venv
#   TESTBED_SLURM=1               also SLURM 22.05 (slurmctld, slurmd, slurm-client, munge,
#                                 slurmdbd, mariadb-server) for tests/test_slurm.py and
#                                 envs/slurm-local.sh (.ci/run sets it; about 50 s of apt)
#   TESTBED_OAR=1                 also OAR 2.5.9 (oar-server, oar-node, oar-user with PostgreSQL)
#                                 and the user testbed-oar that submits (OAR refuses root), for
#                                 tests/test_oar.py and envs/oar-local.sh (.ci/run sets it)
#                                 On a machine with systemd, apt starts munge, MariaDB and
#                                 PostgreSQL as services; the local clusters run their own.
#   TESTBED_STARVZ=auto|1|0       StarVZ (schnorr/starvz 7426178) and data.tree (gluc/data.tree bee0d76)
#                                 into .deps/R from the source tarballs in ../shared/vendor/r
#                                 (sha256 checked), with Debian's R and the r-cran-* packages StarVZ
#                                 imports: tests/test_starvz_export.py then has StarVZ draw an export
#                                 (bench/starvz_check.R). auto = when ../shared/vendor/r exists;
#                                 1 = required (.ci/run sets it); 0.5-2 min of apt, 20-60 s of build.
#                                 TESTBED_STARVZ_VENDOR=DIR: the tarballs' folder instead
#   STARPU_EXTRA_CONFIGURE_FLAGS  more configure flags for the native build (e.g. --without-hwloc)
#   TESTBED_KEEP_BUILD_TREES=1    keep .deps/build-* after installing (about 650 MB)
#   TESTBED_PROGRESS_S=60         seconds between the "still building" lines of a long build
#   CHAMELEON_SOURCE_TARBALL=FILE a Chameleon source tarball (1.2 or later, with its submodules
#                                 hqr/ and cmake_modules/morse_cmake/ filled, as release tarballs
#                                 are), built against each StarPU flavour into
#                                 .deps/chameleon-{native,simgrid} (sha256 printed): `--app chameleon`
#                                 (getting and packing the sources: apps/lu/README.md)
#   CHAMELEON_PREFIX=DIR          an installed native Chameleon instead (checked when used, by
#   CHAMELEON_SIMGRID_PREFIX=DIR  testbed/run/engines/chameleon_app.py); without any of these,
#                                 nothing of Chameleon is built and its tests skip. With one, the
#                                 project's driver apps/chameleon_lu is built against it into
#                                 build/chameleon-lu-{native,simgrid}
#
# What it changes on the system: installs the Debian packages listed below (root or sudo,
# only when some are missing). The StarPU source is fetched with a private apt state under
# .deps/apt (no change to the system's apt sources); everything else stays in .deps/, .venv/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="$ROOT/.deps"
VENV="$ROOT/.venv"
STARPU_VERSION="1.4.10+dfsg-2"          # pinned Debian source version of StarPU
# sha256 of Debian's starpu_1.4.10+dfsg.orig.tar.gz (the file apt verifies against the suite index)
STARPU_ORIG_SHA256="6b3bb9ec0d79f937882148b2da09ae6cb0ad4d1e83a104be45723dd70eba99c3"
TESTBED_APT="${TESTBED_APT:-1}"
TESTBED_STARPU_BUILDS="${TESTBED_STARPU_BUILDS:-simgrid native}"
TESTBED_CUDA="${TESTBED_CUDA:-auto}"
TESTBED_PYTHON="${TESTBED_PYTHON:-1}"
TESTBED_SLURM="${TESTBED_SLURM:-0}"
TESTBED_OAR="${TESTBED_OAR:-0}"
JOBS="$(nproc)"
mkdir -p "$DEPS"
# Its physical path: what the builds record (Chameleon's stamp and CMake package name the StarPU
# they link), the same whether .deps is a folder or a link to a shared one
DEPS="$(cd "$DEPS" && pwd -P)"
TESTBED_STARVZ="${TESTBED_STARVZ:-auto}"
STARVZ_VENDOR="${TESTBED_STARVZ_VENDOR:-$ROOT/../shared/vendor/r}"
# The two R source tarballs (archives of the public repositories at these commits; the vendor
# folder's README lists the same sha256) and what StarVZ's and data.tree's DESCRIPTION import,
# as Debian packages (base R's methods, grDevices, stats, utils come with r-base-core)
STARVZ_TARBALLS=(data.tree-1.1.0-bee0d76.tar.gz starvz-0.8.4-7426178.tar.gz)
declare -A STARVZ_SHA256=(
  [data.tree-1.1.0-bee0d76.tar.gz]=1537de5971e8085f0da5fa59773730f6e0fa59ae5f964ab874c17b592068c799
  [starvz-0.8.4-7426178.tar.gz]=6ce4afdbeb8851ccbbe9dd2bdeb2c83a7160a85fbbc0ae0f20c373e76fb0d5f1
)
STARVZ_APT=(r-base-core r-cran-r6 r-cran-stringi r-cran-magrittr r-cran-dplyr r-cran-ggplot2 r-cran-tibble
  r-cran-rlang r-cran-tidyr r-cran-patchwork r-cran-purrr r-cran-readr r-cran-stringr r-cran-yaml
  r-cran-lpsolve r-cran-gtools r-cran-rcolorbrewer r-cran-zoo r-cran-rcpp r-cran-bh)

say() { printf '\033[1m[setup %4ds]\033[0m %s\n' "$SECONDS" "$*"; }
die() { printf '\033[31m[setup] error:\033[0m %s\n' "$*" >&2; exit 1; }
bad_setting() { printf '\033[31m[setup] error:\033[0m %s\n' "$*" >&2; exit 2; }  # a wrong setting (variable)

# Root for apt only, and only when something must be installed.
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else die "installing Debian packages needs root or sudo; as a user, install them first (list in envs/setup.sh) and run with TESTBED_APT=0"
  fi
}

# ---------------------------------------------------------------- Debian packages
APT_PACKAGES=(
  build-essential g++ cmake ninja-build pkg-config make git
  libsimgrid-dev
  hwloc libhwloc-dev
  libopenblas-dev liblapacke-dev
  libopenmpi-dev openmpi-bin
  xsltproc libxml2-utils
  python3-venv python3-dev
  libgtest-dev nlohmann-json3-dev
  libtcmalloc-minimal4  # numasim links tcmalloc_minimal when present: about 11 % less time, same results
  clang-format
  dpkg-dev
  pajeng
  libfxt-dev
  chromium  # headless: tests/test_report_render.py screenshots the HTML report (no X server)
)
# batch schedulers, for trying the profiles on a one-node cluster of this machine
if [ "$TESTBED_SLURM" = 1 ]; then
  APT_PACKAGES+=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)
fi
if [ "$TESTBED_OAR" = 1 ]; then
  APT_PACKAGES+=(oar-server oar-server-pgsql oar-node oar-user oar-user-pgsql postgresql)
fi
# Chameleon from its source (optional): its CMakeLists.txt declares `project(CHAMELEON Fortran C
# CXX)`, so CMake stops without a Fortran compiler
if [ -n "${CHAMELEON_SOURCE_TARBALL:-}" ]; then
  APT_PACKAGES+=(gfortran)
fi
# StarVZ for the tests (optional): decided here, since it adds Debian packages
case "$TESTBED_STARVZ" in
  0) WANT_STARVZ=0 ;;
  1) [ -d "$STARVZ_VENDOR" ] || bad_setting "TESTBED_STARVZ=1: expected StarVZ's source tarballs in $STARVZ_VENDOR (TESTBED_STARVZ_VENDOR), no such directory"
     WANT_STARVZ=1 ;;
  auto) if [ -d "$STARVZ_VENDOR" ]; then WANT_STARVZ=1; else WANT_STARVZ=0; fi ;;
  *) bad_setting "TESTBED_STARVZ=$TESTBED_STARVZ: expected auto, 1 or 0" ;;
esac
if [ "$WANT_STARVZ" = 1 ]; then
  for f in "${STARVZ_TARBALLS[@]}"; do  # checked before anything is installed (800 kB in all)
    [ -f "$STARVZ_VENDOR/$f" ] || bad_setting "TESTBED_STARVZ: expected $STARVZ_VENDOR/$f (TESTBED_STARVZ_VENDOR), no such file"
    echo "${STARVZ_SHA256[$f]}  $STARVZ_VENDOR/$f" | sha256sum -c --quiet - >/dev/null 2>&1 \
      || bad_setting "TESTBED_STARVZ: $STARVZ_VENDOR/$f: expected sha256 ${STARVZ_SHA256[$f]} (schnorr/starvz and gluc/data.tree at the commits of its name)"
  done
  APT_PACKAGES+=("${STARVZ_APT[@]}")
fi
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ] && [ "$TESTBED_APT" = 0 ]; then
  say "TESTBED_APT=0: not installing ${missing[*]} (the builds below may fail without them)"
elif [ "${#missing[@]}" -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq || die "apt-get update failed: is the Debian registry reachable?"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || die "apt-get install failed for: ${missing[*]} (registry unreachable or package unknown)"
else
  say "Debian packages: all present"
fi

if [ "$TESTBED_OAR" = 1 ] && ! id testbed-oar >/dev/null 2>&1; then
  say "adding the user testbed-oar (submits the OAR test's jobs: OAR refuses root)"
  as_root useradd --create-home --shell /bin/bash testbed-oar || die "useradd testbed-oar failed"
fi

# ---------------------------------------------------------------- StarPU: installed or built
# A flavour whose prefix variable is given is used as installed (checked here); the others are built.
check_starpu_prefix() { # flavour, variable, prefix
  local flavour="$1" var="$2" prefix="$3"
  [ -d "$prefix" ] || bad_setting "$var=$prefix: no such directory (expected an installed StarPU 1.4, $flavour flavour)"
  [ -f "$prefix/lib/pkgconfig/starpu-1.4.pc" ] && [ -f "$prefix/lib/pkgconfig/starpumpi-1.4.pc" ] \
    || bad_setting "$var=$prefix: expected a StarPU 1.4 prefix with MPI (lib/pkgconfig/starpu-1.4.pc and starpumpi-1.4.pc)"
  if [ "$flavour" = simgrid ]; then
    [ -x "$prefix/bin/starpu_smpirun" ] \
      || bad_setting "$var=$prefix: expected a StarPU-SimGrid prefix (bin/starpu_smpirun missing: built without --enable-simgrid?)"
  elif [ -x "$prefix/bin/starpu_smpirun" ]; then
    bad_setting "$var=$prefix: expected a native StarPU, this one is a SimGrid build (bin/starpu_smpirun)"
  fi
  say "StarPU ($flavour): using $var=$prefix"
}
STARPU_TO_BUILD=()
for b in $TESTBED_STARPU_BUILDS; do
  case "$b" in
    simgrid) var=STARPU_SIMGRID_PREFIX ;;
    native) var=STARPU_NATIVE_PREFIX ;;
    none) continue ;;
    *) die "TESTBED_STARPU_BUILDS: expected simgrid and/or native (or none), got $b" ;;
  esac
  if [ -n "${!var:-}" ]; then check_starpu_prefix "$b" "$var" "${!var}"; else STARPU_TO_BUILD+=("$b"); fi
done

# ---------------------------------------------------------------- StarPU sources
# Debian's source package of the pinned version, fetched with a private apt state (sources
# list and package lists under .deps/apt, the archive keyring for signatures): the system's
# apt configuration is not touched. Suites tried in order (any that still carries the pinned
# version; apt checks the files against that suite's signed index), else STARPU_SOURCE_TARBALL.
STARPU_SUITES="${STARPU_SUITES:-forky sid}"
STARPU_SRC="$DEPS/src/starpu-${STARPU_VERSION%%+*}"
# Earlier versions of this script left a deb-src entry in the system's sources: remove ours.
OLD_SRC_LIST=/etc/apt/sources.list.d/testbed-starpu-src.sources
if [ -f "$OLD_SRC_LIST" ] && [ -w /etc/apt/sources.list.d ]; then rm -f "$OLD_SRC_LIST"; fi

fetch_debian_source() { # -> 0 when the source is unpacked in $STARPU_SRC
  local apt_dir="$DEPS/apt" uris suite
  uris="$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
  if [ -z "$uris" ] && [ -f /etc/apt/sources.list ]; then
    uris="$(awk '$1=="deb" && $2 ~ /^http/ {print $2; exit}' /etc/apt/sources.list)"
  fi
  [ -n "$uris" ] || { say "no Debian mirror in /etc/apt/sources.list(.d)"; return 1; }
  for suite in $STARPU_SUITES; do
    rm -rf "$apt_dir" "$DEPS/src" && mkdir -p "$apt_dir/lists/partial" "$apt_dir/parts" "$DEPS/src"
    printf 'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n' "$uris" "$suite" \
      >"$apt_dir/sources.list"
    local opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=$apt_dir/parts"
                -o "Dir::State::Lists=$apt_dir/lists")
    say "fetching StarPU source $STARPU_VERSION from $uris ($suite)"
    if apt-get "${opts[@]}" update -qq >/dev/null 2>&1 \
       && (cd "$DEPS/src" && apt-get "${opts[@]}" source -qq --download-only "starpu=$STARPU_VERSION" >/dev/null 2>&1); then
      (cd "$DEPS/src" && dpkg-source -x --skip-patches starpu_*.dsc "$STARPU_SRC" >/dev/null 2>&1) \
        || die "unpacking StarPU source failed"
      rm -rf "$apt_dir"
      return 0
    fi
    say "suite $suite does not serve starpu=$STARPU_VERSION (or the mirror is unreachable)"
  done
  rm -rf "$apt_dir"
  return 1
}

if [ "${#STARPU_TO_BUILD[@]}" = 0 ] && [ ! -f "$DEPS/src/.fetched-$STARPU_VERSION" ] \
   && [ "$TESTBED_APT" = 0 ] && [ -z "${STARPU_SOURCE_TARBALL:-}" ]; then
  # Nothing to build: the source only brings StarPU's shipped perf models to some tests.
  say "StarPU source: not fetched (nothing to build; the tests reading StarPU's shipped perf models skip)"
elif [ ! -f "$DEPS/src/.fetched-$STARPU_VERSION" ] && [ -n "${STARPU_SOURCE_TARBALL:-}" ]; then
  [ -f "$STARPU_SOURCE_TARBALL" ] || die "STARPU_SOURCE_TARBALL=$STARPU_SOURCE_TARBALL: no such file"
  echo "$STARPU_ORIG_SHA256  $STARPU_SOURCE_TARBALL" | sha256sum -c --quiet - >/dev/null 2>&1 \
    || die "STARPU_SOURCE_TARBALL=$STARPU_SOURCE_TARBALL: expected Debian's starpu_${STARPU_VERSION%%-*}.orig.tar.gz (sha256 $STARPU_ORIG_SHA256)"
  say "unpacking StarPU source from $STARPU_SOURCE_TARBALL"
  rm -rf "$DEPS/src" && mkdir -p "$STARPU_SRC"
  tar -xzf "$STARPU_SOURCE_TARBALL" -C "$STARPU_SRC" --strip-components=1 || die "unpacking $STARPU_SOURCE_TARBALL failed"
  touch "$DEPS/src/.fetched-$STARPU_VERSION"
elif [ ! -f "$DEPS/src/.fetched-$STARPU_VERSION" ]; then
  [ "$TESTBED_APT" != 0 ] || die "TESTBED_APT=0: set STARPU_SOURCE_TARBALL to Debian's starpu_${STARPU_VERSION%%-*}.orig.tar.gz"
  if fetch_debian_source; then
    touch "$DEPS/src/.fetched-$STARPU_VERSION"
  elif [ "${#STARPU_TO_BUILD[@]}" = 0 ]; then  # only some tests read it: not fatal
    say "StarPU source: not fetched (nothing to build; the tests reading StarPU's shipped perf models skip)"
  else
    die "StarPU $STARPU_VERSION: no suite of ($STARPU_SUITES) serves it; download Debian's starpu_${STARPU_VERSION%%-*}.orig.tar.gz (sha256 $STARPU_ORIG_SHA256, e.g. from snapshot.debian.org) and set STARPU_SOURCE_TARBALL"
  fi
else
  say "StarPU source $STARPU_VERSION: present"
fi

COMMON_FLAGS=(--enable-mpi --enable-maxcpus=64 --enable-maxnumanodes=4
  --disable-build-doc --disable-build-tests --disable-build-examples
  --disable-opencl --disable-fortran --disable-socl --disable-starpupy
  --disable-julia --disable-starpufft --disable-hip --disable-mlr
  --disable-openmp)

# The project's fixes to StarPU's source, applied once (each patch says why); their hash
# is part of every build stamp.
PATCHES=("$ROOT"/envs/patches/*.patch)
PATCHES_ID="$(cat "${PATCHES[@]}" | sha256sum | cut -c1-12)"
if [ -d "$STARPU_SRC" ] && [ ! -f "$STARPU_SRC/.patched-$PATCHES_ID" ]; then
  for p in "${PATCHES[@]}"; do
    if patch -d "$STARPU_SRC" -p1 -R --dry-run -s -f <"$p" >/dev/null 2>&1; then continue; fi
    patch -d "$STARPU_SRC" -p1 -s -f <"$p" >/dev/null || die "applying $p to $STARPU_SRC failed"
    say "applied $(basename "$p")"
  done
  touch "$STARPU_SRC/.patched-$PATCHES_ID"
fi

# CUDA for the native build: with a CUDA toolkit (nvcc), StarPU and apps/lu use the GPUs.
NVCC="$(command -v nvcc || true)"
[ -n "$NVCC" ] || { [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc; } || true
NATIVE_CUDA_FLAGS=(--disable-cuda)
case "$TESTBED_CUDA" in
  no) ;;
  yes|auto)
    if [[ " ${STARPU_TO_BUILD[*]} " != *" native "* ]]; then :  # no native build here
    elif [ -n "$NVCC" ]; then
      CUDA_DIR="$(cd "$(dirname "$NVCC")/.." && pwd)"
      NATIVE_CUDA_FLAGS=(--enable-cuda --with-cuda-dir="$CUDA_DIR")
      say "CUDA toolkit found ($NVCC): the native StarPU is built with CUDA"
    elif [ "$TESTBED_CUDA" = yes ]; then
      die "TESTBED_CUDA=yes: expected nvcc on PATH or /usr/local/cuda/bin/nvcc"
    fi ;;
  *) die "TESTBED_CUDA=$TESTBED_CUDA: expected auto, yes or no" ;;
esac

# Waits for a build running in the background (pid) whose whole output goes to its log, saying
# once a minute (TESTBED_PROGRESS_S) that it is still building, with the log's last line; returns
# the build's status.
wait_building() { # what, log, pid
  local what="$1" log="$2" pid="$3" t0=$SECONDS every="${TESTBED_PROGRESS_S:-60}"
  local next="$every"
  while kill -0 "$pid" 2>/dev/null; do
    sleep 2
    if [ $((SECONDS - t0)) -ge "$next" ] && kill -0 "$pid" 2>/dev/null; then
      say "  still building $what, $((SECONDS - t0)) s, $(wc -l <"$log") log lines; last: $(tail -n 1 "$log" | cut -c1-100)"
      next=$((next + every))
    fi
  done
  wait "$pid"
}

build_starpu() { # name, extra configure flags...
  local name="$1"; shift
  local prefix="$DEPS/starpu-$name" build="$DEPS/build-$name"
  # The stamp names the version and the configure flags: changing either rebuilds.
  local flags_id; flags_id="$(printf '%s\n' "${COMMON_FLAGS[@]}" "$@" "$PATCHES_ID" | sha256sum | cut -c1-12)"
  local stamp="$prefix/.built-$STARPU_VERSION-$flags_id"
  if [ -f "$stamp" ]; then say "StarPU ($name build): present"; return; fi
  say "building StarPU $STARPU_VERSION ($name build, $JOBS jobs) -> $prefix"
  rm -rf "$build" "$prefix"; mkdir -p "$build"
  local log="$DEPS/build-$name.log"
  say "  log: $log (a line every ${TESTBED_PROGRESS_S:-60} s while it builds)"
  ( cd "$build" && "$STARPU_SRC/configure" --prefix="$prefix" "${COMMON_FLAGS[@]}" "$@" ) >"$log" 2>&1 \
    || die "configure of StarPU ($name) failed, see $log"
  ( cd "$build" && make -j"$JOBS" && make install ) >>"$log" 2>&1 &
  wait_building "StarPU ($name)" "$log" $! || die "build of StarPU ($name) failed, see $log"
  touch "$stamp"
  if [ "${TESTBED_KEEP_BUILD_TREES:-0}" != 1 ]; then rm -rf "$build"; fi
  say "StarPU ($name build) installed"
}
for b in "${STARPU_TO_BUILD[@]}"; do
  case "$b" in
    simgrid) build_starpu simgrid --enable-simgrid --disable-shared --disable-cuda ;;
    # shellcheck disable=SC2086  # word splitting of the extra flags is intended
    # --with-fxt: StarPU records FxT traces when STARPU_FXT_TRACE=1 (off by default in 1.4.10,
    # src/common/fxt.c), as Debian's own starpu package is built; `testbed simulate --engine real
    # --trace` converts them with starpu_fxt_tool (testbed/traces/fxt_trace.py). Not in the SimGrid build:
    # SMPI links the app as a shared object and needs a PIC libfxt.a for per-rank privatization,
    # which Debian does not ship (StarPU's configure.ac turns FxT off for MPI+SimGrid for that reason).
    native) build_starpu native --with-fxt "${NATIVE_CUDA_FLAGS[@]}" ${STARPU_EXTRA_CONFIGURE_FLAGS:-} ;;
  esac
done

# ---------------------------------------------------------------- Chameleon (optional)
declare -A STARPU_PREFIX_OF=([native]="${STARPU_NATIVE_PREFIX:-$DEPS/starpu-native}" [simgrid]="${STARPU_SIMGRID_PREFIX:-$DEPS/starpu-simgrid}")
# Built only from CHAMELEON_SOURCE_TARBALL, against the StarPU of each flavour present. Double
# precision (and single: the 1.2 testing driver links CHAMELEON_slacpy_Tile), MPI, the testing
# driver chameleon_dtesting (tests/test_chameleon.py compares apps/chameleon_lu with it); the
# SimGrid flavour in Chameleon's simulation mode (no kernels, CPU codelets only:
# CHAMELEON_USE_CUDA there needs the CUDA toolkit's CMake targets).
build_chameleon() { # flavour, source dir, source id, extra cmake flags...
  local flavour="$1" src="$2" id="$3"; shift 3
  local starpu="${STARPU_PREFIX_OF[$flavour]}" prefix="$DEPS/chameleon-$flavour" build="$DEPS/build-chameleon-$flavour"
  local flags=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" -DCHAMELEON_SCHED=STARPU
    -DCHAMELEON_USE_MPI=ON -DCHAMELEON_PREC_C=OFF -DCHAMELEON_PREC_Z=OFF -DCHAMELEON_ENABLE_EXAMPLE=OFF
    -DCHAMELEON_ENABLE_TESTING=ON -DCHAMELEON_ENABLE_DOC=OFF -DPython3_EXECUTABLE=/usr/bin/python3
    -DCMAKE_INSTALL_RPATH_USE_LINK_PATH=ON "$@")
  local flags_id; flags_id="$(printf '%s\n' "$starpu" "${flags[@]}" | sha256sum | cut -c1-12)"
  local stamp="$prefix/.built-$id-$flags_id"
  if [ -f "$stamp" ]; then say "Chameleon ($flavour build): present"; return; fi
  say "building Chameleon ($flavour build, against $starpu, $JOBS jobs) -> $prefix"
  rm -rf "$build" "$prefix"; mkdir -p "$build"
  local log="$DEPS/build-chameleon-$flavour.log"
  say "  log: $log (a line every ${TESTBED_PROGRESS_S:-60} s while it builds)"
  # SMPI_PRETEND_CC: smpicc (the SimGrid flavour's compiler) as a plain cc for CMake's checks
  ( cd "$build" && PKG_CONFIG_PATH="$starpu/lib/pkgconfig" SMPI_PRETEND_CC=1 cmake "$src" "${flags[@]}" ) >"$log" 2>&1 \
    || die "configure of Chameleon ($flavour) failed, see $log"
  # Two passes: the generated precision headers race with their first users under -j
  # (the first pass's output kept in the log too)
  ( cd "$build" && { make -j"$JOBS" || echo "(first pass failed: a second one follows)"; } && make -j"$JOBS" install ) \
    >>"$log" 2>&1 &
  wait_building "Chameleon ($flavour)" "$log" $! || die "build of Chameleon ($flavour) failed, see $log"
  touch "$stamp"
  if [ "${TESTBED_KEEP_BUILD_TREES:-0}" != 1 ]; then rm -rf "$build"; fi
  say "Chameleon ($flavour build) installed"
}
if [ -n "${CHAMELEON_SOURCE_TARBALL:-}" ]; then
  [ -f "$CHAMELEON_SOURCE_TARBALL" ] || bad_setting "CHAMELEON_SOURCE_TARBALL=$CHAMELEON_SOURCE_TARBALL: no such file"
  CHAMELEON_SHA="$(sha256sum "$CHAMELEON_SOURCE_TARBALL" | cut -d' ' -f1)"
  say "Chameleon source: $CHAMELEON_SOURCE_TARBALL (sha256 $CHAMELEON_SHA)"
  CHAMELEON_SRC="$DEPS/src/chameleon-${CHAMELEON_SHA:0:12}"
  if [ ! -f "$CHAMELEON_SRC/.unpacked" ]; then
    rm -rf "$CHAMELEON_SRC"; mkdir -p "$CHAMELEON_SRC"
    tar -xf "$CHAMELEON_SOURCE_TARBALL" -C "$CHAMELEON_SRC" --strip-components=1 2>/dev/null \
      || { rm -rf "$CHAMELEON_SRC"; bad_setting "CHAMELEON_SOURCE_TARBALL=$CHAMELEON_SOURCE_TARBALL: expected a tar archive of a Chameleon source tree"; }
    touch "$CHAMELEON_SRC/.unpacked"
  fi
  # A tarball that is not a Chameleon 1.2+ source tree: one line naming the variable, exit 2, and
  # its unpacked copy removed
  not_chameleon() { rm -rf "$CHAMELEON_SRC"; bad_setting "CHAMELEON_SOURCE_TARBALL=$CHAMELEON_SOURCE_TARBALL: expected $*"; }
  grep -q 'project *( *CHAMELEON' "$CHAMELEON_SRC/CMakeLists.txt" 2>/dev/null \
    || not_chameleon "Chameleon's source tree (CMakeLists.txt with project(CHAMELEON))"
  for sub in hqr/CMakeLists.txt cmake_modules/morse_cmake/modules/MorseInit.cmake; do
    [ -f "$CHAMELEON_SRC/$sub" ] || not_chameleon "Chameleon's submodules in the tarball ($sub missing; a release tarball has them, \`git archive\` does not)"
  done
  CHAMELEON_VERSION="$(sed -n 's/^ *set( *CHAMELEON_VERSION_\(MAJOR\|MINOR\) *\([0-9]*\).*/\2/p' "$CHAMELEON_SRC/CMakeLists.txt" | paste -sd.)"
  case "$CHAMELEON_VERSION" in
    0.*|1.0|1.1|"") not_chameleon "Chameleon 1.2 or later (the first built against StarPU 1.4), got ${CHAMELEON_VERSION:-no version}" ;;
  esac
  say "Chameleon $CHAMELEON_VERSION source in $CHAMELEON_SRC"
  for flavour in native simgrid; do
    if [ ! -f "${STARPU_PREFIX_OF[$flavour]}/lib/pkgconfig/starpu-1.4.pc" ]; then
      say "Chameleon ($flavour build): skipped, no StarPU of that flavour"
    elif [ "$flavour" = native ]; then
      # CUDA kernels where the native StarPU has CUDA (Chameleon refuses CUDA over a StarPU without it)
      cuda=OFF; grep -rqs '^#define STARPU_USE_CUDA 1' "${STARPU_PREFIX_OF[native]}/include" && cuda=ON
      build_chameleon native "$CHAMELEON_SRC" "${CHAMELEON_SHA:0:12}" -DBUILD_SHARED_LIBS=ON -DBLA_VENDOR=OpenBLAS -DCHAMELEON_USE_CUDA=$cuda
    else
      # SMPI's compilers, as for apps/lu: smpicc renames main and links a shared object that
      # starpu_smpirun loads once per rank
      build_chameleon simgrid "$CHAMELEON_SRC" "${CHAMELEON_SHA:0:12}" -DCHAMELEON_SIMULATION=ON -DCHAMELEON_USE_CUDA=OFF \
        -DCMAKE_C_COMPILER=smpicc -DCMAKE_CXX_COMPILER=smpicxx -DCMAKE_Fortran_COMPILER=smpif90
    fi
  done
fi

# ---------------------------------------------------------------- Chameleon's LU (apps/chameleon_lu)
# The project's driver of Chameleon's LU on the testbed's tile mappings (`--app chameleon`), built
# with CMake against each Chameleon present into build/chameleon-lu-<flavour>: CHAMELEON_PREFIX /
# CHAMELEON_SIMGRID_PREFIX when given, else the one built above. Its stamp names its sources, the
# Chameleon (prefix, libraries' sizes and times) and the StarPU: a change to any rebuilds it.
build_chameleon_lu() { # flavour, Chameleon prefix, the variable that gave it (empty: .deps)
  local flavour="$1" cham="$2" var="$3"
  local out="$ROOT/build/chameleon-lu-$flavour" log="$ROOT/build/chameleon-lu-$flavour.log"
  local package="$cham/lib/cmake/chameleon"
  if [ ! -f "$package/CHAMELEONConfig.cmake" ]; then
    if [ -n "$var" ]; then
      bad_setting "$var=$cham: expected an installed Chameleon 1.2 or later (its CMake package $package/CHAMELEONConfig.cmake)"
    fi
    say "Chameleon's LU driver ($flavour): not built, $cham has no CMake package (lib/cmake/chameleon/CHAMELEONConfig.cmake)"
    return
  fi
  local id; id="$( { cat "$ROOT"/apps/chameleon_lu/* "$ROOT"/apps/lu/lu_distribution.[ch]
                     echo "$cham ${STARPU_PREFIX_OF[$flavour]}"
                     ls -lL --time-style=+%s "$cham"/lib/libchameleon* "$cham/include/chameleon/config.h" || true
                   } 2>&1 | sha256sum | cut -c1-12)"
  if [ -f "$out/.built-$id" ]; then say "Chameleon's LU driver ($flavour): present"; return; fi
  say "building Chameleon's LU driver apps/chameleon_lu ($flavour, against $cham) -> build/chameleon-lu-$flavour"
  rm -rf "$out"; mkdir -p "$out"
  local flags=(-DCMAKE_BUILD_TYPE=Release -DCHAMELEON_DIR="$package")
  # SMPI's compiler for the SimGrid flavour, as for apps/lu and Chameleon itself
  if [ "$flavour" = simgrid ]; then flags+=(-DCMAKE_C_COMPILER=smpicc); fi
  if ! ( PKG_CONFIG_PATH="${STARPU_PREFIX_OF[$flavour]}/lib/pkgconfig" SMPI_PRETEND_CC=1 \
           cmake -S "$ROOT/apps/chameleon_lu" -B "$out" "${flags[@]}" && cmake --build "$out" -j "$JOBS" ) >"$log" 2>&1; then
    rm -rf "$out"
    if [ -n "$var" ]; then bad_setting "$var=$cham: expected a Chameleon apps/chameleon_lu builds against, see $log"; fi
    die "build of apps/chameleon_lu ($flavour) failed, see $log"
  fi
  touch "$out/.built-$id"
  say "Chameleon's LU driver ($flavour) built: build/chameleon-lu-$flavour/chameleon_lu"
}
for flavour in native simgrid; do
  if [ "$flavour" = native ]; then var=CHAMELEON_PREFIX; else var=CHAMELEON_SIMGRID_PREFIX; fi
  if [ -n "${!var:-}" ]; then
    build_chameleon_lu "$flavour" "${!var}" "$var"
  elif compgen -G "$DEPS/chameleon-$flavour/.built-*" >/dev/null; then
    build_chameleon_lu "$flavour" "$DEPS/chameleon-$flavour" ""
  fi
done

# ---------------------------------------------------------------- StarVZ (optional)
# StarVZ and data.tree, which Debian does not ship, into the R library .deps/R (R_LIBS for
# tests/test_starvz_export.py and bench/starvz_check.R).
STARVZ_LIB="$DEPS/R"
if [ "$WANT_STARVZ" = 1 ]; then
  command -v R >/dev/null || die "TESTBED_STARVZ: R is missing (Debian's r-base-core; with TESTBED_APT=0 install ${STARVZ_APT[*]})"
  # the stamp names the tarballs and R's version (a new R rebuilds StarVZ's compiled code)
  id="$( { for f in "${STARVZ_TARBALLS[@]}"; do echo "${STARVZ_SHA256[$f]}"; done; R --version | head -n 1; } \
         | sha256sum | cut -c1-12)"
  if [ -f "$STARVZ_LIB/.installed-$id" ]; then
    say "StarVZ (R library .deps/R): present"
  else
    say "installing data.tree and StarVZ into .deps/R (R CMD INSTALL, $JOBS jobs)"
    log="$DEPS/R-install.log"
    say "  log: $log"
    # built in .deps/R.tmp, renamed when StarVZ loads: .deps/R is whole or absent
    rm -rf "$STARVZ_LIB" "$STARVZ_LIB.tmp" && mkdir -p "$STARVZ_LIB.tmp"
    ( for f in "${STARVZ_TARBALLS[@]}"; do
        MAKEFLAGS="-j$JOBS" R CMD INSTALL --no-docs --no-html -l "$STARVZ_LIB.tmp" "$STARVZ_VENDOR/$f" || exit 1
      done
      Rscript -e ".libPaths(c('$STARVZ_LIB.tmp', .libPaths())); suppressPackageStartupMessages(library(starvz))"
    ) >"$log" 2>&1 &
    wait_building "StarVZ" "$log" $! || { rm -rf "$STARVZ_LIB.tmp"; die "installing StarVZ into .deps/R failed, see $log"; }
    touch "$STARVZ_LIB.tmp/.installed-$id" && mv "$STARVZ_LIB.tmp" "$STARVZ_LIB"
    say "StarVZ installed in .deps/R"
  fi
else
  if [ "$TESTBED_STARVZ" = 0 ]; then why="TESTBED_STARVZ=0"; else why="no $STARVZ_VENDOR"; fi
  say "StarVZ: not installed ($why): tests/test_starvz_export.py's StarVZ test skips"
fi

# ---------------------------------------------------------------- Python
REQ="$ROOT/envs/requirements.txt"
PYSTAMP="$VENV/.installed-$(sha256sum "$REQ" "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)"
if [ "$TESTBED_PYTHON" = 0 ]; then
  say "TESTBED_PYTHON=0: Python venv skipped"
elif [ ! -f "$PYSTAMP" ]; then
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
