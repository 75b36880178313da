package replica

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// sendAsPeer writes msgs to the peer port at addr as member from would:
// one frame each (MsgSnap under its own kind), on one fresh connection, and
// waits until the bytes are out. It is the only place tests speak the peer
// protocol as a forger, so a change to how peers connect (a handshake)
// changes only this function.
func sendAsPeer(tb testing.TB, addr string, from uint64, msgs ...*pb.Message) {
	tb.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	// The hello of member from, in the test clusters' cluster (no token).
	buf := helloBytes(from, ClusterID(""))
	for _, m := range msgs {
		body, err := proto.Marshal(m)
		if err != nil {
			tb.Fatal(err)
		}
		kind := kindRaft
		if m.GetType() == pb.MsgSnap {
			kind = kindSnap
		}
		buf = append(buf, frameBytes(kind, from, body)...)
	}
	conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(buf); err != nil {
		tb.Fatal(err)
	}
	// Let the reader take the frames before the connection closes.
	conn.(*net.TCPConn).CloseWrite()
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	conn.Read(make([]byte, 1))
}

// logTerm is the term of entry i in replica r's log (0 when it has none;
// MemoryStorage.Term indexes out of range for i far beyond its log).
func logTerm(r *Replica, i uint64) uint64 {
	if last, _ := r.mem.LastIndex(); i > last {
		return 0
	}
	t, _ := r.mem.Term(i)
	return t
}

// alive fails the test if any replica stopped by itself.
func (c *cluster) alive() {
	c.t.Helper()
	for i, r := range c.reps {
		if r == nil {
			continue
		}
		select {
		case <-r.Failed():
			c.t.Fatalf("replica %d failed: %v", i+1, r.FailErr())
		default:
		}
	}
}

// commitsOn proposes k=v through whoever leads and waits until the members
// in on have applied it: the group still makes progress.
func (c *cluster) commitsOn(k, v string, on ...int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		c.alive()
		lead := c.leader()
		err := c.reps[lead].Propose(ctx, []byte(k+"="+v))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			c.t.Fatalf("propose: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, i := range on {
		for got, _ := c.sms[i].get(k); got != v; got, _ = c.sms[i].get(k) {
			c.alive()
			if ctx.Err() != nil {
				c.t.Fatalf("replica %d did not apply %s=%s", i+1, k, v)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestForgedAppendDoesNotCrashLeader: an append that claims to come from
// the leader, in its term, extending the follower's log past the leader's,
// is taken by the follower (raft trusts a member of the current term; only
// authentication keeps strangers from speaking for one). The follower
// acknowledges entries the leader never had, and the leader's raft, unable
// to build the next append from its own log, asked storage for a snapshot;
// none had been taken yet, raft panicked "need non-empty snapshot" and the
// leader stopped. It must stay up, keep leading and keep committing.
func TestForgedAppendDoesNotCrashLeader(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	c.put(lead, "a", "1")
	f, other := (lead+1)%3, (lead+2)%3
	st := c.reps[f].Status()
	last, term := st.LastIndex, st.Term
	normal := pb.EntryNormal
	var ents []*pb.Entry
	for i := uint64(1); i <= 3; i++ {
		ents = append(ents, &pb.Entry{Index: new(last + i), Term: new(term), Type: &normal, Data: []byte("forged=1")})
	}
	sendAsPeer(t, c.peers[f].Addr, uint64(lead+1), &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(f + 1)), From: new(uint64(lead + 1)),
		Term: new(term), Index: new(last), LogTerm: new(logTerm(c.reps[f], last)), Commit: new(st.Commit), Entries: ents})
	time.Sleep(500 * time.Millisecond) // the follower's answer reaches the leader, heartbeats go round
	c.alive()
	if l := c.reps[lead].Leader(); l != uint64(lead+1) {
		t.Fatalf("leader changed to %d", l)
	}
	// Nor does the leader believe the follower holds entries beyond its own
	// log (it would count them toward commits and stop replicating to it).
	if ls := c.reps[lead].Status(); ls.Progress[uint64(f+1)] > ls.LastIndex {
		t.Errorf("leader records match %d for %d beyond its last index %d", ls.Progress[uint64(f+1)], f+1, ls.LastIndex)
	}
	c.commitsOn("b", "2", lead, other)
}

// peerTypes are the message types a peer may send (validate refuses the
// local ones before raft sees them).
var peerTypes = []pb.MessageType{pb.MsgProp, pb.MsgApp, pb.MsgAppResp, pb.MsgVote, pb.MsgVoteResp, pb.MsgSnap,
	pb.MsgHeartbeat, pb.MsgHeartbeatResp, pb.MsgTransferLeader, pb.MsgTimeoutNow, pb.MsgReadIndex,
	pb.MsgReadIndexResp, pb.MsgPreVote, pb.MsgPreVoteResp, pb.MsgForgetLeader}

// choices turns fuzz bytes into decisions; exhausted, it answers zeros.
type choices struct{ b []byte }

func (c *choices) byte() byte {
	if len(c.b) == 0 {
		return 0
	}
	x := c.b[0]
	c.b = c.b[1:]
	return x
}

func (c *choices) pick(n int) int { return int(c.byte()) % n }

func (c *choices) u64() uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(c.byte())
	}
	return v
}

