#!/usr/bin/env bash
# rkubelet vs the upstream kubelet (v1.37.2), side by side on one real
# control plane and one containerd, one kubelet at a time as the same node
# (crates/rkubelet-bench/src/cluster.rs): pod startup latency, bursts, RSS,
# CPU and API requests per minute, with the ratio rkubelet/upstream.
#
#   hack/bench-cluster.sh [--serial N] [--bursts 20,100] [--steady SECS]
#                         [--rest SECS] [--settle SECS] [--timeout SECS]
#                         [--csi N] [--deaths N] [--evented] [--only rkubelet|upstream]
#
#   1. builds release binaries of rkubelet and rkubelet-bench, and (cached)
#      the control plane, the upstream kubelet, the CSI mock driver and
#      external-provisioner (hack/control-plane.sh) for the CSI phase
#   2. starts a private containerd (RKUBELET_RUNTIME_DIR=/tmp/rk-bc, bridge
#      rkbr-bc, 10.93.0.0/16) with the test images
#   3. starts a private control plane with an audit log of the node's
#      requests (RKUBELET_CLUSTER_DIR=/tmp/rk-bc-cluster, API server on
#      :18443, etcd on :14379, RKUBELET_AUDIT=1)
#   4. runs the bench and prints the table
#
# Always cleans up on exit: the kubelets stopped, the control plane down
# (CLEAN=1), containerd stopped and its directory removed, and the kernel
# tunables the upstream kubelet sets on start (vm.overcommit_memory,
# kernel.panic, kernel.panic_on_oops, ...) put back as they were.
# RKUBELET_BENCH_LOGS=DIR keeps each kubelet's log and the audit log there.
# Quick run: --steady 30 --rest 30. Exit status non-zero if a kubelet's run failed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$PWD
PROG=${0##*/}
START=$(date +%s)

die() { echo "$PROG: error: $*" >&2; exit 1; }
# shellcheck source=lib/mounts.sh
. "$REPO_ROOT/hack/lib/mounts.sh"

export RKUBELET_RUNTIME_DIR=/tmp/rk-bc
export RKUBELET_CNI_BRIDGE=rkbr-bc
export RKUBELET_POD_SUBNET=10.93.0.0/16
export RKUBELET_CLUSTER_DIR=/tmp/rk-bc-cluster
export RKUBELET_APISERVER_PORT=18443
export RKUBELET_ETCD_PORT=14379
export RKUBELET_AUDIT=1
NODE=rkb-bench

BENCH_ARGS=("$@")
for arg in "${BENCH_ARGS[@]}"; do
  case "$arg" in
  --rkubelet* | --upstream* | --cluster-dir* | --node* | --endpoint* | --work* | --csi-*)
    die "$PROG chooses $arg itself" ;;
  esac
done

# The kernel tunables the upstream kubelet's container manager sets
# (setupKernelTunables), to put back on exit.
SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
declare -A SYSCTL_SAVED=()
for s in "${SYSCTLS[@]}"; do
  [[ -r /proc/sys/$s ]] && SYSCTL_SAVED[$s]=$(cat "/proc/sys/$s")
done

