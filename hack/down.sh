#!/usr/bin/env bash
# Stop what hack/up.sh started: rkubelet, the private containerd (and the
# pods' mounts, bridge and state), the nodes of `up.sh --nodes` (their
# namespaces, bridges, routes and cgroups: hack/nodes.sh down), the control
# plane. Leaves nothing running.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export RKUBELET_CLUSTER_DIR=${RKUBELET_CLUSTER_DIR:-/tmp/rkubelet-cluster}
export RKUBELET_RUNTIME_DIR=${RKUBELET_RUNTIME_DIR:-$RKUBELET_CLUSTER_DIR/runtime}
state=$RKUBELET_CLUSTER_DIR/node

# shellcheck source=lib/process.sh
. hack/lib/process.sh
stop_pidfile "$state/rkubelet.pid"
hack/containerd.sh stop
# What rkubelet mounted and leaves (pods keep running after it stops, as
# upstream's): the pods' volumes and its root directory's shared bind mount.
# shellcheck source=lib/mounts.sh
. hack/lib/mounts.sh
unmount_under "$RKUBELET_CLUSTER_DIR/node"
unmount_under "$RKUBELET_RUNTIME_DIR"
hack/nodes.sh down
echo "stopped: rkubelet, containerd, nodes, control plane (state removed)"
