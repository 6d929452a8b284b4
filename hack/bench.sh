#!/usr/bin/env bash
# rkubelet's benchmark: static pod startup latency, batch start/teardown,
# rkubelet's RSS and CPU (crates/rkubelet-bench).
#
#   hack/bench.sh [--serial N] [--batch M] [--timeout SECS]
#
#   1. builds release binaries of rkubelet and rkubelet-bench
#   2. runs the bench against an in-process fake CRI runtime (the
#      kubelet's own overhead)
#   3. starts a private containerd (its own directory, bridge and pod
#      subnet, so the developer's and the e2e tests' can keep running),
#      imports the test images and runs the bench against it
#
# containerd is stopped and its directory removed on exit, whatever happens.
# The exit status is non-zero if either run failed (timings are never judged).
#
# Environment: RKUBELET_BENCH_RUNTIME_DIR (default /tmp/rk-bench),
# RKUBELET_BENCH_BRIDGE (rkbr-bench), RKUBELET_BENCH_SUBNET (10.91.0.0/16).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$PWD
PROG=${0##*/}

die() { echo "$PROG: error: $*" >&2; exit 1; }

export RKUBELET_RUNTIME_DIR=${RKUBELET_BENCH_RUNTIME_DIR:-/tmp/rk-bench}
export RKUBELET_CNI_BRIDGE=${RKUBELET_BENCH_BRIDGE:-rkbr-bench}
export RKUBELET_POD_SUBNET=${RKUBELET_BENCH_SUBNET:-10.91.0.0/16}

BENCH_ARGS=("$@")
for arg in "${BENCH_ARGS[@]}"; do
  case "$arg" in
  --rkubelet* | --endpoint* | --fake) die "$PROG chooses $arg itself" ;;
  esac
done

CONTAINERD_STARTED=""
# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
  local rc=$?
  if [[ -n "$CONTAINERD_STARTED" ]]; then
    "$REPO_ROOT/hack/containerd.sh" stop "$RKUBELET_RUNTIME_DIR" >&2 ||
      echo "$PROG: warning: stopping containerd in $RKUBELET_RUNTIME_DIR failed" >&2
    if [[ -d "$RKUBELET_RUNTIME_DIR" ]]; then
      if grep -qF " $RKUBELET_RUNTIME_DIR/" /proc/mounts; then
        echo "$PROG: warning: mounts remain under $RKUBELET_RUNTIME_DIR; not removing it" >&2
      else
        rm -rf --one-file-system "$RKUBELET_RUNTIME_DIR"
      fi
    fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "==> cargo build --release -p rkubelet -p rkubelet-bench" >&2
cargo build --release -p rkubelet -p rkubelet-bench >&2
RKUBELET=$REPO_ROOT/target/release/rkubelet
BENCH=$REPO_ROOT/target/release/rkubelet-bench

status=0

echo
echo "==> fake CRI runtime (in-process): rkubelet's own overhead"
"$BENCH" --rkubelet "$RKUBELET" --fake "${BENCH_ARGS[@]}" || status=1

echo "==> containerd (private, $RKUBELET_RUNTIME_DIR, $RKUBELET_CNI_BRIDGE, $RKUBELET_POD_SUBNET)"
if hack/containerd.sh status "$RKUBELET_RUNTIME_DIR" >/dev/null 2>&1; then
  die "a containerd already runs for $RKUBELET_RUNTIME_DIR; stop it first (hack/containerd.sh stop $RKUBELET_RUNTIME_DIR)"
fi
CONTAINERD_STARTED=1
hints=$(hack/containerd.sh start "$RKUBELET_RUNTIME_DIR") || die "starting containerd failed"
eval "$hints"
hack/images.sh "$RKUBELET_RUNTIME_DIR/containerd.sock"
containerd --version | sed 's/^/    /'
"$BENCH" --rkubelet "$RKUBELET" --endpoint "$CONTAINER_RUNTIME_ENDPOINT" "${BENCH_ARGS[@]}" || status=1

exit "$status"
