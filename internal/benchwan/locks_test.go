//go:build bench

// Package benchwan holds the first side-by-side benchmark: seed 003's lock
// acquisition, Meridian's server-side lock versus ZooKeeper's lock recipe
// (on a real ZooKeeper 3.8 cluster from Debian's package, and on Meridian's
// ZooKeeper port), with every client→server and server→server link through
// a delaying proxy. It is build-tagged so go-zookeeper's recipe and the
// ZooKeeper process stay out of `make test`; `make bench-locks` runs it.
package benchwan

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/server"
	"github.com/meridian-coord/meridian/internal/testutil"
)

// cluster is 3 servers behind proxies: clientAddrs[i] reaches server i
// through a client→server proxy.
type cluster struct {
	name        string
	clientAddrs []string // native gRPC (Meridian) or ZooKeeper port
	zkAddrs     []string // ZooKeeper-protocol addresses (both systems)
}

func ports(t *testing.T, n int) []int { return testutil.FreePorts(t, n) }

func proxyTo(t *testing.T, target string, oneWay time.Duration) string {
	return testutil.NewProxy(t, target, oneWay).Addr
}

func startProc(t *testing.T, logPath string, name string, args ...string) {
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
}

// meridianCluster starts 3 meridian server processes; every server→server
// link and every client→server link gets its own proxy with oneWay delay.
func meridianCluster(t *testing.T, bin string, oneWay time.Duration) cluster {
	dir := t.TempDir()
	p := ports(t, 9)
	real := make([]server.Member, 3)
	for i := range real {
		real[i] = server.Member{ID: uint64(i + 1), Region: "r", Zone: fmt.Sprint(i),
			Peer: fmt.Sprintf("127.0.0.1:%d", p[3*i]), GRPC: fmt.Sprintf("127.0.0.1:%d", p[3*i+1]),
			ZK: fmt.Sprintf("127.0.0.1:%d", p[3*i+2])}
	}
	c := cluster{name: "meridian"}
	for i := 0; i < 3; i++ {
		members := slices.Clone(real)
		for j := range members {
			if j != i {
				members[j].Peer = proxyTo(t, real[j].Peer, oneWay)
			}
		}
		cfg := server.Config{ID: uint64(i + 1), DataDir: filepath.Join(dir, fmt.Sprint(i+1)), Members: members,
			ListenPeer: real[i].Peer}
		path := filepath.Join(dir, fmt.Sprintf("n%d.yaml", i+1))
		if err := cfg.WriteFile(path); err != nil {
			t.Fatal(err)
		}
		startProc(t, filepath.Join(dir, fmt.Sprintf("n%d.log", i+1)), bin, "server", "--config", path)
		c.clientAddrs = append(c.clientAddrs, proxyTo(t, real[i].GRPC, oneWay))
		c.zkAddrs = append(c.zkAddrs, proxyTo(t, real[i].ZK, oneWay))
	}
	return c
}

// zookeeperCluster starts 3 ZooKeeper 3.8 servers (Debian's package) with
// fsync on (its default); each server's zoo.cfg names per-pair proxies for
// the other servers' quorum and election ports.
func zookeeperCluster(t *testing.T, oneWay time.Duration) cluster {
	if _, err := os.Stat("/usr/share/java/zookeeper.jar"); err != nil {
		t.Fatal("ZooKeeper is not installed: run scripts/install-zookeeper.sh")
	}
	dir := t.TempDir()
	p := ports(t, 9)
	c := cluster{name: "zookeeper"}
	for i := 0; i < 3; i++ {
		data := filepath.Join(dir, fmt.Sprint(i+1))
		os.MkdirAll(data, 0o755)
		os.WriteFile(filepath.Join(data, "myid"), []byte(fmt.Sprint(i+1)), 0o644)
		var lines []string
		for j := 0; j < 3; j++ {
			quorum, election := fmt.Sprintf("127.0.0.1:%d", p[3*j]), fmt.Sprintf("127.0.0.1:%d", p[3*j+1])
			if j != i {
				quorum, election = proxyTo(t, quorum, oneWay), proxyTo(t, election, oneWay)
			}
			lines = append(lines, fmt.Sprintf("server.%d=%s:%s", j+1, quorum, election[strings.LastIndex(election, ":")+1:]))
		}
		// ZooKeeper's server line has one host for both ports; the proxies
		// all listen on 127.0.0.1, so host:port1:port2 works.
		cfg := fmt.Sprintf("tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"+
			"admin.enableServer=false\n4lw.commands.whitelist=*\n%s\n", data, p[3*i+2], strings.Join(lines, "\n"))
		path := filepath.Join(dir, fmt.Sprintf("zoo%d.cfg", i+1))
		os.WriteFile(path, []byte(cfg), 0o644)
		startProc(t, filepath.Join(dir, fmt.Sprintf("zk%d.log", i+1)), "/usr/bin/java",
			"-cp", "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar", "-Dzookeeper.log.dir="+dir,
			"org.apache.zookeeper.server.quorum.QuorumPeerMain", path)
		zk := proxyTo(t, fmt.Sprintf("127.0.0.1:%d", p[3*i+2]), oneWay)
		c.clientAddrs = append(c.clientAddrs, zk)
		c.zkAddrs = append(c.zkAddrs, zk)
	}
	return c
}

