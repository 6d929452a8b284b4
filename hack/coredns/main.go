// Command coredns is CoreDNS v1.14.6 (the version kubeadm v1.37 deploys)
// with the plugins of kubeadm's Corefile only: CoreDNS's own main imports
// every plugin (core/plugin), each registers itself in init(), and the
// order of directives is fixed (core/dnsserver/zdirectives.go), so this is
// the same server with fewer plugins and a fraction of the modules to build.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() { coremain.Run() }
