#!/usr/bin/env bash
# Build the images the upstream e2e specs this project runs use (the
# [NodeConformance] and [Conformance] ones, and the CSI Mock storage specs),
# under their canonical names, and import them into containerd's CRI
# namespace (k8s.io). There is no registry: each image is made here from the
# Go module proxy (the k8s.io/kubernetes module in hack/k8s, the CSI
# sidecars) and Debian's packages, and is the real program the specs
# expect, except the two CSI images named below whose programs are not on
# the proxy.
#
#   hack/e2e-images.sh [SOCKET]
#   hack/e2e-images.sh --print-dir   build the cache if needed and print its
#                                    directory: images.tar (an OCI layout) and
#                                    refs (name and manifest digest per line);
#                                    no import (hack/registry.sh mirror)
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
#                                                    getent, iproute2's ip and ss, socat,
#                                                    ipcs, busybox applets;
#                                                    user-defined-in-image (1000) in
#                                                    group-defined-in-image (50000)
#   registry.k8s.io/e2e-test-images/busybox:1.37.0-2 busybox 1.37.0 built here from its source
#   registry.k8s.io/e2e-test-images/busybox:1.36.1-1 (pinned by SHA-256) as the Docker library's
#                                                    image is, defconfig and static, every
#                                                    applet in /bin
#   registry.k8s.io/e2e-test-images/nonewprivs:1.4   busybox + /usr/local/bin/nnp (setuid root)
#                                                    from test/images/nonewprivs
#   registry.k8s.io/e2e-test-images/nonroot:1.5      busybox, USER 1234
#   registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1
#                                                    busybox + glibc's hostname and getent
#                                                    and BIND's dig, nslookup and host
#                                                    (Debian's), nsswitch "hosts: files dns"
#   registry.k8s.io/e2e-test-images/nginx:1.27.0-2   busybox + Debian's nginx serving
#   registry.k8s.io/e2e-test-images/nginx:1.28.0-2   /usr/share/nginx/html on :80, as the
#                                                    official image; Cmd nginx -g 'daemon off;'
#   registry.k8s.io/e2e-test-images/kitten:1.8       agnhost + /kitten.jpg, /data.json (from
#   registry.k8s.io/e2e-test-images/nautilus:1.8     test/images/kitten), Cmd test-webserver;
#                                                    nautilus the same with its own files;
#                                                    agnhost's /etc/os-release is its
#                                                    upstream base's (alpine:3.21)
#   registry.k8s.io/e2e-test-images/sample-apiserver:1.29.2
#                                                    /sample-apiserver (k8s.io/sample-apiserver
#                                                    at the control plane's version,
#                                                    hack/control-plane.sh sample-apiserver)
#   registry.k8s.io/etcd:3.7.0-0                     /usr/local/bin/etcd, the control plane's
#   registry.k8s.io/sig-storage/csi-provisioner:v6.3.0
#   registry.k8s.io/sig-storage/csi-attacher:v4.12.0
#   registry.k8s.io/sig-storage/csi-resizer:v2.2.0   the CSI sidecars at the versions the
#                                                    suite's manifests pin, from the Go
#                                                    module proxy (hack/control-plane.sh)
#   registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.17.0
#                                                    not on the proxy: rkubelet's registrar
#                                                    with its flags (hack/k8s/cmd/
#                                                    csi-node-driver-registrar)
#   registry.k8s.io/sig-storage/hostpathplugin:v1.17.1
#                                                    not on the proxy: the suite's CSI mock
#                                                    driver with hostpathplugin's flags and
#                                                    proxy mode (hack/k8s/cmd/csi-mock-plugin),
#                                                    for the "CSI Mock" specs; also as
#                                                    /hostpathplugin over busybox, as the
#                                                    upstream image (Alpine) has a shell:
#                                                    the DRA specs' plugin proxy pods run
#                                                    sh, sleep, mkdir, base64 and rm in it
#
# Busybox is 1.37.0 with upstream's default configuration, as the suite's
# image: Debian's builds (1.35 in bookworm, 1.37 in trixie) run applets from
# ash with an environment rebuilt from the shell's variables, which drops
# those that are not shell names (`data-1`): the ConfigMap/Secrets
# "consumable via the environment" specs read them from `sh -c env`.
#
# Other images the suite lists (perl, volume servers, the csi-hostpath
# driver...) are not made: no [NodeConformance] or [Conformance] spec, nor
# the storage specs of hack/conformance.sh --csi-mock, runs them.
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
RECIPE_VERSION=8
ENV_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
PACKAGES=(dash bash curl netcat-openbsd bind9-dnsutils iproute2 socat util-linux libc-bin hostname
  libc6-dev gcc make bzip2)
