// Package testutil holds helpers shared by tests: nothing here runs in a server.
package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// FreePorts returns n distinct loopback ports that were free a moment ago.
//
// They come from below the kernel's ephemeral range (32768 and up by
// default), which outgoing connections draw their source ports from: a port
// picked there could be taken by any connection (this process's gRPC
// clients, another test binary's) between this call and the server binding
// it, and the server would fail with "address already in use". Below it,
// only another caller of FreePorts could take it, and picks are random.
//
// A port handed out once is not handed out again by this process while it
// is among the last half-range of picks: a test that picks ports twice
// (its own, then a cluster's) must not get one it already gave a server,
// which is free again until that server binds it.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := PickPorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// Port range FreePorts picks from: below the default ephemeral range and
// above the ports kazoo's harness uses (20000-20030).
const (
	minPickPort = 21000
	maxPickPort = 32000
)

// portRange is the range picks come from: MERIDIAN_PORT_RANGE=LO-HI
// narrows it, so processes run side by side (shards of a long chaos run)
// can be given disjoint ranges and never take a port another one's stopped
// server will bind again on restart.
func portRange() (lo, hi int, err error) {
	v := os.Getenv("MERIDIAN_PORT_RANGE")
	if v == "" {
		return minPickPort, maxPickPort, nil
	}
	if _, err := fmt.Sscanf(v, "%d-%d", &lo, &hi); err != nil || lo < 1024 || hi > 65535 || hi-lo < 100 {
		return 0, 0, fmt.Errorf("MERIDIAN_PORT_RANGE=%q: want LO-HI, 1024 <= LO, HI <= 65535, at least 100 ports", v)
	}
	return lo, hi, nil
}

// PickPorts is FreePorts for code without a testing.TB.
func PickPorts(n int) ([]int, error) {
	minPickPort, maxPickPort, err := portRange()
	if err != nil {
		return nil, err
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	picked.mu.Lock()
	defer picked.mu.Unlock()
	if picked.set == nil {
		picked.set = map[int]bool{}
	}
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("no free loopback ports in %d-%d", minPickPort, maxPickPort)
		}
		p := minPickPort + rand.IntN(maxPickPort-minPickPort)
		if picked.set[p] {
			continue // handed out a moment ago: maybe not bound yet
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // taken: try another
		}
		ls = append(ls, l)
		ports = append(ports, p)
	}
	// Remember the picks; past half the range, forget the oldest (long
	// bound by now, or never to be).
	for _, p := range ports {
		picked.set[p] = true
		picked.order = append(picked.order, p)
	}
	for len(picked.order) > (maxPickPort-minPickPort)/2 {
		delete(picked.set, picked.order[0])
		picked.order = picked.order[1:]
	}
	return ports, nil
}

// picked are the ports this process handed out, oldest first.
var picked struct {
	mu    sync.Mutex
	set   map[int]bool
	order []int
}

// ProcessCPU is the CPU time (user and system) this process has used so
// far: unlike wall time it is not inflated by other processes on a shared
// machine. 0 if the kernel does not say.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
