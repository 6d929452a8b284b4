#!/usr/bin/env bash
# The upstream Kubernetes e2e suites (v1.37.2) against a cluster of
# hack/nodes.sh whose nodes run rkubelet, the upstream kubelet, or both.
#
#   hack/conformance.sh [--suite node|conformance] [--kubelet rkubelet|upstream|mixed]
#                       [--nodes N] [--focus REGEX] [--skip REGEX]
#                       [--subset FILE] [--procs N] [--timeout DURATION]
#                       [--out DIR] [--rkubelet BINARY] [--keep]
#
#   --suite       node: the [NodeConformance] specs that are not [Serial],
#                 [Slow], [Disruptive], [Flaky], alpha or feature-gated (the
#                 default); conformance: every [Conformance] spec, the [Serial]
#                 ones after the parallel ones on one process, as the
#                 certification runs do
#   --kubelet     which kubelet the nodes run (default rkubelet); mixed: the
#                 first node rkubelet, the next upstream, and so on
#   --nodes       how many nodes (default 2); on one, the suite is told its
#                 kubelet's root directory (--kubelet-root-dir), which the
#                 CSI specs' drivers mount: run them so, in a short
#                 RKUBELET_CONFORMANCE_DIR (a driver's registration socket,
#                 <root>/plugins_registry/csi-mock-<namespace>-reg.sock, must
#                 fit a socket address's 107 bytes), e.g.
#                 RKUBELET_CONFORMANCE_DIR=/tmp/rkc hack/conformance.sh
#                 --nodes 1 --focus '\[sig-storage\] CSI Mock' (and the
#                 same for the DRA specs, '\[DRA\] kubelet', whose test
#                 driver's pods mount it too)
#   --focus       ginkgo focus (default the suite's)
#   --skip        ginkgo skip (default the suite's)
#   --subset FILE run exactly the specs named in FILE (one full spec name a
#                 line, '#' comments), and fail unless every one ran and passed
#                 (hack/test.sh runs hack/conformance/ci-subset.txt this way)
#   --procs       ginkgo parallel processes (default 8: stable on 2 cores)
#   --timeout     the whole suite's limit (default 90m; 5h for conformance)
#   --out         where the JUnit XML, the table and the logs go
#                 (default /tmp/rkubelet-conformance/results-<suite>-<kubelet>)
#   --rkubelet    the rkubelet binary (default: cargo build --release)
#   --keep        leave the cluster running afterwards (stop it with
#                 hack/conformance.sh --down)
#
# RKUBELET_FEATURE_GATES=A=true,B=true (default none) turns gates on in the
# API server and in every node's kubelet, for the specs of an alpha feature.
#
# Builds (or takes from ~/.cache/rkubelet) the control plane, kube-proxy,
# CoreDNS, e2e.test and ginkgo (hack/control-plane.sh) and the suite's images
# (hack/e2e-images.sh); starts the cluster in /tmp/rkubelet-conformance with
# a control plane on ports 26443/22379, nodes rkc-n1... on 10.100.1.0/24 and
# pods on 10.92.0.0/16 (sandbox image registry.k8s.io/pause:3.10.2), so a
# developer's cluster and hack/test.sh's are untouched; runs the suite;
# prints every spec with passed/failed and the first line of each failure,
# the failures grouped by cause (hack/conformance/causes.tsv), and ends with
# "N passed, M failed". Everything it started is stopped on exit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$PWD
PROG=${0##*/}

SUITE=node
KUBELET=rkubelet
NODES=2
FOCUS=""
SKIP=""
SUBSET=""
PROCS=8
TIMEOUT=""
OUT=""
RKUBELET_BIN=""
KEEP=""
DOWN_ONLY=""

die() { echo "$PROG: error: $*" >&2; exit 1; }
# shellcheck source=lib/mounts.sh
. "$REPO_ROOT/hack/lib/mounts.sh"
usage() { sed -n '5,37p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

while (($#)); do
  case $1 in
  --suite) SUITE=${2:?}; shift 2 ;;
  --kubelet) KUBELET=${2:?}; shift 2 ;;
  --nodes) NODES=${2:?}; shift 2 ;;
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
case $SUITE in
node)
  FOCUS=${FOCUS:-'\[NodeConformance\]'}
  SKIP=${SKIP:-'\[Slow\]|\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Feature:|\[Alpha\]'}
  TIMEOUT=${TIMEOUT:-90m}
  ;;
conformance)
  FOCUS=${FOCUS:-'\[Conformance\]'}
  SKIP=${SKIP:-'^$'}
  TIMEOUT=${TIMEOUT:-5h}
  ;;
