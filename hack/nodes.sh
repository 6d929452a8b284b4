#!/usr/bin/env bash
# A cluster of several nodes on one machine: the control plane of
# hack/cluster.sh on a host bridge, and per node a network namespace of its
# own with its own containerd, kubelet (rkubelet or the upstream kubelet
# v1.37.2) and kube-proxy, pod subnets routed between the nodes, and CoreDNS
# as the cluster DNS.
#
#   hack/nodes.sh up KIND...     one node per KIND (rkubelet | upstream),
#                                named ${TAG}-n1, ${TAG}-n2, ...; waits until
#                                every node is Ready and CoreDNS is available
#   hack/nodes.sh down           stop every node and the control plane, remove
#                                the namespaces, bridges, routes, cgroups and
#                                state (safe to repeat, and after a crash)
#   hack/nodes.sh metrics-server hack/cluster.sh metrics-server, reached by the
#                                API server on the host bridge
#   hack/nodes.sh check-clean    fail, naming it, on anything `down` leaves:
#                                a process, mount, interface, route, iptables
#                                rule, cgroup or CNI cache entry of the cluster
#
# Environment (defaults for hack/up.sh --nodes N; hack/conformance.sh and
# hack/test.sh set others, so their clusters and a developer's coexist):
#   RKUBELET_CLUSTER_DIR     state: the control plane's, nodes/<name>/ per node
#                            (default /tmp/rkubelet-cluster)
#   RKUBELET_NET_TAG         prefix of every name: nodes, interfaces, cgroup
#                            roots (2-5 of [a-z0-9], default rk)
#   RKUBELET_NODE_NET        the host bridge's /24: the API server on .1, node
#                            i on .(10+i) (default 10.100.0.0/24)
#   RKUBELET_POD_SUBNET      the cluster's pod /16: node i gets x.y.i.0/24
#                            (default 10.88.0.0/16)
#   RKUBELET_APISERVER_PORT, RKUBELET_ETCD_PORT    as hack/cluster.sh
#   RKUBELET_BIN             the rkubelet binary (default target/release/rkubelet)
#   RKUBELET_SANDBOX_IMAGE   as hack/containerd.sh
#   RKUBELET_NODE_IMAGES     "e2e" also imports hack/e2e-images.sh's images,
#                            and serves them from a registry.k8s.io mirror
#                            (hack/registry.sh mirror) on the host bridge's
#                            .1:5000, which every node's containerd pulls
#                            registry.k8s.io images from (imagePullPolicy:
#                            Always)
#   RKUBELET_PROXY_MODE      kube-proxy's mode: iptables, or nftables (default
#                            nftables when Debian's nft is installed)
#
# Layout. Node i's network namespace is pinned at nodes/<name>/netns (a bind
# mount of nsfs, not `ip netns add`, whose /run/netns mount outlives it);
# processes enter it with `nsenter --net` only, never a mount namespace of
# their own, so the kubelet's volume mounts are the ones containerd and runc
# see. A veth joins it to the host bridge ${TAG}-br; inside, a CNI bridge
# ${TAG}-cni<i> (no masquerade: pods reach pods on other nodes by their own
# addresses) and a route to every other node's pod subnet; on the host, a
# route to every pod subnet, so the API server (webhooks, aggregated APIs,
# the proxy subresource) and e2e.test reach pods. Nothing leaves the machine:
# pods have no route off it, and CoreDNS answers cluster names only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$PWD
PROG=${0##*/}

die() { echo "$PROG: error: $*" >&2; exit 1; }
warn() { echo "$PROG: warning: $*" >&2; }
# shellcheck source=lib/mounts.sh
. hack/lib/mounts.sh
# shellcheck source=lib/process.sh
. hack/lib/process.sh

export RKUBELET_CLUSTER_DIR=${RKUBELET_CLUSTER_DIR:-/tmp/rkubelet-cluster}
DIR=$RKUBELET_CLUSTER_DIR
NODES_DIR=$DIR/nodes
TAG=${RKUBELET_NET_TAG:-rk}
[[ $TAG =~ ^[a-z][a-z0-9]{1,4}$ ]] || die "RKUBELET_NET_TAG '$TAG' must be 2-5 of [a-z0-9], a letter first"
NODE_NET=${RKUBELET_NODE_NET:-10.100.0.0/24}
[[ $NODE_NET =~ ^([0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3})\.0/24$ ]] || die "RKUBELET_NODE_NET '$NODE_NET' must be a /24 like 10.100.0.0/24"
NODE_PREFIX=${BASH_REMATCH[1]}
POD_SUBNET=${RKUBELET_POD_SUBNET:-10.88.0.0/16}
[[ $POD_SUBNET =~ ^([0-9]{1,3}\.[0-9]{1,3})\.0\.0/16$ ]] || die "RKUBELET_POD_SUBNET '$POD_SUBNET' must be a /16 like 10.88.0.0/16"
POD_PREFIX=${BASH_REMATCH[1]}
export RKUBELET_APISERVER_HOST=$NODE_PREFIX.1
HOST_BRIDGE=$TAG-br
# kubeadm's: the tenth address of the service range (hack/cluster.sh's 10.0.0.0/24).
CLUSTER_DNS=10.0.0.10
CLUSTER_DOMAIN=cluster.local
RKUBELET_BIN=${RKUBELET_BIN:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/rkubelet}
E2E_MIRROR=""
[[ ${RKUBELET_NODE_IMAGES:-} == e2e ]] && E2E_MIRROR=$RKUBELET_APISERVER_HOST:5000

node_name() { echo "$TAG-n$1"; }
node_ip() { echo "$NODE_PREFIX.$((10 + $1))"; }
pod_cidr() { echo "$POD_PREFIX.$1.0/24"; }

# in_node DIR CMD...: CMD in the node's network namespace (and nothing else).
in_node() {
  local nd=$1
  shift
  nsenter --net="$nd/netns" -- "$@"
}

alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# start_in NODE_DIR NAME CMD...: CMD in the background, in its own session,
# in the node's namespace; its pid in NODE_DIR/NAME.pid, log NODE_DIR/NAME.log.
start_in() {
  local nd=$1 name=$2
  shift 2
  alive "$nd/$name.pid" && return
  nsenter --net="$nd/netns" -- setsid "$@" >"$nd/$name.log" 2>&1 </dev/null &
  echo $! >"$nd/$name.pid"
}

# The cgroup hierarchies' mount points (v1: one per controller set; v2: one).
cgroup_mounts() { awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/mounts | sort -u; }

host_bridge() {
  if ! ip link show "$HOST_BRIDGE" >/dev/null 2>&1; then
    ip link add "$HOST_BRIDGE" type bridge
    ip addr add "$RKUBELET_APISERVER_HOST/24" dev "$HOST_BRIDGE"
  fi
  ip link set "$HOST_BRIDGE" up
}

# net_up I COUNT: node I's namespace, veth, addresses and routes.
net_up() {
  local i=$1 count=$2 nd name ip j
  name=$(node_name "$i")
  nd=$NODES_DIR/$name
  ip=$(node_ip "$i")
  mkdir -p "$nd"
  if ! mountpoint -q "$nd/netns"; then
    touch "$nd/netns"
    unshare --net="$nd/netns" true
  fi
  if ! ip link show "$TAG-v$i" >/dev/null 2>&1; then
    ip link add "$TAG-v$i" type veth peer name eth0 netns "$nd/netns"
  fi
  ip link set "$TAG-v$i" master "$HOST_BRIDGE" up
  in_node "$nd" sh -euc "
    ip link set lo up
    ip addr replace $ip/24 dev eth0
    ip link set eth0 up
    ip route replace default via $RKUBELET_APISERVER_HOST"
  ip route replace "$(pod_cidr "$i")" via "$ip"
  for ((j = 1; j <= count; j++)); do
    ((j == i)) || in_node "$nd" ip route replace "$(pod_cidr "$j")" via "$(node_ip "$j")"
  done
  local m
  for m in $(cgroup_mounts); do mkdir -p "$m/$name"; done
}

# kubelet_config I KIND: node I's KubeletConfiguration.
kubelet_config() {
  local i=$1 kind=$2 nd name
  name=$(node_name "$i")
  nd=$NODES_DIR/$name
  # The images are imported, not pullable: neither image GC nor the eviction
  # manager's disk reclaim may remove them (the disk of these machines looks
  # more than 85 % full to statvfs, and a CI machine's was once over 99 %):
  # no disk thresholds (0 % turns one off, in both kubelets).
  cat <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "1Mi", nodefs.available: "0%", imagefs.available: "0%", nodefs.inodesFree: "0%"}
containerRuntimeEndpoint: unix://$nd/runtime/containerd.sock
staticPodPath: $nd/manifests
podLogsDir: $nd/logs
clusterDNS: [$CLUSTER_DNS]
clusterDomain: $CLUSTER_DOMAIN
CFG
  # RKUBELET_FEATURE_GATES (A=true,B=false), as hack/cluster.sh gives them to
  # the API server
  if [[ -n ${RKUBELET_FEATURE_GATES:-} ]]; then
    echo "featureGates:"
    local gate
    for gate in ${RKUBELET_FEATURE_GATES//,/ }; do
      echo "  ${gate%%=*}: ${gate#*=}"
    done
  fi
  if [[ $kind == rkubelet ]]; then
    # These machines are cgroup v1 hosts, which failCgroupV1's default
    # (true, as upstream's) refuses.
    cat <<CFG
failCgroupV1: false
cgroupRoot: /$name
authentication:
  x509:
    clientCAFile: $DIR/pki/ca.crt
CFG
  else
    # As a node runs it: pod cgroups (cgroupsPerQOS) under a cgroup root of
    # its own, so that it never takes another node's for orphans (cgroup v1,
    # no systemd here: cgroupfs). Without pod cgroups it panics on an
    # in-place resize (kuberuntime's doPodResizeAction reads the pod
    # cgroup's memory limit).
    cat <<CFG
imageGCLowThresholdPercent: 99
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$name
failSwapOn: false
localStorageCapacityIsolation: false
resolvConf: /etc/resolv.conf
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $DIR/pki/ca.crt}
authorization: {mode: Webhook}
CFG
  fi
}

