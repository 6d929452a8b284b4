#!/usr/bin/env bash
# The main job: a one-node Kubernetes cluster whose node is rkubelet.
# Builds (or takes from the cache) the real control plane from the Go
# modules, starts it hardened on loopback, starts a private containerd, and
# runs rkubelet joined to the cluster in the background. Prints how to use
# kubectl with it. `hack/down.sh` stops everything and leaves nothing running.
#
#   hack/up.sh [--nodes N] [--upstream-nodes M]
#
# With --nodes N (and --upstream-nodes M: M more nodes running the upstream
# kubelet v1.37.2 beside them), a cluster of N+M nodes instead
# (hack/nodes.sh): each in a network namespace of its own with its own
# containerd, kubelet and kube-proxy, pod subnets routed between them, and
# CoreDNS as the cluster DNS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

NODES=""
UPSTREAM_NODES=0
while (($#)); do
  case $1 in
  --nodes) NODES=${2:?--nodes needs a count}; shift 2 ;;
  --upstream-nodes) UPSTREAM_NODES=${2:?--upstream-nodes needs a count}; shift 2 ;;
  *) echo "usage: $0 [--nodes N] [--upstream-nodes M]" >&2; exit 2 ;;
  esac
done
[[ -z $NODES || $NODES =~ ^[0-9]+$ ]] && [[ $UPSTREAM_NODES =~ ^[0-9]+$ ]] ||
  { echo "up.sh: error: --nodes and --upstream-nodes take a count" >&2; exit 2; }
if [[ -z $NODES && $UPSTREAM_NODES -gt 0 ]]; then NODES=0; fi

export RKUBELET_CLUSTER_DIR=${RKUBELET_CLUSTER_DIR:-/tmp/rkubelet-cluster}
export RKUBELET_RUNTIME_DIR=${RKUBELET_RUNTIME_DIR:-$RKUBELET_CLUSTER_DIR/runtime}
node=${RKUBELET_NODE:-$(hostname | tr 'A-Z' 'a-z')}
state=$RKUBELET_CLUSTER_DIR/node

echo "==> installing system packages"
hack/install-deps.sh
echo "==> building rkubelet (release)"
cargo build --release -q -p rkubelet
echo "==> control plane binaries (built from Go modules once, then cached)"
bin=$(hack/control-plane.sh build)
kubectl=("$bin/kubectl" --kubeconfig "$RKUBELET_CLUSTER_DIR/admin.conf")
show_cluster() {
  "${kubectl[@]}" get nodes -o wide
  echo
  "${kubectl[@]}" get pods -A -o wide
}

if [[ -n $NODES ]]; then
  kinds=()
  for ((i = 0; i < NODES; i++)); do kinds+=(rkubelet); done
  for ((i = 0; i < UPSTREAM_NODES; i++)); do kinds+=(upstream); done
  ((${#kinds[@]})) || { echo "up.sh: error: no nodes asked for" >&2; exit 2; }
  echo "==> starting the control plane and ${#kinds[@]} nodes (${kinds[*]}), kube-proxy and CoreDNS"
  RKUBELET_BIN=$PWD/target/release/rkubelet hack/nodes.sh up "${kinds[@]}"
  echo "==> starting metrics-server (kubectl top)"
  hack/nodes.sh metrics-server >/dev/null
  show_cluster
  cat <<INFO

The cluster is up; its nodes run in network namespaces pinned under
$RKUBELET_CLUSTER_DIR/nodes/<node>/ (logs there too). Use it with:
  export KUBECONFIG=$RKUBELET_CLUSTER_DIR/admin.conf PATH=$bin:\$PATH
  kubectl create deployment web --image=rkubelet.test/busybox:1 --replicas=4 -- httpd -f -p 8080
  kubectl expose deployment web --port=80 --target-port=8080
  kubectl run client --rm -it --image=rkubelet.test/busybox:1 -- wget -qO- http://web
Stop everything: hack/down.sh
INFO
  exit 0
fi

echo "==> starting the control plane"
hack/cluster.sh up "$node" >/dev/null
echo "==> starting a private containerd"
eval "$(hack/containerd.sh start)"
hack/images.sh

mkdir -p "$state/manifests" "$state/root" "$state/logs"
cp -n examples/static-pods/web.yaml "$state/manifests/" 2>/dev/null || true
# The images here are imported, not pullable: image GC must not remove them,
# nor the eviction manager's disk reclaim (the disk of these machines looks
# more than 85 % full to statvfs): thresholds of 1 %, as hack/conformance.sh
# gives both kubelets. These machines are cgroup v1 hosts, which upstream's
# default (failCgroupV1: true) refuses.
cat >"$state/kubelet-config.yaml" <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
staticPodPath: $state/manifests
containerRuntimeEndpoint: $CONTAINER_RUNTIME_ENDPOINT
podLogsDir: $state/logs
rotateCertificates: true
podPidsLimit: 4096
seccompDefault: true
authentication:
  x509:
    clientCAFile: $RKUBELET_CLUSTER_DIR/pki/ca.crt
CFG
if [[ -f $state/rkubelet.pid ]] && kill -0 "$(cat "$state/rkubelet.pid")" 2>/dev/null; then
  echo "==> rkubelet already running"
else
  echo "==> starting rkubelet as node $node (log: $state/rkubelet.log)"
  setsid target/release/rkubelet --config "$state/kubelet-config.yaml" --root-dir "$state/root" \
    --cert-dir "$state/root/pki" --kubeconfig "$RKUBELET_CLUSTER_DIR/kubelet-$node.conf" --hostname-override "$node" \
    >"$state/rkubelet.log" 2>&1 </dev/null &
  echo $! >"$state/rkubelet.pid"
fi

for _ in $(seq 1 60); do
  [[ $("${kubectl[@]}" get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]] && break
  sleep 0.5
done
echo "==> starting metrics-server (kubectl top)"
hack/cluster.sh metrics-server >/dev/null
echo "==> starting local-path-provisioner (StorageClass local-path, the default)"
hack/cluster.sh local-path >/dev/null
show_cluster
cat <<INFO

The cluster is up; its node is rkubelet. Use it with:
  export KUBECONFIG=$RKUBELET_CLUSTER_DIR/admin.conf PATH=$bin:\$PATH
  kubectl create deployment web --image=rkubelet.test/busybox:1 --replicas=3 -- sh -c 'trap "exit 0" TERM; sleep 3600 & wait'
  kubectl get pods -o wide
  kubectl logs <pod>; kubectl exec -it <pod> -- sh; kubectl top pod
Static pods: $state/manifests (they appear in the API as mirror pods).
Stop everything: hack/down.sh
INFO