*) die "--suite must be node or conformance" ;;
esac
[[ $PROCS =~ ^[1-9][0-9]*$ ]] || die "--procs must be a positive number"
[[ $NODES =~ ^[1-9][0-9]?$ ]] || die "--nodes must be a count from 1 to 99"
KINDS=()
for ((i = 0; i < NODES; i++)); do
  case $KUBELET in
  rkubelet | upstream) KINDS+=("$KUBELET") ;;
  mixed) if ((i % 2)); then KINDS+=(upstream); else KINDS+=(rkubelet); fi ;;
  *) die "--kubelet must be rkubelet, upstream or mixed" ;;
  esac
done

WORK=${RKUBELET_CONFORMANCE_DIR:-/tmp/rkubelet-conformance}
OUT=${OUT:-$WORK/results-$SUITE-$KUBELET}
export RKUBELET_CLUSTER_DIR=$WORK/cluster
# Ports and networks of its own (settable, so that two runs can share a
# machine: hack/test.sh's subset picks others).
export RKUBELET_APISERVER_PORT=${RKUBELET_CONFORMANCE_APISERVER_PORT:-26443}
export RKUBELET_ETCD_PORT=${RKUBELET_CONFORMANCE_ETCD_PORT:-22379}
export RKUBELET_NET_TAG=${RKUBELET_CONFORMANCE_NET_TAG:-rkc}
export RKUBELET_NODE_NET=${RKUBELET_CONFORMANCE_NODE_NET:-10.100.1.0/24}
export RKUBELET_POD_SUBNET=${RKUBELET_CONFORMANCE_POD_SUBNET:-10.92.0.0/16}
export RKUBELET_SANDBOX_IMAGE=registry.k8s.io/pause:3.10.2
export RKUBELET_NODE_IMAGES=e2e

# The kernel tunables the upstream kubelet's container manager sets
# (setupKernelTunables), put back on exit.
SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
declare -A SYSCTL_SAVED=()

down() {
  hack/nodes.sh down || echo "$PROG: warning: stopping the cluster failed" >&2
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
if [[ $KUBELET != upstream && -z $RKUBELET_BIN ]]; then
  stage "cargo build --release -p rkubelet"
  cargo build --release -q -p rkubelet
  RKUBELET_BIN=${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/rkubelet
fi

export RKUBELET_BIN
# A run left over (killed, or --keep) is stopped first.
down
trap '[[ -n $KEEP ]] || down' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for s in "${SYSCTLS[@]}"; do
  [[ -r /proc/sys/$s ]] && SYSCTL_SAVED[$s]=$(cat "/proc/sys/$s")
done

stage "control plane on :$RKUBELET_APISERVER_PORT, ${#KINDS[@]} nodes (${KINDS[*]}), kube-proxy and CoreDNS"
hack/nodes.sh up "${KINDS[@]}"
ADMIN=$RKUBELET_CLUSTER_DIR/admin.conf
# The suite's CSI specs deploy drivers whose hostPath volumes name the
# kubelet's root directory (--kubelet-root-dir), which must then be the same
# on every node: on one node it is that node's.
ROOT_DIR_FLAG=()
if ((NODES == 1)); then
  ROOT_DIR_FLAG=(--kubelet-root-dir="$(cd "$RKUBELET_CLUSTER_DIR"/nodes/*/root && pwd -P)")
fi

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
  --allowed-not-ready-nodes=-1 --report-dir="$OUT" "${ROOT_DIR_FLAG[@]}" >"$OUT/e2e.log" 2>&1
rc=$?
set -e
for nd in "$RKUBELET_CLUSTER_DIR"/nodes/*/; do
  cp "$nd/kubelet.log" "$OUT/kubelet-$(basename "$nd").log" 2>/dev/null || true
done
stage "e2e.test exited $rc"
[[ -f $OUT/junit_01.xml ]] || { tail -30 "$OUT/e2e.log" >&2; die "the suite wrote no JUnit report"; }

WHAT="$SUITE suite"
[[ -n $SUBSET ]] && WHAT="subset $SUBSET"
report=(python3 hack/conformance-report.py table "$OUT/junit_01.xml" --causes hack/conformance/causes.tsv
  --title "$WHAT, $KUBELET (${KINDS[*]}), $(date -u +%F), commit $COMMIT")
[[ -n $SUBSET ]] && report+=(--subset "$SUBSET")
"${report[@]}" | tee "$OUT/table.txt"
exit "${PIPESTATUS[0]}"
