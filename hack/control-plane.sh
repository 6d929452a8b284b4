#!/usr/bin/env bash
# The real Kubernetes control plane, built from the Go module proxy.
#
#   hack/control-plane.sh build    build etcd, kube-apiserver, kube-controller-manager,
#                                  kube-proxy (hack/nodes.sh runs one per node),
#                                  kube-scheduler, kubectl and the upstream kubelet
#                                  (for side-by-side benchmarks) into a cache keyed by
#                                  version and go.sum; prints the bin directory
#   hack/control-plane.sh e2e      build the upstream e2e suite (e2e.test, from
#                                  k8s.io/kubernetes/test/e2e) and the ginkgo CLI at the
#                                  version the suite pins into the same cache; prints the
#                                  bin directory (hack/conformance.sh runs them)
#   hack/control-plane.sh metrics-server
#                                  build metrics-server (hack/metrics-server/go.mod) into
#                                  the same cache; prints the binary's path
#   hack/control-plane.sh kube-state-metrics
#                                  the same for kube-state-metrics
#                                  (hack/kube-state-metrics/go.mod)
#   hack/control-plane.sh local-path-provisioner
#                                  the same for rancher's local-path-provisioner
#                                  (hack/local-path-provisioner/go.mod)
#   hack/control-plane.sh csi-provisioner | csi-attacher | csi-resizer
#                                  the same for the CSI sidecars external-provisioner,
#                                  external-attacher and external-resizer (hack/csi-provisioner,
#                                  hack/csi-attacher, hack/csi-resizer)
#   hack/control-plane.sh csi-mock-plugin | csi-node-driver-registrar
#                                  the CSI mock driver of upstream's e2e suite with
#                                  hostpathplugin's flags and a registrar of its own
#                                  (hack/k8s/cmd/csi-mock-plugin); a registrar with
#                                  node-driver-registrar's flags (hack/k8s/cmd/
#                                  csi-node-driver-registrar); built in the control
#                                  plane's module
#   hack/control-plane.sh sample-device-plugin
#                                  upstream's sample device plugin (k8s.io/kubernetes/
#                                  test/images/sample-device-plugin: example.com/resource,
#                                  devices Dev-1 and Dev-2), built in the control plane's
#                                  module; the device plugin of the cluster tests
#   hack/control-plane.sh dra-test-driver
#                                  upstream's DRA test driver (k8s.io/kubernetes/
#                                  test/e2e/dra/test-driver: `dra-test-driver
#                                  kubelet-plugin`, driver test-driver.cdi.k8s.io by
#                                  default, devices device-00..03 in the pool named
#                                  after the node, CDI specs that set env vars),
#                                  built in the control plane's module the same way
#   hack/control-plane.sh coredns  the same for CoreDNS with kubeadm's plugins
#                                  (hack/coredns), the cluster DNS of hack/nodes.sh
#   hack/control-plane.sh sample-apiserver
#                                  the same for k8s.io/sample-apiserver at the
#                                  control plane's version (hack/e2e-images.sh's image)
#   hack/control-plane.sh runtime2 containerd v2 (containerd, containerd-shim-runc-v2,
#                                  ctr; hack/containerd2) and runc v1.5 (hack/runc) into
#                                  one directory of the cache; prints it
#                                  (RKUBELET_RUNTIME=containerd2, hack/containerd.sh)
#
# The build is idempotent: a cache hit returns at once; a fresh machine builds
# again (about 20-40 minutes on 2 cores, most of it kube-apiserver).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$PWD

K8S_VERSION=v1.37.2
MOD_DIR=$REPO_ROOT/hack/k8s
CACHE_ROOT=${RKUBELET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rkubelet}
BINARIES=(etcd kube-apiserver kube-controller-manager kube-proxy kube-scheduler kubectl kubelet)

die() { echo "control-plane.sh: error: $*" >&2; exit 1; }

bin_dir() {
  local key
  key=$(cat "$MOD_DIR/go.mod" "$MOD_DIR/go.sum" "$MOD_DIR/cmd/etcd/main.go" | sha256sum | cut -c1-12)
  echo "$CACHE_ROOT/k8s/$K8S_VERSION-$key/bin"
}

