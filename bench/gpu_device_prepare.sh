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
# * SHA256SUMS of these files, which bench/gpu_device.sh checks before using them.
# The folder goes to the node as an ignored path the device call carries (64 MiB at most in all):
# the script stops if it holds more than 32 MiB.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$ROOT/.device}"
FXT_VERSION="${FXT_VERSION:-0.3.13-2}"
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
(cd "$tmp" && sha256sum -- *.tar.gz *.deb >SHA256SUMS)
bytes="$(du -sb "$tmp" | cut -f1)"
[ "$bytes" -le $((32 << 20)) ] || die "$DIR would hold $bytes bytes: expected at most 32 MiB (the device call carries 64 MiB in all)"
rm -rf "$DIR" && mv "$tmp" "$DIR"
trap - EXIT
echo "gpu_device_prepare: $DIR ($bytes bytes):"
cat "$DIR/SHA256SUMS"