WORK=""
BENCH_PID=""
CONTAINERD_STARTED=""
CLUSTER_STARTED=""
# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
  local rc=$?
  trap '' INT TERM
  if [[ -n "$BENCH_PID" ]] && kill -0 "$BENCH_PID" 2>/dev/null; then
    kill -INT "$BENCH_PID" 2>/dev/null || true
    for _ in $(seq 1 150); do kill -0 "$BENCH_PID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$BENCH_PID" 2>/dev/null || true
  fi
  # Kubelets the bench started and did not stop (it was killed): they are
  # the processes whose command line names the bench's work directory.
  if [[ -n "$WORK" ]]; then
    local pid
    for cmdline in /proc/[0-9]*/cmdline; do
      pid=${cmdline#/proc/}
      pid=${pid%/cmdline}
      if { tr '\0' ' ' <"$cmdline"; } 2>/dev/null | grep -qF -- "$WORK/"; then
        echo "$PROG: stopping leftover kubelet $pid" >&2
        kill -TERM "$pid" 2>/dev/null || true
        sleep 2
        kill -KILL "$pid" 2>/dev/null || true
      fi
    done
  fi
  if [[ -n "${RKUBELET_BENCH_LOGS:-}" && -n "$WORK" && -d "$WORK" ]]; then
    local log
    mkdir -p "$RKUBELET_BENCH_LOGS"
    for log in "$WORK"/*/kubelet.log; do
      [[ -f $log ]] && cp "$log" "$RKUBELET_BENCH_LOGS/$(basename "$(dirname "$log")").log"
    done
    [[ -f $RKUBELET_CLUSTER_DIR/audit.log ]] && cp "$RKUBELET_CLUSTER_DIR/audit.log" "$RKUBELET_BENCH_LOGS/"
    echo "$PROG: kubelet logs and the audit log kept in $RKUBELET_BENCH_LOGS" >&2
  fi
  if [[ -n "$CLUSTER_STARTED" ]]; then
    CLEAN=1 "$REPO_ROOT/hack/cluster.sh" down >&2 ||
      echo "$PROG: warning: stopping the control plane in $RKUBELET_CLUSTER_DIR failed" >&2
  fi
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
  if [[ -n "$WORK" && -d "$WORK" ]]; then
    # Both kubelets bind-mount their root directory onto itself.
    unmount_under "$WORK" || true
    if grep -qF " $WORK/" /proc/mounts; then
      echo "$PROG: warning: mounts remain under $WORK; not removing it" >&2
    else
      rm -rf --one-file-system "$WORK"
    fi
  fi
  local s
  for s in "${!SYSCTL_SAVED[@]}"; do
    if [[ $(cat "/proc/sys/$s") != "${SYSCTL_SAVED[$s]}" ]]; then
      echo "${SYSCTL_SAVED[$s]}" >"/proc/sys/$s" 2>/dev/null ||
        echo "$PROG: warning: could not restore /proc/sys/$s to ${SYSCTL_SAVED[$s]}" >&2
    fi
  done
  echo "$PROG: finished in $(($(date +%s) - START)) s (exit $rc)" >&2
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "==> cargo build --release -p rkubelet -p rkubelet-bench" >&2
cargo build --release -p rkubelet -p rkubelet-bench >&2
RKUBELET=$REPO_ROOT/target/release/rkubelet
BENCH=$REPO_ROOT/target/release/rkubelet-bench
BIN=$(hack/control-plane.sh build)
UPSTREAM=$BIN/kubelet
[[ -x $UPSTREAM ]] || die "no upstream kubelet at $UPSTREAM"
CSI_MOCK=$(hack/control-plane.sh csi-mock-plugin)
CSI_PROVISIONER=$(hack/control-plane.sh csi-provisioner)

echo "==> containerd (private, $RKUBELET_RUNTIME_DIR, $RKUBELET_CNI_BRIDGE, $RKUBELET_POD_SUBNET)" >&2
if hack/containerd.sh status "$RKUBELET_RUNTIME_DIR" >/dev/null 2>&1; then
  die "a containerd already runs for $RKUBELET_RUNTIME_DIR; stop it first (hack/containerd.sh stop $RKUBELET_RUNTIME_DIR)"
fi
CONTAINERD_STARTED=1
hints=$(hack/containerd.sh start "$RKUBELET_RUNTIME_DIR") || die "starting containerd failed"
eval "$hints"
hack/images.sh "$RKUBELET_RUNTIME_DIR/containerd.sock" >&2

echo "==> control plane (private, $RKUBELET_CLUSTER_DIR, :$RKUBELET_APISERVER_PORT, audited)" >&2
if [[ -f $RKUBELET_CLUSTER_DIR/kube-apiserver.pid ]] &&
  kill -0 "$(cat "$RKUBELET_CLUSTER_DIR/kube-apiserver.pid")" 2>/dev/null; then
  die "a control plane already runs in $RKUBELET_CLUSTER_DIR; stop it first (RKUBELET_CLUSTER_DIR=$RKUBELET_CLUSTER_DIR hack/cluster.sh down)"
fi
rm -rf "$RKUBELET_CLUSTER_DIR"
CLUSTER_STARTED=1
hack/cluster.sh up "$NODE" >&2

WORK=$(mktemp -d /tmp/rk-bc-work.XXXXXX)
echo "==> bench (kubelet logs and state in $WORK while it runs)" >&2
containerd --version | sed 's/^/    /'
status=0
"$BENCH" cluster --rkubelet "$RKUBELET" --upstream "$UPSTREAM" \
  --cluster-dir "$RKUBELET_CLUSTER_DIR" --node "$NODE" \
  --endpoint "$CONTAINER_RUNTIME_ENDPOINT" --work "$WORK" \
  --csi-mock "$CSI_MOCK" --csi-provisioner "$CSI_PROVISIONER" "${BENCH_ARGS[@]}" &
BENCH_PID=$!
wait "$BENCH_PID" || status=$?
BENCH_PID=""
if [[ $status != 0 && -d $WORK ]]; then
  for log in "$WORK"/*/kubelet.log; do
    [[ -f $log ]] || continue
    echo "==> last lines of $log" >&2
    tail -n 20 "$log" >&2
  done
fi
exit "$status"
