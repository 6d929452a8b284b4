#!/usr/bin/env bash
# A private image registry on loopback, for the pull path's tests (Debian's
# docker-registry, the distribution registry, with htpasswd auth: every
# repository needs the user below).
#
#   hack/registry.sh start DIR ADDR   serve on ADDR (127.0.0.1:PORT), state in
#                                     DIR, and push the test image to it as
#                                     ADDR/private/busybox:1
#   hack/registry.sh stop DIR         stop it (idempotent)
#
# The user is rkubelet-puller, password `registry.sh-pw` (a test fixture,
# not a secret). containerd reaches ADDR over plain HTTP when hack/containerd.sh
# is given RKUBELET_REGISTRY_MIRROR=ADDR.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
USER_NAME=rkubelet-puller
PASSWORD=registry.sh-pw

die() { echo "registry.sh: $*" >&2; exit 1; }

start() {
  local dir=$1 addr=$2
  mkdir -p "$dir/data"
  dir=$(cd "$dir" && pwd)
  stop "$dir"
  htpasswd -Bbn "$USER_NAME" "$PASSWORD" >"$dir/htpasswd" 2>/dev/null ||
    die "htpasswd failed (apache2-utils)"
  cat >"$dir/config.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $dir/data
http:
  addr: $addr
auth:
  htpasswd:
    realm: rkubelet-test
    path: $dir/htpasswd
EOF
  setsid docker-registry serve "$dir/config.yml" >"$dir/registry.log" 2>&1 &
  echo $! >"$dir/pid"
  local i
  for i in $(seq 1 100); do
    # 401 without credentials: up, and asking for them
    if [[ $(curl -s -o /dev/null -w '%{http_code}' "http://$addr/v2/") == 401 ]]; then
      break
    fi
    kill -0 "$(cat "$dir/pid")" 2>/dev/null || die "docker-registry exited: $(tail -5 "$dir/registry.log")"
    ((i < 100)) || die "docker-registry not answering on $addr"
    sleep 0.1
  done
  local tar
  tar=$("$REPO_ROOT/hack/images.sh" --print-tarball) || die "no test image tarball"
  skopeo copy -q --dest-tls-verify=false --dest-creds "$USER_NAME:$PASSWORD" \
    "oci-archive:$tar:rkubelet.test/busybox:1" "docker://$addr/private/busybox:1" ||
    die "skopeo copy to $addr failed"
  echo "registry on $addr (state in $dir): $addr/private/busybox:1, user $USER_NAME"
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
stop) stop "${2:?DIR}" ;;
*) die "usage: registry.sh start DIR ADDR | stop DIR" ;;
esac
