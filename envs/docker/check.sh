#!/usr/bin/env bash
# Builds envs/docker/Dockerfile with podman and runs a part of the tests in the image, where no
# image registry can be reached: the base image is a debootstrap'ed bookworm (minbase) imported
# with `podman import`. Records the time of each stage; envs/docker/README.md has its results.
#
#   bash envs/docker/check.sh            # needs root, podman, runc and debootstrap (Debian packages)
#
# Settings (environment variables):
#   CHECK_WORK=DIR        scratch directory (default: a new mktemp -d); the base image's root
#                         file system, the build context (a clone of this checkout's HEAD: commit
#                         first), logs and results/ go there
#   CHECK_MIRROR=URL      Debian mirror for debootstrap (default http://deb.debian.org/debian)
#   CHECK_RUN='CMD'       what runs in the image (default: the C++ tests, then tests/test_lu.py,
#                         tests/test_install_paths.py and tests/test_repository_hygiene.py)
#   APT_MIRROR, APT_PROXY, APT_CONF, PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_TRUSTED_HOST
#                         passed to the build as build arguments when set; APT_CONF defaults to
#                         this machine's Acquire::Check-Valid-Until / Check-Date when apt has them
#                         off (a mirror serving a dated snapshot: sid's Release file has expired)
#   PIP_CERT=FILE         pip's CA bundle, passed as the build secret pip_cert (not kept in the image)
# podman runs with the runc runtime and no default ulimits (a containers.conf of its own, in the
# scratch directory): on machines like the project's, crun's rlimit and cgroup set-up is refused.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WORK="${CHECK_WORK:-$(mktemp -d)}"
MIRROR="${CHECK_MIRROR:-http://deb.debian.org/debian}"
BASE_IMAGE=localhost/testbed-bookworm-minbase
IMAGE=localhost/testbed
RUN_CMD="${CHECK_RUN:-make test-cpp && .venv/bin/python -m pytest -q -rs tests/test_lu.py tests/test_install_paths.py tests/test_repository_hygiene.py}"
mkdir -p "$WORK"
T0=$SECONDS
say() { printf '[check %5ds] %s\n' "$((SECONDS - T0))" "$*"; }
die() { printf '[check] error: %s\n' "$*" >&2; exit 1; }

for tool in podman runc debootstrap git; do
  command -v "$tool" >/dev/null || die "$tool not found (Debian packages: podman runc debootstrap git)"
done
[ "$(id -u)" = 0 ] || die "run as root (debootstrap, and podman with the runc runtime)"
printf '[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n' >"$WORK/containers.conf"
export CONTAINERS_CONF="$WORK/containers.conf"
PODMAN=(podman --runtime runc)

# 1. the base image: Debian bookworm, minbase variant (apt, no compiler, no Python)
if "${PODMAN[@]}" image exists "$BASE_IMAGE"; then
  say "base image $BASE_IMAGE: present"
else
  say "debootstrap --variant=minbase bookworm from $MIRROR (log: $WORK/debootstrap.log)"
  rm -rf "$WORK/rootfs"
  debootstrap --variant=minbase bookworm "$WORK/rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
    || die "debootstrap failed, see $WORK/debootstrap.log"
  rm -rf "$WORK/rootfs/var/cache/apt/archives/"*.deb "$WORK/rootfs/var/lib/apt/lists/"*
  say "importing the root file system ($(du -sh "$WORK/rootfs" | cut -f1)) as $BASE_IMAGE"
  tar -C "$WORK/rootfs" -c . | "${PODMAN[@]}" import --quiet --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
  rm -rf "$WORK/rootfs"
fi

# 2. the image, from a clone of this checkout's HEAD (what a fresh clone has)
rm -rf "$WORK/context"
git clone -q "$ROOT" "$WORK/context"
say "building $IMAGE from commit $(git -C "$WORK/context" rev-parse --short HEAD) (log: $WORK/build.log)"
ARGS=(--build-arg "BASE=$BASE_IMAGE")
if [ -z "${APT_CONF:-}" ]; then
  APT_CONF="$(apt-config dump 2>/dev/null | grep -E '^Acquire::Check-(Valid-Until|Date) "false";$' || true)"
fi
for v in APT_MIRROR APT_PROXY APT_CONF PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST; do
  if [ -n "${!v:-}" ]; then ARGS+=(--build-arg "$v=${!v}"); fi
done
# pip's CA bundle of this machine (PIP_CERT: a proxy with its own CA) as a build secret
if [ -n "${PIP_CERT:-}" ] && [ -f "$PIP_CERT" ]; then ARGS+=(--secret "id=pip_cert,src=$PIP_CERT"); fi
"${PODMAN[@]}" build --network host -f envs/docker/Dockerfile "${ARGS[@]}" -t "$IMAGE" "$WORK/context" \
  > >(while IFS= read -r line; do printf '%6ds %s\n' "$((SECONDS - T0))" "$line"; done >"$WORK/build.log") 2>&1 \
  || die "podman build failed, see $WORK/build.log"
sleep 1  # the log's last lines
say "image built: $("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE" | numfmt --to=iec) (layers: $WORK/history.txt)"
"${PODMAN[@]}" history --format '{{.Size}}\t{{.CreatedBy}}' "$IMAGE" | cut -c1-160 >"$WORK/history.txt"

# 3. the tests in the image, without network, as its user `testbed`, results/ as the volume
mkdir -p "$WORK/results"
say "running in the image: $RUN_CMD (log: $WORK/run.log)"
status=0
"${PODMAN[@]}" run --rm --network none -v "$WORK/results:/testbed/results:U" "$IMAGE" bash -c "$RUN_CMD" \
  >"$WORK/run.log" 2>&1 || status=$?
tail -n 5 "$WORK/run.log"
[ "$status" = 0 ] || die "the run in the image failed (exit $status), see $WORK/run.log"
say "done: image builds and the run passes"
