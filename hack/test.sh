#!/usr/bin/env bash
# rkubelet's full test run (what CI runs through .ci/run):
#
#   1. system packages (hack/install-deps.sh)
#   2. cargo fmt --check, clippy with -D warnings
#   3. cargo test --workspace (unit and integration tests; the
#      k8s.io/kubelet Go module is downloaded first, for the test that
#      compares the config fields with upstream's struct)
#   4. a private containerd in a temporary directory, the test images, and
#      the end-to-end tests against it (cargo test -p rkubelet --test e2e
#      -- --ignored), which read RKUBELET_E2E_ENDPOINT and
#      RKUBELET_E2E_RUNTIME_DIR; and a second containerd whose image file
#      system is a 64 MiB tmpfs, for image GC (RKUBELET_E2E_SMALL_FS_DIR).
#      Both are containerd 2 (hack/containerd.sh's default, built and
#      cached); then the same end-to-end tests against two of Debian's
#      containerd 1.6 (RKUBELET_RUNTIME=containerd1), stopped after them
#   5. a real control plane (hack/cluster.sh, on ports 16443/12379 so a
#      developer's cluster on 6443/2379 is untouched) and the cluster tests
#      against it and the same containerd (cargo test -p rkubelet --test
#      cluster -- --ignored), which read RKUBELET_CLUSTER_DIR,
#      RKUBELET_CLUSTER_NODE, RKUBELET_KUBECTL, RKUBELET_E2E_ENDPOINT and
#      RKUBELET_TEST_REGISTRY (a private registry on loopback,
#      hack/registry.sh, that this containerd pulls from over HTTP) and
#      RKUBELET_KUBE_STATE_METRICS (kube-state-metrics, built and cached
#      like metrics-server; with Debian's prometheus, for /metrics/cadvisor),
#      with rancher's local-path-provisioner (built and cached the same way)
#      as the cluster's default StorageClass, and the CSI mock driver of
#      upstream's e2e suite with external-provisioner, -attacher and
#      -resizer (RKUBELET_CSI_MOCK_PLUGIN, RKUBELET_CSI_PROVISIONER,
#      RKUBELET_CSI_ATTACHER, RKUBELET_CSI_RESIZER; the tests start them),
#      and upstream's sample device plugin (RKUBELET_SAMPLE_DEVICE_PLUGIN)
#      and DRA test driver (RKUBELET_DRA_TEST_DRIVER)
#   6. the conformance tier's CI subset: the upstream e2e specs listed in
#      hack/conformance/ci-subset.txt (all passing on main), through
#      hack/conformance.sh --subset against a cluster of its own of two
#      nodes running the rkubelet just built (hack/nodes.sh: ports
#      36443/32379, nodes rki-n1 and rki-n2 on 10.100.2.0/24, pods on
#      10.93.0.0/16, so a developer's full conformance run can go on); fails
#      when one of them fails
#   7. the multi-node tests against the same cluster (cargo test -p rkubelet
#      --test multinode -- --ignored), which read RKUBELET_CLUSTER_DIR,
#      RKUBELET_KUBECTL and RKUBELET_NODES; then the cluster is stopped and
#      hack/nodes.sh check-clean fails on anything it left
#
# Whatever happens, the control plane and containerd are stopped and the
# temporary directory removed on exit, so a run leaves nothing behind.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$PWD

if [[ "${CI:-}" == true ]]; then
  export CARGO_TERM_COLOR=never
  # A fresh machine builds once: incremental state would only take disk.
  export CARGO_INCREMENTAL=0
fi

# A pod network of its own, so a developer's containerd from
# `hack/containerd.sh start` (rkbr0, 10.88.0.0/16) can keep running.
export RKUBELET_CNI_BRIDGE=${RKUBELET_CNI_BRIDGE:-rkbr-e2e}
export RKUBELET_POD_SUBNET=${RKUBELET_POD_SUBNET:-10.89.0.0/16}

