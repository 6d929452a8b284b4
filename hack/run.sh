#!/usr/bin/env bash
# The main job: rkubelet standalone on a private containerd, running the
# example static pods from examples/static-pods. Stays in the foreground
# showing where things are; Ctrl-C stops rkubelet and the private
# containerd and removes what the pods left (mounts, bridge, state).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export RKUBELET_RUNTIME_DIR=${RKUBELET_RUNTIME_DIR:-/tmp/rkubelet-runtime}
state=${RKUBELET_STATE_DIR:-/tmp/rkubelet-standalone}
node=${RKUBELET_NODE:-$(hostname | tr 'A-Z' 'a-z')}
port=${RKUBELET_READ_ONLY_PORT:-10255}

echo "==> installing system packages (containerd, runc, CNI plugins, busybox)"
hack/install-deps.sh
echo "==> building rkubelet (release)"
cargo build --release -q -p rkubelet
echo "==> starting a private containerd in $RKUBELET_RUNTIME_DIR"
eval "$(hack/containerd.sh start)"
echo "==> importing images (no registry needed)"
hack/images.sh

rm -rf "$state"
mkdir -p "$state/manifests" "$state/root" "$state/logs"
cp examples/static-pods/*.yaml "$state/manifests/"
# The images here are imported, not pullable: image GC must not remove them,
# nor the eviction manager's disk reclaim (the disk of these machines looks
# more than 85 % full to statvfs): thresholds of 1 %, as hack/conformance.sh
# gives both kubelets.
cat > "$state/kubelet-config.yaml" <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
staticPodPath: $state/manifests
containerRuntimeEndpoint: $CONTAINER_RUNTIME_ENDPOINT
podLogsDir: $state/logs
address: 127.0.0.1
readOnlyPort: $port
CFG

pid=
cleanup() {
  trap - EXIT INT TERM
  echo
  echo "==> stopping rkubelet and the private containerd"
  [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  hack/containerd.sh stop || true
  # shellcheck source=lib/mounts.sh
  . hack/lib/mounts.sh
  unmount_under "$state" && rm -rf --one-file-system "$state"
}
trap cleanup EXIT INT TERM

echo "==> starting rkubelet as node $node (log: $state/rkubelet.log)"
target/release/rkubelet --config "$state/kubelet-config.yaml" --root-dir "$state/root" \
  --cert-dir "$state/root/pki" --hostname-override "$node" >"$state/rkubelet.log" 2>&1 &
pid=$!

want=$(find "$state/manifests" -name '*.yaml' | wc -l)
show_pods() {
  python3 -c '
import json, sys, urllib.request
items = json.load(urllib.request.urlopen(sys.argv[1], timeout=2))["items"]
print(f"{\"POD\":28} {\"PHASE\":10} {\"IP\":14} CONTAINERS (ready, restarts)")
for p in items:
    s = p.get("status", {})
    cs = ", ".join(f"{c[\"name\"]}({c[\"ready\"]},{c[\"restartCount\"]})" for c in s.get("containerStatuses", []))
    print(f"{p[\"metadata\"][\"name\"]:28} {s.get(\"phase\",\"-\"):10} {s.get(\"podIP\",\"host\"):14} {cs}")
print(sum(1 for p in items if p.get("status", {}).get("phase") == "Running"), "running")
' "http://127.0.0.1:$port/pods"
}
for _ in $(seq 1 120); do
  running=$(show_pods 2>/dev/null | tail -1 | cut -d' ' -f1 || true)
  [[ $running == "$want" ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$state/rkubelet.log"; exit 1; }
  sleep 0.5
done
show_pods
cat <<INFO

rkubelet is running $want static pods on a real containerd.
  pods and statuses:  curl -s http://127.0.0.1:$port/pods
  health:             curl -s http://127.0.0.1:10248/healthz
  container logs:     $state/logs/<namespace>_<pod>_<uid>/<container>/<restart>.log
  the runtime's view: ctr -a $RKUBELET_RUNTIME_DIR/containerd.sock -n k8s.io containers ls
  add/edit/remove:    files in $state/manifests (picked up at once)
Ctrl-C stops everything and cleans up.
INFO
wait "$pid"
