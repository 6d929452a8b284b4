//go:build tools

// Pins metrics-server's command in go.mod and go.sum (built by
// hack/control-plane.sh metrics-server).
package tools

import _ "sigs.k8s.io/metrics-server/cmd/metrics-server"
