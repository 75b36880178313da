package replica

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/meridian-coord/meridian/internal/pki"
)

func helloBytes(from, cluster uint64) []byte {
	var b [helloPayload]byte
	binary.BigEndian.PutUint64(b[:], cluster)
	return frameBytes(kindHello, from, b[:])
}

// peerHello opens a connection to a member's peer port (TLS when tc is
// set), says hello as member from of cluster cid and returns the
// connection and the answer's refusal reason ("" accepted). err reports a
// connection closed without an answer (refused before the hello was read:
// TLS, identity, or no hello at all).
func peerHello(t *testing.T, addr string, from, cid uint64, tc *tls.Config) (net.Conn, string, error) {
	t.Helper()
	raw, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var c net.Conn = raw
	if tc != nil {
		c = tls.Client(raw, tc)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(helloBytes(from, cid)); err != nil {
		c.Close()
		return nil, "", err
	}
	var hdr [4 + frameHeader]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		c.Close()
		return nil, "", err
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:4])-frameHeader)
	if _, err := io.ReadFull(c, body); err != nil || hdr[4] != kindHello || len(body) < helloPayload {
		c.Close()
		return nil, "", fmt.Errorf("bad answer to hello: kind %d, %v", hdr[4], err)
	}
	c.SetDeadline(time.Time{})
	return c, string(body[helloPayload:]), nil
}

// peerConnect is peerHello that must be accepted.
func peerConnect(t *testing.T, addr string, from, cid uint64, tc *tls.Config) net.Conn {
	t.Helper()
	c, reason, err := peerHello(t, addr, from, cid, tc)
	if err != nil || reason != "" {
		t.Fatalf("hello as member %d refused: %q, %v", from, reason, err)
	}
	return c
}

// requireClosed: the member closes c (EOF or reset, not a timeout).
func requireClosed(t *testing.T, what string, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: connection not closed", what)
	}
	c.Close()
}

// testPKI is a CA with member certificates for ids 1..n, and a second,
// unrelated CA.
type testPKI struct {
	ca, otherCA *pki.CA
	members     map[uint64]tls.Certificate
	foreign     tls.Certificate // member 1's identity, issued by otherCA
}

