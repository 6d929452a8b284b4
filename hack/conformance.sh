#!/usr/bin/env bash
# The upstream Kubernetes e2e [NodeConformance] suite (v1.37.2) against a
# one-node cluster whose node is rkubelet (or, for the other column, the
# upstream kubelet on the same control plane and containerd).
#
#   hack/conformance.sh [--kubelet rkubelet|upstream] [--focus REGEX] [--skip REGEX]
#                       [--subset FILE] [--procs N] [--timeout DURATION]
#                       [--out DIR] [--rkubelet BINARY] [--keep]
#
#   --kubelet     which kubelet is the node (default rkubelet)
#   --focus       ginkgo focus (default '\[NodeConformance\]')
#   --skip        ginkgo skip (default the tiers a conformance run leaves out:
#                 '\[Slow\]|\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Feature:|\[Alpha\]')
#   --subset FILE run exactly the specs named in FILE (one full spec name a
#                 line, '#' comments), and fail unless every one ran and passed
#                 (hack/test.sh runs hack/conformance/ci-subset.txt this way)
#   --procs       ginkgo parallel processes (default 8: stable on 2 cores)
#   --timeout     the whole suite's limit (default 90m)
#   --out         where the JUnit XML, the table and the logs go
#                 (default /tmp/rkubelet-conformance/results-<kubelet>)
#   --rkubelet    the rkubelet binary (default: cargo build --release)
#   --keep        leave the cluster running afterwards (stop it with
#                 hack/conformance.sh --down)
#
# Builds (or takes from ~/.cache/rkubelet) the control plane, e2e.test and
# ginkgo (hack/control-plane.sh e2e) and the suite's images
# (hack/e2e-images.sh); starts a private control plane on ports 26443/22379
# and a private containerd (bridge rkbr-conf, 10.92.0.0/16, sandbox image
# registry.k8s.io/pause:3.10.2) in /tmp/rkubelet-conformance, so a
# developer's cluster and hack/test.sh's are untouched; runs the suite;
# prints every spec with passed/failed and the first line of each failure,
# the failures grouped by cause (hack/conformance/causes.tsv), and ends with
# "N passed, M failed". Everything it started is stopped on exit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$PWD
PROG=${0##*/}

KUBELET=rkubelet
FOCUS='\[NodeConformance\]'
SKIP='\[Slow\]|\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Feature:|\[Alpha\]'
SUBSET=""
PROCS=8
TIMEOUT=90m
OUT=""
RKUBELET_BIN=""
KEEP=""
DOWN_ONLY=""

die() { echo "$PROG: error: $*" >&2; exit 1; }
# shellcheck source=lib/mounts.sh
. "$REPO_ROOT/hack/lib/mounts.sh"
usage() { sed -n '6,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

while (($#)); do
  case $1 in
  --kubelet) KUBELET=${2:?}; shift 2 ;;
  --focus) FOCUS=${2:?}; shift 2 ;;
  --skip) SKIP=${2:?}; shift 2 ;;
  --subset) SUBSET=${2:?}; shift 2 ;;
  --procs) PROCS=${2:?}; shift 2 ;;
  --timeout) TIMEOUT=${2:?}; shift 2 ;;
  --out) OUT=${2:?}; shift 2 ;;
  --rkubelet) RKUBELET_BIN=${2:?}; shift 2 ;;
  --keep) KEEP=1; shift ;;
  --down) DOWN_ONLY=1; shift ;;
  -h | --help) usage ;;
  *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ $KUBELET == rkubelet || $KUBELET == upstream ]] || die "--kubelet must be rkubelet or upstream"
[[ $PROCS =~ ^[1-9][0-9]*$ ]] || die "--procs must be a positive number"