proxy_mode() {
  local mode=${RKUBELET_PROXY_MODE:-}
  if [[ -z $mode ]]; then
    mode=iptables
    command -v nft >/dev/null 2>&1 && mode=nftables
  fi
  [[ $mode == iptables || $mode == nftables ]] || die "RKUBELET_PROXY_MODE '$mode' must be iptables or nftables"
  echo "$mode"
}

# kube-proxy's configuration. The conntrack sysctls are global, not writable
# from a network namespace: zero leaves them alone (as kind runs it).
proxy_config() {
  local i=$1 mode=$2
  cat <<CFG
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $DIR/kube-proxy.conf}
hostnameOverride: $(node_name "$i")
mode: $mode
clusterCIDR: $POD_SUBNET
detectLocalMode: ClusterCIDR
nodePortAddresses: [primary]
healthzBindAddress: 0.0.0.0:10256
metricsBindAddress: 127.0.0.1:10249
oomScoreAdj: 0
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {minSyncPeriod: 1s, syncPeriod: 30s}
nftables: {minSyncPeriod: 1s, syncPeriod: 30s}
CFG
}

# node_up I KIND COUNT BIN
node_up() {
  local i=$1 kind=$2 count=$3 bin=$4 nd name
  name=$(node_name "$i")
  nd=$NODES_DIR/$name
  net_up "$i" "$count"
  mkdir -p "$nd/root" "$nd/logs" "$nd/manifests"
  in_node "$nd" env RKUBELET_CNI_BRIDGE="$TAG-cni$i" RKUBELET_POD_SUBNET="$(pod_cidr "$i")" \
    RKUBELET_CNI_IPMASQ=false RKUBELET_REGISTRY_MIRROR="${E2E_MIRROR:+registry.k8s.io=$E2E_MIRROR}" \
    RKUBELET_CDI_SPEC_DIRS=/var/run/cdi hack/containerd.sh start "$nd/runtime" >/dev/null
  hack/images.sh "$nd/runtime/containerd.sock" >/dev/null
  [[ -z $E2E_MIRROR ]] || hack/e2e-images.sh "$nd/runtime/containerd.sock" >/dev/null
  hack/addon-images.sh "$nd/runtime/containerd.sock" >/dev/null
  kubelet_config "$i" "$kind" >"$nd/kubelet-config.yaml"
  local kubelet=$RKUBELET_BIN
  [[ $kind == upstream ]] && kubelet=$bin/kubelet
  [[ -x $kubelet ]] || die "no kubelet binary at $kubelet"
  start_in "$nd" kubelet "$kubelet" --config "$nd/kubelet-config.yaml" --root-dir "$nd/root" \
    --cert-dir "$nd/root/pki" --kubeconfig "$DIR/kubelet-$name.conf" --hostname-override "$name" --node-ip "$(node_ip "$i")"
  proxy_config "$i" "$(proxy_mode)" >"$nd/kube-proxy.yaml"
  start_in "$nd" kube-proxy "$bin/kube-proxy" --config "$nd/kube-proxy.yaml"
}

