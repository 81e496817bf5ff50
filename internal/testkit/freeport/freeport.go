// Package freeport picks TCP+UDP ports for servers a test starts as separate
// processes (a meshnode binary, a PostgreSQL server), which must be told their port
// before they bind it.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// Below returns a port free now on 127.0.0.1 (TCP and UDP), chosen below the kernel's
// ephemeral range (32768 and up on Linux): tests running in parallel packages bind
// port 0 and dial out from ephemeral ports, so between the check here and the
// process binding it they can take an ephemeral port, never one given here.
func Below(t testing.TB) int {
	t.Helper()
	for range 1000 {
		port := 20000 + rand.IntN(12000)
		tcp, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		udp, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		_ = tcp.Close()
		if err != nil {
			continue
		}
		_ = udp.Close()
		return port
	}
	t.Fatal("freeport: no free port in 20000-31999 on 127.0.0.1")
	return 0
}