// near is a value a hostile peer would choose given base, something the
// receiver holds: base itself, one off, a few off, zero, the top of the
// range, or anything.
func (c *choices) near(base uint64) uint64 {
	k := c.byte()
	d := uint64(k>>3) + 2
	switch k % 8 {
	case 0:
		return base
	case 1:
		return base + 1
	case 2:
		return base - 1
	case 3:
		return base + d
	case 4:
		return base - min(base, d)
	case 5:
		return 0
	case 6:
		return ^uint64(0) - uint64(k>>3)
	default:
		return c.u64()
	}
}

// hostileMessage builds a well-formed raft message to member to, in the
// name of another member, whose fields are chosen near what to holds (its
// term, last, commit and first indexes): what a peer that lies, or is
// confused, would send.
func hostileMessage(ch *choices, c *cluster, to int) (from uint64, m *pb.Message) {
	r := c.reps[to]
	st := r.Status()
	from = uint64((to+1+ch.pick(2))%3 + 1)
	typ := peerTypes[ch.pick(len(peerTypes))]
	idx := ch.near([]uint64{st.LastIndex, st.Commit, st.FirstIndex - 1}[ch.pick(3)])
	term := ch.near(st.Term)
	m = &pb.Message{Type: typ.Enum(), To: new(uint64(to + 1)), From: new(from), Term: new(term), Index: new(idx),
		LogTerm: new(ch.near(logTerm(r, idx))), Commit: new(ch.near([]uint64{st.Commit, st.LastIndex}[ch.pick(2)]))}
	if ch.byte()&1 == 1 {
		m.Reject = new(true)
		m.RejectHint = new(ch.near(idx))
	}
	if ch.byte()&1 == 1 {
		m.Context = []byte{ch.byte(), ch.byte(), ch.byte(), ch.byte(), ch.byte(), ch.byte(), ch.byte(), ch.byte()}
	}
	// Entries follow the message's index (validate refuses gaps; a gap now
	// and then checks that it does), with terms near the previous one.
	prev, prevTerm := idx, m.GetLogTerm()
	for n := ch.pick(4); n > 0; n-- {
		next := prev + 1
		if ch.byte() == 0xff {
			next = ch.near(prev)
		}
		e := &pb.Entry{Index: new(next), Term: new(ch.near(prevTerm)), Type: pb.EntryNormal.Enum(), Data: []byte(fmt.Sprintf("fz%d=%d", next, ch.byte()))}
		if ch.byte()%5 == 0 {
			cc := &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{
				Type:   []pb.ConfChangeType{pb.ConfChangeAddNode, pb.ConfChangeRemoveNode, pb.ConfChangeAddLearnerNode}[ch.pick(3)].Enum(),
				NodeId: new(uint64(ch.pick(5)))}}}
			if ch.byte()&1 == 1 {
				cc.Context = encodeContext(ccContext{Peers: []Peer{{ID: cc.GetChanges()[0].GetNodeId(), Addr: "127.0.0.1:1"}}})
			}
			e.Type, e.Data = pb.EntryConfChangeV2.Enum(), mustMarshal(cc)
		}
		m.Entries = append(m.Entries, e)
		prev, prevTerm = next, e.GetTerm()
	}
	if typ == pb.MsgSnap {
		voters := [][]uint64{{1, 2, 3}, {1, 2}, {to1(to)}, {1, 2, 3, 4}}[ch.pick(4)]
		data := []byte("fz=snap\n")
		if ch.byte()&1 == 0 {
			data = wrapSnapshot(book{Peers: c.peers, Index: idx}, data)
		}
		m.Snapshot = &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{Index: new(idx), Term: new(m.GetLogTerm()),
			ConfState: &pb.ConfState{Voters: voters}}}
	}
	return from, m
}

