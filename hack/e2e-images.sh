#!/usr/bin/env bash
# Build the images the upstream e2e [NodeConformance] specs run, under their
# canonical names, and import them into containerd's CRI namespace (k8s.io).
# There is no registry: each image is made here from the k8s.io/kubernetes
# module (hack/k8s) and Debian's packages, and is the real program the specs
# expect, not a stub.
#
#   hack/e2e-images.sh [SOCKET]
#
#   registry.k8s.io/pause:3.10.2                     /pause from build/pause/linux/pause.c
#                                                    (gcc -static), user 65535
#   registry.k8s.io/e2e-test-images/agnhost:2.66.1   /agnhost from test/images/agnhost
#   registry.k8s.io/e2e-test-images/agnhost:2.55     (static), /agnhost-2 link, the porter's
#                                                    /localhost.{crt,key}, /uploads, and the
#                                                    programs its subcommands run: sh (dash;
#                                                    busybox ash would run its own nc), bash,
#                                                    curl, nc (netcat-openbsd), BIND's dig,
#                                                    nslookup and host (which, unlike
#                                                    busybox's, use the search list),
#                                                    busybox applets;
#                                                    user-defined-in-image (1000) in
#                                                    group-defined-in-image (50000)
#   registry.k8s.io/e2e-test-images/busybox:1.37.0-2 Debian's static busybox, every applet in /bin
#   registry.k8s.io/e2e-test-images/busybox:1.36.1-1
#   registry.k8s.io/e2e-test-images/nonewprivs:1.4   busybox + /usr/local/bin/nnp (setuid root)
#                                                    from test/images/nonewprivs
#   registry.k8s.io/e2e-test-images/nonroot:1.5      busybox, USER 1234
#   registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1
#                                                    busybox + glibc's hostname and getent
#                                                    (Debian's), nsswitch "hosts: files dns"
#
# What this costs: Debian's busybox is 1.35, whose ash drops environment
# variables that are not shell names, which the suite's busybox 1.37 keeps;
# so "ConfigMap/Secrets should be consumable via the environment" (they read
# `data-1` from `sh -c env`) fail here under any kubelet. Another shell as
# /bin/sh would keep them but fails specs that expect ash's own error messages
# ("/bin/sh: can't create /file: Read-only file system").
#
# Images the suite lists but no [NodeConformance] spec here runs (nginx,
# perl, volume servers, CSI sidecars...) are not made.
#
# Cached like hack/images.sh under ${RKUBELET_CACHE:-~/.cache/rkubelet}/images/,
# keyed by this recipe, the k8s.io/kubernetes module graph and the Debian
# packages that go in; an image already pointing at its digest is not
# imported again.
set -euo pipefail

