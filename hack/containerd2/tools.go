//go:build tools

// Pins containerd v2's commands in go.mod and go.sum (built by
// hack/control-plane.sh containerd2): the daemon, its runc shim and ctr.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