func to1(i int) uint64 { return uint64(i + 1) }

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// progresses fails the test unless some member leads and applies a new
// proposal within 20 s: the group still commits.
func (c *cluster) progresses(k, v string) {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		c.alive()
		for i, r := range c.reps {
			if r == nil || !r.IsLeader() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if r.Propose(ctx, []byte(k+"="+v)) == nil {
				for ctx.Err() == nil {
					if got, _ := c.sms[i].get(k); got == v {
						cancel()
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			cancel()
		}
		time.Sleep(20 * time.Millisecond)
	}
	var sts []Status
	for _, r := range c.reps {
		sts = append(sts, r.Status())
	}
	c.t.Fatalf("the group no longer commits: %+v", sts)
}

// hostileRun starts a 3-member group, commits an entry, sends the messages
// program describes to one member (the leader if the first byte is even,
// else a follower), then requires that no member failed and that the group
// still commits. Only one member is lied to: the other two are an honest
// majority, so whatever the lies did to that one, the group must go on.
func hostileRun(t *testing.T, program []byte) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.TickInterval = 10 * time.Millisecond })
	lead := c.leader()
	c.put(lead, "a", "1")
	ch := &choices{b: program}
	to := lead
	if ch.byte()&1 == 1 {
		to = (lead + 1) % 3
	}
	for n := 1 + ch.pick(4); n > 0 && c.reps[to] != nil; n-- {
		from, m := hostileMessage(ch, c, to)
		sendAsPeer(t, c.peers[to].Addr, from, m)
	}
	time.Sleep(50 * time.Millisecond)
	c.alive()
	c.progresses("after", "lies")
}

