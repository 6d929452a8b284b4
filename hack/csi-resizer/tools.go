//go:build tools

// Pins csi-resizer's command in go.mod and go.sum (built by
// hack/control-plane.sh csi-resizer).
package tools

import _ "github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer"