// waitZK waits until a ZooKeeper-protocol write succeeds.
func waitZK(t *testing.T, addrs []string) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, _, err := gozk.Connect(addrs, 10*time.Second, gozk.WithLogInfo(false))
		if err == nil {
			_, err = conn.Create("/ready", nil, 0, gozk.WorldACL(gozk.PermAll))
			if err == gozk.ErrNodeExists {
				err = nil
			}
			conn.Close()
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ready: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// locker acquires and releases one named lock.
type locker interface {
	lock(name string) (release func() error, err error)
	close()
}

type nativeLocker struct{ c *client.Client }

func (n nativeLocker) lock(name string) (func() error, error) {
	l, err := n.c.Lock(context.Background(), name, client.LockOptions{})
	if err != nil {
		return nil, err
	}
	return func() error { return l.Unlock(context.Background()) }, nil
}
func (n nativeLocker) close() { n.c.Close() }

type recipeLocker struct{ c *gozk.Conn }

func (r recipeLocker) lock(name string) (func() error, error) {
	l := gozk.NewLock(r.c, "/locks/"+name, gozk.WorldACL(gozk.PermAll))
	if err := l.Lock(); err != nil {
		return nil, err
	}
	return l.Unlock, nil
}
func (r recipeLocker) close() { r.c.Close() }

// run has n clients each acquire, hold for hold, and release iters times,
// on one shared lock or one lock each; it returns every acquire latency.
func run(t *testing.T, mk func(i int) locker, n, iters int, same bool, hold time.Duration) []time.Duration {
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		lk := mk(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer lk.close()
			name := fmt.Sprintf("k%d", i)
			if same {
				name = "shared"
			}
			for k := 0; k < iters; k++ {
				start := time.Now()
				release, err := lk.lock(name)
				if err != nil {
					t.Errorf("lock: %v", err)
					return
				}
				d := time.Since(start)
				time.Sleep(hold)
				if err := release(); err != nil {
					t.Errorf("unlock: %v", err)
					return
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return lat
}

func summary(lat []time.Duration) string {
	slices.Sort(lat)
	if len(lat) == 0 {
		return "no data"
	}
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/1e6) }
	return fmt.Sprintf("%s | %s | %s | %s | %d", ms(sum/time.Duration(len(lat))), ms(q(0.5)), ms(q(0.99)), ms(lat[len(lat)-1]), len(lat))
}

// TestSeed003Locks prints a markdown table: acquire latency (ms) per
// system, client count and key mode, at each emulated round trip.
//
//	MERIDIAN_BENCH_RTTS=0,40ms make bench-locks
func TestSeed003Locks(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "meridian")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/meridian").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	rtts := []time.Duration{0, 40 * time.Millisecond}
	if s := os.Getenv("MERIDIAN_BENCH_RTTS"); s != "" {
		rtts = nil
		for _, f := range strings.Split(s, ",") {
			d, err := time.ParseDuration(f)
			if err != nil {
				t.Fatal(err)
			}
			rtts = append(rtts, d)
		}
	}
	hold := 2 * time.Millisecond
	var out strings.Builder
	host, _ := os.Hostname()
	cpu, _ := exec.Command("sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").Output()
	fmt.Fprintf(&out, "Machine: %s, %d CPUs,%s; hold %v; every link through a proxy adding RTT/2 each way.\n\n", host, numCPU(), strings.TrimSpace(string(cpu)), hold)
	for _, rtt := range rtts {
		fmt.Fprintf(&out, "### RTT %v (client↔server and server↔server)\n\n| system | clients | keys | avg | p50 | p99 | max | acquires |\n|---|---|---|---|---|---|---|---|\n", rtt)
		mer := meridianCluster(t, bin, rtt/2)
		waitZK(t, mer.zkAddrs)
		zkc := zookeeperCluster(t, rtt/2)
		waitZK(t, zkc.zkAddrs)
		iters := 60
		if rtt > 0 {
			iters = 20
		}
		systems := []struct {
			name string
			mk   func(i int) locker
		}{
			{"Meridian lock (native, 1 RPC)", func(i int) locker {
				c, err := client.New(context.Background(), client.Config{Endpoints: rotate(mer.clientAddrs, i), KeepEndpointOrder: true})
				if err != nil {
					t.Fatal(err)
				}
				return nativeLocker{c}
			}},
			{"Meridian, ZooKeeper recipe", func(i int) locker { return recipeLocker{zkConn(t, rotate(mer.zkAddrs, i))} }},
			{"ZooKeeper 3.8, recipe", func(i int) locker { return recipeLocker{zkConn(t, rotate(zkc.zkAddrs, i))} }},
		}
		for _, sys := range systems {
			run(t, sys.mk, 1, 10, false, 0) // warm up (ZooKeeper's JIT, connections), unmeasured
			for _, n := range []int{1, 3, 5} {
				for _, same := range []bool{false, true} {
					if n == 1 && same {
						continue
					}
					keys := "different"
					if same {
						keys = "same"
					}
					lat := run(t, sys.mk, n, iters, same, hold)
					fmt.Fprintf(&out, "| %s | %d | %s | %s |\n", sys.name, n, keys, summary(lat))
				}
			}
		}
		out.WriteString("\n")
	}
	fmt.Println(out.String())
	if p := os.Getenv("MERIDIAN_BENCH_OUT"); p != "" {
		os.WriteFile(p, []byte(out.String()), 0o644)
	}
}

// rotate makes client i prefer server i mod 3, spreading clients.
func rotate(addrs []string, i int) []string {
	k := i % len(addrs)
	return append(slices.Clone(addrs[k:]), addrs[:k]...)
}

func zkConn(t *testing.T, addrs []string) *gozk.Conn {
	c, ev, err := gozk.Connect(addrs, 10*time.Second, gozk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	for e := range ev {
		if e.State == gozk.StateHasSession {
			break
		}
	}
	return c
}

func numCPU() int {
	n := 0
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "processor") {
			n++
		}
	}
	return n
}