// TestHostilePeerMessages sends one well-formed raft message with hostile
// fields to a member, over its peer port, in the name of another member,
// and requires that no member fails and the group still commits. The
// fields are set relative to what the receiver holds (st).
func TestHostilePeerMessages(t *testing.T) {
	normal := pb.EntryNormal
	ent := func(i, term uint64) *pb.Entry {
		return &pb.Entry{Index: new(i), Term: new(term), Type: &normal, Data: []byte(fmt.Sprint("h", i, "=x"))}
	}
	const huge = ^uint64(0) - 1
	type hostile struct {
		toLeader bool
		// fromLeader: a follower gets it in the leader's name (else in the
		// other follower's); to the leader it comes from a follower.
		fromLeader bool
		msg        func(st Status, lt uint64) *pb.Message // lt: the term of the receiver's last entry
	}
	cases := map[string]hostile{
		"append beyond the log": {fromLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgApp.Enum(), Term: new(st.Term), Index: new(st.LastIndex + 5), LogTerm: new(st.Term),
				Entries: []*pb.Entry{ent(st.LastIndex+6, st.Term)}}
		}},
		"append with a log term beyond the term": {fromLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgApp.Enum(), Term: new(st.Term), Index: new(st.LastIndex), LogTerm: new(st.Term + 7)}
		}},
		"append committing beyond the last index": {fromLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgApp.Enum(), Term: new(st.Term), Index: new(st.LastIndex), LogTerm: new(lt), Commit: new(huge),
				Entries: []*pb.Entry{ent(st.LastIndex+1, st.Term)}}
		}},
		"append extending the log past the leader's": {fromLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgApp.Enum(), Term: new(st.Term), Index: new(st.LastIndex), LogTerm: new(lt), Commit: new(st.Commit),
				Entries: []*pb.Entry{ent(st.LastIndex+1, st.Term), ent(st.LastIndex+2, st.Term), ent(st.LastIndex+3, st.Term)}}
		}},
		"append with entries that skip": {fromLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgApp.Enum(), Term: new(st.Term), Index: new(st.LastIndex), LogTerm: new(lt),
				Entries: []*pb.Entry{ent(st.LastIndex+1, st.Term), ent(st.LastIndex+3, st.Term)}}
		}},
		// A configuration change raft cannot apply, committed: raft
		// panics applying it unless the replica treats it as a no-op.
		"committed configuration change removing every voter": {fromLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			cc := &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(uint64(1))},
				{Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(uint64(2))}, {Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(uint64(3))}}}
			return &pb.Message{Type: pb.MsgApp.Enum(), Term: new(st.Term), Index: new(st.LastIndex), LogTerm: new(lt), Commit: new(st.LastIndex + 1),
				Entries: []*pb.Entry{{Index: new(st.LastIndex + 1), Term: new(st.Term), Type: pb.EntryConfChangeV2.Enum(), Data: mustMarshal(cc)}}}
		}},
		"committed configuration change leaving a joint state that is not": {fromLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgApp.Enum(), Term: new(st.Term), Index: new(st.LastIndex), LogTerm: new(lt), Commit: new(st.LastIndex + 1),
				Entries: []*pb.Entry{{Index: new(st.LastIndex + 1), Term: new(st.Term), Type: pb.EntryConfChangeV2.Enum(), Data: mustMarshal(&pb.ConfChangeV2{})}}}
		}},
		"committed undecodable configuration change": {fromLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgApp.Enum(), Term: new(st.Term), Index: new(st.LastIndex), LogTerm: new(lt), Commit: new(st.LastIndex + 1),
				Entries: []*pb.Entry{{Index: new(st.LastIndex + 1), Term: new(st.Term), Type: pb.EntryConfChange.Enum(), Data: []byte{0xff, 0xff}}}}
		}},
		"append below the commit index": {fromLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgApp.Enum(), Term: new(st.Term), Index: new(uint64(0)), LogTerm: new(uint64(0)), Commit: new(huge),
				Entries: []*pb.Entry{ent(1, st.Term)}}
		}},
		"acknowledgement beyond the leader's last index": {toLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgAppResp.Enum(), Term: new(st.Term), Index: new(st.LastIndex + 3)}
		}},
		"huge acknowledgement": {toLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgAppResp.Enum(), Term: new(st.Term), Index: new(huge)}
		}},
		"rejection with hint 0": {toLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgAppResp.Enum(), Term: new(st.Term), Index: new(st.LastIndex), Reject: new(true), RejectHint: new(uint64(0))}
		}},
		"rejection with a huge hint": {toLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgAppResp.Enum(), Term: new(st.Term), Index: new(st.LastIndex), Reject: new(true), RejectHint: new(huge), LogTerm: new(huge)}
		}},
		"rejection with a hint beyond the log": {toLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgAppResp.Enum(), Term: new(st.Term), Index: new(st.LastIndex), Reject: new(true),
				RejectHint: new(st.LastIndex + 1000), LogTerm: new(st.Term + 5)}
		}},
		"rejection hinting below the first index": {toLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgAppResp.Enum(), Term: new(st.Term), Index: new(st.LastIndex), Reject: new(true),
				RejectHint: new(st.FirstIndex - 1), LogTerm: new(uint64(1))}
		}},
		"rejection of an index beyond the leader's": {toLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgAppResp.Enum(), Term: new(st.Term), Index: new(huge), Reject: new(true), RejectHint: new(huge)}
		}},
		"heartbeat response of a higher term": {toLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgHeartbeatResp.Enum(), Term: new(st.Term + 1)}
		}},
		"heartbeat of a higher term from a non-leader": {msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgHeartbeat.Enum(), Term: new(st.Term + 1), Commit: new(st.Commit)}
		}},
		"heartbeat of a higher term to the leader": {toLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgHeartbeat.Enum(), Term: new(st.Term + 1), Commit: new(st.Commit)}
		}},
		"snapshot far ahead": {fromLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgSnap.Enum(), Term: new(st.Term), Snapshot: &pb.Snapshot{Data: []byte("s=1\n"),
				Metadata: &pb.SnapshotMetadata{Index: new(st.LastIndex + 100), Term: new(st.Term), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}}
		}},
		"snapshot at a huge index and term": {fromLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgSnap.Enum(), Term: new(huge), Snapshot: &pb.Snapshot{Data: []byte("s=1\n"),
				Metadata: &pb.SnapshotMetadata{Index: new(huge), Term: new(huge), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}}
		}},
		"snapshot of a term above the message's": {toLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgSnap.Enum(), Term: new(st.Term + 1), Snapshot: &pb.Snapshot{Data: []byte("s=1\n"),
				Metadata: &pb.SnapshotMetadata{Index: new(st.LastIndex + 16), Term: new(st.Term + 10), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}}
		}},
		"snapshot behind the commit index": {fromLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgSnap.Enum(), Term: new(st.Term), Snapshot: &pb.Snapshot{Data: []byte("s=1\n"),
				Metadata: &pb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1)), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}}
		}},
		"snapshot to the leader": {toLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgSnap.Enum(), Term: new(st.Term), Snapshot: &pb.Snapshot{Data: []byte("s=1\n"),
				Metadata: &pb.SnapshotMetadata{Index: new(st.LastIndex + 100), Term: new(st.Term), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}}
		}},
		"read index response beyond the log": {fromLeader: true, msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgReadIndexResp.Enum(), Term: new(st.Term), Index: new(huge), Context: []byte("12345678")}
		}},
		"vote of a higher term with a longer log": {msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgVote.Enum(), Term: new(st.Term + 1), Index: new(st.LastIndex + 1000), LogTerm: new(st.Term)}
		}},
		// raft forwards these to the leader and panics sending one that
		// carries a term.
		"read index with a term": {msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgReadIndex.Enum(), Term: new(st.Term), Entries: []*pb.Entry{{Data: []byte("12345678")}}}
		}},
		"proposal with a term": {msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgProp.Enum(), Term: new(st.Term), Entries: []*pb.Entry{{Type: &normal, Data: []byte("p=1")}}}
		}},
		"leader transfer of the current term to a follower": {msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgTransferLeader.Enum(), Term: new(st.Term)}
		}},
		"timeout now": {msg: func(st Status, lt uint64) *pb.Message {
			return &pb.Message{Type: pb.MsgTimeoutNow.Enum(), Term: new(st.Term)}
		}},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 3, func(cfg *Config) { cfg.TickInterval = 10 * time.Millisecond })
			lead := c.leader()
			c.put(lead, "a", "1")
			to, from := (lead+1)%3, (lead+2)%3
			if h.toLeader {
				to, from = lead, (lead+1)%3
			} else if h.fromLeader {
				from = lead
			}
			st := c.reps[to].Status()
			m := h.msg(st, logTerm(c.reps[to], st.LastIndex))
			m.To, m.From = new(uint64(to+1)), new(uint64(from+1))
			sendAsPeer(t, c.peers[to].Addr, uint64(from+1), m)
			time.Sleep(100 * time.Millisecond)
			c.alive()
			c.progresses("after", "it")
		})
	}
}

