#!/usr/bin/env bash
# Install the Debian packages rkubelet's runtime tests need:
# containerd, runc, the CNI plugins, a static busybox (test images),
# protoc (k8s-cri's build script), make (tikv-jemalloc-sys builds jemalloc
# with it), the network tools, and what the upstream e2e suite's images are
# made of (hack/e2e-images.sh: a C compiler, static libc and bzip2 for pause
# and busybox, dash, bash, curl, netcat-openbsd, glibc's hostname/getent,
# BIND's dig and nslookup, socat), and what hack/nodes.sh runs nodes with
# (util-linux's unshare and nsenter), and the private system bus the
# graceful node shutdown tests run logind's stand-in on (dbus-daemon), and
# what runc is built with for containerd 2 nodes (libseccomp's headers,
# pkg-config).
#
# Idempotent: when every package is already installed it returns at once,
# without touching apt's lists. Quiet on success.
set -euo pipefail

PACKAGES=(
  containerd
  runc
  containernetworking-plugins
  busybox-static
  protobuf-compiler
  iproute2
  iptables
  curl
  openssl
  gcc
  make
  bzip2
  libc6-dev
  dash
  bash
  hostname
  libc-bin
  netcat-openbsd
  bind9-dnsutils
  socat
  util-linux
  python3
  docker-registry
  skopeo
  apache2-utils
  prometheus
  dbus-daemon
  libseccomp-dev
  pkg-config
)

die() { echo "install-deps: $*" >&2; exit 1; }

command -v dpkg-query >/dev/null 2>&1 || die "dpkg-query not found: this script expects a Debian-based system"

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "installed" ]]; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  die "missing packages (${missing[*]}) and not root: run as root or install them yourself"
fi

export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT

if ! apt-get update -qq >"$log" 2>&1; then
  cat "$log" >&2
  die "apt-get update failed"
fi
if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
  cat "$log" >&2
  die "apt-get install failed for: ${missing[*]}"
fi

for pkg in "${missing[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "installed" ]] || die "package $pkg is still not installed after apt-get install"
done