START=$SECONDS
stage() {
  printf '\n==> %s  [%ss]\n' "$*" "$((SECONDS - START))"
}

die() { echo "test.sh: error: $*" >&2; exit 1; }

TMP_DIR=""
RUNTIME_DIR=""
SMALL_FS_DIR=""
RUNTIME1_DIR=""
SMALL_FS1_DIR=""
CLUSTER_DIR=""
CLUSTER_APISERVER_PORT=16443
CLUSTER_ETCD_PORT=12379
CLUSTER_METRICS_SERVER_PORT=14443
CLUSTER_NODE=rk-e2e-node
REGISTRY_ADDR=127.0.0.1:15000
REGISTRY_DIR=""
CONFORMANCE_UP=""
# The multi-node cluster of the last two stages (hack/conformance.sh, hack/nodes.sh).
MULTI_NODE_ENV=(RKUBELET_CONFORMANCE_APISERVER_PORT=36443 RKUBELET_CONFORMANCE_ETCD_PORT=32379
  RKUBELET_CONFORMANCE_NET_TAG=rki RKUBELET_CONFORMANCE_NODE_NET=10.100.2.0/24
  RKUBELET_CONFORMANCE_POD_SUBNET=10.93.0.0/16)
cleanup() {
  local rc=$?
  if [[ -n "$CONFORMANCE_UP" ]]; then
    env "${MULTI_NODE_ENV[@]}" RKUBELET_CONFORMANCE_DIR="$TMP_DIR/conformance" \
      "$REPO_ROOT/hack/conformance.sh" --down ||
      echo "test.sh: warning: stopping the multi-node cluster failed" >&2
  fi
  if [[ -n "$REGISTRY_DIR" ]]; then
    "$REPO_ROOT/hack/registry.sh" stop "$REGISTRY_DIR" ||
      echo "test.sh: warning: stopping the registry failed" >&2
  fi
  if [[ -n "$CLUSTER_DIR" ]]; then
    CLEAN=1 RKUBELET_CLUSTER_DIR="$CLUSTER_DIR" \
      RKUBELET_APISERVER_PORT=$CLUSTER_APISERVER_PORT RKUBELET_ETCD_PORT=$CLUSTER_ETCD_PORT \
      "$REPO_ROOT/hack/cluster.sh" down ||
      echo "test.sh: warning: stopping the control plane in $CLUSTER_DIR failed" >&2
  fi
  local d
  for d in "$RUNTIME1_DIR" "$SMALL_FS1_DIR"; do
    [[ -z "$d" ]] || "$REPO_ROOT/hack/containerd.sh" stop "$d" ||
      echo "test.sh: warning: stopping containerd in $d failed" >&2
  done
  if [[ -n "$SMALL_FS_DIR" ]]; then
    "$REPO_ROOT/hack/containerd.sh" stop "$SMALL_FS_DIR" ||
      echo "test.sh: warning: stopping containerd in $SMALL_FS_DIR failed" >&2
  fi
  if [[ -n "$RUNTIME_DIR" ]]; then
    "$REPO_ROOT/hack/containerd.sh" stop "$RUNTIME_DIR" ||
      echo "test.sh: warning: stopping containerd in $RUNTIME_DIR failed" >&2
  fi
  if [[ -n "$TMP_DIR" && -d "$TMP_DIR" ]]; then
    if grep -qF " $TMP_DIR/" /proc/mounts; then
      echo "test.sh: warning: mounts remain under $TMP_DIR; not removing it" >&2
    else
      rm -rf --one-file-system "$TMP_DIR"
    fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

stage "install system packages"
hack/install-deps.sh

stage "cargo fmt --check"
cargo fmt --all -- --check

stage "no module import circles"
hack/check-modules.py

stage "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

stage "cargo test"
# The config tests compare the fields rkubelet knows with upstream's Go
# struct: the k8s.io/kubelet module (small; cached by Go) at hack/k8s's version.
(cd hack/k8s && go mod download k8s.io/kubelet)
cargo test --workspace

stage "start a private registry and containerd"
TMP_DIR=$(mktemp -d "${TMPDIR:-/tmp}/rkubelet-test.XXXXXX")
# Traversable (0711, not mktemp's 0700): a pod with hostUsers: false runs as
# host IDs of its own, which must reach its rootfs under the runtime's state.
chmod 0711 "$TMP_DIR"
REGISTRY_DIR="$TMP_DIR/registry"
hack/registry.sh start "$REGISTRY_DIR" "$REGISTRY_ADDR"
RUNTIME_DIR="$TMP_DIR/runtime"
RKUBELET_REGISTRY_MIRROR=$REGISTRY_ADDR hack/containerd.sh start "$RUNTIME_DIR" >/dev/null
echo "containerd on unix://$RUNTIME_DIR/containerd.sock"

SMALL_FS_DIR="$TMP_DIR/small-fs"
RKUBELET_IMAGE_FS_SIZE=64m RKUBELET_CNI_BRIDGE=rkbr-e2e-gc RKUBELET_POD_SUBNET=10.94.0.0/16 \
  hack/containerd.sh start "$SMALL_FS_DIR" >/dev/null
echo "containerd with a 64 MiB image file system on unix://$SMALL_FS_DIR/containerd.sock"

stage "import test images"
hack/images.sh "$RUNTIME_DIR/containerd.sock"
hack/images.sh "$SMALL_FS_DIR/containerd.sock"

# e2e_tests DIR SMALL_FS_DIR: the end-to-end tests against those two.
e2e_tests() {
  RKUBELET_E2E_ENDPOINT="unix://$1/containerd.sock" \
    RKUBELET_E2E_RUNTIME_DIR="$1" \
    RKUBELET_E2E_SMALL_FS_DIR="$2" \
    cargo test -p rkubelet --test e2e -- --ignored --test-threads=1
}

stage "end-to-end tests (containerd 2)"
e2e_tests "$RUNTIME_DIR" "$SMALL_FS_DIR"

stage "end-to-end tests (Debian's containerd 1.6)"
RUNTIME1_DIR="$TMP_DIR/runtime1"
SMALL_FS1_DIR="$TMP_DIR/small-fs1"
RKUBELET_RUNTIME=containerd1 RKUBELET_CNI_BRIDGE=rkbr-e2e1 RKUBELET_POD_SUBNET=10.95.0.0/16 \
  hack/containerd.sh start "$RUNTIME1_DIR" >/dev/null
RKUBELET_RUNTIME=containerd1 RKUBELET_IMAGE_FS_SIZE=64m RKUBELET_CNI_BRIDGE=rkbr-e2e1-gc \
  RKUBELET_POD_SUBNET=10.96.0.0/16 hack/containerd.sh start "$SMALL_FS1_DIR" >/dev/null
hack/images.sh "$RUNTIME1_DIR/containerd.sock"
hack/images.sh "$SMALL_FS1_DIR/containerd.sock"
e2e_tests "$RUNTIME1_DIR" "$SMALL_FS1_DIR"
hack/containerd.sh stop "$RUNTIME1_DIR"
hack/containerd.sh stop "$SMALL_FS1_DIR"
RUNTIME1_DIR=""
SMALL_FS1_DIR=""

stage "start a control plane"
K8S_BIN=$(hack/control-plane.sh build)
CLUSTER_DIR="$TMP_DIR/cluster"
RKUBELET_CLUSTER_DIR="$CLUSTER_DIR" \
  RKUBELET_APISERVER_PORT=$CLUSTER_APISERVER_PORT RKUBELET_ETCD_PORT=$CLUSTER_ETCD_PORT \
  hack/cluster.sh up "$CLUSTER_NODE"

stage "start metrics-server"
hack/control-plane.sh metrics-server >/dev/null
RKUBELET_CLUSTER_DIR="$CLUSTER_DIR" \
  RKUBELET_APISERVER_PORT=$CLUSTER_APISERVER_PORT RKUBELET_ETCD_PORT=$CLUSTER_ETCD_PORT \
  RKUBELET_METRICS_SERVER_PORT=$CLUSTER_METRICS_SERVER_PORT \
  hack/cluster.sh metrics-server

stage "start local-path-provisioner"
hack/control-plane.sh local-path-provisioner >/dev/null
RKUBELET_CLUSTER_DIR="$CLUSTER_DIR" \
  RKUBELET_APISERVER_PORT=$CLUSTER_APISERVER_PORT RKUBELET_ETCD_PORT=$CLUSTER_ETCD_PORT \
  hack/cluster.sh local-path

stage "build the CSI mock driver, external-provisioner, -attacher and -resizer, the sample device plugin and the DRA test driver"
SAMPLE_DEVICE_PLUGIN=$(hack/control-plane.sh sample-device-plugin)
DRA_TEST_DRIVER=$(hack/control-plane.sh dra-test-driver)
CSI_MOCK_PLUGIN=$(hack/control-plane.sh csi-mock-plugin)
CSI_PROVISIONER=$(hack/control-plane.sh csi-provisioner)
CSI_ATTACHER=$(hack/control-plane.sh csi-attacher)
CSI_RESIZER=$(hack/control-plane.sh csi-resizer)

stage "cluster tests"
KUBE_STATE_METRICS=$(hack/control-plane.sh kube-state-metrics)
RKUBELET_KUBE_STATE_METRICS="$KUBE_STATE_METRICS" \
  RKUBELET_CSI_MOCK_PLUGIN="$CSI_MOCK_PLUGIN" \
  RKUBELET_CSI_PROVISIONER="$CSI_PROVISIONER" \
  RKUBELET_CSI_ATTACHER="$CSI_ATTACHER" \
  RKUBELET_CSI_RESIZER="$CSI_RESIZER" \
  RKUBELET_SAMPLE_DEVICE_PLUGIN="$SAMPLE_DEVICE_PLUGIN" \
  RKUBELET_DRA_TEST_DRIVER="$DRA_TEST_DRIVER" \
  RKUBELET_CLUSTER_DIR="$CLUSTER_DIR" \
  RKUBELET_CLUSTER_NODE="$CLUSTER_NODE" \
  RKUBELET_KUBECTL="$K8S_BIN/kubectl" \
  RKUBELET_E2E_ENDPOINT="unix://$RUNTIME_DIR/containerd.sock" \
  RKUBELET_TEST_REGISTRY=$REGISTRY_ADDR \
  cargo test -p rkubelet --test cluster -- --ignored --test-threads=1

stage "conformance subset (hack/conformance/ci-subset.txt) on two nodes"
CONFORMANCE_UP=1
env "${MULTI_NODE_ENV[@]}" RKUBELET_CONFORMANCE_DIR="$TMP_DIR/conformance" \
  hack/conformance.sh --subset hack/conformance/ci-subset.txt --procs 4 --timeout 20m \
  --rkubelet "${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug/rkubelet" --keep

stage "multi-node tests"
RKUBELET_CLUSTER_DIR="$TMP_DIR/conformance/cluster" \
  RKUBELET_KUBECTL="$K8S_BIN/kubectl" \
  RKUBELET_NODES=rki-n1,rki-n2 \
  cargo test -p rkubelet --test multinode -- --ignored --test-threads=1

stage "the multi-node cluster down, nothing left behind"
env "${MULTI_NODE_ENV[@]}" RKUBELET_CONFORMANCE_DIR="$TMP_DIR/conformance" hack/conformance.sh --down
CONFORMANCE_UP=""
RKUBELET_CLUSTER_DIR="$TMP_DIR/conformance/cluster" RKUBELET_NET_TAG=rki \
  RKUBELET_NODE_NET=10.100.2.0/24 RKUBELET_POD_SUBNET=10.93.0.0/16 hack/nodes.sh check-clean

stage "done"
