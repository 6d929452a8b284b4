//go:build tools

// Pins local-path-provisioner's command in go.mod and go.sum (built by
// hack/control-plane.sh local-path-provisioner).
package tools

import _ "github.com/rancher/local-path-provisioner"
