package chaos

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/netem"
	"github.com/meridian-coord/meridian/internal/server"
	"github.com/meridian-coord/meridian/internal/testutil"
)

// BuildServer builds the meridian binary (without the race detector: the
// servers are the system under test, not the harness) into dir.
func BuildServer(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "meridian")
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/meridian-coord/meridian/cmd/meridian").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build meridian: %v\n%s", err, out)
	}
	return bin, nil
}

// freePorts returns n distinct loopback ports that were free a moment ago,
// from below the kernel's ephemeral range (see testutil.PickPorts).
func freePorts(n int) ([]int, error) { return testutil.PickPorts(n) }

// ClusterConfig sizes and tunes a cluster.
type ClusterConfig struct {
	Binary        string
	Dir           string
	Nodes         int // default 3
	TickMs        int // raft tick (default 50)
	SessionTickMs int // session timeouts clamp to [2,20] of these (default 250)
	// RequestTimeoutMs bounds a server-side wait; short so that writes
	// stuck behind a fault resolve (as outcome unknown) quickly.
	RequestTimeoutMs int // default 3000
	SnapshotEntries  int // default 300, so snapshots and compaction happen
	// Proxied routes every server→server link through its own proxy and
	// delay link (needed for partitions and slow links).
	Proxied bool
	// DiskMB > 0 puts each node's data directory on its own tmpfs of that
	// size (needs root), so that a disk can be filled (disk-full).
	DiskMB int
	Logf   func(format string, args ...any)
}

// Node is one server process slot.
type Node struct {
	ID      uint64
	GRPC    string // gRPC address clients use
	dataDir string
	ZK      string // ZooKeeper protocol address
	cfgPath string
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	paused bool
}

// up reports whether the node's process runs and is not paused.
func (nd *Node) up() bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.cmd != nil && !nd.paused
}

// Cluster is a set of real meridian server processes on loopback.
type Cluster struct {
	cfg   ClusterConfig
	Nodes []*Node
	// links[i][j] carries node i+1's raft messages to node j+1 (nil on the
	// diagonal and when not proxied).
	links [][]*Proxy
	// delays[i][j] sits in front of links[i][j] and adds latency and
	// jitter (slow-* faults); zero delay otherwise.
	delays [][]*netem.Link
	mounts []string // tmpfs data directories (DiskMB)
}

