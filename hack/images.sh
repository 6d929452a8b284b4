#!/usr/bin/env bash
# Build rkubelet's test images locally and import them into containerd's
# CRI namespace (k8s.io). No registry is involved.
#
#   hack/images.sh [SOCKET]
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
RECIPE_VERSION=1
NAMESPACE=k8s.io
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

usage() {
  echo "usage: $PROG [SOCKET]" >&2
  echo "  SOCKET defaults to \${RKUBELET_RUNTIME_DIR:-/tmp/rkubelet-runtime}/containerd.sock" >&2
  exit 2
}

sha256_of() {
  local sum
  sum=$(sha256sum "$1") || die "sha256sum $1 failed"
  printf '%s\n' "${sum%% *}"
}

size_of() { stat -c %s "$1"; }

oci_arch() {
  case "$(uname -m)" in
  x86_64) echo amd64 ;;
  aarch64 | arm64) echo arm64 ;;
  armv7l) echo arm ;;
  ppc64le) echo ppc64le ;;
  s390x) echo s390x ;;
  riscv64) echo riscv64 ;;
  *) die "unsupported machine architecture $(uname -m)" ;;
  esac
}

# add_blob LAYOUT FILE: move FILE into LAYOUT's blob store; prints its digest.
add_blob() {
  local layout=$1 file=$2 hex
  hex=$(sha256_of "$file")
  mv -f "$file" "$layout/blobs/sha256/$hex"
  echo "sha256:$hex"
}

# tar options that make the archives reproducible
TAR_OPTS=(--sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu)

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

# image_config ARCH DIFF_ID CMD_JSON
image_config() {
  printf '{"architecture":"%s","os":"linux","created":"1970-01-01T00:00:00Z",' "$1"
  printf '"config":{"Env":["PATH=%s"],"Cmd":%s,"WorkingDir":"/"},' "$ENV_PATH" "$3"
  printf '"rootfs":{"type":"layers","diff_ids":["%s"]},' "$2"
  printf '"history":[{"created":"1970-01-01T00:00:00Z","created_by":"rkubelet hack/images.sh recipe %s"}]}' "$RECIPE_VERSION"
}

# build_cache DIR: write DIR/images.tar (an OCI layout holding both images)
# and DIR/refs ("NAME DIGEST" of each image's manifest).
build_cache() {
  local out=$1 busybox=$2 arch=$3
  local work layout rootfs layer_digest layer_size
  work=$(mktemp -d "${TMPDIR:-/tmp}/rkubelet-images.XXXXXX")
  TEMP_DIRS+=("$work")
  layout="$work/layout"
  rootfs="$work/rootfs"
  mkdir -p "$layout/blobs/sha256"

  build_rootfs "$rootfs" "$busybox"
  local top=()
  mapfile -t top < <(ls -A "$rootfs")
  tar "${TAR_OPTS[@]}" -C "$rootfs" -cf "$work/layer.tar" "${top[@]}" || die "creating the layer tar failed"
  layer_size=$(size_of "$work/layer.tar")
  layer_digest=$(add_blob "$layout" "$work/layer.tar")

  local entries=() refs=() name cmd config_digest config_size manifest_digest manifest_size
  for name in "$TEST_IMAGE" "$PAUSE_IMAGE"; do
    case "$name" in
    "$TEST_IMAGE") cmd='["sh"]' ;;
    "$PAUSE_IMAGE") cmd='["sleep","2147483647"]' ;;
    esac
    image_config "$arch" "$layer_digest" "$cmd" >"$work/config.json"
    config_size=$(size_of "$work/config.json")
    config_digest=$(add_blob "$layout" "$work/config.json")

    {
      printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",'
      printf '"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},' \
        "$config_digest" "$config_size"
      printf '"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}]}' \
        "$layer_digest" "$layer_size"
    } >"$work/manifest.json"
    manifest_size=$(size_of "$work/manifest.json")
    manifest_digest=$(add_blob "$layout" "$work/manifest.json")

    entries+=("$(printf '{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"platform":{"architecture":"%s","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}' \
      "$manifest_digest" "$manifest_size" "$arch" "$name" "$name")")
    refs+=("$name $manifest_digest")
  done

  local joined
  joined=$(
    IFS=,
    echo "${entries[*]}"
  )
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s]}' \
    "$joined" >"$layout/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"

  mkdir -p "$work/out"
  tar "${TAR_OPTS[@]}" -C "$layout" -cf "$work/out/images.tar" oci-layout index.json blobs ||
    die "creating the image archive failed"
  printf '%s\n' "${refs[@]}" >"$work/out/refs"

  # publish atomically; a concurrent run may have won the race
  mkdir -p "$(dirname "$out")"
  if ! mv -T "$work/out" "$out" 2>/dev/null; then
    [[ -f "$out/images.tar" && -f "$out/refs" ]] || die "cannot write the image cache to $out"
  fi
}

# current_digest NAME: the manifest digest NAME points at in containerd.
current_digest() {
  awk -v n="$1" '$1 == n { print $3 }' <<<"$LISTING"
}

main() {
  (($# <= 1)) || usage
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
  [[ -S "$socket" ]] || die "no containerd socket at $socket (start one with hack/containerd.sh start)"

  local arch cache key dir
  arch=$(oci_arch)
  cache=${RKUBELET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rkubelet}
  key="r${RECIPE_VERSION}-busybox-${bb_version//[^A-Za-z0-9.-]/_}-${arch}"
  dir="$cache/images/$key"
  if [[ ! -f "$dir/images.tar" || ! -f "$dir/refs" ]]; then
    build_cache "$dir" "$busybox" "$arch"
  fi

  local ctr=(ctr --connect-timeout 5s -a "$socket" -n "$NAMESPACE")
  LISTING=$("${ctr[@]}" images ls 2>&1) || die "cannot list images on $socket: $LISTING"

  local name digest stale=0
  while read -r name digest; do
    [[ "$(current_digest "$name")" == "$digest" ]] || stale=1
  done <"$dir/refs"
  ((stale)) || return 0

  local out
  out=$("${ctr[@]}" images import "$dir/images.tar" 2>&1) ||
    die "importing $dir/images.tar into $socket failed: $out"

  LISTING=$("${ctr[@]}" images ls 2>&1) || die "cannot list images on $socket: $LISTING"
  while read -r name digest; do
    [[ "$(current_digest "$name")" == "$digest" ]] ||
      die "after the import, $name does not point at $digest; ctr said: $out"
  done <"$dir/refs"
}

main "$@"
