#!/usr/bin/env bash
# Build rkubelet's test images locally and import them into containerd's
# CRI namespace (k8s.io). No registry is involved.
#
#   hack/images.sh [SOCKET]
#   hack/images.sh --print-tarball    build the cache if needed and print the
#                                     OCI layout tarball's path (no import)
#
# SOCKET defaults to ${RKUBELET_RUNTIME_DIR:-/tmp/rkubelet-runtime}/containerd.sock
# (the private containerd of hack/containerd.sh).
#
# Both images share one uncompressed layer: Debian's static busybox at
# /bin/busybox with a symlink in /bin for every applet, an /etc/passwd and
# /etc/group with root and nobody, and the usual empty directories.
#
#   rkubelet.test/busybox:1      Cmd ["sh"]
#   registry.k8s.io/pause:3.10   Cmd ["sleep","2147483647"]  (the sandbox image)
#
# The OCI layout tarball is cached under
# ${RKUBELET_CACHE:-~/.cache/rkubelet}/images/<recipe>-busybox-<version>-<arch>/
# and is byte-for-byte reproducible. An image whose name already points at
# the expected manifest digest is not imported again.
set -euo pipefail

PROG=${0##*/}
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)

# Bump when anything below changes what ends up in the images.
RECIPE_VERSION=2
TEST_IMAGE=rkubelet.test/busybox:1
PAUSE_IMAGE=registry.k8s.io/pause:3.10
ENV_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# applets the tests and examples rely on
REQUIRED_APPLETS=(sh sleep httpd nc wget cat echo ls true false env date touch rm
  mkdir ps kill printf test grep hostname ip ifconfig id head tail wc)

TEMP_DIRS=()
cleanup() { ((${#TEMP_DIRS[@]} == 0)) || rm -rf "${TEMP_DIRS[@]}"; }
trap cleanup EXIT

die() { echo "$PROG: error: $*" >&2; exit 1; }

# shellcheck source=lib/oci.sh
. "$REPO_ROOT/hack/lib/oci.sh"

usage() {
  echo "usage: $PROG [SOCKET] | --print-tarball" >&2
  echo "  SOCKET defaults to \${RKUBELET_RUNTIME_DIR:-/tmp/rkubelet-runtime}/containerd.sock" >&2
  exit 2
}

build_rootfs() {
  local rootfs=$1 busybox=$2 applet
  mkdir -p "$rootfs"/{bin,dev,etc,proc,root,sys,tmp,var/tmp,var/log,usr/bin,usr/sbin,sbin}
  chmod 0755 "$rootfs" "$rootfs"/{bin,dev,etc,proc,sys,var,var/log,usr,usr/bin,usr/sbin,sbin}
  chmod 0700 "$rootfs/root"
  chmod 1777 "$rootfs/tmp" "$rootfs/var/tmp"
  cp "$busybox" "$rootfs/bin/busybox"
  chmod 0755 "$rootfs/bin/busybox"

  local applets
  applets=$("$busybox" --list) || die "'$busybox --list' failed"
  for applet in "${REQUIRED_APPLETS[@]}"; do
    grep -qx -- "$applet" <<<"$applets" || die "$busybox has no '$applet' applet"
  done
  while read -r applet; do
    [[ -n "$applet" && "$applet" != busybox && "$applet" != */* ]] || continue
    ln -s busybox "$rootfs/bin/$applet"
  done <<<"$applets"

  printf '%s\n' \
    'root:x:0:0:root:/root:/bin/sh' \
    'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' >"$rootfs/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' >"$rootfs/etc/group"
  chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
}

# build_cache DIR BUSYBOX: write DIR/images.tar (an OCI layout holding both
# images) and DIR/refs ("NAME DIGEST" of each image's manifest).
build_cache() {
  local out=$1 busybox=$2 work layer name cmd
  work=$(mktemp -d "${TMPDIR:-/tmp}/rkubelet-images.XXXXXX")
  TEMP_DIRS+=("$work")
  oci_begin "$work"
  build_rootfs "$work/rootfs" "$busybox"
  layer=$(oci_layer "$work" "$work/rootfs")
  for name in "$TEST_IMAGE" "$PAUSE_IMAGE"; do
    case "$name" in
    "$TEST_IMAGE") cmd='["sh"]' ;;
    "$PAUSE_IMAGE") cmd='["sleep","2147483647"]' ;;
    esac
    oci_image "$work" "$name" "{\"Env\":[\"PATH=$ENV_PATH\"],\"Cmd\":$cmd,\"WorkingDir\":\"/\"}" "$layer"
  done
  oci_finish "$work" "$out"
}

main() {
  (($# <= 1)) || usage
  local print_only=""
  if [[ "${1:-}" == --print-tarball ]]; then
    print_only=1
    shift
  fi
  [[ "${1:-}" != -* ]] || usage
  local socket=${1:-${RKUBELET_RUNTIME_DIR:-/tmp/rkubelet-runtime}/containerd.sock}
  socket=${socket#unix://}

  local tool
  for tool in ctr tar sha256sum dpkg-query; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found (run hack/install-deps.sh)"
  done
  local bb_version
  bb_version=$(dpkg-query -W -f='${Version}' busybox-static 2>/dev/null) ||
    die "package busybox-static is not installed (run hack/install-deps.sh)"
  local busybox=/bin/busybox
  [[ -x "$busybox" ]] || die "$busybox not found (busybox-static installed?)"
  [[ -n "$print_only" || -S "$socket" ]] ||
    die "no containerd socket at $socket (start one with hack/containerd.sh start)"

  local arch cache key dir
  arch=$(oci_arch)
  cache=${RKUBELET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rkubelet}
  key="r${RECIPE_VERSION}-busybox-${bb_version//[^A-Za-z0-9.-]/_}-${arch}"
  dir="$cache/images/$key"
  if [[ ! -f "$dir/images.tar" || ! -f "$dir/refs" ]]; then
    build_cache "$dir" "$busybox"
  fi
  if [[ -n "$print_only" ]]; then
    echo "$dir/images.tar"
    return
  fi

  oci_import "$socket" "$dir"
}

main "$@"
