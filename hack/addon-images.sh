#!/usr/bin/env bash
# Build the images of the cluster add-ons hack/nodes.sh deploys, under their
# canonical names, and import them into containerd's CRI namespace (k8s.io).
# There is no registry: each is made here from the program
# hack/control-plane.sh builds from the Go module proxy.
#
#   hack/addon-images.sh SOCKET
#
#   registry.k8s.io/coredns/coredns:v1.14.6   /coredns (hack/control-plane.sh
#                                             coredns), /etc/passwd and /etc/group;
#                                             Entrypoint ["/coredns"]
#
# Upstream's image runs as 65532 with the file capability cap_net_bind_service
# on /coredns; the layers made here carry no file capabilities, so the image
# runs as root and binds :53 with the capability the Deployment gives it
# (kubeadm's: drop ALL, add NET_BIND_SERVICE).
#
# Cached like hack/e2e-images.sh under ${RKUBELET_CACHE:-~/.cache/rkubelet}/images/,
# keyed by this recipe and the program's cache path (its version and module
# key); an image already pointing at its digest is not imported again.
set -euo pipefail

PROG=${0##*/}
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
# Bump when anything below changes what ends up in the images.
RECIPE_VERSION=1
COREDNS_IMAGE=registry.k8s.io/coredns/coredns:v1.14.6

TEMP_DIRS=()
cleanup() { ((${#TEMP_DIRS[@]} == 0)) || rm -rf "${TEMP_DIRS[@]}"; }
trap cleanup EXIT

die() { echo "$PROG: error: $*" >&2; exit 1; }

# shellcheck source=lib/oci.sh
. "$REPO_ROOT/hack/lib/oci.sh"

build_cache() {
  local out=$1 coredns=$2 work layer
  work=$(mktemp -d "${TMPDIR:-/tmp}/rkubelet-addon-images.XXXXXX")
  TEMP_DIRS+=("$work")
  oci_begin "$work"
  mkdir -p "$work/coredns/etc"
  install -m 0755 "$coredns" "$work/coredns/coredns"
  echo 'root:x:0:0:root:/root:/sbin/nologin' >"$work/coredns/etc/passwd"
  echo 'root:x:0:' >"$work/coredns/etc/group"
  layer=$(oci_layer "$work" "$work/coredns")
  oci_image "$work" "$COREDNS_IMAGE" '{"Entrypoint":["/coredns"],"Cmd":null,"WorkingDir":"/","User":"0"}' "$layer"
  oci_finish "$work" "$out"
}

main() {
  (($# == 1)) || die "usage: $PROG SOCKET"
  local socket=${1#unix://} coredns key cache dir
  [[ -S "$socket" ]] || die "no containerd socket at $socket (start one with hack/containerd.sh start)"
  coredns=$("$REPO_ROOT/hack/control-plane.sh" coredns)
  key=$(echo "$coredns" | sha256sum | cut -c1-12)
  cache=${RKUBELET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rkubelet}
  dir="$cache/images/addons-r${RECIPE_VERSION}-${COREDNS_IMAGE##*:}-$key-$(oci_arch)"
  if [[ ! -f "$dir/images.tar" || ! -f "$dir/refs" ]]; then
    build_cache "$dir" "$coredns"
  fi
  oci_import "$socket" "$dir"
}

main "$@"
