package bench

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/meridian-coord/meridian/internal/server"
)

// Cluster is a running system: for every client region, the address of
// the emulated link from there to each server.
type Cluster struct {
	System string
	Native map[string][]string // Meridian gRPC
	ZK     map[string][]string // ZooKeeper protocol (Meridian and ZooKeeper)
	Etcd   map[string][]string
	Redis  map[string]string // one server: single-instance Redlock
	GRPC   []string          // Meridian: each server's own gRPC address (no emulated link), for operator calls
	// Leader returns the index of the leading server (-1: unknown).
	Leader func() int
	// HTTP: Meridian with MeridianOptions.Pprof or Metrics, each server's HTTP
	// address (no emulated link).
	HTTP []string
	// Notes describes the durability and emulation settings.
	Notes string
	// CPU returns the CPU time the system's processes have used so far
	// (nil: not measured).
	CPU func() time.Duration
	// Direct: each server's own client address, with no emulated link in
	// front (the ZooKeeper port; etcd: the client URL's host:port), for
	// experiments that open more connections than proxies should carry.
	Direct []string
}

// clientRegions returns the topology's distinct client regions.
func clientRegions(t *Topology) []string {
	var out []string
	for _, r := range t.Clients {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// srvrMode asks a ZooKeeper-protocol server for its mode with the srvr
// four-letter word (Meridian answers it too).
func srvrMode(addr string) string {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	c.Write([]byte("srvr"))
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return m
		}
	}
	return ""
}

func leaderBySrvr(direct []string) func() int {
	return func() int {
		for i, a := range direct {
			if srvrMode(a) == "leader" {
				return i
			}
		}
		return -1
	}
}