# wait_until WHAT SECONDS CMD...
wait_until() {
  local what=$1 secs=$2
  shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "$what: not after ${secs} s (logs in $NODES_DIR/*/)"
    sleep 0.5
  done
}

node_ready() {
  [[ $("${kubectl[@]}" get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

cmd_up() {
  (($#)) || die "usage: $PROG up KIND... (rkubelet | upstream)"
  local kind names=() bin i=0
  for kind in "$@"; do
    [[ $kind == rkubelet || $kind == upstream ]] || die "node kind '$kind' must be rkubelet or upstream"
    i=$((i + 1))
    names+=("$(node_name "$i")")
  done
  [[ $(id -u) -eq 0 ]] || die "nodes need root (network namespaces, containerd)"
  bin=$(hack/control-plane.sh build)
  # containerd 2 is built here, where the Go module proxy is reachable, not
  # in a node's network namespace
  [[ ${RKUBELET_RUNTIME:-containerd2} == containerd1 ]] || hack/control-plane.sh runtime2 >/dev/null
  host_bridge
  [[ -z $E2E_MIRROR ]] || hack/registry.sh mirror "$DIR/registry" "$E2E_MIRROR" >/dev/null
  hack/cluster.sh up "${names[@]}" >/dev/null
  kubectl=("$bin/kubectl" --kubeconfig "$DIR/admin.conf")
  i=0
  for kind in "$@"; do
    i=$((i + 1))
    node_up "$i" "$kind" "$#" "$bin"
  done
  local name nd
  for name in "${names[@]}"; do
    nd=$NODES_DIR/$name
    wait_until "node $name Ready" 120 node_ready "$name"
    alive "$nd/kube-proxy.pid" || { tail -5 "$nd/kube-proxy.log" >&2; die "kube-proxy of $name exited"; }
  done
  "${kubectl[@]}" apply -f hack/addons/coredns.yaml >/dev/null
  wait_until "CoreDNS available" 120 "${kubectl[@]}" -n kube-system wait --for=condition=Available deployment/coredns --timeout=1s
}

# Down in phases, so that each step finds what it cleans and no connection
# is left with its peer gone: every node's kube-proxy and kubelet first, then
# every containerd (its network cleanup runs in the node's namespace, before
# the pin that keeps it goes), then what is left of each namespace: its
# sockets (closed ones wait for a peer that is gone, and keep the namespace
# alive for minutes), the veth (both ends go at once), the pin, the mounts.
cmd_down() {
  local nds=() nd name m i
  for nd in "$NODES_DIR"/*/; do [[ -d $nd ]] && nds+=("${nd%/}"); done
  for nd in ${nds[@]+"${nds[@]}"}; do
    stop_pidfile "$nd/kube-proxy.pid"
    stop_pidfile "$nd/kubelet.pid"
  done
  for nd in ${nds[@]+"${nds[@]}"}; do
    [[ -d $nd/runtime ]] || continue
    if mountpoint -q "$nd/netns"; then
      in_node "$nd" hack/containerd.sh stop "$nd/runtime" || warn "stopping containerd of ${nd##*/} failed"
    else
      hack/containerd.sh stop "$nd/runtime" || warn "stopping containerd of ${nd##*/} failed"
    fi
  done
  for nd in ${nds[@]+"${nds[@]}"}; do
    name=${nd##*/}
    i=${name##*-n}
    mountpoint -q "$nd/netns" && in_node "$nd" ss -K -a >/dev/null 2>&1
    if ip link show "$TAG-v$i" >/dev/null 2>&1; then
      ip link delete "$TAG-v$i" || warn "could not delete $TAG-v$i"
    fi
    unmount_under "$nd" || true
    for m in $(cgroup_mounts); do
      [[ -d $m/$name ]] && find "$m/$name" -depth -type d -exec rmdir {} + 2>/dev/null
      [[ -d $m/$name ]] && warn "cgroup $m/$name remains"
    done
  done
  hack/registry.sh stop "$DIR/registry"
  # The host's routes to the pod subnets go with the bridge.
  if ip link show "$HOST_BRIDGE" >/dev/null 2>&1; then
    ip link delete "$HOST_BRIDGE" || warn "could not delete bridge $HOST_BRIDGE"
  fi
  CLEAN=1 hack/cluster.sh down >/dev/null
}

cmd_check_clean() {
  local found=() p c m
  for p in /proc/[0-9]*; do
    c=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
    [[ $c == *"$DIR/"* ]] && found+=("process ${p#/proc/}: $c")
  done
  while read -r m; do found+=("mount $m"); done < <(awk -v d="$DIR" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/mounts)
  while read -r m; do found+=("interface ${m%@*}"); done < <(ip -o link show | awk -F': ' -v t="$TAG-" 'index($2, t) == 1 { print $2 }')
  while read -r m; do found+=("route $m"); done < <(ip route show | grep -E "^($POD_PREFIX|$NODE_PREFIX)\." || true)
  for m in $(cgroup_mounts); do
    for c in "$m/$TAG"-n*; do [[ -d $c ]] && found+=("cgroup $c"); done
  done
  for c in /var/lib/cni/results/rkubelet-"$TAG"-*; do [[ -e $c ]] && found+=("CNI cache $c"); done
  if command -v iptables-save >/dev/null 2>&1; then
    while read -r m; do found+=("iptables: $m"); done < <(iptables-save 2>/dev/null | grep -E "$TAG-|$POD_PREFIX\.|$NODE_PREFIX\." || true)
  fi
  ((${#found[@]} == 0)) && return 0
  echo "$PROG: left behind:" >&2
  printf '  %s\n' "${found[@]}" >&2
  return 1
}

case ${1:-} in
up) shift; cmd_up "$@" ;;
down) cmd_down ;;
check-clean) cmd_check_clean ;;
metrics-server) hack/cluster.sh metrics-server ;;
*) die "usage: $PROG up KIND...|down|metrics-server|check-clean" ;;
esac