# busybox 1.37.0's release tarball, as Debian's archive keeps it (the orig
# tarball of trixie's busybox source package).
BUSYBOX_SRC=busybox_1.37.0.orig.tar.bz2
BUSYBOX_SRC_URL=http://deb.debian.org/debian/pool/main/b/busybox/$BUSYBOX_SRC
BUSYBOX_SRC_SHA256=3311dff32e746499f4df0d5df04d7eb396382d7e108bb9250e7b519b837043a4

E2E=registry.k8s.io/e2e-test-images
PAUSE_IMAGE=registry.k8s.io/pause:3.10.2
AGNHOST_IMAGES=("$E2E/agnhost:2.66.1" "$E2E/agnhost:2.55")
BUSYBOX_IMAGES=("$E2E/busybox:1.37.0-2" "$E2E/busybox:1.36.1-1")
NONEWPRIVS_IMAGE=$E2E/nonewprivs:1.4
NONROOT_IMAGE=$E2E/nonroot:1.5
GLIBC_DNS_IMAGE=$E2E/glibc-dns-testing:2.1.1
NGINX_IMAGES=("$E2E/nginx:1.27.0-2" "$E2E/nginx:1.28.0-2")
KITTEN_IMAGE=$E2E/kitten:1.8
NAUTILUS_IMAGE=$E2E/nautilus:1.8
SAMPLE_APISERVER_IMAGE=$E2E/sample-apiserver:1.29.2
ETCD_IMAGE=registry.k8s.io/etcd:3.7.0-0
SIG_STORAGE=registry.k8s.io/sig-storage
# The CSI programs: NAME=IMAGE (the image runs /NAME, built by
# hack/control-plane.sh NAME).
CSI_IMAGES=(
  "csi-provisioner=$SIG_STORAGE/csi-provisioner:v6.3.0"
  "csi-attacher=$SIG_STORAGE/csi-attacher:v4.12.0"
  "csi-resizer=$SIG_STORAGE/csi-resizer:v2.2.0"
  "csi-node-driver-registrar=$SIG_STORAGE/csi-node-driver-registrar:v2.17.0"
  "csi-mock-plugin=$SIG_STORAGE/hostpathplugin:v1.17.1"
)

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

# download URL SHA256 OUT: a file from Debian's archive, checked against its
# pinned digest, kept in the cache's downloads/.
download() {
  local url=$1 sha=$2 out=$3
  if [[ ! -f $out ]] || [[ $(sha256sum "$out" | cut -d' ' -f1) != "$sha" ]]; then
    mkdir -p "$(dirname "$out")"
    curl -fsSL --retry 3 -o "$out.tmp" "$url" || die "downloading $url failed"
    [[ $(sha256sum "$out.tmp" | cut -d' ' -f1) == "$sha" ]] ||
      die "$url does not have the pinned SHA-256 $sha (update the pin in $PROG)"
    mv "$out.tmp" "$out"
  fi
}