func newTestPKI(t *testing.T, n int) *testPKI {
	t.Helper()
	ca, err := pki.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{ca: ca, otherCA: other, members: map[uint64]tls.Certificate{}}
	for id := uint64(1); id <= uint64(n); id++ {
		l, err := ca.IssueMember(pki.MemberIdentity("", id), []string{"127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		p.members[id] = l.TLSCertificate()
	}
	l, err := other.IssueMember(pki.MemberIdentity("", 1), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	p.foreign = l.TLSCertificate()
	return p
}

// secure makes a cluster's members use TLS and cluster token token.
func (p *testPKI) secure(token string) func(*Config) {
	return func(cfg *Config) {
		cfg.PeerTLS = &PeerTLS{Cert: p.members[cfg.ID], CA: p.ca.Pool()}
		cfg.ClusterToken = token
	}
}

// client is a dialer's TLS configuration presenting cert whatever CAs the
// member asks for (the server's certificate is not checked: the tests play
// the attacker).
func client(cert tls.Certificate) *tls.Config {
	return &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }}
}

func TestPeerTLSReplicates(t *testing.T) {
	p := newTestPKI(t, 3)
	c := newCluster(t, 3, p.secure("token-a"))
	lead := c.leader()
	c.put(lead, "a", "1")
	c.put((lead+1)%3, "b", "2")
	want := FormatClusterID(ClusterID("token-a"))
	for i, r := range c.reps {
		if got := r.Status().ClusterID; got != want || len(got) != 16 {
			t.Fatalf("member %d: cluster id %q, want %q", i+1, got, want)
		}
	}
	// Restarted, a member keeps talking over TLS.
	c.stop(lead)
	c.start(lead)
	c.put(c.leader(), "c", "3")
}

// memberState is what a forged frame must not change.
type memberState struct {
	term, leader, applied uint64
	data                  map[string]string
	members               []Peer
}

func (c *cluster) states() []memberState {
	var out []memberState
	for i, r := range c.reps {
		st := r.Status()
		out = append(out, memberState{term: st.Term, leader: st.Leader, applied: st.Applied, data: c.sms[i].state(), members: st.Members})
	}
	return out
}

func sameStates(a, b []memberState) error {
	for i := range a {
		x, y := a[i], b[i]
		if x.term != y.term || x.leader != y.leader || x.applied != y.applied {
			return fmt.Errorf("member %d: term/leader/applied %d/%d/%d became %d/%d/%d", i+1, x.term, x.leader, x.applied, y.term, y.leader, y.applied)
		}
		if !maps.Equal(x.data, y.data) {
			return fmt.Errorf("member %d: data %v became %v", i+1, x.data, y.data)
		}
		if !slices.EqualFunc(x.members, y.members, func(p, q Peer) bool {
			return p.ID == q.ID && p.Addr == q.Addr && p.Learner == q.Learner && bytes.Equal(p.Meta, q.Meta) && p.Identity == q.Identity
		}) {
			return fmt.Errorf("member %d: members %v became %v", i+1, x.members, y.members)
		}
	}
	return nil
}

// TestForgedPeerFramesRefused: raft frames that would move the term (a
// heartbeat from the "leader" at a higher term) and write data (a
// proposal) reach a member over every unauthenticated or misauthenticated
// path an attacker has; each is refused, and nothing changes anywhere.
func TestForgedPeerFramesRefused(t *testing.T) {
	p := newTestPKI(t, 3)
	c := newCluster(t, 3, p.secure("token-a"))
	lead := c.leader()
	c.put(lead, "a", "1")
	f := (lead + 1) % 3     // the target: a follower
	third := (lead + 2) % 3 // the member whose certificate is misused
	leadID, fID, thirdID := uint64(lead+1), uint64(f+1), uint64(third+1)
	cid := ClusterID("token-a")
	before := c.states()

	forged := func(sender uint64) []byte {
		term := before[f].term + 5
		hb := frameBytes(kindRaft, sender, marshal(t, &pb.Message{Type: pb.MsgHeartbeat.Enum(), To: new(fID), From: new(leadID), Term: new(term)}))
		prop := frameBytes(kindRaft, sender, marshal(t, &pb.Message{Type: pb.MsgProp.Enum(), To: new(fID), From: new(leadID),
			Entries: []*pb.Entry{{Type: pb.EntryNormal.Enum(), Data: []byte("evil=1")}}}))
		return append(hb, prop...)
	}
	addr := c.peers[f].Addr
	// writeAll sends the hello and forged frames blind and requires the
	// member to close the connection.
	writeAll := func(what string, conn net.Conn, frames []byte) {
		t.Helper()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		conn.Write(frames) // may fail: the member closes as soon as it sees
		requireClosed(t, what, conn)
	}

	// (a) plaintext, to a TLS peer port.
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	writeAll("plaintext", raw, append(helloBytes(leadID, cid), forged(leadID)...))

	// (b) a certificate of another CA asserting the leader's identity.
	if conn, reason, err := peerHello(t, addr, leadID, cid, client(p.foreign)); err == nil {
		t.Fatalf("another CA's certificate: hello answered (%q)", reason)
	} else if conn != nil {
		conn.Close()
	}
	raw, _ = net.Dial("tcp", addr)
	writeAll("another CA", tls.Client(raw, client(p.foreign)), append(helloBytes(leadID, cid), forged(leadID)...))

	// (c) the third member's genuine certificate, claiming to be the leader
	// in the hello...
	if _, reason, err := peerHello(t, addr, leadID, cid, client(p.members[thirdID])); err == nil {
		t.Fatalf("member %d's certificate claiming member %d: hello answered (%q)", thirdID, leadID, reason)
	}
	raw, _ = net.Dial("tcp", addr)
	writeAll("claims another member in the hello", tls.Client(raw, client(p.members[thirdID])), append(helloBytes(leadID, cid), forged(leadID)...))
	// ... or in a frame after an honest hello ...
	conn := peerConnect(t, addr, thirdID, cid, client(p.members[thirdID]))
	writeAll("claims another member in a frame", conn, forged(leadID))
	// ... or in the raft message a frame carries.
	conn = peerConnect(t, addr, thirdID, cid, client(p.members[thirdID]))
	writeAll("claims another member in the raft message", conn, forged(thirdID))

	// (d) the leader's genuine certificate, from another cluster.
	other := ClusterID("token-b")
	_, reason, err := peerHello(t, addr, leadID, other, client(p.members[leadID]))
	if err != nil || !strings.Contains(reason, "another cluster") {
		t.Fatalf("member of another cluster: answer %q, %v; want a refusal naming the cluster", reason, err)
	}
	raw, _ = net.Dial("tcp", addr)
	writeAll("another cluster", tls.Client(raw, client(p.members[leadID])), append(helloBytes(leadID, other), forged(leadID)...))
	// A hello without a cluster id is refused too.
	if _, reason, err := peerHello(t, addr, leadID, 0, client(p.members[leadID])); err != nil || reason == "" {
		t.Fatalf("hello without a cluster id: answer %q, %v; want a refusal", reason, err)
	}

	// Nothing changed: several heartbeat intervals later, every member has
	// the term, leader, applied index, data and membership it had.
	time.Sleep(500 * time.Millisecond)
	if err := sameStates(before, c.states()); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.sms[f].get("evil"); ok {
		t.Fatal("forged proposal applied")
	}
	// The genuine members still replicate.
	c.put(f, "b", "2")
}

// TestJoinerAdoptsClusterID: a member that joins with empty storage has no
// cluster id; it takes the group's from the first authenticated hello,
// stores it, and after a restart still refuses members of another cluster.
func TestJoinerAdoptsClusterID(t *testing.T) {
	p := newTestPKI(t, 4)
	c := newCluster(t, 3, p.secure("token-a"))
	lead := c.leader()
	c.put(lead, "a", "1")
	// The joiner's own token is not used: it adopts the group's id.
	c.tweak = func(cfg *Config) { p.secure("token-b")(cfg) }
	n4 := c.addNode()
	if got := c.reps[n4].Status().ClusterID; got != "" {
		t.Fatalf("joiner has cluster id %q before anyone contacted it", got)
	}
	if err := c.change(lead, MemberChange{Type: AddLearner, Peer: c.peers[n4]}); err != nil {
		t.Fatalf("add learner: %v", err)
	}
	c.waitAll(func(s *kv) bool { _, ok := s.get("a"); return ok })
	want := FormatClusterID(ClusterID("token-a"))
	if got := c.reps[n4].Status().ClusterID; got != want {
		t.Fatalf("joiner's cluster id %q, want the group's %q", got, want)
	}

	c.stop(n4)
	c.sms[n4] = newKV()
	cfg := c.config(n4)
	cfg.Join = true
	r, err := Open(cfg, c.sms[n4])
	if err != nil {
		t.Fatal(err)
	}
	c.reps[n4] = r
	if got := r.Status().ClusterID; got != want {
		t.Fatalf("restarted joiner's cluster id %q, want %q", got, want)
	}
	_, reason, err := peerHello(t, c.peers[n4].Addr, 1, ClusterID("token-b"), client(p.members[1]))
	if err != nil || !strings.Contains(reason, "another cluster") {
		t.Fatalf("restarted joiner answered a hello of another cluster with %q, %v", reason, err)
	}
	c.put(lead, "b", "2")
}

// closedAfter waits (up to limit) for the member to close c and says how
// long that took; ok false when it stayed open.
func closedAfter(c net.Conn, limit time.Duration) (time.Duration, bool) {
	start := time.Now()
	c.SetReadDeadline(start.Add(limit))
	_, err := io.Copy(io.Discard, c)
	c.Close()
	var ne net.Error
	return time.Since(start), !(errors.As(err, &ne) && ne.Timeout())
}

// TestInboundDeadlines: an inbound connection that never says hello, one
// that stalls in a frame body, and one that goes idle are closed within
// their limits; dialers keep idle connections alive with keepalives (here
// with latency probes off, so follower-to-follower connections carry
// nothing else).
func TestInboundDeadlines(t *testing.T) {
	idle, keep := inboundIdle, keepaliveEvery
	inboundIdle, keepaliveEvery = time.Second, 200*time.Millisecond
	t.Cleanup(func() { inboundIdle, keepaliveEvery = idle, keep }) // after the cluster stops
	c := newCluster(t, 3, func(cfg *Config) { cfg.ProbeInterval = -1 })
	lead := c.leader()
	c.put(lead, "a", "1")
	f, third := (lead+1)%3, (lead+2)%3
	addr, other := c.peers[f].Addr, uint64(third+1)
	// Leadership moves to the third member: the old leader's connection
	// to f, open since it led, now carries nothing but keepalives.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.reps[lead].TransferLeadership(ctx, uint64(third+1)); err != nil {
		t.Fatal(err)
	}
	c.leader()

	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	stalled := peerConnect(t, addr, other, ClusterID(""), nil)
	// A side frame declaring 1000 bytes of body, of which 1 arrives.
	stalled.Write(withLen(frameBytes(kindSide, other, []byte("x")), frameHeader+1000))
	quiet := peerConnect(t, addr, other, ClusterID(""), nil)

	type result struct {
		what     string
		took     time.Duration
		min, max time.Duration
		closed   bool
	}
	results := make(chan result, 3)
	for _, x := range []struct {
		what     string
		c        net.Conn
		min, max time.Duration
	}{
		{"no hello", silent, helloTimeout - 500*time.Millisecond, helloTimeout + 3*time.Second},
		{"stalled body", stalled, bodyTimeout - 500*time.Millisecond, bodyTimeout + 3*time.Second},
		{"idle", quiet, inboundIdle - 500*time.Millisecond, inboundIdle + 3*time.Second},
	} {
		go func() {
			took, closed := closedAfter(x.c, x.max)
			results <- result{x.what, took, x.min, x.max, closed}
		}()
	}
	for range 3 {
		r := <-results
		if !r.closed || r.took < r.min {
			t.Errorf("%s: closed %v after %v, want closed within [%v, %v]", r.what, r.closed, r.took, r.min, r.max)
		}
	}
	// Several idle limits have passed: f still has its connections from
	// both other members, the old leader's included.
	tr := c.reps[f].tr
	tr.mu.Lock()
	n := tr.inbound
	tr.mu.Unlock()
	if n != 2 {
		t.Fatalf("member %d has %d inbound connections after 5 idle limits, want 2 (one from each other member)", f+1, n)
	}
	c.put(f, "b", "2")
}

