//go:build tools

// Pins runc in go.mod and go.sum (built by hack/control-plane.sh runc,
// with cgo and Debian's libseccomp).
package tools

import _ "github.com/opencontainers/runc"