# busybox_rootfs ROOTFS [SKIP...]: the layout of the busybox image (applets
# in /bin, its passwd and group), without the applets named in SKIP.
busybox_rootfs() {
  local rootfs=$1 applet
  shift
  mkdir -p "$rootfs"/{bin,dev,etc,home,proc,root,sys,tmp,usr/bin,usr/sbin,usr/local/bin,var/tmp,var/www}
  chmod 1777 "$rootfs/tmp" "$rootfs/var/tmp"
  chmod 0700 "$rootfs/root"
  cp "$BUSYBOX" "$rootfs/bin/busybox"
  while read -r applet; do
    [[ -n $applet && $applet != busybox && $applet != */* ]] || continue
    [[ " $* " == *" $applet "* ]] && continue
    ln -s busybox "$rootfs/bin/$applet"
  done < <("$BUSYBOX" --list)
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

# nginx_rootfs ROOTFS NGINX_DEB: busybox, Debian's nginx and a configuration
# like the official image's: the site in /usr/share/nginx/html on :80, the
# logs on the container's stdout and stderr.
nginx_rootfs() {
  local rootfs=$1 deb=$2 x
  busybox_rootfs "$rootfs"
  x=$(dirname "$rootfs")/nginx-deb
  dpkg-deb -x "$deb" "$x"
  copy_with_libs "$rootfs" "$x/usr/sbin/nginx" /usr/sbin/nginx
  mkdir -p "$rootfs"/{etc/nginx,usr/share/nginx/html,var/log/nginx,var/lib/nginx,var/cache/nginx,run}
  echo 'nginx:x:101:101:nginx user:/nonexistent:/bin/false' >>"$rootfs/etc/passwd"
  echo 'nginx:x:101:' >>"$rootfs/etc/group"
  cat >"$rootfs/etc/nginx/nginx.conf" <<'CONF'
user nginx;
worker_processes auto;
error_log /dev/stderr notice;
pid /run/nginx.pid;
events { worker_connections 1024; }
http {
    types { text/html html htm; text/plain txt; application/json json; image/jpeg jpg jpeg; }
    default_type application/octet-stream;
    access_log /dev/stdout;
    sendfile on;
    keepalive_timeout 65;
    server {
        listen 80;
        listen [::]:80;
        server_name localhost;
        location / { root /usr/share/nginx/html; index index.html index.htm; }
    }
}
CONF
  cat >"$rootfs/usr/share/nginx/html/index.html" <<'HTML'
<!DOCTYPE html>
<html>
<head><title>Welcome to nginx!</title></head>
<body>
<h1>Welcome to nginx!</h1>
<p>If you see this page, the nginx web server is successfully installed and
working.</p>
</body>
</html>
HTML
}

build_cache() {
  local out=$1 nginx_deb=$2 work src layer name agnhost_layer
  work=$(mktemp -d "${TMPDIR:-/tmp}/rkubelet-e2e-images.XXXXXX")
  TEMP_DIRS+=("$work")
  src=$(cd "$MOD_DIR" && go list -m -f '{{.Dir}}' k8s.io/kubernetes) || die "k8s.io/kubernetes is not in hack/k8s's module graph"
  echo "$PROG: busybox 1.37.0 from source" >&2
  mkdir -p "$work/busybox-src"
  tar -xjf "$BUSYBOX_SRC_FILE" -C "$work/busybox-src" --strip-components=1
  (cd "$work/busybox-src" && make defconfig >/dev/null &&
    sed -i 's/^# CONFIG_STATIC is not set$/CONFIG_STATIC=y/' .config &&
    make -j"$(nproc)" busybox >build.log 2>&1) || die "building busybox failed (see $work/busybox-src/build.log)"
  BUSYBOX=$work/busybox-src/busybox
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
  busybox_rootfs "$work/glibc" hostname nslookup
  copy_with_libs "$work/glibc" /bin/hostname
  copy_with_libs "$work/glibc" /usr/bin/getent
  copy_with_libs "$work/glibc" /usr/bin/dig
  copy_with_libs "$work/glibc" /usr/bin/nslookup
  copy_with_libs "$work/glibc" /usr/bin/host
  layer=$(oci_layer "$work" "$work/glibc")
  oci_image "$work" "$GLIBC_DNS_IMAGE" "$(config_json null '["sh"]')" "$layer"

  echo "$PROG: agnhost" >&2
  local a=$work/agnhost
  busybox_rootfs "$a" sh ash nc bash nslookup ip ipcs
  copy_with_libs "$a" /bin/dash /bin/sh
  copy_with_libs "$a" /bin/bash
  copy_with_libs "$a" /usr/bin/curl
  copy_with_libs "$a" /bin/nc.openbsd /usr/bin/nc
  copy_with_libs "$a" /usr/bin/dig
  copy_with_libs "$a" /usr/bin/nslookup
  copy_with_libs "$a" /usr/bin/host
  copy_with_libs "$a" /usr/bin/getent
  copy_with_libs "$a" /bin/ip
  copy_with_libs "$a" /bin/ss
  copy_with_libs "$a" /usr/bin/socat
  copy_with_libs "$a" /usr/bin/ipcs
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] && install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$a/etc/ssl/certs/ca-certificates.crt"
  go_build "$a/agnhost" k8s.io/kubernetes/test/images/agnhost
  ln -s agnhost "$a/agnhost-2"
  install -m 0644 "$src/test/images/agnhost/porter/localhost.crt" "$src/test/images/agnhost/porter/localhost.key" "$a/"
  mkdir -p "$a/uploads" "$a/home/user-defined-in-image"
  echo 'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh' >>"$a/etc/passwd"
  printf '%s\n' 'user-defined-in-image:x:1000:' 'group-defined-in-image:x:50000:user-defined-in-image' >>"$a/etc/group"
  # The os-release of upstream's base (test/images/agnhost/BASEIMAGE:
  # alpine:3.21), which kitten's and nautilus's carry too: the ImageVolume
  # spec reads it through the image mounted as a volume. Nothing else here
  # is Alpine's.
  printf '%s\n' 'NAME="Alpine Linux"' 'ID=alpine' 'VERSION_ID=3.21' 'PRETTY_NAME="Alpine Linux v3.21"' \
    'HOME_URL="https://alpinelinux.org/"' >"$a/etc/os-release"
  agnhost_layer=$(oci_layer "$work" "$a")
  for name in "${AGNHOST_IMAGES[@]}"; do
    oci_image "$work" "$name" "$(config_json '["/agnhost"]' '["pause"]')" "$agnhost_layer"
  done

  echo "$PROG: kitten, nautilus" >&2
  for name in kitten nautilus; do
    mkdir -p "$work/$name"
    install -m 0644 "$src/test/images/$name/html/"* "$work/$name/"
    layer=$(oci_layer "$work" "$work/$name")
    [[ $name == kitten ]] && name=$KITTEN_IMAGE || name=$NAUTILUS_IMAGE
    oci_image "$work" "$name" "$(config_json '["/agnhost"]' '["test-webserver"]')" "$agnhost_layer" "$layer"
  done

  echo "$PROG: nginx" >&2
  nginx_rootfs "$work/nginx" "$nginx_deb"
  layer=$(oci_layer "$work" "$work/nginx")
  for name in "${NGINX_IMAGES[@]}"; do
    oci_image "$work" "$name" "$(config_json null '["nginx","-g","daemon off;"]')" "$layer"
  done

  echo "$PROG: sample-apiserver, etcd" >&2
  mkdir -p "$work/sample-apiserver" "$work/etcd/usr/local/bin" "$work/etcd/tmp"
  chmod 1777 "$work/etcd/tmp"
  install -m 0755 "$("$REPO_ROOT/hack/control-plane.sh" sample-apiserver)" "$work/sample-apiserver/sample-apiserver"
  layer=$(oci_layer "$work" "$work/sample-apiserver")
  oci_image "$work" "$SAMPLE_APISERVER_IMAGE" "$(config_json '["/sample-apiserver"]' null)" "$layer"
  install -m 0755 "$("$REPO_ROOT/hack/control-plane.sh" build)/etcd" "$work/etcd/usr/local/bin/etcd"
  layer=$(oci_layer "$work" "$work/etcd")
  oci_image "$work" "$ETCD_IMAGE" "$(config_json null '["/usr/local/bin/etcd"]')" "$layer"

  echo "$PROG: CSI sidecars and mock driver" >&2
  local entry program image
  for entry in "${CSI_IMAGES[@]}"; do
    program=${entry%%=*} image=${entry#*=}
    mkdir -p "$work/$program/tmp"
    chmod 1777 "$work/$program/tmp"
    install -m 0755 "$("$REPO_ROOT/hack/control-plane.sh" "$program")" "$work/$program/$program"
    if [[ $program == csi-mock-plugin ]]; then
      busybox_rootfs "$work/$program"
      ln -s "$program" "$work/$program/hostpathplugin"
    fi
    layer=$(oci_layer "$work" "$work/$program")
    oci_image "$work" "$image" "$(config_json "[\"/$program\"]" null)" "$layer"
  done

  oci_finish "$work" "$out"
}

main() {
  (($# <= 1)) || die "usage: $PROG [SOCKET] | --print-dir"
  local print_dir=""
  if [[ ${1:-} == --print-dir ]]; then
    print_dir=1
    shift
  fi
  [[ ${1:-} != -* ]] || die "usage: $PROG [SOCKET] | --print-dir"
  local socket=${1:-${RKUBELET_RUNTIME_DIR:-/tmp/rkubelet-runtime}/containerd.sock}
  socket=${socket#unix://}
  [[ -n $print_dir || -S "$socket" ]] || die "no containerd socket at $socket (start one with hack/containerd.sh start)"
  local tool
  for tool in ctr go gcc make bzip2 strip ldd tar sha256sum dpkg-query dpkg-deb apt-get curl; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found (run hack/install-deps.sh)"
  done
  local versions key cache dir nginx_version nginx_deb
  versions=$(dpkg-query -W -f='${Package}=${Version}\n' "${PACKAGES[@]}" 2>/dev/null) ||
    die "missing packages among ${PACKAGES[*]} (run hack/install-deps.sh)"
  # Debian's nginx, downloaded, never installed (its postinst would start it
  # on the host): the version apt would install now.
  nginx_version=$(apt-cache policy nginx 2>/dev/null | awk '$1 == "Candidate:" { print $2 }')
  [[ -n $nginx_version && $nginx_version != "(none)" ]] || die "apt knows no nginx (run apt-get update)"
  # The CSI programs' paths name their versions and sources' keys.
  local entry csi_bins=()
  for entry in "${CSI_IMAGES[@]}"; do
    csi_bins+=("$("$REPO_ROOT/hack/control-plane.sh" "${entry%%=*}")") || die "building ${entry%%=*} failed"
  done
  key=$(cat "$MOD_DIR/go.mod" "$MOD_DIR/go.sum" "$REPO_ROOT/hack/sample-apiserver/go.sum" \
    <(echo "$versions" "$BUSYBOX_SRC_SHA256" "nginx=$nginx_version" "${csi_bins[@]}") | sha256sum | cut -c1-12)
  cache=${RKUBELET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rkubelet}
  dir="$cache/images/e2e-r${RECIPE_VERSION}-$K8S_VERSION-$key-$(oci_arch)"
  if [[ ! -f "$dir/images.tar" || ! -f "$dir/refs" ]]; then
    BUSYBOX_SRC_FILE=$cache/downloads/$BUSYBOX_SRC
    download "$BUSYBOX_SRC_URL" "$BUSYBOX_SRC_SHA256" "$BUSYBOX_SRC_FILE"
    nginx_deb=$cache/downloads/nginx_${nginx_version//:/%3a}_$(oci_arch).deb
    if [[ ! -f $nginx_deb ]]; then
      mkdir -p "$cache/downloads"
      (cd "$cache/downloads" && apt-get download -q "nginx=$nginx_version" >/dev/null 2>&1) ||
        die "apt-get download nginx=$nginx_version failed"
    fi
    build_cache "$dir" "$nginx_deb"
  fi
  if [[ -n $print_dir ]]; then
    echo "$dir"
    return
  fi
  oci_import "$socket" "$dir"
}

main "$@"
