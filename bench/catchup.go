package bench

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	gozk "github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/server"
)

// The scale experiment's catch-up: after the fill (and the restart), one
// follower (not the leader) starts again from an empty data directory and
// gets the whole tree from the leader. Each system does it the way an
// operator would:
//
//   - ZooKeeper: the follower is stopped, its data directory emptied but
//     for myid, and started again; the leader syncs it (SNAP).
//   - Meridian: a wiped member cannot rejoin under its id (raft does not
//     reuse a removed id, and a member without data and without join would
//     bootstrap a cluster of its own): it is removed (MemberChange), its
//     data directory wiped, and a new member (id 4, on fresh loopback
//     ports, no emulated link) added as a learner the leader promotes once
//     caught up, started with join.
//   - etcd: MemberRemove, the data directory wiped, MemberAdd with the same
//     peer URL, and the member started with --initial-cluster-state existing.
//
// A marker znode (etcd: key) is written once the follower is gone; the
// catch-up time runs from the process start to the first successful local
// read of it through a client of that server only (ZooKeeper: getData with
// no sync; Meridian: its ZooKeeper port, the default sequential read; etcd:
// a serializable Get).

// ScaleCatchup is one follower's catch-up from an empty data directory.
type ScaleCatchup struct {
	Procedure string
	Server    int     // 1-based: the follower that was wiped
	ListenSec float64 // from the process start until its client port accepts connections
	Sec       float64 // from the process start until it serves the marker
	// PeakRSSMiB is the process's VmHWM once caught up (its peak so far);
	// RSSMiB its VmRSS then.
	PeakRSSMiB float64
	RSSMiB     float64
	// SnapshotMiB: the snapshot file the follower holds once caught up
	// (Meridian: the one streamed into DataDir/snap; ZooKeeper:
	// version-2/snapshot.*; etcd: member/snap/*.snap.db); 0: none, it
	// caught up from the log.
	SnapshotMiB float64
	// LeaderSnapshotMiB: Meridian, the size of the leader's last snapshot
	// as its log reports it ("snapshot taken").
	LeaderSnapshotMiB float64 `json:",omitempty"`
	Error             string  `json:",omitempty"`
}

// scaleCatchupMarker is the znode (etcd: key) the caught-up follower must serve.
const scaleCatchupMarker = "/scale/catchup"

// AdminSuperDigest is the super_digest value for a Meridian cluster whose
// administrative calls the bench makes (membership, keyspaces).
func AdminSuperDigest() string {
	sum := sha1.Sum([]byte(ksSuperUser + ":" + ksSuperPassword))
	return ksSuperUser + ":" + base64.StdEncoding.EncodeToString(sum[:])
}