WORK=${RKUBELET_CONFORMANCE_DIR:-/tmp/rkubelet-conformance}
OUT=${OUT:-$WORK/results-$KUBELET}
NODE=rk-conformance
export RKUBELET_CLUSTER_DIR=$WORK/cluster
export RKUBELET_RUNTIME_DIR=$WORK/runtime
# Ports and pod network of its own (settable, so that two runs can share a
# machine: hack/test.sh's subset picks others).
export RKUBELET_APISERVER_PORT=${RKUBELET_CONFORMANCE_APISERVER_PORT:-26443}
export RKUBELET_ETCD_PORT=${RKUBELET_CONFORMANCE_ETCD_PORT:-22379}
export RKUBELET_CNI_BRIDGE=${RKUBELET_CONFORMANCE_BRIDGE:-rkbr-conf}
export RKUBELET_POD_SUBNET=${RKUBELET_CONFORMANCE_POD_SUBNET:-10.92.0.0/16}
KUBELET_PORT=${RKUBELET_CONFORMANCE_KUBELET_PORT:-10250}
export RKUBELET_SANDBOX_IMAGE=registry.k8s.io/pause:3.10.2
NODE_DIR=$WORK/node

# The kernel tunables the upstream kubelet's container manager sets
# (setupKernelTunables), put back on exit.
SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
declare -A SYSCTL_SAVED=()