// A snapshot stream that does not match its checksum, or is cut short, is
// discarded by its receiver: nothing installed, no file left behind, the
// cluster goes on.
func TestBadSnapshotStreamDiscarded(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotStreams = func() bool { return true } })
	lead := c.leader()
	c.put(lead, "a", "1")
	f := (lead + 1) % 3
	st := c.reps[f].Status()
	snapMsg := func() []byte {
		conf := &pb.ConfState{Voters: []uint64{1, 2, 3}}
		m := &pb.Message{Type: pb.MsgSnap.Enum(), To: new(uint64(f + 1)), From: new(uint64(lead + 1)), Term: new(st.Term),
			Snapshot: &pb.Snapshot{Data: []byte("head"), Metadata: &pb.SnapshotMetadata{Index: new(st.LastIndex + 1000), Term: new(st.Term), ConfState: conf}}}
		return mustMarshal(m)
	}
	stream := func(size uint64, crc uint32, file []byte) []byte {
		meta := make([]byte, snapStreamMeta)
		binary.BigEndian.PutUint64(meta[groupIDBytes:], size)
		binary.BigEndian.PutUint32(meta[groupIDBytes+8:], crc)
		return append(frameBytes(kindSnapStream, uint64(lead+1), append(meta, snapMsg()...)), file...)
	}
	file := []byte(strings.Repeat("x", 4096))
	for _, tc := range []struct {
		name  string
		bytes []byte
	}{
		{"checksum mismatch", stream(uint64(len(file)), crc32.Checksum(file, crcTable)^1, file)},
		{"cut short", stream(uint64(len(file))*4, crc32.Checksum(file, crcTable), file)},
	} {
		conn, err := net.DialTimeout("tcp", c.peers[f].Addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write(append(helloBytes(uint64(lead+1), ClusterID("")), tc.bytes...)); err != nil {
			t.Fatal(err)
		}
		conn.(*net.TCPConn).CloseWrite()
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		io.Copy(io.Discard, conn) // until the receiver closes it
		conn.Close()
		time.Sleep(100 * time.Millisecond)
		if names, _ := filepath.Glob(filepath.Join(c.dirs[f], "snap", "*")); len(names) != 0 {
			t.Fatalf("%s: files left behind: %v", tc.name, names)
		}
		if got := c.reps[f].Status(); got.SnapshotIndex > st.LastIndex {
			t.Fatalf("%s: the follower installed the forged snapshot (%+v)", tc.name, got)
		}
	}
	c.alive()
	c.commitsOn("b", "2", 0, 1, 2)
}
