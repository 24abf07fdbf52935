// SPDX-License-Identifier: Apache-2.0

// Command coredns is CoreDNS with only the plugins the test environment's
// real node needs: it answers for cluster.local from the API server and
// nothing else (no forwarding: the node has no outside network).
package main

import (
	_ "github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() { coremain.Run() }
