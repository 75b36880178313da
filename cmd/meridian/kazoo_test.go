//go:build compat

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/server"
)

// These tests drive a 3-process cluster through its ZooKeeper ports with
// unmodified ZooKeeper clients. `make test` provides them: the pinned
// Python environment (scripts/pyenv.sh, MERIDIAN_PYTHON) and Debian's
// zookeeper package (scripts/install-zookeeper.sh, ZKCLI).

// startZKCluster starts three server processes and returns their
// ZooKeeper addresses.
func startZKCluster(t *testing.T) []string {
	addrs, _ := startZKClusterWith(t, nil)
	return addrs
}

// startZKClusterWith is startZKCluster with tweak applied to each member's
// configuration; it also returns the processes.
func startZKClusterWith(t *testing.T, tweak func(*server.Config)) ([]string, []*proc) {
	dir := t.TempDir()
	ports := freePorts(t, 9)
	var members []server.Member
	var zkAddrs []string
	for i := 0; i < 3; i++ {
		m := server.Member{ID: uint64(i + 1), Region: "local", Zone: "z",
			Peer: fmt.Sprintf("127.0.0.1:%d", ports[3*i]), GRPC: fmt.Sprintf("127.0.0.1:%d", ports[3*i+1]),
			ZK: fmt.Sprintf("127.0.0.1:%d", ports[3*i+2])}
		members = append(members, m)
		zkAddrs = append(zkAddrs, m.ZK)
	}
	var procs []*proc
	for i := 0; i < 3; i++ {
		cfg := server.Config{ID: uint64(i + 1), DataDir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)), Members: members}
		if err := cfg.UseDevTLS(filepath.Join(dir, "tls")); err != nil {
			t.Fatal(err)
		}
		if tweak != nil {
			tweak(&cfg)
		}
		p := filepath.Join(dir, fmt.Sprintf("n%d.yaml", i+1))
		if err := cfg.WriteFile(p); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, startServer(t, p, filepath.Join(dir, fmt.Sprintf("n%d.log", i+1))))
	}
	return zkAddrs, procs
}