// NewCluster writes configs and starts every node.
func NewCluster(cfg ClusterConfig) (*Cluster, error) {
	if cfg.Nodes <= 0 {
		cfg.Nodes = 3
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.TickMs, 50)
	def(&cfg.SessionTickMs, 250)
	def(&cfg.RequestTimeoutMs, 3000)
	def(&cfg.SnapshotEntries, 300)
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	n := cfg.Nodes
	ports, err := freePorts(4 * n)
	if err != nil {
		return nil, err
	}
	addr := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	members := make([]server.Member, n)
	for i := range n {
		members[i] = server.Member{ID: uint64(i + 1), Region: "local", Zone: fmt.Sprintf("z%d", i+1),
			Peer: addr(ports[4*i]), GRPC: addr(ports[4*i+1]), ZK: addr(ports[4*i+2]), HTTP: addr(ports[4*i+3])}
	}
	c := &Cluster{cfg: cfg}
	if cfg.Proxied {
		c.links = make([][]*Proxy, n)
		for i := range n {
			c.links[i] = make([]*Proxy, n)
			for j := range n {
				if i == j {
					continue
				}
				p, err := NewProxy(members[j].Peer)
				if err != nil {
					c.Close()
					return nil, err
				}
				c.links[i][j] = p
			}
		}
		c.delays = make([][]*netem.Link, n)
		for i := range n {
			c.delays[i] = make([]*netem.Link, n)
			for j := range n {
				if i == j {
					continue
				}
				// 127.0.0.2 for the same reason as the proxies (NewProxy).
				l, err := netem.Listen(netem.Config{Listen: "127.0.0.2:0", Target: c.links[i][j].Addr(),
					Seed: uint64(i*n + j), MaxConns: maxProxyConns})
				if err != nil {
					c.Close()
					return nil, err
				}
				c.delays[i][j] = l
			}
		}
	}
	for i := range n {
		// Each node sees the others' peer addresses through its own
		// outbound proxies; it listens on its real address.
		ms := append([]server.Member(nil), members...)
		if cfg.Proxied {
			for j := range n {
				if j != i {
					ms[j].Peer = c.delays[i][j].Addr()
				}
			}
		}
		sc := server.Config{ID: uint64(i + 1), DataDir: filepath.Join(cfg.Dir, fmt.Sprintf("n%d", i+1)), Members: ms,
			ListenPeer: members[i].Peer, TickMs: cfg.TickMs, ElectionTicks: electionTicks, SessionTickMs: cfg.SessionTickMs,
			RequestTimeoutMs: cfg.RequestTimeoutMs, SnapshotEntries: cfg.SnapshotEntries, LogLevel: "info"}
		if err := sc.UseDevTLS(filepath.Join(cfg.Dir, "tls")); err != nil {
			c.Close()
			return nil, err
		}
		if cfg.DiskMB > 0 {
			if err := os.MkdirAll(sc.DataDir, 0o755); err != nil {
				c.Close()
				return nil, err
			}
			out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm", cfg.DiskMB), "tmpfs", sc.DataDir).CombinedOutput()
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("disk faults need a tmpfs per node (root): mount %s: %v: %s", sc.DataDir, err, out)
			}
			c.mounts = append(c.mounts, sc.DataDir)
		}
		node := &Node{ID: uint64(i + 1), GRPC: members[i].GRPC, ZK: members[i].ZK, dataDir: sc.DataDir,
			cfgPath: filepath.Join(cfg.Dir, fmt.Sprintf("n%d.yaml", i+1)),
			logPath: filepath.Join(cfg.Dir, fmt.Sprintf("n%d.log", i+1))}
		if err := sc.WriteFile(node.cfgPath); err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, node)
	}
	for _, nd := range c.Nodes {
		if err := c.Start(nd.ID); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// ElectionTimeout is the servers' configured election timeout: the raft
// tick times the election ticks. The failure detector may stretch the
// tick at run time; the availability bound uses the configured value.
func (c *Cluster) ElectionTimeout() time.Duration {
	return time.Duration(c.cfg.TickMs*electionTicks) * time.Millisecond
}

// Endpoints returns every node's gRPC address, starting at node first
// (1-based; 0 for node 1), so clients spread over the servers.
func (c *Cluster) Endpoints(first int) []string {
	var eps []string
	for i := range c.Nodes {
		eps = append(eps, c.Nodes[(first+i)%len(c.Nodes)].GRPC)
	}
	return eps
}

func (c *Cluster) node(id uint64) *Node { return c.Nodes[id-1] }

// Start starts node id's process (it must not be running).
func (c *Cluster) Start(id uint64) error {
	nd := c.node(id)
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd != nil {
		return fmt.Errorf("node %d already running", id)
	}
	logf, err := os.OpenFile(nd.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.cfg.Binary, "server", "--config", nd.cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	nd.cmd, nd.done, nd.paused = cmd, done, false
	c.cfg.Logf("node %d started (pid %d)", id, cmd.Process.Pid)
	return nil
}

// Kill SIGKILLs node id and waits for it to exit.
func (c *Cluster) Kill(id uint64) {
	nd := c.node(id)
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd == nil {
		return
	}
	nd.cmd.Process.Signal(syscall.SIGKILL)
	<-nd.done
	nd.cmd, nd.done, nd.paused = nil, nil, false
	c.cfg.Logf("node %d killed", id)
}

// Pause SIGSTOPs node id; Resume SIGCONTs it.
func (c *Cluster) Pause(id uint64) { c.signal(id, syscall.SIGSTOP, true) }

// Resume continues a paused node.
func (c *Cluster) Resume(id uint64) { c.signal(id, syscall.SIGCONT, false) }

func (c *Cluster) signal(id uint64, sig syscall.Signal, paused bool) {
	nd := c.node(id)
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd == nil {
		return
	}
	nd.cmd.Process.Signal(sig)
	nd.paused = paused
	c.cfg.Logf("node %d %v", id, sig)
}

// Running reports whether node id has a live process.
func (c *Cluster) Running(id uint64) bool {
	nd := c.node(id)
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd == nil {
		return false
	}
	select {
	case <-nd.done:
		return false
	default:
		return true
	}
}

// Exited lists nodes whose process exited without being killed by the
// harness (a crash).
func (c *Cluster) Exited() []uint64 {
	var out []uint64
	for _, nd := range c.Nodes {
		nd.mu.Lock()
		if nd.cmd != nil {
			select {
			case <-nd.done:
				out = append(out, nd.ID)
			default:
			}
		}
		nd.mu.Unlock()
	}
	return out
}

// Block cuts the link carrying from's raft messages to to; Unblock restores it.
func (c *Cluster) Block(from, to uint64) {
	if c.links != nil {
		c.links[from-1][to-1].Block()
		c.cfg.Logf("link %d->%d blocked", from, to)
	}
}

// Unblock restores the link from→to.
func (c *Cluster) Unblock(from, to uint64) {
	if c.links != nil {
		c.links[from-1][to-1].Unblock()
	}
}

// SetDelay gives the link carrying from's raft messages to to a one-way
// delay with uniform jitter (zero restores it).
func (c *Cluster) SetDelay(from, to uint64, oneWay, jitter time.Duration) {
	if c.delays != nil {
		c.delays[from-1][to-1].SetDelay(oneWay, jitter, netem.Uniform)
	}
}

// Heal unblocks every link and removes every added delay.
func (c *Cluster) Heal() {
	for i := range c.links {
		for j := range c.links[i] {
			if c.links[i][j] != nil {
				c.links[i][j].Unblock()
				c.delays[i][j].SetDelay(0, 0, netem.Uniform)
			}
		}
	}
}

// TLSDir is the cluster's dev PKI (pki.Dev): its CA and admin client
// certificate.
func (c *Cluster) TLSDir() string { return filepath.Join(c.cfg.Dir, "tls") }

// ClientTLS is the TLS configuration of a client of the cluster (the dev
// admin client certificate); nil if the PKI cannot be read, which then
// fails the client's handshake visibly.
func (c *Cluster) ClientTLS() *tls.Config { return clientTLS(c.TLSDir()) }

func clientTLS(dir string) *tls.Config {
	tc, err := client.DevTLS(dir)
	if err != nil {
		return nil
	}
	return tc
}

// Proxied reports whether links can be cut.
func (c *Cluster) Proxied() bool { return c.links != nil }

// Status asks one node for its status (no session needed).
func (c *Cluster) Status(ctx context.Context, id uint64) (*pb.StatusResponse, error) {
	conn, err := grpc.NewClient(c.node(id).GRPC, client.DialOptions(client.Config{TLS: c.ClientTLS()})...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return pb.NewMeridianClient(conn).Status(ctx, &pb.StatusRequest{})
}

// Leader returns the member that says it leads in the highest term, waiting
// up to timeout for one; only running, unpaused nodes are asked.
func (c *Cluster) Leader(ctx context.Context, timeout time.Duration) (uint64, error) {
	deadline := time.Now().Add(timeout)
	for {
		var best uint64
		var term uint64
		for _, nd := range c.Nodes {
			if !nd.up() {
				continue
			}
			st, err := c.Status(ctx, nd.ID)
			if err == nil && st.GetLeaderId() == nd.ID && st.GetTerm() >= term {
				best, term = nd.ID, st.GetTerm()
			}
		}
		if best != 0 {
			return best, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, errors.New("no leader")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TransferLeader asks the current leader to hand leadership to target.
func (c *Cluster) TransferLeader(ctx context.Context, via, target uint64) error {
	conn, err := grpc.NewClient(c.node(via).GRPC, client.DialOptions(client.Config{TLS: c.ClientTLS()})...)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pb.NewMeridianClient(conn).TransferLeader(ctx, &pb.TransferLeaderRequest{TargetId: target})
	return err
}

// Close kills every process and closes the proxies.
func (c *Cluster) Close() {
	for _, nd := range c.Nodes {
		c.Resume(nd.ID) // a stopped process must be continued to die promptly
		c.Kill(nd.ID)
	}
	for i := range c.links {
		for j := range c.links[i] {
			if c.links[i][j] != nil {
				c.links[i][j].Close()
			}
		}
	}
	for i := range c.delays {
		for j := range c.delays[i] {
			if c.delays[i][j] != nil {
				c.delays[i][j].Close()
			}
		}
	}
	for _, m := range c.mounts {
		if out, err := exec.Command("umount", m).CombinedOutput(); err != nil {
			c.cfg.Logf("umount %s: %v: %s", m, err, out)
		}
	}
	c.mounts = nil
}

// FillDisk fills node id's data disk (DiskMB) with a ballast file until it
// is full; the returned function removes the ballast.
func (c *Cluster) FillDisk(id uint64) (func(), error) {
	if len(c.mounts) == 0 {
		return nil, errors.New("disk-full needs a cluster with DiskMB")
	}
	path := filepath.Join(c.node(id).dataDir, "ballast")
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			break // ENOSPC: full
		}
	}
	f.Sync()
	f.Close()
	c.cfg.Logf("node %d disk full", id)
	return func() { os.Remove(path) }, nil
}

// Reap records that node id's process exited by itself as expected (a
// full disk) so that Exited does not report it; false if it is running.
func (c *Cluster) Reap(id uint64) bool {
	if c.Running(id) {
		return false
	}
	c.Kill(id)
	return true
}

// ZKServers returns every node's ZooKeeper address, starting at node first.
func (c *Cluster) ZKServers(first int) []string {
	var eps []string
	for i := range c.Nodes {
		eps = append(eps, c.Nodes[(first+i)%len(c.Nodes)].ZK)
	}
	return eps
}