// TestClusterIDStored: the cluster id is derived once and stored with the
// data; a later token changes nothing. Data from before cluster ids gets
// one derived from the token it restarts with.
func TestClusterIDStored(t *testing.T) {
	token := "first"
	c := newCluster(t, 1, func(cfg *Config) { cfg.ClusterToken = token })
	c.put(c.leader(), "a", "1")
	want := FormatClusterID(ClusterID("first"))
	token = "second"
	c.stop(0)
	c.start(0)
	if got := c.reps[0].Status().ClusterID; got != want {
		t.Fatalf("after a restart with another token: cluster id %q, want the stored %q", got, want)
	}
	// Remove the stored id, as data written before cluster ids lacks it.
	c.stop(0)
	d, err := openDisk(c.dirs[0], nil, logger())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.db.Delete(keyClusterID, nil); err != nil {
		t.Fatal(err)
	}
	d.close()
	c.start(0)
	if got, want := c.reps[0].Status().ClusterID, FormatClusterID(ClusterID("second")); got != want {
		t.Fatalf("data without a cluster id: %q, want %q (from the token)", got, want)
	}
	// Open replays the log in the background: wait for the entry (waitAll
	// fails if it never comes back).
	c.waitAll(func(s *kv) bool { v, ok := s.get("a"); return ok && v == "1" })
}

