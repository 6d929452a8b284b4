//go:build tools

// Pins csi-attacher's command in go.mod and go.sum (built by
// hack/control-plane.sh csi-attacher).
package tools

import _ "github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher"
