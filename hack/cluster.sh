#!/usr/bin/env bash
# A real Kubernetes control plane, hardened as a real cluster runs:
# anonymous auth off, --authorization-mode=Node,RBAC, NodeRestriction
# admission, TLS everywhere but etcd (loopback only).
#
#   hack/cluster.sh up [NODE...]  certs, kubeconfigs (one per node, and
#                                 kube-proxy's), etcd, kube-apiserver,
#                                 kube-controller-manager, kube-scheduler
#   hack/cluster.sh metrics-server
#                                 start metrics-server (hack/control-plane.sh
#                                 metrics-server) on the node IP, port
#                                 ${RKUBELET_METRICS_SERVER_PORT:-4443}, and register
#                                 it as v1beta1.metrics.k8s.io (kubectl top)
#   hack/cluster.sh local-path    start rancher's local-path-provisioner
#                                 (hack/control-plane.sh local-path-provisioner)
#                                 on the host with its upstream manifest's
#                                 namespace, RBAC-free service account,
#                                 ConfigMap (volumes under $DIR/local-path,
#                                 helper pods of $HELPER_IMAGE) and the
#                                 default StorageClass `local-path`
#                                 (WaitForFirstConsumer, reclaim Delete)
#   hack/cluster.sh bootstrap-token NODE
#                                 a bootstrap token as kubeadm makes one (the
#                                 kube-system/bootstrap-token-<id> Secret, 24 h,
#                                 group system:bootstrappers:kubeadm:default-node-token,
#                                 and kubeadm's three ClusterRoleBindings: CSR
#                                 creation, auto-approval of the first client
#                                 certificate and of its renewals); prints the
#                                 path of $DIR/bootstrap-kubelet-NODE.conf
#   hack/cluster.sh down          stop them all (state dir kept unless CLEAN=1)
#   hack/cluster.sh env           print KUBECONFIG and PATH exports
#
# State lives in ${RKUBELET_CLUSTER_DIR:-/tmp/rkubelet-cluster}; binaries come
# from hack/control-plane.sh build (cached by version).
#
# The API server listens on ${RKUBELET_APISERVER_HOST:-127.0.0.1}. On loopback
# (one node on the host) the `kubernetes` Service has no endpoint, as none can
# be a loopback address. On another address (the host bridge of hack/nodes.sh,
# which nodes in network namespaces of their own reach) it is in the
# certificate's SANs and every kubeconfig, and the API server's lease
# reconciler gives the `kubernetes` Service that address as its endpoint.
#
# RKUBELET_AUDIT=1 (opt-in, for hack/bench-cluster.sh): the API server writes
# an audit log, $DIR/audit.log (JSON lines), of every request made by a node
# (group system:nodes, level Metadata; the RequestReceived stage is omitted,
# so a request is one line, a watch two) and of nothing else.
#
# RKUBELET_FEATURE_GATES (e.g. ContainerStopSignals=true; default none): the
# API server's --feature-gates, for specs of an alpha feature (hack/nodes.sh
# gives the kubelets the same gates).
#
# RKUBELET_SIGNING_DURATION (default 8760h, upstream's): the life of the
# certificates the controller manager signs (--cluster-signing-duration; the
# signer's floor is 10m), so a test sees client certificates rotate.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$PWD

DIR=${RKUBELET_CLUSTER_DIR:-/tmp/rkubelet-cluster}
PKI=$DIR/pki
APISERVER_HOST=${RKUBELET_APISERVER_HOST:-127.0.0.1}
APISERVER_PORT=${RKUBELET_APISERVER_PORT:-6443}
ETCD_PORT=${RKUBELET_ETCD_PORT:-2379}
SERVICE_CIDR=10.0.0.0/24
METRICS_SERVER_PORT=${RKUBELET_METRICS_SERVER_PORT:-4443}
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler metrics-server local-path-provisioner)
# The image local-path-provisioner's helper pods run (hack/images.sh makes it).
HELPER_IMAGE=${RKUBELET_HELPER_IMAGE:-rkubelet.test/busybox:1}

die() { echo "cluster.sh: error: $*" >&2; exit 1; }
# shellcheck source=lib/process.sh
. "$REPO_ROOT/hack/lib/process.sh"

bin_dir() { "$REPO_ROOT/hack/control-plane.sh" build; }

# cert NAME CN [O] [SANS]: a key and a certificate signed by the cluster CA
# (kept while its SANs stay the same).
cert() {
  local name=$1 cn=$2 org=${3:-} sans=${4:-}
  [[ -f $PKI/$name.crt && $(cat "$PKI/$name.sans" 2>/dev/null) == "$sans" ]] && return
  echo "$sans" >"$PKI/$name.sans"
  local subj="/CN=$cn"
  [[ -n $org ]] && subj="/O=$org$subj"
  openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  local ext="$PKI/$name.ext"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [[ -n $sans ]]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$sans"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 365 -sha256 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$ext"
}

