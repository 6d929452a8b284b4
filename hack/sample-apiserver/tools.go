//go:build tools

// Pins sample-apiserver's command in go.mod and go.sum (built by
// hack/control-plane.sh sample-apiserver).
package tools

import _ "k8s.io/sample-apiserver"