stop_kubelet() {
  local pid
  [[ -f $NODE_DIR/kubelet.pid ]] || return 0
  pid=$(cat "$NODE_DIR/kubelet.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$NODE_DIR/kubelet.pid"
}

down() {
  stop_kubelet
  CLEAN=1 hack/cluster.sh down >/dev/null 2>&1 || echo "$PROG: warning: stopping the control plane failed" >&2
  hack/containerd.sh stop "$RKUBELET_RUNTIME_DIR" >/dev/null 2>&1 || echo "$PROG: warning: stopping containerd failed" >&2
  # Both kubelets bind-mount their root directory onto itself.
  unmount_under "$NODE_DIR" || true
  if grep -qF " $WORK/" /proc/mounts; then
    echo "$PROG: warning: mounts remain under $WORK; not removing its node state" >&2
  else
    rm -rf --one-file-system "$NODE_DIR" "$RKUBELET_RUNTIME_DIR"
  fi
  local s
  for s in "${!SYSCTL_SAVED[@]}"; do
    [[ $(cat "/proc/sys/$s") == "${SYSCTL_SAVED[$s]}" ]] || echo "${SYSCTL_SAVED[$s]}" >"/proc/sys/$s" 2>/dev/null || true
  done
}

if [[ -n $DOWN_ONLY ]]; then
  down
  exit 0
fi

START=$SECONDS
# The commit the kubelet under test is built from (the title of the table).
COMMIT="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates Cargo.toml Cargo.lock || echo '+uncommitted')"
stage() { printf '==> %s  [%ss]\n' "$*" "$((SECONDS - START))" >&2; }

stage "system packages"
hack/install-deps.sh
stage "control plane, e2e.test and ginkgo (cached by version)"
BIN=$(hack/control-plane.sh e2e)
export PATH=$BIN:$PATH
if [[ $KUBELET == rkubelet && -z $RKUBELET_BIN ]]; then
  stage "cargo build --release -p rkubelet"
  cargo build --release -q -p rkubelet
  RKUBELET_BIN=${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/rkubelet
fi

# A run left over (killed, or --keep) is stopped first: one node at a time.
down
trap '[[ -n $KEEP ]] || down' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for s in "${SYSCTLS[@]}"; do
  [[ -r /proc/sys/$s ]] && SYSCTL_SAVED[$s]=$(cat "/proc/sys/$s")
done

stage "control plane on :$RKUBELET_APISERVER_PORT"
hack/cluster.sh up "$NODE" >/dev/null
ADMIN=$RKUBELET_CLUSTER_DIR/admin.conf
kubectl=(kubectl --kubeconfig "$ADMIN")

stage "containerd and the suite's images"
eval "$(hack/containerd.sh start "$RKUBELET_RUNTIME_DIR")"
hack/images.sh "$RKUBELET_RUNTIME_DIR/containerd.sock"
hack/e2e-images.sh "$RKUBELET_RUNTIME_DIR/containerd.sock"

stage "$KUBELET as node $NODE"
mkdir -p "$NODE_DIR/root" "$NODE_DIR/logs" "$NODE_DIR/manifests"
# The suite's images are imported, not pullable: neither kubelet's image GC
# nor its eviction manager's disk reclaim may remove them (the disk of these
# machines looks more than 85 % full to statvfs): thresholds of 1 %.
if [[ $KUBELET == rkubelet ]]; then
  cat >"$NODE_DIR/config.yaml" <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
staticPodPath: $NODE_DIR/manifests
containerRuntimeEndpoint: $CONTAINER_RUNTIME_ENDPOINT
podLogsDir: $NODE_DIR/logs
port: $KUBELET_PORT
healthzPort: 0
authentication:
  x509:
    clientCAFile: $RKUBELET_CLUSTER_DIR/pki/ca.crt
CFG
  cmd=("$RKUBELET_BIN")
else
  # As the benchmark runs it on these machines (cgroup v1, no systemd), with
  # the API server's authentication and authorization like any node.
  cat >"$NODE_DIR/config.yaml" <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
imageGCHighThresholdPercent: 100
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: $CONTAINER_RUNTIME_ENDPOINT
failSwapOn: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
staticPodPath: $NODE_DIR/manifests
podLogsDir: $NODE_DIR/logs
port: $KUBELET_PORT
healthzPort: 0
resolvConf: /etc/resolv.conf
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $RKUBELET_CLUSTER_DIR/pki/ca.crt}
authorization: {mode: Webhook}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
localStorageCapacityIsolation: false
CFG
  cmd=("$BIN/kubelet")
fi
setsid "${cmd[@]}" --config "$NODE_DIR/config.yaml" --root-dir "$NODE_DIR/root" \
  --kubeconfig "$RKUBELET_CLUSTER_DIR/kubelet-$NODE.conf" --hostname-override "$NODE" \
  >"$NODE_DIR/kubelet.log" 2>&1 </dev/null &
echo $! >"$NODE_DIR/kubelet.pid"

ready=""
for _ in $(seq 1 240); do
  kill -0 "$(cat "$NODE_DIR/kubelet.pid")" 2>/dev/null || { tail -20 "$NODE_DIR/kubelet.log" >&2; die "$KUBELET exited"; }
  if [[ $("${kubectl[@]}" get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]] &&
    "${kubectl[@]}" -n default get serviceaccount default >/dev/null 2>&1; then
    ready=1
    break
  fi
  sleep 0.5
done
[[ -n $ready ]] || { tail -20 "$NODE_DIR/kubelet.log" >&2; die "node $NODE not Ready (or no default ServiceAccount) after 120 s"; }

rm -rf "$OUT"
mkdir -p "$OUT"
if [[ -n $SUBSET ]]; then
  [[ -f $SUBSET ]] || die "no subset file $SUBSET"
  FOCUS=$(python3 hack/conformance-report.py focus "$SUBSET")
  SKIP='^$'
fi

stage "e2e.test: $PROCS processes (log: $OUT/e2e.log)"
set +e
ginkgo --procs="$PROCS" --timeout="$TIMEOUT" --no-color --focus="$FOCUS" --skip="$SKIP" \
  "$BIN/e2e.test" -- --provider=skeleton --kubeconfig="$ADMIN" --minStartupPods=-1 \
  --allowed-not-ready-nodes=-1 --report-dir="$OUT" >"$OUT/e2e.log" 2>&1
rc=$?
set -e
cp "$NODE_DIR/kubelet.log" "$OUT/kubelet.log" 2>/dev/null || true
stage "e2e.test exited $rc"
[[ -f $OUT/junit_01.xml ]] || { tail -30 "$OUT/e2e.log" >&2; die "the suite wrote no JUnit report"; }

report=(python3 hack/conformance-report.py table "$OUT/junit_01.xml" --causes hack/conformance/causes.tsv
  --title "$KUBELET, $(date -u +%F), commit $COMMIT")
[[ -n $SUBSET ]] && report+=(--subset "$SUBSET")
"${report[@]}" | tee "$OUT/table.txt"
exit "${PIPESTATUS[0]}"