# kubeconfig NAME CERT: a kubeconfig using client certificate CERT.
kubeconfig() {
  local name=$1 cert=$2
  cat >"$DIR/$name.conf" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: rkubelet
  cluster:
    server: https://$APISERVER_HOST:$APISERVER_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $name
  user:
    client-certificate: $PKI/$cert.crt
    client-key: $PKI/$cert.key
contexts:
- name: $name
  context: {cluster: rkubelet, user: $name}
current-context: $name
EOF
}

pki() {
  mkdir -p "$PKI"
  if [[ ! -f $PKI/ca.crt ]]; then
    openssl genrsa -out "$PKI/ca.key" 2048 2>/dev/null
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=rkubelet-ca" -days 365 -sha256 \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
      -out "$PKI/ca.crt" 2>/dev/null
  fi
  local host_san=""
  [[ $APISERVER_HOST == 127.0.0.1 ]] || host_san=",IP:$APISERVER_HOST"
  cert apiserver kube-apiserver "" \
    "IP:127.0.0.1,IP:10.0.0.1$host_san,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin kubernetes-admin system:masters
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  # The aggregation layer's client (API server -> metrics-server), allowed by
  # name only (--requestheader-allowed-names) though signed by the same CA.
  cert front-proxy-client front-proxy-client
  cert controller-manager system:kube-controller-manager
  cert scheduler system:kube-scheduler
  # kube-proxy's user, bound to system:node-proxier by the API server's
  # bootstrap policy.
  cert kube-proxy system:kube-proxy
  local node
  for node in "$@"; do
    cert "node-$node" "system:node:$node" system:nodes
    kubeconfig "kubelet-$node" "node-$node"
  done
  cert "node-other" "system:node:other-node" system:nodes
  [[ -f $PKI/sa.key ]] || openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  [[ -f $PKI/sa.pub ]] || openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  kubeconfig admin admin
  kubeconfig controller-manager controller-manager
  kubeconfig scheduler scheduler
  kubeconfig kube-proxy kube-proxy
  kubeconfig kubelet-other node-other
}

# Alive and not a zombie (PID 1 here may reap late).
running() {
  local pid
  [[ -f $DIR/$1.pid ]] || return 1
  pid=$(cat "$DIR/$1.pid")
  [[ -r /proc/$pid/stat ]] && [[ $(cut -d' ' -f3 "/proc/$pid/stat") != Z ]]
}

start() {
  local name=$1; shift
  running "$name" && return
  setsid "$@" >"$DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$DIR/$name.pid"
}

wait_for() {
  local what=$1; shift
  for _ in $(seq 1 120); do
    "$@" >/dev/null 2>&1 && return
    sleep 0.5
  done
  die "$what did not come up; see $DIR/*.log"
}