// startZKClusterInKeyspace is startZKCluster with the members in zones
// z1-z3 of region local and the regional keyspace prefix (zone survival,
// its own raft group) created before it returns, through the native API
// as the dev admin.
func startZKClusterInKeyspace(t *testing.T, prefix string) []string {
	var tlsDir string
	var grpc []string
	zkAddrs, _ := startZKClusterWith(t, func(c *server.Config) {
		for i := range c.Members {
			c.Members[i].Zone = fmt.Sprintf("z%d", i+1)
		}
		tlsDir, grpc = filepath.Dir(c.TLS.CA), nil
		for _, m := range c.Members {
			grpc = append(grpc, m.GRPC)
		}
	})
	tlsc, err := client.DevTLS(tlsDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: grpc, TLS: tlsc, RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	defer c.Close()
	for {
		ks, err := c.CreateKeyspace(ctx, prefix, "local", "zone")
		if err == nil {
			t.Logf("keyspace %s: group %d, voters %v", ks.GetPrefix(), ks.GetGroup(), ks.GetVoters())
			return zkAddrs
		}
		if ctx.Err() != nil {
			t.Fatalf("create keyspace %s: %v", prefix, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// zkLeader returns the index of the member whose ZooKeeper port reports
// itself leader (four-letter word srvr), waiting up to 30 s for one.
func zkLeader(t *testing.T, zkAddrs []string) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for i, a := range zkAddrs {
			c, err := net.DialTimeout("tcp", a, time.Second)
			if err != nil {
				continue
			}
			c.SetDeadline(time.Now().Add(2 * time.Second))
			c.Write([]byte("srvr"))
			out, _ := io.ReadAll(c)
			c.Close()
			if strings.Contains(string(out), "Mode: leader") {
				return i
			}
		}
	}
	t.Fatal("no member reports itself leader")
	return -1
}

// TestKazooConnectionLoss runs tests/compat/kazoo_connloss.py: with both
// followers stopped (SIGSTOP) the leader cannot commit kazoo's write, so
// its outcome is unknown; kazoo must see ConnectionLoss (the connection
// closed, as ZooKeeper does), not an error code in a reply, and after the
// followers resume it must go on with the same session.
func TestKazooConnectionLoss(t *testing.T) {
	py := os.Getenv("MERIDIAN_PYTHON")
	if py == "" {
		t.Fatal("MERIDIAN_PYTHON is not set: run through `make test` (it prepares .venv)")
	}
	// A request timeout well inside kazoo's own heartbeat timeout (two
	// thirds of its 30 s session): the server, not kazoo, ends the
	// connection.
	zkAddrs, procs := startZKClusterWith(t, func(c *server.Config) { c.RequestTimeoutMs = 3000 })
	lead := zkLeader(t, zkAddrs)
	var pids []string
	for i, p := range procs {
		if i != lead {
			pids = append(pids, strconv.Itoa(p.cmd.Process.Pid))
		}
	}
	// Whatever the script does, the followers end up running (and are
	// killed by startServer's cleanup).
	t.Cleanup(func() {
		for i, p := range procs {
			if i != lead {
				p.cmd.Process.Signal(syscall.SIGCONT)
			}
		}
	})
	script, _ := filepath.Abs("../../tests/compat/kazoo_connloss.py")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, append([]string{script, zkAddrs[lead]}, pids...)...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "KAZOO CONNLOSS OK") {
		t.Fatalf("kazoo connection loss: %v\n%s", err, out)
	}
}

// TestKazoo runs tests/compat/kazoo_smoke.py (CRUD, watches, transactions,
// kazoo's Lock and Election recipes) against the cluster.
func TestKazoo(t *testing.T) {
	py := os.Getenv("MERIDIAN_PYTHON")
	if py == "" {
		t.Fatal("MERIDIAN_PYTHON is not set: run through `make test` (it prepares .venv)")
	}
	zkAddrs := startZKCluster(t)
	script, _ := filepath.Abs("../../tests/compat/kazoo_smoke.py")
	out, err := exec.Command(py, script, strings.Join(zkAddrs, ",")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "KAZOO SMOKE OK") {
		t.Fatalf("kazoo smoke failed: %v\n%s", err, out)
	}
}

// TestKazooInKeyspace is TestKazoo with every path the smoke test uses
// (/kz and below) in a regional keyspace: kazoo's recipes, watches and
// transactions against a keyspace's own raft group.
func TestKazooInKeyspace(t *testing.T) {
	py := os.Getenv("MERIDIAN_PYTHON")
	if py == "" {
		t.Fatal("MERIDIAN_PYTHON is not set: run through `make test` (it prepares .venv)")
	}
	zkAddrs := startZKClusterInKeyspace(t, "/kz")
	script, _ := filepath.Abs("../../tests/compat/kazoo_smoke.py")
	out, err := exec.Command(py, script, strings.Join(zkAddrs, ",")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "KAZOO SMOKE OK") {
		t.Fatalf("kazoo smoke in a keyspace failed: %v\n%s", err, out)
	}
}

// TestZkCliInKeyspace is TestZkCli's session under a regional keyspace
// /eu: create, get, ls, set, delete through different servers and data
// and child watches, all in the keyspace's group; ls / shows the
// keyspace's root, and deleting it is refused (it goes with the keyspace).
func TestZkCliInKeyspace(t *testing.T) {
	zkcli, cli := zkCliRunner(t)
	zkAddrs := startZKClusterInKeyspace(t, "/eu")
	zkCliSession(t, zkcli, cli, zkAddrs, "/eu")
	// ZooKeeper's BadArguments: zkCli.sh says so and exits 1.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got, err := exec.CommandContext(ctx, zkcli, "-server", zkAddrs[0], "delete", "/eu").CombinedOutput()
	if err == nil || !strings.Contains(string(got), "Arguments are not valid : /eu") {
		t.Fatalf("delete of the keyspace root: %v\n%s", err, got)
	}
	if got := cli(zkAddrs[1], "ls", "/"); !strings.Contains(got, "[eu, meridian, zookeeper]") {
		t.Fatalf("ls / after the refused delete:\n%s", got)
	}
}

// TestZkCli drives the cluster with ZooKeeper's own command-line client
// (zkCli.sh from Debian's zookeeper 3.8 package): create, ls, get, set,
// delete, each through a different server, and data and child watches.
func TestZkCli(t *testing.T) {
	zkcli, cli := zkCliRunner(t)
	zkAddrs := startZKCluster(t)
	// zkCli.sh tries for a while before giving up on a server; make sure
	// the cluster has a leader first.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if out := cli(zkAddrs[0], "ls", "/"); strings.Contains(out, "[meridian, zookeeper]") {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("cluster not serving:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	zkCliSession(t, zkcli, cli, zkAddrs, "/", "meridian", "zookeeper")
}

// zkCliRunner is zkCli.sh's path and a runner of one command of it
// against a server, failing the test when the command fails.
func zkCliRunner(t *testing.T) (string, func(server string, args ...string) string) {
	zkcli := os.Getenv("ZKCLI")
	if zkcli == "" {
		t.Fatal("ZKCLI is not set: run through `make test` (scripts/install-zookeeper.sh provides zkCli.sh)")
	}
	return zkcli, func(server string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, zkcli, append([]string{"-server", server}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("zkCli.sh %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
}

// zkCliSession creates dir/cli, reads and lists it through other servers,
// then an interactive session sets a data watch on it and a child watch
// on dir while other processes change both, then deletes it. others are
// dir's other children.
func zkCliSession(t *testing.T, zkcli string, cli func(string, ...string) string, zkAddrs []string, dir string, others ...string) {
	t.Helper()
	node := strings.TrimSuffix(dir, "/") + "/cli"
	list := func(kids ...string) string {
		all := append(slices.Clone(kids), others...)
		slices.Sort(all)
		return "[" + strings.Join(all, ", ") + "]"
	}
	if out := cli(zkAddrs[0], "create", node, "hello"); !strings.Contains(out, "Created "+node) {
		t.Fatalf("create:\n%s", out)
	}
	if out := cli(zkAddrs[1], "get", node); !strings.Contains(out, "\nhello\n") {
		t.Fatalf("get:\n%s", out)
	}
	if out := cli(zkAddrs[2], "ls", dir); !strings.Contains(out, list("cli")) {
		t.Fatalf("ls %s:\n%s", dir, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	watcher := exec.CommandContext(ctx, zkcli, "-server", zkAddrs[0])
	stdin, _ := watcher.StdinPipe()
	var out strings.Builder
	watcher.Stdout, watcher.Stderr = &out, &out
	if err := watcher.Start(); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("get -w " + node + "\nls -w " + dir + "\n"))
	// The watches are set once the session has printed their replies.
	time.Sleep(3 * time.Second)
	cli(zkAddrs[1], "set", node, "world")
	cli(zkAddrs[2], "create", node+"2")
	time.Sleep(2 * time.Second)
	stdin.Write([]byte("quit\n"))
	stdin.Close()
	watcher.Wait()
	for _, want := range []string{"type:NodeDataChanged path:" + node, "type:NodeChildrenChanged path:" + dir} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("watcher session did not see %q:\n%s", want, out.String())
		}
	}
	if got := cli(zkAddrs[0], "get", node); !strings.Contains(got, "\nworld\n") {
		t.Fatalf("get after set:\n%s", got)
	}
	cli(zkAddrs[1], "delete", node)
	if got := cli(zkAddrs[2], "ls", dir); !strings.Contains(got, list("cli2")) {
		t.Fatalf("ls after delete:\n%s", got)
	}
}
