#!/bin/sh
# Runs a command of the image's build with the apt and pip settings given as build arguments
# (envs/docker/Dockerfile), then removes them: nothing of them stays in the image.
#   APT_MIRROR   Debian mirror replacing the image's (e.g. http://deb.debian.org/debian)
#   APT_PROXY    HTTP proxy for apt (Acquire::http::Proxy)
#   APT_CONF     more apt configuration, apt.conf syntax (e.g. 'Acquire::Check-Valid-Until "false";'
#                for a mirror that serves a snapshot whose suites' Release files have expired)
#   PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_TRUSTED_HOST   pip's own variables, passed through
#   /run/secrets/pip_cert   the build secret pip_cert: pip's CA bundle (PIP_CERT) for the step
set -eu
# the image's Debian sources: debian:bookworm's deb822 file, or a debootstrap'ed sources.list
SOURCES="/etc/apt/sources.list.d/debian.sources /etc/apt/sources.list"
restore() {
  rm -f /etc/apt/apt.conf.d/99testbed-build-proxy /etc/apt/apt.conf.d/99testbed-build-conf
  for f in $SOURCES; do
    if [ -f "$f.testbed-build" ]; then mv "$f.testbed-build" "$f"; fi
  done
  rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
}
if [ "$(id -u)" = 0 ]; then
  trap restore EXIT
  if [ -n "${APT_PROXY:-}" ]; then
    printf 'Acquire::http::Proxy "%s";\n' "$APT_PROXY" >/etc/apt/apt.conf.d/99testbed-build-proxy
  fi
  if [ -n "${APT_CONF:-}" ]; then
    printf '%s\n' "$APT_CONF" >/etc/apt/apt.conf.d/99testbed-build-conf
  fi
  for f in $SOURCES; do
    if [ -n "${APT_MIRROR:-}" ] && [ -f "$f" ]; then
      cp "$f" "$f.testbed-build"
      sed -i -e "s|^URIs: http[^ ]*/debian\$|URIs: $APT_MIRROR|" -e "s|^deb http[^ ]*/debian |deb $APT_MIRROR |" "$f"
    fi
  done
fi
# empty build arguments are unset, not empty settings (an empty PIP_INDEX_URL breaks pip)
for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST APT_MIRROR APT_PROXY APT_CONF; do
  eval "[ -n \"\${$v:-}\" ] || unset $v"
done
# a CA bundle for pip given as the build secret pip_cert (mounted for the step only)
if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi
export PIP_NO_CACHE_DIR=1 DEBIAN_FRONTEND=noninteractive
"$@"