// MoveLeader transfers Meridian's leadership to server want (0-based)
// and waits until c reports it leading, within timeout.
func MoveLeader(c *Cluster, want int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	adm, err := client.New(ctx, client.Config{Endpoints: c.GRPC, SessionTimeout: 10 * time.Second,
		Digest: []string{ksSuperUser + ":" + ksSuperPassword}})
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	defer adm.Close()
	for c.Leader() != want {
		if err := adm.TransferLeader(ctx, uint64(want+1)); err != nil && ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("server %d still leads", c.Leader()+1)
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// runCatchup makes one follower of c catch up from scratch; a failure is
// recorded in the result (the fill's figures stand without it).
func runCatchup(e *Env, c *Cluster, region string, timeout time.Duration, progress func(string)) ScaleCatchup {
	l := c.Leader()
	f := 2
	if l >= 0 {
		f = (l + 1) % 3
	}
	res := ScaleCatchup{Server: f + 1}
	var err error
	switch c.System {
	case "zookeeper":
		err = catchupZooKeeper(e, c, region, f, l, timeout, &res)
	case "meridian":
		err = catchupMeridian(e, c, region, f, l, timeout, &res)
	case "etcd":
		err = catchupEtcd(e, c, region, f, l, timeout, &res)
	default:
		err = fmt.Errorf("no catch-up procedure for %s", c.System)
	}
	if err != nil {
		res.Error = err.Error()
		progress(fmt.Sprintf("scale %s: catch-up of server %d not measured: %v", c.System, f+1, err))
	} else {
		progress(fmt.Sprintf("scale %s: server %d caught up in %.1f s (listening after %.1f s); peak RSS %.0f MiB, RSS %.0f MiB, snapshot %.1f MiB",
			c.System, f+1, res.Sec, res.ListenSec, res.PeakRSSMiB, res.RSSMiB, res.SnapshotMiB))
	}
	return res
}

// writeMarker writes the marker through server s.
func writeMarker(c *Cluster, region string, s int, timeout time.Duration) ([]byte, error) {
	newKV := zkKV
	if c.System == "etcd" {
		newKV = etcdKV
	}
	z, err := newKV(c, region, s)
	if err != nil {
		return nil, err
	}
	defer z.Close()
	val := []byte(fmt.Sprintf("caught up %d", time.Now().UnixNano()))
	if err := createWithin(z, scaleCatchupMarker, val, timeout); err != nil {
		return nil, fmt.Errorf("writing the marker: %w", err)
	}
	return val, nil
}

// other returns a server that is neither f nor, if possible, unknown.
func other(f, l int) int {
	if l >= 0 && l != f {
		return l
	}
	return (f + 1) % 3
}

// waitCaughtUp times a started process: until addr listens, then until
// read returns want. It fills res.ListenSec, Sec and the memory figures.
// On failure it stops the process, so that the run's other figures stand.
func waitCaughtUp(e *Env, name, addr string, start time.Time, timeout time.Duration, want []byte,
	read func() ([]byte, error), res *ScaleCatchup) (err error) {
	defer func() {
		if err != nil {
			e.Stop(name)
		}
	}()
	if err := waitListen(addr, timeout); err != nil {
		return err
	}
	res.ListenSec = time.Since(start).Seconds()
	deadline := start.Add(timeout)
	var last error
	for {
		got, err := read()
		if err == nil && bytes.Equal(got, want) {
			break
		}
		if err == nil {
			err = fmt.Errorf("read %q", got)
		}
		last = err
		if ex := e.Exited(); slices.Contains(ex, name) {
			return fmt.Errorf("%s exited while catching up (last read: %v)", name, last)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not caught up after %v: %v", timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
	res.Sec = time.Since(start).Seconds()
	res.PeakRSSMiB, res.RSSMiB = e.procMem(name)
	return nil
}

// withTimeout runs f, giving up after d (ZooKeeper's client takes no context).
func withTimeout(d time.Duration, f func() ([]byte, error)) ([]byte, error) {
	type r struct {
		b   []byte
		err error
	}
	ch := make(chan r, 1)
	go func() { b, err := f(); ch <- r{b, err} }()
	select {
	case x := <-ch:
		return x.b, x.err
	case <-time.After(d):
		return nil, fmt.Errorf("no answer in %v", d)
	}
}

// zkLocalRead reads path through a ZooKeeper client of addr only (a new
// session each time: a server still syncing refuses connections).
func zkLocalRead(addr, path string) func() ([]byte, error) {
	var conn *gozk.Conn
	return func() ([]byte, error) {
		if conn == nil {
			c, _, err := gozk.Connect([]string{addr}, 10*time.Second, gozk.WithLogInfo(false), gozk.WithLogger(quiet{}))
			if err != nil {
				return nil, err
			}
			conn = c
		}
		b, err := withTimeout(5*time.Second, func() ([]byte, error) { v, _, err := conn.Get(path); return v, err })
		if err != nil && err != gozk.ErrNoNode {
			conn.Close()
			conn = nil
		}
		return b, err
	}
}

func catchupZooKeeper(e *Env, c *Cluster, region string, f, l int, timeout time.Duration, res *ScaleCatchup) error {
	res.Procedure = "follower stopped, data directory emptied but for myid, started again (the leader syncs it: SNAP)"
	name := fmt.Sprintf("zk%d", f+1)
	argv, err := e.Stop(name)
	if err != nil {
		return err
	}
	cfg, err := os.ReadFile(argv[len(argv)-1])
	if err != nil {
		return err
	}
	var data, port string
	for _, line := range strings.Split(string(cfg), "\n") {
		if v, ok := strings.CutPrefix(line, "dataDir="); ok {
			data = v
		}
		if v, ok := strings.CutPrefix(line, "clientPort="); ok {
			port = v
		}
	}
	if data == "" || port == "" {
		return fmt.Errorf("%s: no dataDir or clientPort in %s", name, argv[len(argv)-1])
	}
	ents, err := os.ReadDir(data)
	if err != nil {
		return err
	}
	for _, d := range ents {
		if d.Name() != "myid" {
			if err := os.RemoveAll(filepath.Join(data, d.Name())); err != nil {
				return err
			}
		}
	}
	want, err := writeMarker(c, region, other(f, l), time.Minute)
	if err != nil {
		return err
	}
	addr := "127.0.0.1:" + port
	start := time.Now()
	if err := e.Start(name, argv...); err != nil {
		return err
	}
	if err := waitCaughtUp(e, name, addr, start, timeout, want, zkLocalRead(addr, scaleCatchupMarker), res); err != nil {
		return err
	}
	res.SnapshotMiB = largestFileMiB(filepath.Join(data, "version-2"), "snapshot.")
	return nil
}

func catchupMeridian(e *Env, c *Cluster, region string, f, l int, timeout time.Duration, res *ScaleCatchup) error {
	res.Procedure = "member removed, data directory wiped, a new member (id 4, fresh ports) added as a learner promoted once caught up, started with join"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var eps []string
	for i, a := range c.GRPC {
		if i != f {
			eps = append(eps, a)
		}
	}
	adm, err := client.New(ctx, client.Config{Endpoints: eps, SessionTimeout: 10 * time.Second, RequestTimeout: time.Minute,
		Digest: []string{ksSuperUser + ":" + ksSuperPassword}})
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	defer adm.Close()
	old := fmt.Sprintf("meridian%d", f+1)
	if _, err := adm.ChangeMembers(ctx, &pb.MemberChangeOp{Type: pb.MemberChangeType_REMOVE_MEMBER, Member: &pb.Member{Id: uint64(f + 1)}}); err != nil {
		return fmt.Errorf("member remove %d: %w", f+1, err)
	}
	argv, err := e.Stop(old)
	if err != nil {
		return err
	}
	cfg, err := server.LoadConfig(argv[len(argv)-1])
	if err != nil {
		return err
	}
	if err := os.RemoveAll(cfg.DataDir); err != nil {
		return err
	}
	want, err := writeMarker(c, region, other(f, l), time.Minute)
	if err != nil {
		return err
	}
	p, err := e.Ports(3)
	if err != nil {
		return err
	}
	var self server.Member
	nc := cfg
	nc.ID, nc.Join, nc.ListenHTTP, nc.EnablePprof = 4, true, "", false
	nc.Members = slices.Clone(cfg.Members)
	for i, m := range nc.Members {
		if m.ID == cfg.ID {
			self = server.Member{ID: 4, Region: m.Region, Zone: m.Zone, Peer: fmt.Sprintf("127.0.0.1:%d", p[0]),
				GRPC: fmt.Sprintf("127.0.0.1:%d", p[1]), ZK: fmt.Sprintf("127.0.0.1:%d", p[2])}
			nc.Members[i] = self
		}
	}
	if self.ID == 0 {
		return fmt.Errorf("%s: its configuration does not list itself", old)
	}
	// LoadConfig filled in the old member's listening addresses.
	nc.ListenPeer, nc.ListenGRPC, nc.ListenZK = self.Peer, self.GRPC, self.ZK
	path := filepath.Join(e.Dir, "meridian-catchup.yaml")
	if err := nc.WriteFile(path); err != nil {
		return err
	}
	if _, err := adm.ChangeMembers(ctx, &pb.MemberChangeOp{Type: pb.MemberChangeType_ADD_LEARNER, PromoteWhenCaughtUp: true,
		Member: &pb.Member{Id: 4, Region: self.Region, Zone: self.Zone, PeerAddr: self.Peer, GrpcAddr: self.GRPC, ZkAddr: self.ZK}}); err != nil {
		return fmt.Errorf("member add 4: %w", err)
	}
	name := "meridian-catchup"
	start := time.Now()
	if err := e.Start(name, argv[0], "server", "--config", path); err != nil {
		return err
	}
	if err := waitCaughtUp(e, name, self.ZK, start, timeout, want, zkLocalRead(self.ZK, scaleCatchupMarker), res); err != nil {
		return err
	}
	res.SnapshotMiB = largestFileMiB(filepath.Join(nc.DataDir, "snap"), "")
	if l >= 0 {
		res.LeaderSnapshotMiB = float64(logSnapshots(filepath.Join(e.Dir, fmt.Sprintf("meridian%d.log", l+1))).LastBytes) / (1 << 20)
	}
	return nil
}

func catchupEtcd(e *Env, c *Cluster, region string, f, l int, timeout time.Duration, res *ScaleCatchup) error {
	res.Procedure = "MemberRemove, data directory wiped, MemberAdd with the same peer URL, started with --initial-cluster-state existing"
	var eps []string
	for i, a := range c.Etcd[region] {
		if i != f {
			eps = append(eps, a)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := fmt.Sprintf("etcd%d", f+1)
	member := fmt.Sprintf("e%d", f+1)
	list, err := cli.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("member list: %w", err)
	}
	var id uint64
	var peerURLs []string
	for _, m := range list.Members {
		if m.Name == member {
			id, peerURLs = m.ID, m.PeerURLs
		}
	}
	if id == 0 {
		return fmt.Errorf("no member %s in %v", member, list.Members)
	}
	// Just after the restart etcd refuses membership changes as an
	// "unhealthy cluster" until its members have been connected a while.
	for {
		_, err := cli.MemberRemove(ctx, id)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "unhealthy cluster") || ctx.Err() != nil {
			return fmt.Errorf("member remove %s: %w", member, err)
		}
		time.Sleep(time.Second)
	}
	argv, err := e.Stop(name)
	if err != nil {
		return err
	}
	data, clientURL := argValue(argv, "--data-dir"), argValue(argv, "--advertise-client-urls")
	if data == "" || clientURL == "" {
		return fmt.Errorf("%s: no --data-dir or --advertise-client-urls in %v", name, argv)
	}
	if err := os.RemoveAll(data); err != nil {
		return err
	}
	want, err := writeMarker(c, region, other(f, l), time.Minute)
	if err != nil {
		return err
	}
	var add *clientv3.MemberAddResponse
	for {
		add, err = cli.MemberAdd(ctx, peerURLs)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "unhealthy cluster") || ctx.Err() != nil {
			return fmt.Errorf("member add: %w", err)
		}
		time.Sleep(time.Second)
	}
	var initial []string
	for _, m := range add.Members {
		n := m.Name
		if m.ID == add.Member.ID {
			n = member
		}
		for _, u := range m.PeerURLs {
			initial = append(initial, n+"="+u)
		}
	}
	argv = slices.Clone(argv)
	setArg(argv, "--initial-cluster", strings.Join(initial, ","))
	setArg(argv, "--initial-cluster-state", "existing")
	addr := strings.TrimPrefix(clientURL, "http://")
	local, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer local.Close()
	read := func() ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := local.Get(ctx, scaleCatchupMarker, clientv3.WithSerializable())
		if err != nil {
			return nil, err
		}
		if len(r.Kvs) == 0 {
			return nil, fmt.Errorf("%s not found", scaleCatchupMarker)
		}
		return r.Kvs[0].Value, nil
	}
	start := time.Now()
	if err := e.Start(name, argv...); err != nil {
		return err
	}
	if err := waitCaughtUp(e, name, addr, start, timeout, want, read, res); err != nil {
		return err
	}
	res.SnapshotMiB = largestFileMiB(filepath.Join(data, "member", "snap"), "")
	return nil
}

// argValue is the value following flag in argv ("" if absent).
func argValue(argv []string, flag string) string {
	if i := slices.Index(argv, flag); i >= 0 && i+1 < len(argv) {
		return argv[i+1]
	}
	return ""
}

// setArg sets the value following flag in argv, if present.
func setArg(argv []string, flag, v string) {
	if i := slices.Index(argv, flag); i >= 0 && i+1 < len(argv) {
		argv[i+1] = v
	}
}

// largestFileMiB is the size of the largest file in dir whose name starts
// with prefix (0: none).
func largestFileMiB(dir, prefix string) float64 {
	var most int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), prefix) && !strings.HasSuffix(d.Name(), ".tmp") {
			if info, err := d.Info(); err == nil {
				most = max(most, info.Size())
			}
		}
		return nil
	})
	return float64(most) / (1 << 20)
}