// TestUnauthenticatedConnectionsPerAddress: one address holding as many
// silent connections as it may (never saying hello) gets further ones
// closed at once, while the members, from another address, still connect:
// a member that restarts gets back in and the group commits.
func TestUnauthenticatedConnectionsPerAddress(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	c.put(lead, "a", "1")
	f := (lead + 1) % 3
	addr := c.peers[f].Addr
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 2 * time.Second}
	var silent []net.Conn
	t.Cleanup(func() {
		for _, s := range silent {
			s.Close()
		}
	})
	for range maxUnauthPerAddr {
		s, err := dialer.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, s)
	}
	// Let the acceptor take them all before the one over the limit.
	time.Sleep(200 * time.Millisecond)
	extra, err := dialer.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if took, closed := closedAfter(extra, time.Second); !closed {
		t.Fatalf("connection %d from one unauthenticated address still open after %v", maxUnauthPerAddr+1, took)
	}
	// The members (dialing from 127.0.0.1) are not held back: the third
	// member restarts and redials f, whose inbound connections are then
	// the silent ones, the leader's and the third member's.
	g := (lead + 2) % 3
	c.stop(g)
	c.start(g)
	tr := c.reps[f].tr
	deadline := time.Now().Add(10 * time.Second)
	for {
		tr.mu.Lock()
		n := tr.inbound
		tr.mu.Unlock()
		if n == maxUnauthPerAddr+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("member %d has %d inbound connections, want %d silent + 2 members", f+1, n, maxUnauthPerAddr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.put(c.leader(), "b", "2")
}