# The version the binaries say they are (what `git describe` gives a release
# build), as -ldflags -X settings.
version_ldflags() {
  local v=${K8S_VERSION#v} pkg
  local major=${v%%.*} minor=${v#*.}
  minor=${minor%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    printf ' -X %s' "$pkg.gitVersion=$K8S_VERSION" "$pkg.gitMajor=$major" "$pkg.gitMinor=$minor" \
      "$pkg.gitTreeState=clean" "$pkg.buildDate=1970-01-01T00:00:00Z"
  done
}

build() {
  local dir
  dir=$(bin_dir)
  local missing=()
  for b in "${BINARIES[@]}"; do
    [[ -x $dir/$b ]] || missing+=("$b")
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    echo "$dir"
    return
  fi
  command -v go >/dev/null || die "go is not installed"
  mkdir -p "$dir.tmp"
  local ldflags pkgs=()
  ldflags=$(version_ldflags)
  for b in "${missing[@]}"; do
    case $b in
      etcd) pkgs+=(./cmd/etcd) ;;
      *) pkgs+=("k8s.io/kubernetes/cmd/$b") ;;
    esac
  done
  echo "building ${missing[*]} ($K8S_VERSION) into $dir" >&2
  (cd "$MOD_DIR" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w$ldflags" \
    -o "$dir.tmp/" "${pkgs[@]}") || die "go build failed"
  mkdir -p "$dir"
  for b in "${missing[@]}"; do
    mv "$dir.tmp/$b" "$dir/$b"
  done
  rmdir "$dir.tmp" 2>/dev/null || true
  echo "$dir"
}

# Tools run beside the cluster, each in a module of its own (they pin
# other k8s.io libraries than the control plane's), cached like it, keyed by
# their go.sum (and main.go, where the module has its own): metrics-server
# (`kubectl top`), kube-state-metrics (the Prometheus check of
# /metrics/cadvisor), CoreDNS (the multi-node clusters' DNS),
# sample-apiserver (the e2e suite's aggregated API server) and
# local-path-provisioner (the README cluster's StorageClass).
MS_VERSION=v0.8.0
KSM_VERSION=v2.20.0
COREDNS_VERSION=v1.14.6
LPP_VERSION=v0.0.30
CSI_PROVISIONER_VERSION=v6.3.0
CSI_ATTACHER_VERSION=v4.12.0
CSI_RESIZER_VERSION=v2.2.0
CONTAINERD2_VERSION=v2.4.2
RUNC_VERSION=v1.5.3

# tool NAME VERSION PACKAGE [LDFLAGS] [SOURCES]: build the module
# hack/NAME's PACKAGE once (SOURCES: the Go files of the module's own that
# go in, keyed with it; hack/NAME/main.go by default); print the binary's
# path. The commands under hack/k8s/cmd are built in the control plane's
# module.
tool() {
  local name=$1 version=$2 pkg=$3 ldflags=${4:-} src=$REPO_ROOT/hack/$1 key path sources
  sources=${5:-$src/main.go}
  [[ $pkg == ./cmd/* || $pkg == k8s.io/kubernetes/* ]] && src=$MOD_DIR
  # shellcheck disable=SC2086 # SOURCES is a list of paths without spaces
  key=$(cat "$src/go.mod" "$src/go.sum" $(ls $sources 2>/dev/null) | sha256sum | cut -c1-12)
  path=$CACHE_ROOT/$name/$version-$key/$name
  if [[ ! -x $path ]]; then
    command -v go >/dev/null || die "go is not installed"
    echo "building $name $version into $path" >&2
    (cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w$ldflags" \
      -o "$path.tmp" "$pkg") || die "go build of $name failed"
    mv "$path.tmp" "$path"
  fi
  echo "$path"
}

# runtime2: containerd v2 (the daemon, its runc shim and ctr, without cgo:
# no btrfs or devmapper snapshotters, as containerd's static release) and
# runc (with cgo and Debian's libseccomp, runc's default build tags but
# libpathrs, a Rust library Debian does not package: runc then resolves
# paths with filepath-securejoin, its fallback), the runtime of
# RKUBELET_RUNTIME=containerd2 nodes, built once into one directory keyed
# by both modules; print the directory.
runtime2() {
  local c2=$REPO_ROOT/hack/containerd2 runc=$REPO_ROOT/hack/runc key dir b
  key=$(cat "$c2/go.mod" "$c2/go.sum" "$runc/go.mod" "$runc/go.sum" | sha256sum | cut -c1-12)
  dir=$CACHE_ROOT/runtime/containerd-$CONTAINERD2_VERSION-runc-$RUNC_VERSION-$key
  command -v go >/dev/null || die "go is not installed"
  mkdir -p "$dir"
  for b in containerd containerd-shim-runc-v2 ctr; do
    [[ -x $dir/$b ]] && continue
    echo "building $b $CONTAINERD2_VERSION into $dir" >&2
    (cd "$c2" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath \
      -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD2_VERSION" \
      -o "$dir/$b.tmp" "github.com/containerd/containerd/v2/cmd/$b") || die "go build of $b failed"
    mv "$dir/$b.tmp" "$dir/$b"
  done
  if [[ ! -x $dir/runc ]]; then
    echo "building runc $RUNC_VERSION into $dir" >&2
    (cd "$runc" && CGO_ENABLED=1 GOFLAGS=-mod=mod go build -trimpath -tags "seccomp urfave_cli_no_docs" \
      -ldflags "-s -w" -o "$dir/runc.tmp" github.com/opencontainers/runc) ||
      die "go build of runc failed (it needs gcc, pkg-config and libseccomp-dev: hack/install-deps.sh)"
    mv "$dir/runc.tmp" "$dir/runc"
  fi
  echo "$dir"
}

# The e2e suite and ginkgo, built with the control plane's flags so its Go
# build cache is reused (about 90 s after the control plane on 2 cores).
# e2e.test says its version too: specs compare it with the cluster's (an
# unversioned build is v0.0 to them). Rebuilt when its flags change
# (e2e.test.ldflags keeps them).
e2e() {
  local dir ldflags
  dir=$(build)
  ldflags="-s -w$(version_ldflags)"
  if [[ ! -x $dir/e2e.test || $(cat "$dir/e2e.test.ldflags" 2>/dev/null) != "$ldflags" ]]; then
    echo "building e2e.test ($K8S_VERSION) into $dir" >&2
    (cd "$MOD_DIR" && CGO_ENABLED=0 GOFLAGS=-mod=mod go test -c -trimpath -ldflags "$ldflags" \
      -o "$dir/e2e.test.tmp" k8s.io/kubernetes/test/e2e) || die "go test -c of test/e2e failed"
    mv "$dir/e2e.test.tmp" "$dir/e2e.test"
    echo "$ldflags" >"$dir/e2e.test.ldflags"
  fi
  if [[ ! -x $dir/ginkgo ]]; then
    echo "building ginkgo ($(cd "$MOD_DIR" && go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2)) into $dir" >&2
    (cd "$MOD_DIR" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" \
      -o "$dir/ginkgo.tmp" github.com/onsi/ginkgo/v2/ginkgo) || die "go build of ginkgo failed"
    mv "$dir/ginkgo.tmp" "$dir/ginkgo"
  fi
  echo "$dir"
}

case ${1:-} in
  build) build ;;
  e2e) e2e ;;
  bin-dir) bin_dir ;;
  metrics-server) tool metrics-server "$MS_VERSION" sigs.k8s.io/metrics-server/cmd/metrics-server ;;
  kube-state-metrics) tool kube-state-metrics "$KSM_VERSION" k8s.io/kube-state-metrics/v2 ;;
  coredns) tool coredns "$COREDNS_VERSION" rkubelet.local/coredns \
    " -X github.com/coredns/coredns/coremain.gitTag=$COREDNS_VERSION" ;;
  sample-apiserver) tool sample-apiserver "$K8S_VERSION" k8s.io/sample-apiserver ;;
  local-path-provisioner) tool local-path-provisioner "$LPP_VERSION" github.com/rancher/local-path-provisioner ;;
  csi-provisioner) tool csi-provisioner "$CSI_PROVISIONER_VERSION" \
    github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner \
    " -X main.version=$CSI_PROVISIONER_VERSION" ;;
  csi-attacher) tool csi-attacher "$CSI_ATTACHER_VERSION" \
    github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher \
    " -X main.version=$CSI_ATTACHER_VERSION" ;;
  csi-resizer) tool csi-resizer "$CSI_RESIZER_VERSION" \
    github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer \
    " -X main.version=$CSI_RESIZER_VERSION" ;;
  runtime2) runtime2 ;;
  sample-device-plugin) tool sample-device-plugin "$K8S_VERSION" \
    k8s.io/kubernetes/test/images/sample-device-plugin ;;
  dra-test-driver) tool dra-test-driver "$K8S_VERSION" \
    k8s.io/kubernetes/test/e2e/dra/test-driver "$(version_ldflags)" ;;
  csi-mock-plugin | csi-node-driver-registrar) tool "$1" "$K8S_VERSION" "./cmd/$1" "" \
    "$MOD_DIR/cmd/$1/main.go $MOD_DIR/internal/csiplugin/*.go" ;;
  *) die "usage: $0 build|bin-dir|e2e|metrics-server|kube-state-metrics|coredns|sample-apiserver|local-path-provisioner|csi-provisioner|csi-attacher|csi-resizer|csi-mock-plugin|csi-node-driver-registrar|sample-device-plugin|dra-test-driver|runtime2" ;;
esac
