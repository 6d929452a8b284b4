//go:build tools

// Pins csi-provisioner's command in go.mod and go.sum (built by
// hack/control-plane.sh csi-provisioner).
package tools

import _ "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"
