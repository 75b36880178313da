// Package testutil holds helpers shared by tests: nothing here runs in a server.
package testutil

import (
	"net"
	"testing"
)

// FreePorts returns n distinct loopback ports that were free a moment ago
// (listeners are opened together, then closed, so the ports differ).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}
