#!/usr/bin/env bash
# Image registries for the tests (Debian's docker-registry, the distribution
# registry), of two kinds:
#
#   hack/registry.sh start DIR ADDR   a private registry for the pull path's
#                                     tests: htpasswd auth (every repository
#                                     needs the user below), state in DIR, the
#                                     test image pushed as ADDR/private/busybox:1
#   hack/registry.sh mirror DIR ADDR  a mirror of registry.k8s.io for the e2e
#                                     suites' clusters (hack/nodes.sh): no auth,
#                                     hack/e2e-images.sh's images pushed under
#                                     their own paths, so that a spec's
#                                     imagePullPolicy: Always pulls them as
#                                     from registry.k8s.io
#   hack/registry.sh stop DIR         stop either (idempotent)
#
# ADDR is HOST:PORT. The user is rkubelet-puller, password `registry.sh-pw`
# (a test fixture, not a secret). containerd reaches a registry over plain
# HTTP when hack/containerd.sh is given RKUBELET_REGISTRY_MIRROR=ADDR (the
# private one) or RKUBELET_REGISTRY_MIRROR=registry.k8s.io=ADDR (the mirror).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
USER_NAME=rkubelet-puller
PASSWORD=registry.sh-pw

die() { echo "registry.sh: $*" >&2; exit 1; }

# serve DIR ADDR WANT [AUTH]: docker-registry on ADDR, its state in DIR,
# AUTH the configuration's auth section; returns when /v2/ answers WANT.
serve() {
  local dir=$1 addr=$2 want=$3 auth=${4:-}
  [[ $addr =~ ^[A-Za-z0-9.-]+:[0-9]+$ ]] || die "address '$addr' must be HOST:PORT"
  cat >"$dir/config.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $dir/data
http:
  addr: $addr
$auth
EOF
  setsid docker-registry serve "$dir/config.yml" >"$dir/registry.log" 2>&1 &
  echo $! >"$dir/pid"
  local i
  for i in $(seq 1 100); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' "http://$addr/v2/") == "$want" ]] && return
    kill -0 "$(cat "$dir/pid")" 2>/dev/null || die "docker-registry exited: $(tail -5 "$dir/registry.log")"
    sleep 0.1
  done
  die "docker-registry not answering on $addr"
}

start() {
  local dir=$1 addr=$2
  mkdir -p "$dir/data"
  dir=$(cd "$dir" && pwd)
  stop "$dir"
  htpasswd -Bbn "$USER_NAME" "$PASSWORD" >"$dir/htpasswd" 2>/dev/null ||
    die "htpasswd failed (apache2-utils)"
  # 401 without credentials: up, and asking for them
  serve "$dir" "$addr" 401 "auth:
  htpasswd:
    realm: rkubelet-test
    path: $dir/htpasswd"
  local tar
  tar=$("$REPO_ROOT/hack/images.sh" --print-tarball) || die "no test image tarball"
  skopeo copy -q --dest-tls-verify=false --dest-creds "$USER_NAME:$PASSWORD" \
    "oci-archive:$tar:rkubelet.test/busybox:1" "docker://$addr/private/busybox:1" ||
    die "skopeo copy to $addr failed"
  echo "registry on $addr (state in $dir): $addr/private/busybox:1, user $USER_NAME"
}

mirror() {
  local dir=$1 addr=$2 images name digest pushed=0
  mkdir -p "$dir/data"
  dir=$(cd "$dir" && pwd)
  stop "$dir"
  images=$("$REPO_ROOT/hack/e2e-images.sh" --print-dir) || die "no e2e images"
  serve "$dir" "$addr" 200
  while read -r name digest; do
    [[ $name == registry.k8s.io/* ]] || continue
    skopeo copy -q --preserve-digests --dest-tls-verify=false \
      "oci-archive:$images/images.tar:$name" "docker://$addr/${name#registry.k8s.io/}" ||
      die "skopeo copy of $name to $addr failed"
    pushed=$((pushed + 1))
  done <"$images/refs"
  echo "registry.k8s.io mirror on $addr (state in $dir): $pushed images"
}

stop() {
  local dir=$1 pid
  [[ -f "$dir/pid" ]] || return 0
  pid=$(cat "$dir/pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/pid"
}

case "${1:-}" in
start) start "${2:?DIR}" "${3:?ADDR}" ;;
mirror) mirror "${2:?DIR}" "${3:?ADDR}" ;;
stop) stop "${2:?DIR}" ;;
*) die "usage: registry.sh start DIR ADDR | mirror DIR ADDR | stop DIR" ;;
esac