// waitZK waits until a write through the ZooKeeper protocol succeeds.
func waitZK(addrs []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, _, err := gozk.Connect(addrs, 10*time.Second, gozk.WithLogInfo(false), gozk.WithLogger(quiet{}))
		if err == nil {
			_, err = conn.Create("/ready", nil, 0, gozk.WorldACL(gozk.PermAll))
			if err == gozk.ErrNodeExists {
				err = nil
			}
			conn.Close()
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ready: %w", err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// StartMeridian starts 3 `meridian server` processes (bin) with the
// topology's regions and leader placement on (as a multi-region deployment
// should run it); every server→server link is a per-pair emulated link.
// preferLeader (1-based, 0: none) pins the leader, an operator's choice.
func StartMeridian(e *Env, bin string, preferLeader uint64) (*Cluster, error) {
	return StartMeridianWith(e, bin, MeridianOptions{PreferLeader: preferLeader})
}

// MeridianOptions shapes a Meridian cluster beyond the topology.
type MeridianOptions struct {
	PreferLeader uint64 // 1-based, 0: none
	// PlacementPolicy is placement_policy ("": the default, center of gravity).
	PlacementPolicy string
	// LearnerRegion adds a fourth server there, a non-voting replica
	// (learner): Native[r][3] and ZK[r][3] reach it.
	LearnerRegion string
	// SuperDigest is super_digest (ZooKeeper's superDigest), for the
	// admin calls a workload makes (creating keyspaces). "": none.
	SuperDigest string
	// Metrics serves /metrics on each server's HTTP port (listed in
	// Cluster.HTTP), for figures a workload reads from the servers.
	Metrics bool
	// Pprof serves Go's profiles on each server's HTTP port (enable_pprof),
	// listed in Cluster.HTTP, to profile a server under a workload.
	Pprof bool
	// MaxClientConnections is max_client_connections (0: the server's
	// default, 10000 or what its file-descriptor limit has room for).
	MaxClientConnections int
}

// StartMeridianWith is StartMeridian with options.
func StartMeridianWith(e *Env, bin string, o MeridianOptions) (*Cluster, error) {
	t := e.Topo
	regions := slices.Clone(t.Servers)
	if o.LearnerRegion != "" {
		regions = append(regions, o.LearnerRegion)
	}
	n := len(regions)
	p, err := e.Ports(3 * n)
	if err != nil {
		return nil, err
	}
	// Round trips between members and from clients: zone-aware among the
	// topology's servers; the learner (LearnerRegion) by region.
	serverRTT := func(i, j int) time.Duration {
		if i < len(t.Servers) && j < len(t.Servers) {
			return t.ServerRTT(i, j)
		}
		return t.RTT(regions[i], regions[j])
	}
	clientRTT := func(r string, i int) time.Duration {
		if i < len(t.Servers) {
			return t.ClientServerRTT(r, i)
		}
		return t.RTT(r, regions[i])
	}
	real := make([]server.Member, n)
	for i := range real {
		zone := fmt.Sprint(i)
		if i < len(t.Servers) && t.HasZones() {
			zone = t.Zones[i]
		}
		real[i] = server.Member{ID: uint64(i + 1), Region: regions[i], Zone: zone,
			Peer: fmt.Sprintf("127.0.0.1:%d", p[3*i]), GRPC: fmt.Sprintf("127.0.0.1:%d", p[3*i+1]),
			ZK: fmt.Sprintf("127.0.0.1:%d", p[3*i+2])}
	}
	if o.LearnerRegion != "" {
		real[3].Role = "learner"
	}
	c := &Cluster{System: "meridian", Native: map[string][]string{}, ZK: map[string][]string{}}
	var direct []string
	for i := 0; i < n; i++ {
		members := slices.Clone(real)
		for j := range members {
			if j != i {
				if members[j].Peer, err = e.linkRTT(serverRTT(i, j), real[j].Peer, ""); err != nil {
					return nil, err
				}
			}
		}
		cfg := server.Config{ID: uint64(i + 1), DataDir: filepath.Join(e.Dir, fmt.Sprint(i+1)), Members: members,
			ListenPeer: real[i].Peer, PreferLeader: o.PreferLeader, Placement: "auto",
			PlacementMinIntervalMs: 5000, MaxTickMs: 1000, PlacementPolicy: o.PlacementPolicy,
			// Plaintext, as the ZooKeeper, etcd and Redis it is compared with;
			// no per-address cap, as ZooKeeper's maxClientCnxns=0 below (every
			// bench client connects from 127.0.0.1).
			Insecure: true, MaxClientCnxns: new(int), SuperDigest: o.SuperDigest,
			MaxClientConnections: o.MaxClientConnections}
		if o.Pprof || o.Metrics {
			hp, err := e.Ports(1)
			if err != nil {
				return nil, err
			}
			cfg.ListenHTTP, cfg.EnablePprof = fmt.Sprintf("127.0.0.1:%d", hp[0]), o.Pprof
			c.HTTP = append(c.HTTP, cfg.ListenHTTP)
		}
		path := filepath.Join(e.Dir, fmt.Sprintf("meridian%d.yaml", i+1))
		if err := cfg.WriteFile(path); err != nil {
			return nil, err
		}
		if err := e.Start(fmt.Sprintf("meridian%d", i+1), bin, "server", "--config", path); err != nil {
			return nil, err
		}
		direct = append(direct, real[i].ZK)
	}
	for _, r := range clientRegions(t) {
		for i := 0; i < n; i++ {
			nat, err := e.linkRTT(clientRTT(r, i), real[i].GRPC, "")
			if err != nil {
				return nil, err
			}
			z, err := e.linkRTT(clientRTT(r, i), real[i].ZK, "")
			if err != nil {
				return nil, err
			}
			c.Native[r] = append(c.Native[r], nat)
			c.ZK[r] = append(c.ZK[r], z)
		}
	}
	if err := waitZK(direct[:3], 60*time.Second); err != nil {
		return nil, fmt.Errorf("meridian: %w (logs in %s)", err, e.Dir)
	}
	c.Leader = leaderBySrvr(direct[:len(t.Servers)])
	c.Direct = slices.Clone(direct)
	for i := 0; i < len(t.Servers); i++ {
		c.GRPC = append(c.GRPC, real[i].GRPC)
	}
	c.Notes = "fsync on (one synced Pebble batch per raft Ready); placement: auto with a 5 s minimum interval between moves (default 30 s) so the 10 s warm-up lets the leader settle where the workload is; raft tick from measured round trips (max_tick_ms 1000)"
	if o.PlacementPolicy != "" {
		c.Notes += "; placement_policy " + o.PlacementPolicy
	}
	return c, nil
}

// ZooKeeperJar is Debian's zookeeper package.
const ZooKeeperJar = "/usr/share/java/zookeeper.jar"

// StartZooKeeper starts 3 ZooKeeper 3.8 servers with fsync on (its
// default forceSync=yes); each server's zoo.cfg names its own per-pair
// links for the other servers' quorum and election ports.
func StartZooKeeper(e *Env) (*Cluster, error) { return StartZooKeeperWith(e, ZKOptions{}) }

// ZKOptions shapes a ZooKeeper cluster beyond the topology.
type ZKOptions struct {
	// LeaderRegion puts ZooKeeper's first leader in this server region:
	// that server gets the highest myid and starts first, so fast leader
	// election (which prefers the highest server id among equal logs) picks
	// it. ZooKeeper has no leader priority or transfer; this is how an
	// operator would have to arrange it. "": myids in order, started together.
	LeaderRegion string
	// Observers: on a topology of more servers in three regions, the first
	// server of each region votes and every other one is an observer
	// (ZooKeeper's non-voting replica, serving reads and forwarding writes).
	Observers bool
	// Heap is the JVM's -Xmx ("": 512m, enough for every workload but the
	// scale experiment's fill).
	Heap string
}

// StartZooKeeperWith starts 3 ZooKeeper servers as StartZooKeeper does.
func StartZooKeeperWith(e *Env, o ZKOptions) (*Cluster, error) {
	if _, err := os.Stat(ZooKeeperJar); err != nil {
		return nil, fmt.Errorf("ZooKeeper is not installed: run make bench-deps")
	}
	t := e.Topo
	n := len(t.Servers)
	observer := make([]bool, n)
	if o.Observers {
		// The first server of each region votes, the others observe.
		seen := map[string]bool{}
		for i, r := range t.Servers {
			observer[i] = seen[r]
			seen[r] = true
		}
		if len(seen) != 3 || o.LeaderRegion != "" {
			return nil, fmt.Errorf("zookeeper: observers need servers in exactly 3 regions and no leader region (topology %s)", t.Name)
		}
	} else if n != 3 {
		return nil, fmt.Errorf("zookeeper: the harness runs 3 servers (or observers), topology %s has %d", t.Name, n)
	}
	p, err := e.Ports(3 * n)
	if err != nil {
		return nil, err
	}
	c := &Cluster{System: "zookeeper", ZK: map[string][]string{}}
	var sid, order []int
	for i := 0; i < n; i++ {
		sid, order = append(sid, i+1), append(order, i)
	}
	if o.LeaderRegion != "" {
		first := slices.Index(t.Servers, o.LeaderRegion)
		if first < 0 {
			return nil, fmt.Errorf("zookeeper: no server in region %q", o.LeaderRegion)
		}
		order = append([]int{first}, slices.DeleteFunc(order, func(i int) bool { return i == first })...)
		for rank, i := range order {
			sid[i] = 3 - rank
		}
	}
	direct := make([]string, n)
	for _, i := range order {
		data := filepath.Join(e.Dir, fmt.Sprint(i+1))
		os.MkdirAll(data, 0o755)
		os.WriteFile(filepath.Join(data, "myid"), []byte(fmt.Sprint(sid[i])), 0o644)
		var lines []string
		for j := 0; j < n; j++ {
			quorum, election := fmt.Sprintf("127.0.0.1:%d", p[3*j]), fmt.Sprintf("127.0.0.1:%d", p[3*j+1])
			if j != i {
				if quorum, err = e.linkRTT(t.ServerRTT(i, j), quorum, ""); err != nil {
					return nil, err
				}
				if election, err = e.linkRTT(t.ServerRTT(i, j), election, ""); err != nil {
					return nil, err
				}
			}
			// One host for both ports: every link listens on 127.0.0.1.
			line := fmt.Sprintf("server.%d=%s:%s", sid[j], quorum, election[strings.LastIndex(election, ":")+1:])
			if observer[j] {
				line += ":observer"
			}
			lines = append(lines, line)
		}
		if observer[i] {
			lines = append(lines, "peerType=observer")
		}
		cfg := fmt.Sprintf("tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"+
			"admin.enableServer=false\n4lw.commands.whitelist=*\nmaxClientCnxns=0\n%s\n", data, p[3*i+2], strings.Join(lines, "\n"))
		path := filepath.Join(e.Dir, fmt.Sprintf("zoo%d.cfg", i+1))
		os.WriteFile(path, []byte(cfg), 0o644)
		heap := cmp.Or(o.Heap, "512m")
		if err := e.Start(fmt.Sprintf("zk%d", i+1), "java", "-Xmx"+heap,
			"-cp", "/etc/zookeeper/conf:"+ZooKeeperJar, "-Dzookeeper.log.dir="+e.Dir,
			"org.apache.zookeeper.server.quorum.QuorumPeerMain", path); err != nil {
			return nil, err
		}
		direct[i] = fmt.Sprintf("127.0.0.1:%d", p[3*i+2])
		if o.LeaderRegion != "" && i == order[0] {
			// Let the chosen server be looking before the others vote.
			if err := waitListen(direct[i], 30*time.Second); err != nil {
				return nil, fmt.Errorf("zookeeper: %w (logs in %s)", err, e.Dir)
			}
			time.Sleep(time.Second)
		}
	}
	for _, r := range clientRegions(t) {
		for i := 0; i < n; i++ {
			z, err := e.linkRTT(t.ClientServerRTT(r, i), direct[i], "")
			if err != nil {
				return nil, err
			}
			c.ZK[r] = append(c.ZK[r], z)
		}
	}
	if err := waitZK(direct, 90*time.Second); err != nil {
		return nil, fmt.Errorf("zookeeper: %w (logs in %s)", err, e.Dir)
	}
	c.Leader = leaderBySrvr(direct)
	c.Direct = slices.Clone(direct)
	c.Notes = "fsync on (forceSync=yes, the default)"
	if o.Observers {
		c.Notes += fmt.Sprintf("; %d servers: the first of each region votes, the others observe", n)
	}
	if o.LeaderRegion != "" {
		c.Notes += "; first leader placed in " + o.LeaderRegion + " (highest myid, started first; if the election still chose another, that one was restarted)"
		// Fast leader election prefers the highest id only among votes it
		// has heard: two servers close to each other can settle on one of
		// them before the far one's vote arrives (a CI run: 3region, leader
		// CA). ZooKeeper has no leader transfer, so restart the wrong
		// leader: the two left have equal logs and elect the highest id.
		for attempt := 0; ; attempt++ {
			l := c.Leader()
			if l >= 0 && t.Servers[l] == o.LeaderRegion {
				break
			}
			if attempt == 3 || l < 0 {
				return nil, fmt.Errorf("zookeeper: leader is server %d, not the one in %s (logs in %s)", l+1, o.LeaderRegion, e.Dir)
			}
			time.Sleep(time.Second) // every follower logs the last write (waitZK's), so logs are equal
			if err := e.Restart(fmt.Sprintf("zk%d", l+1)); err != nil {
				return nil, fmt.Errorf("zookeeper: %w (logs in %s)", err, e.Dir)
			}
			if err := waitZK(direct, 90*time.Second); err != nil {
				return nil, fmt.Errorf("zookeeper: %w (logs in %s)", err, e.Dir)
			}
		}
	}
	return c, nil
}

// waitListen waits until addr accepts connections.
func waitListen(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening after %v: %w", addr, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StartEtcd starts 3 etcd members (Debian's etcd-server) with fsync on
// (etcd always syncs its WAL). etcd advertises one peer URL to all
// members, so per-pair delays need each member in its own network
// namespace (Env.SetupNetns, root only); where namespaces cannot be made
// the members share loopback and every member's inbound peer traffic gets
// one delay (the mean of its pairs), which is exact only when all server
// pairs have the same round trip, and the report says so.
func StartEtcd(e *Env) (*Cluster, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, fmt.Errorf("etcd is not installed: run make bench-deps")
	}
	t := e.Topo
	if len(t.Servers) != 3 {
		return nil, fmt.Errorf("etcd: the harness runs 3 servers, topology %s has %d", t.Name, len(t.Servers))
	}
	c := &Cluster{System: "etcd", Etcd: map[string][]string{}}
	useNetns := true
	var nsErr error
	if nsErr = e.SetupNetns(3); nsErr != nil {
		useNetns = false
	}
	var clientTargets, peerURLs []string
	var cluster []string
	var ports []int
	if useNetns {
		for i := 0; i < 3; i++ {
			clientTargets = append(clientTargets, HostAddr(i)+":2379")
			peerURLs = append(peerURLs, "http://"+AdvertisedAddr(i)+":2380")
			// In member i's namespace, member j's advertised address is a
			// link with pair (i,j)'s delay to j's host-side address.
			for j := 0; j < 3; j++ {
				if j == i {
					continue
				}
				if err := e.LinkInNetns(i, t.RTT(t.Servers[i], t.Servers[j]), HostAddr(j)+":2380", AdvertisedAddr(j)+":2380"); err != nil {
					return nil, err
				}
			}
		}
	} else {
		if ports, err = e.Ports(6); err != nil {
			return nil, err
		}
		for i := 0; i < 3; i++ {
			clientTargets = append(clientTargets, fmt.Sprintf("127.0.0.1:%d", ports[2*i]))
			// Advertise a link in front of the real peer port, with the
			// mean of the round trips from the other members.
			var sum time.Duration
			for j := 0; j < 3; j++ {
				if j != i {
					sum += t.RTT(t.Servers[j], t.Servers[i])
				}
			}
			a, err := e.linkRTT(sum/2, fmt.Sprintf("127.0.0.1:%d", ports[2*i+1]), "")
			if err != nil {
				return nil, err
			}
			peerURLs = append(peerURLs, "http://"+a)
		}
	}
	for i := 0; i < 3; i++ {
		cluster = append(cluster, fmt.Sprintf("e%d=%s", i+1, peerURLs[i]))
	}
	// etcd's defaults assume a LAN (heartbeat 100 ms, election 1 s); the
	// etcd tuning guide says heartbeat ≈ the round trip and election ≥ 10×.
	var maxRTT time.Duration
	for i := 0; i < 3; i++ {
		for j := 0; j < 3; j++ {
			maxRTT = max(maxRTT, t.RTT(t.Servers[i], t.Servers[j]))
		}
	}
	hb := max(100*time.Millisecond, maxRTT*3/2)
	for i := 0; i < 3; i++ {
		// In its namespace a member listens on its host-side address only:
		// the other members' advertised addresses are links there.
		listenPeer, listenClient := "http://"+HostAddr(i)+":2380", "http://"+clientTargets[i]
		if !useNetns {
			listenPeer, listenClient = fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]), "http://"+clientTargets[i]
		}
		argv := []string{bin, "--name", fmt.Sprintf("e%d", i+1), "--data-dir", filepath.Join(e.Dir, fmt.Sprintf("etcd%d", i+1)),
			"--listen-peer-urls", listenPeer, "--initial-advertise-peer-urls", peerURLs[i],
			"--listen-client-urls", listenClient, "--advertise-client-urls", "http://" + clientTargets[i],
			"--initial-cluster", strings.Join(cluster, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "bench", "--heartbeat-interval", fmt.Sprint(hb.Milliseconds()),
			"--election-timeout", fmt.Sprint(10 * hb.Milliseconds()), "--logger", "zap", "--log-level", "warn"}
		if useNetns {
			argv = e.NetnsExec(i, argv...)
		}
		if err := e.Start(fmt.Sprintf("etcd%d", i+1), argv...); err != nil {
			return nil, err
		}
	}
	for _, r := range clientRegions(t) {
		for i := 0; i < 3; i++ {
			a, err := e.Link(r, t.Servers[i], clientTargets[i], "")
			if err != nil {
				return nil, err
			}
			c.Etcd[r] = append(c.Etcd[r], a)
		}
	}
	if err := waitEtcd(clientTargets, 90*time.Second); err != nil {
		return nil, fmt.Errorf("etcd: %w (logs in %s)", err, e.Dir)
	}
	c.Leader = func() int { return etcdLeader(clientTargets) }
	c.Direct = slices.Clone(clientTargets)
	c.Notes = fmt.Sprintf("fsync on (etcd always syncs its WAL); heartbeat %v, election timeout %v", hb, 10*hb)
	if useNetns {
		c.Notes += "; per-pair peer delays through network namespaces"
	} else if t.UniformServers() {
		c.Notes += fmt.Sprintf("; one delay per destination member (exact here: uniform server round trips; no namespaces: %v)", nsErr)
	} else {
		c.Notes += fmt.Sprintf("; APPROXIMATE: one delay per destination member, the mean of its pairs (no namespaces: %v)", nsErr)
	}
	return c, nil
}

func waitEtcd(eps []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = cli.Put(ctx, "/ready", "")
			cancel()
			cli.Close()
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ready: %w", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func etcdLeader(eps []string) int {
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return -1
	}
	defer cli.Close()
	for i, ep := range eps {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		st, err := cli.Status(ctx, ep)
		cancel()
		if err == nil && st.Header.GetMemberId() == st.Leader {
			return i
		}
	}
	return -1
}

// StartRedis starts one redis-server in the first server's region with
// appendonly yes and appendfsync always (every write fsynced before the
// reply, like the consensus systems): single-instance Redlock.
func StartRedis(e *Env) (*Cluster, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed: run make bench-deps")
	}
	p, err := e.Ports(1)
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", p[0])
	if err := e.Start("redis", bin, "--port", fmt.Sprint(p[0]), "--bind", "127.0.0.1", "--dir", e.Dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode", "no"); err != nil {
		return nil, err
	}
	c := &Cluster{System: "redis", Redis: map[string]string{}, Leader: func() int { return 0 },
		Notes: "one server (single-instance Redlock), appendfsync always"}
	for _, r := range clientRegions(e.Topo) {
		a, err := e.Link(r, e.Topo.Servers[0], addr, "")
		if err != nil {
			return nil, err
		}
		c.Redis[r] = a
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		rc := redis.NewClient(&redis.Options{Addr: addr})
		err := rc.Ping(context.Background()).Err()
		rc.Close()
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("redis: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
