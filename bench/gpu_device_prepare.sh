#!/usr/bin/env bash
# Fills a folder with what a GPU node without network lacks for bench/gpu_device.sh:
#
#   bash bench/gpu_device_prepare.sh [DIR]        # DIR defaults to .device (git-ignored)
#
# * Debian's StarPU orig tarball (the pinned version of envs/setup.sh, sha256 checked against
#   setup.sh's STARPU_ORIG_SHA256): from STARPU_SOURCE_TARBALL, else the one envs/setup.sh
#   fetched into .deps/src/;
# * Debian's FxT packages libfxt2 and libfxt-dev (version FXT_VERSION), fetched with
#   `apt-get download` (apt checks them against the suite's signed index); the node unpacks them
#   with `dpkg -x` into a private prefix (not /), as bench/gpu_device.sh does;
# * the wheels of jsonschema and what it needs beyond the GPU node's Python (jsonschema-specifications,
#   referencing, rpds-py; versions WHEELS, for CPython WHEEL_PYTHON, 3.12 there), which the testbed
#   reads machine descriptions with (bench/gpu_numa_split.sh installs them into its scratch folder),
#   fetched with `pip download` (pip checks the index's hashes);
# * SHA256SUMS of these files, which bench/gpu_device.sh checks before using them.
# The folder goes to the node as an ignored path the device call carries (64 MiB at most in all):
# the script stops if it holds more than 32 MiB.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$ROOT/.device}"
FXT_VERSION="${FXT_VERSION:-0.3.13-2}"
WHEELS="${WHEELS:-jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1}"
WHEEL_PYTHON="${WHEEL_PYTHON:-3.12}"
die() { printf 'gpu_device_prepare: error: %s\n' "$*" >&2; exit 2; }

sha="$(sed -n 's/^STARPU_ORIG_SHA256="\([0-9a-f]*\)".*/\1/p' "$ROOT/envs/setup.sh")"
version="$(sed -n 's/^STARPU_VERSION="\([^"]*\)".*/\1/p' "$ROOT/envs/setup.sh")"
[ -n "$sha" ] && [ -n "$version" ] || die "envs/setup.sh: STARPU_VERSION or STARPU_ORIG_SHA256 not found"
name="starpu_${version%%-*}.orig.tar.gz"
tarball="${STARPU_SOURCE_TARBALL:-$ROOT/.deps/src/$name}"
[ -f "$tarball" ] || die "STARPU_SOURCE_TARBALL=$tarball: no such file (run envs/setup.sh, which fetches it into .deps/src/, or set STARPU_SOURCE_TARBALL)"
echo "$sha  $tarball" | sha256sum -c --quiet - >/dev/null 2>&1 \
  || die "STARPU_SOURCE_TARBALL=$tarball: expected sha256 $sha (envs/setup.sh STARPU_ORIG_SHA256)"

tmp="$(mktemp -d "${DIR%/}.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cp "$tarball" "$tmp/$name"
(cd "$tmp" && apt-get download -q "libfxt2=$FXT_VERSION" "libfxt-dev=$FXT_VERSION" >/dev/null 2>apt.err) \
  || die "apt-get download libfxt2=$FXT_VERSION libfxt-dev=$FXT_VERSION failed: $(tail -1 "$tmp/apt.err") (apt-get update first?)"
rm -f "$tmp/apt.err"
platforms=()
for n in 17 24 28; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
# shellcheck disable=SC2086  # WHEELS: one requirement a word
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$WHEEL_PYTHON" --implementation cp \
  "${platforms[@]}" --platform manylinux2014_x86_64 -d "$tmp/wheels" $WHEELS 2>"$tmp/pip.err" \
  || die "pip download $WHEELS failed: $(tail -1 "$tmp/pip.err")"
rm -f "$tmp/pip.err"
(cd "$tmp" && sha256sum -- *.tar.gz *.deb wheels/*.whl >SHA256SUMS)
bytes="$(du -sb "$tmp" | cut -f1)"
[ "$bytes" -le $((32 << 20)) ] || die "$DIR would hold $bytes bytes: expected at most 32 MiB (the device call carries 64 MiB in all)"
rm -rf "$DIR" && mv "$tmp" "$DIR"
trap - EXIT
echo "gpu_device_prepare: $DIR ($bytes bytes):"
cat "$DIR/SHA256SUMS"