up() {
  local nodes=("$@") bin
  ((${#nodes[@]})) || nodes=("$(hostname | tr 'A-Z' 'a-z')")
  bin=$(bin_dir)
  mkdir -p "$DIR"
  pki "${nodes[@]}"
  local audit=()
  if [[ ${RKUBELET_AUDIT:-0} == 1 ]]; then
    cat >"$DIR/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  userGroups: ["system:nodes"]
- level: None
EOF
    audit=(--audit-policy-file "$DIR/audit-policy.yaml" --audit-log-path "$DIR/audit.log"
      --audit-log-mode blocking --audit-log-format json)
  fi
  start etcd "$bin/etcd" --name rkubelet --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls http://127.0.0.1:0 --log-level warn
  local reconciler=(--endpoint-reconciler-type=none) gates=()
  [[ -z ${RKUBELET_FEATURE_GATES:-} ]] || gates=(--feature-gates "$RKUBELET_FEATURE_GATES")
  [[ $APISERVER_HOST == 127.0.0.1 ]] || reconciler=()
  start kube-apiserver "$bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address "$APISERVER_HOST" --advertise-address "$APISERVER_HOST" --secure-port "$APISERVER_PORT" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP,Hostname \
    --requestheader-client-ca-file "$PKI/ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --enable-aggregator-routing=true \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range "$SERVICE_CIDR" ${reconciler[@]+"${reconciler[@]}"} \
    --anonymous-auth=false --authorization-mode=Node,RBAC --enable-bootstrap-token-auth=true \
    --enable-admission-plugins=NodeRestriction --allow-privileged=true ${audit[@]+"${audit[@]}"} \
    ${gates[@]+"${gates[@]}"}
  local kubectl=("$bin/kubectl" --kubeconfig "$DIR/admin.conf")
  wait_for kube-apiserver "${kubectl[@]}" get --raw /readyz
  start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig "$DIR/controller-manager.conf" \
    --authentication-kubeconfig "$DIR/controller-manager.conf" \
    --authorization-kubeconfig "$DIR/controller-manager.conf" \
    --secure-port 0 --leader-elect=false \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --cluster-signing-duration "${RKUBELET_SIGNING_DURATION:-8760h}" \
    --use-service-account-credentials=true --service-cluster-ip-range "$SERVICE_CIDR"
  start kube-scheduler "$bin/kube-scheduler" \
    --kubeconfig "$DIR/scheduler.conf" \
    --authentication-kubeconfig "$DIR/scheduler.conf" \
    --authorization-kubeconfig "$DIR/scheduler.conf" \
    --secure-port 0 --leader-elect=false
  wait_for "the default service account" "${kubectl[@]}" get serviceaccount default -n default
  cat <<EOF
control plane up (state in $DIR); use it with:
  export KUBECONFIG=$DIR/admin.conf PATH=$bin:\$PATH
nodes (${nodes[*]}): kubeconfigs $DIR/kubelet-<node>.conf
EOF
}

# bootstrap_token NODE: a token, its Secret and kubeadm's bindings, and the
# bootstrap kubeconfig a node joins with (kubeadm's user name for it).
bootstrap_token() {
  local node=${1:?usage: bootstrap-token NODE} id secret expiration random
  local kubectl=("$(bin_dir)/kubectl" --kubeconfig "$DIR/admin.conf")
  # [a-z0-9]{6}.[a-z0-9]{16}, as kubeadm's tokens.
  random=$(head -c 4096 /dev/urandom | LC_ALL=C tr -dc 'a-z0-9')
  id=${random:0:6}
  secret=${random:6:16}
  expiration=$(date -u -d '+24 hours' +%Y-%m-%dT%H:%M:%SZ)
  local group=system:bootstrappers:kubeadm:default-node-token server
  # The API server as the admin kubeconfig names it (so a test that knows
  # only the state directory gets the right port).
  server=$("${kubectl[@]}" config view --minify -o 'jsonpath={.clusters[0].cluster.server}')
  # kubeadm's bindings: the group may create CSRs, its first client
  # certificate is approved, and so are every node's renewals.
  local bindings="" b name role subject
  for b in "kubeadm:kubelet-bootstrap system:node-bootstrapper $group" \
    "kubeadm:node-autoapprove-bootstrap system:certificates.k8s.io:certificatesigningrequests:nodeclient $group" \
    "kubeadm:node-autoapprove-certificate-rotation system:certificates.k8s.io:certificatesigningrequests:selfnodeclient system:nodes"; do
    read -r name role subject <<<"$b"
    bindings+="---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: \"$name\"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: \"$role\"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: \"$subject\"}]
"
  done
  "${kubectl[@]}" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Secret
metadata: {name: bootstrap-token-$id, namespace: kube-system}
type: bootstrap.kubernetes.io/token
stringData:
  description: "rkubelet hack/cluster.sh bootstrap token for $node"
  token-id: "$id"
  token-secret: "$secret"
  expiration: "$expiration"
  usage-bootstrap-authentication: "true"
  usage-bootstrap-signing: "true"
  auth-extra-groups: "$group"
${bindings}
EOF
  cat >"$DIR/bootstrap-kubelet-$node.conf" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster:
    server: $server
    certificate-authority: $PKI/ca.crt
users:
- name: tls-bootstrap-token-user
  user:
    token: $id.$secret
contexts:
- name: tls-bootstrap-token-user@kubernetes
  context: {cluster: kubernetes, user: tls-bootstrap-token-user}
current-context: tls-bootstrap-token-user@kubernetes
EOF
  chmod 600 "$DIR/bootstrap-kubelet-$node.conf"
  echo "$DIR/bootstrap-kubelet-$node.conf"
}

# The address metrics-server is reached at: the API server's when that is not
# loopback (the host bridge of hack/nodes.sh), else the source of the default
# route (what a node on the host reports as InternalIP); endpoints cannot be
# loopback addresses.
node_ip() {
  [[ $APISERVER_HOST == 127.0.0.1 ]] || { echo "$APISERVER_HOST"; return; }
  ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") { print $(i + 1); exit }}'
}

metrics_server() {
  local ms ip kubectl=("$(bin_dir)/kubectl" --kubeconfig "$DIR/admin.conf")
  ms=$("$REPO_ROOT/hack/control-plane.sh" metrics-server)
  ip=$(node_ip)
  [[ -n $ip ]] || die "no default route: cannot tell the node IP for metrics-server"
  mkdir -p "$DIR/metrics-server"
  # Its own credentials are admin's; the kubelets trust the cluster CA for
  # client certificates, so it scrapes /metrics/resource as admin.
  start metrics-server "$ms" --kubeconfig "$DIR/admin.conf" \
    --authentication-kubeconfig "$DIR/admin.conf" --authorization-kubeconfig "$DIR/admin.conf" \
    --bind-address 0.0.0.0 --secure-port "$METRICS_SERVER_PORT" --cert-dir "$DIR/metrics-server" \
    --kubelet-preferred-address-types InternalIP --kubelet-use-node-status-port --kubelet-insecure-tls --metric-resolution 10s --kubelet-request-timeout 5s
  "${kubectl[@]}" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: metrics-server, namespace: kube-system}
spec:
  ports: [{name: https, port: 443, protocol: TCP, targetPort: $METRICS_SERVER_PORT}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: metrics-server, namespace: kube-system}
subsets:
- addresses: [{ip: $ip}]
  ports: [{name: https, port: $METRICS_SERVER_PORT, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: metrics-server-manual
  namespace: kube-system
  labels: {kubernetes.io/service-name: metrics-server}
addressType: IPv4
endpoints: [{addresses: [$ip]}]
ports: [{name: https, port: $METRICS_SERVER_PORT, protocol: TCP}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.k8s.io}
spec:
  service: {name: metrics-server, namespace: kube-system, port: 443}
  group: metrics.k8s.io
  version: v1beta1
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 100
  versionPriority: 100
EOF
  wait_for "metrics-server (APIService available)" \
    "${kubectl[@]}" wait --for=condition=Available apiservice/v1beta1.metrics.k8s.io --timeout=1s
  echo "metrics-server up on $ip:$METRICS_SERVER_PORT; try: kubectl top node"
}

local_path() {
  local lpp kubectl=("$(bin_dir)/kubectl" --kubeconfig "$DIR/admin.conf")
  lpp=$("$REPO_ROOT/hack/control-plane.sh" local-path-provisioner)
  mkdir -p "$DIR/local-path"
  # Upstream's deploy/local-path-storage.yaml, less its Deployment (the
  # provisioner runs on the host with admin's credentials) and RBAC.
  "${kubectl[@]}" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: local-path-storage}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: local-path-provisioner-service-account, namespace: local-path-storage}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local-path
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: rancher.io/local-path
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
---
kind: ConfigMap
apiVersion: v1
metadata: {name: local-path-config, namespace: local-path-storage}
data:
  config.json: |-
    {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["$DIR/local-path"]}]}
  setup: |-
    #!/bin/sh
    set -eu
    mkdir -m 0777 -p "\$VOL_DIR"
  teardown: |-
    #!/bin/sh
    set -eu
    rm -rf "\$VOL_DIR"
  helperPod.yaml: |-
    apiVersion: v1
    kind: Pod
    metadata:
      name: helper-pod
    spec:
      priorityClassName: system-node-critical
      tolerations:
        - key: node.kubernetes.io/disk-pressure
          operator: Exists
          effect: NoSchedule
      containers:
      - name: helper-pod
        image: $HELPER_IMAGE
        imagePullPolicy: IfNotPresent
EOF
  start local-path-provisioner "$lpp" --debug start --kubeconfig "$DIR/admin.conf" \
    --namespace local-path-storage --configmap-name local-path-config \
    --service-account-name local-path-provisioner-service-account --helper-image "$HELPER_IMAGE"
  wait_for "local-path-provisioner" grep -q "Started provisioner controller" "$DIR/local-path-provisioner.log"
  echo "local-path-provisioner up: StorageClass local-path (default), volumes under $DIR/local-path"
}

down() {
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    stop_pidfile "$DIR/${COMPONENTS[i]}.pid"
  done
  [[ ${CLEAN:-0} == 1 ]] && rm -rf --one-file-system "$DIR"
  return 0
}

case ${1:-} in
  up) shift; up "$@" ;;
  metrics-server) metrics_server ;;
  local-path) local_path ;;
  bootstrap-token) shift; bootstrap_token "$@" ;;
  down) down ;;
  env) echo "export KUBECONFIG=$DIR/admin.conf PATH=$(bin_dir):\$PATH" ;;
  *) die "usage: $0 up [NODE...]|metrics-server|local-path|bootstrap-token NODE|down|env" ;;
esac
