package replica

import (
	"context"
	"net"
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
	var buf []byte
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

// logTerm is the term of entry i in replica r's log (0 when it has none).
func logTerm(r *Replica, i uint64) uint64 {
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
