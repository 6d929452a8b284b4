//go:build tools

// Pins kube-state-metrics' command in go.mod and go.sum (built by
// hack/control-plane.sh kube-state-metrics).
package tools

import _ "k8s.io/kube-state-metrics/v2"