PROG=${0##*/}
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
MOD_DIR=$REPO_ROOT/hack/k8s
K8S_VERSION=v1.37.2
# Bump when anything below changes what ends up in the images.
RECIPE_VERSION=2
ENV_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
PACKAGES=(busybox-static dash bash curl netcat-openbsd bind9-dnsutils libc-bin hostname libc6-dev gcc)

E2E=registry.k8s.io/e2e-test-images
PAUSE_IMAGE=registry.k8s.io/pause:3.10.2
AGNHOST_IMAGES=("$E2E/agnhost:2.66.1" "$E2E/agnhost:2.55")
BUSYBOX_IMAGES=("$E2E/busybox:1.37.0-2" "$E2E/busybox:1.36.1-1")
NONEWPRIVS_IMAGE=$E2E/nonewprivs:1.4
NONROOT_IMAGE=$E2E/nonroot:1.5
GLIBC_DNS_IMAGE=$E2E/glibc-dns-testing:2.1.1

TEMP_DIRS=()
cleanup() { ((${#TEMP_DIRS[@]} == 0)) || rm -rf "${TEMP_DIRS[@]}"; }
trap cleanup EXIT

die() { echo "$PROG: error: $*" >&2; exit 1; }

# shellcheck source=lib/oci.sh
. "$REPO_ROOT/hack/lib/oci.sh"

go_build() { # OUT PACKAGE
  (cd "$MOD_DIR" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$1" "$2") ||
    die "go build of $2 failed"
}

# busybox_rootfs ROOTFS [SKIP...]: the layout of the busybox image (applets
# in /bin, its passwd and group), without the applets named in SKIP.
busybox_rootfs() {
  local rootfs=$1 applet
  shift
  mkdir -p "$rootfs"/{bin,dev,etc,home,proc,root,sys,tmp,usr/bin,usr/sbin,usr/local/bin,var/tmp,var/www}
  chmod 1777 "$rootfs/tmp" "$rootfs/var/tmp"
  chmod 0700 "$rootfs/root"
  cp /bin/busybox "$rootfs/bin/busybox"
  while read -r applet; do
    [[ -n $applet && $applet != busybox && $applet != */* ]] || continue
    [[ " $* " == *" $applet "* ]] && continue
    ln -s busybox "$rootfs/bin/$applet"
  done < <(/bin/busybox --list)
  printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'daemon:x:1:1:daemon:/usr/sbin:/bin/false' \
    'bin:x:2:2:bin:/bin:/bin/false' 'sys:x:3:3:sys:/dev:/bin/false' 'sync:x:4:100:sync:/bin:/bin/sync' \
    'mail:x:8:8:mail:/var/spool/mail:/bin/false' 'www-data:x:33:33:www-data:/var/www:/bin/false' \
    'operator:x:37:37:Operator:/var:/bin/false' 'nobody:x:65534:65534:nobody:/home:/bin/false' \
    >"$rootfs/etc/passwd"
  printf '%s\n' 'root:x:0:' 'daemon:x:1:' 'bin:x:2:' 'sys:x:3:' 'adm:x:4:' 'tty:x:5:' 'disk:x:6:' \
    'mail:x:8:' 'wheel:x:10:root' 'www-data:x:33:' 'operator:x:37:' 'staff:x:50:' 'users:x:100:' \
    'nogroup:x:65534:' >"$rootfs/etc/group"
  echo 'hosts: files dns' >"$rootfs/etc/nsswitch.conf"
}

config_json() { # ENTRYPOINT_JSON CMD_JSON [USER]
  printf '{"Env":["PATH=%s"],"Entrypoint":%s,"Cmd":%s,"WorkingDir":"/"%s}' \
    "$ENV_PATH" "$1" "$2" "${3:+,\"User\":\"$3\"}"
}

build_cache() {
  local out=$1 work src layer name
  work=$(mktemp -d "${TMPDIR:-/tmp}/rkubelet-e2e-images.XXXXXX")
  TEMP_DIRS+=("$work")
  src=$(cd "$MOD_DIR" && go list -m -f '{{.Dir}}' k8s.io/kubernetes) || die "k8s.io/kubernetes is not in hack/k8s's module graph"
  oci_begin "$work"

  echo "$PROG: pause" >&2
  mkdir -p "$work/pause"
  gcc -Os -Wall -Werror -static -DVERSION="v${PAUSE_IMAGE##*:}" -o "$work/pause/pause" \
    "$src/build/pause/linux/pause.c" || die "building pause.c failed"
  strip "$work/pause/pause"
  layer=$(oci_layer "$work" "$work/pause")
  oci_image "$work" "$PAUSE_IMAGE" "$(config_json '["/pause"]' null 65535:65535)" "$layer"

  echo "$PROG: busybox" >&2
  busybox_rootfs "$work/busybox"
  layer=$(oci_layer "$work" "$work/busybox")
  for name in "${BUSYBOX_IMAGES[@]}"; do
    oci_image "$work" "$name" "$(config_json null '["sh"]')" "$layer"
  done
  oci_image "$work" "$NONROOT_IMAGE" "$(config_json null '["sh"]' 1234)" "$layer"

  echo "$PROG: nonewprivs" >&2
  busybox_rootfs "$work/nnp"
  go_build "$work/nnp/usr/local/bin/nnp" k8s.io/kubernetes/test/images/nonewprivs
  chmod 4755 "$work/nnp/usr/local/bin/nnp"
  layer=$(oci_layer "$work" "$work/nnp")
  oci_image "$work" "$NONEWPRIVS_IMAGE" "$(config_json null '["nnp"]')" "$layer"

  echo "$PROG: glibc-dns-testing" >&2
  busybox_rootfs "$work/glibc" hostname
  copy_with_libs "$work/glibc" /bin/hostname
  copy_with_libs "$work/glibc" /usr/bin/getent
  layer=$(oci_layer "$work" "$work/glibc")
  oci_image "$work" "$GLIBC_DNS_IMAGE" "$(config_json null '["sh"]')" "$layer"

  echo "$PROG: agnhost" >&2
  local a=$work/agnhost
  busybox_rootfs "$a" sh ash nc bash nslookup
  copy_with_libs "$a" /bin/dash /bin/sh
  copy_with_libs "$a" /bin/bash
  copy_with_libs "$a" /usr/bin/curl
  copy_with_libs "$a" /bin/nc.openbsd /usr/bin/nc
  copy_with_libs "$a" /usr/bin/dig
  copy_with_libs "$a" /usr/bin/nslookup
  copy_with_libs "$a" /usr/bin/host
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] && install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$a/etc/ssl/certs/ca-certificates.crt"
  go_build "$a/agnhost" k8s.io/kubernetes/test/images/agnhost
  ln -s agnhost "$a/agnhost-2"
  install -m 0644 "$src/test/images/agnhost/porter/localhost.crt" "$src/test/images/agnhost/porter/localhost.key" "$a/"
  mkdir -p "$a/uploads" "$a/home/user-defined-in-image"
  echo 'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh' >>"$a/etc/passwd"
  printf '%s\n' 'user-defined-in-image:x:1000:' 'group-defined-in-image:x:50000:user-defined-in-image' >>"$a/etc/group"
  layer=$(oci_layer "$work" "$a")
  for name in "${AGNHOST_IMAGES[@]}"; do
    oci_image "$work" "$name" "$(config_json '["/agnhost"]' '["pause"]')" "$layer"
  done

  oci_finish "$work" "$out"
}

main() {
  (($# <= 1)) || die "usage: $PROG [SOCKET]"
  local socket=${1:-${RKUBELET_RUNTIME_DIR:-/tmp/rkubelet-runtime}/containerd.sock}
  socket=${socket#unix://}
  [[ -S "$socket" ]] || die "no containerd socket at $socket (start one with hack/containerd.sh start)"
  local tool
  for tool in ctr go gcc strip ldd tar sha256sum dpkg-query; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found (run hack/install-deps.sh)"
  done
  local versions key cache dir
  versions=$(dpkg-query -W -f='${Package}=${Version}\n' "${PACKAGES[@]}" 2>/dev/null) ||
    die "missing packages among ${PACKAGES[*]} (run hack/install-deps.sh)"
  key=$(cat "$MOD_DIR/go.mod" "$MOD_DIR/go.sum" <(echo "$versions") | sha256sum | cut -c1-12)
  cache=${RKUBELET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rkubelet}
  dir="$cache/images/e2e-r${RECIPE_VERSION}-$K8S_VERSION-$key-$(oci_arch)"
  if [[ ! -f "$dir/images.tar" || ! -f "$dir/refs" ]]; then
    build_cache "$dir"
  fi
  oci_import "$socket" "$dir"
}

main "$@"
