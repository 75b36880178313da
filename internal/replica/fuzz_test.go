package replica

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-coord/meridian/internal/testutil"
)

// collectEvents records what a transport hands to the raft loop.
type collectEvents struct {
	mu   sync.Mutex
	msgs []*pb.Message
}

func (e *collectEvents) deliver(m *pb.Message) {
	e.mu.Lock()
	e.msgs = append(e.msgs, m)
	e.mu.Unlock()
}
func (e *collectEvents) side(uint64, []byte)                  {}
func (e *collectEvents) unreachable(uint64)                   {}
func (e *collectEvents) snapshotDone(uint64, bool)            {}
func (e *collectEvents) steppedDown(uint64, uint64, uint64)   {}
func (e *collectEvents) quiesceNotice(uint64, uint64, uint64) {}
func (e *collectEvents) wakeRequest(uint64)                   {}

// FuzzPeerFrames feeds arbitrary bytes to a peer connection's reader, as a
// confused or hostile peer would send them, and steps every message the
// transport accepts into a raft node of a 3-member group that has a
// committed log. Neither the decoder nor raft may panic: whatever validate
// lets through must be something raft handles.
//
// program, when not empty, is decoded into well-formed raft messages whose
// fields (terms, indexes, log terms, commits, rejections and hints, entries,
// configuration changes, snapshots with metadata) are chosen near what the
// receiver holds, and sent over a real peer connection to one member of a
// live 3-member group (hostileRun): no member may fail and the group must
// still commit.
func FuzzPeerFrames(f *testing.F) {
	typ := func(mt pb.MessageType) *pb.MessageType { return &mt }
	normal, ccv2 := pb.EntryNormal, pb.EntryConfChangeV2
	msg := func(m *pb.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	cc, _ := proto.Marshal(&pb.ConfChangeV2{})
	seeds := [][]byte{
		frameBytes(kindRaft, 2, msg(&pb.Message{Type: typ(pb.MsgHeartbeat), To: new(uint64(1)), From: new(uint64(2)), Term: new(uint64(3)), Commit: new(uint64(2))})),
		frameBytes(kindRaft, 2, msg(&pb.Message{Type: typ(pb.MsgApp), To: new(uint64(1)), From: new(uint64(2)), Term: new(uint64(3)),
			Index: new(uint64(3)), LogTerm: new(uint64(2)), Commit: new(uint64(4)),
			Entries: []*pb.Entry{{Index: new(uint64(4)), Term: new(uint64(3)), Type: &normal, Data: []byte("k=v")}}})),
		frameBytes(kindRaft, 3, msg(&pb.Message{Type: typ(pb.MsgVote), To: new(uint64(1)), From: new(uint64(3)), Term: new(uint64(4)), Index: new(uint64(9)), LogTerm: new(uint64(3))})),
		frameBytes(kindRaft, 3, msg(&pb.Message{Type: typ(pb.MsgProp), To: new(uint64(1)), From: new(uint64(3)),
			Entries: []*pb.Entry{{Type: &ccv2, Data: cc}}})),
		frameBytes(kindRaft, 2, msg(&pb.Message{Type: typ(pb.MsgAppResp), To: new(uint64(1)), From: new(uint64(2)), Term: new(uint64(2)), Index: new(uint64(3)), Reject: new(true), RejectHint: new(uint64(1))})),
		frameBytes(kindSnap, 2, msg(&pb.Message{Type: typ(pb.MsgSnap), To: new(uint64(1)), From: new(uint64(2)), Term: new(uint64(3)),
			Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(10)), Term: new(uint64(3)), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}})),
		frameBytes(kindSide, 2, []byte("side")),
		frameBytes(kindStepDown, 2, []byte{0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 3}),
		frameBytes(kindStepDown, 2, []byte{0, 0, 0, 3}),
		withLen(frameBytes(kindRaft, 2, nil), 0xffffffff),
		// Group frames: group 9 runs on the fuzzed member, group 8 does not.
		frameBytes(kindGroupRaft, 2, append([]byte{0, 0, 0, 0, 0, 0, 0, 9}, msg(&pb.Message{Type: typ(pb.MsgHeartbeat), To: new(uint64(1)), From: new(uint64(2)), Term: new(uint64(3)), Commit: new(uint64(2))})...)),
		frameBytes(kindGroupRaft, 2, append([]byte{0, 0, 0, 0, 0, 0, 0, 8}, msg(&pb.Message{Type: typ(pb.MsgVote), To: new(uint64(1)), From: new(uint64(2)), Term: new(uint64(4))})...)),
		frameBytes(kindGroupSnap, 2, append([]byte{0, 0, 0, 0, 0, 0, 0, 9}, msg(&pb.Message{Type: typ(pb.MsgSnap), To: new(uint64(1)), From: new(uint64(2)), Term: new(uint64(3)),
			Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(10)), Term: new(uint64(3)), ConfState: &pb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{3}}}}})...)),
		frameBytes(kindGroupStepDown, 2, []byte{0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 1}),
		frameBytes(kindGroupRaft, 2, []byte{0, 0, 0, 0, 0, 0, 0, 0}),
		frameBytes(kindGroupQuiesce, 2, []byte{0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 2}),
		frameBytes(kindGroupQuiesce, 2, []byte{0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 3}),
		frameBytes(kindGroupWake, 2, []byte{0, 0, 0, 0, 0, 0, 0, 9}),
	}
	for _, s := range seeds {
		f.Add(s, []byte(nil))
	}
	// Programs for hostileRun (see hostileMessage for how bytes decode).
	for _, p := range [][]byte{
		// To a follower, in the leader's name and term: an append past
		// the follower's log; the follower's acknowledgement made the
		// leader's raft demand a snapshot that did not exist (a panic).
		{1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1},
		// To the leader: an acknowledgement beyond its last index.
		{0, 0, 0, 2, 0, 3, 0, 0, 0, 0, 0, 0, 0},
		// To a follower: a heartbeat of a higher term from a non-leader.
		{1, 0, 0, 6, 0, 0, 1, 0, 0, 0, 0, 0, 0},
		// To a follower: a snapshot far ahead, in the leader's name.
		{1, 0, 1, 5, 0, 3, 1, 1, 0, 0, 0, 0, 0, 0, 0},
		// To the leader: a rejection whose hint points below everything.
		{0, 1, 1, 2, 0, 0, 0, 0, 0, 0, 1, 5, 0, 0},
	} {
		f.Add([]byte(nil), p)
	}
	f.Fuzz(func(t *testing.T, data, program []byte) {
		ev := &collectEvents{}
		tr := &transport{id: 1, log: slog.New(slog.DiscardHandler), ev: ev, origin: time.Now(),
			maxMsgFrame: 1 << 20, conns: map[net.Conn]struct{}{}, unauth: map[string]int{}, unauthAddr: map[net.Conn]string{}, stop: make(chan struct{})}
		members := map[uint64]string{1: "", 2: "", 3: ""}
		peers := map[uint64]*peerConn{2: {id: 2}, 3: {id: 3}}
		tr.members.Store(&members)
		tr.peers.Store(&peers)
		if err := tr.addGroup(9, ev); err != nil { // its messages are stepped like the root's
			t.Fatal(err)
		}
		server, client := net.Pipe()
		tr.mu.Lock()
		tr.conns[server] = struct{}{}
		tr.inbound++
		tr.mu.Unlock()
		tr.wg.Add(1)
		go tr.reader(server)
		tr.cluster.Store(1)
		// The connection authenticates (plaintext hello) as the sender of
		// the first frame, so the frames that follow reach the decoder.
		from := uint64(2)
		if len(data) >= 4+frameHeader {
			from = binary.BigEndian.Uint64(data[5:])
		}
		go io.Copy(io.Discard, client) // the hello's answer
		go func() {
			client.Write(append(helloBytes(from, 1), data...))
			client.Close()
		}()
		tr.wg.Wait()

		// The same messages go to a follower and to a leader: raft takes
		// different paths for each.
		for _, lead := range []bool{false, true} {
			rn, ms := fuzzRaftNode(t, lead)
			for _, m := range ev.msgs {
				m = proto.Clone(m).(*pb.Message)
				last, _ := ms.LastIndex()
				if refuseStep(m, last, rn.BasicStatus().RaftState == raft.StateLeader) != nil {
					continue
				}
				if err := rn.Step(m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) && !errors.Is(err, raft.ErrProposalDropped) {
					t.Logf("step %s: %v", m.GetType(), err)
				}
				for rn.HasReady() {
					rd := rn.Ready()
					if !raft.IsEmptySnap(rd.Snapshot) {
						ms.ApplySnapshot(rd.Snapshot)
					}
					ms.Append(rd.Entries)
					if rd.HardState != nil {
						ms.SetHardState(rd.HardState)
					}
					rn.Advance(rd)
				}
			}
		}

		// Well-formed messages with hostile fields, to a live group.
		if len(program) > 0 {
			hostileRun(t, program)
		}
	})
}

// fuzzRaftNode is member 1 of {1,2,3} at term 2 with three committed
// entries, the state a follower has after a short life; or, with leader,
// the same member after winning the next election.
func fuzzRaftNode(t *testing.T, leader bool) (*raft.RawNode, *raft.MemoryStorage) {
	ms := raft.NewMemoryStorage()
	normal := pb.EntryNormal
	ms.ApplySnapshot(&pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1)),
		ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}})
	ms.Append([]*pb.Entry{{Index: new(uint64(2)), Term: new(uint64(2)), Type: &normal}, {Index: new(uint64(3)), Term: new(uint64(2)), Type: &normal}})
	ms.SetHardState(&pb.HardState{Term: new(uint64(2)), Commit: new(uint64(3)), Vote: new(uint64(2))})
	rn, err := raft.NewRawNode(&raft.Config{ID: 1, ElectionTick: 10, HeartbeatTick: 1, Storage: raftStorage{MemoryStorage: ms}, Applied: 1,
		MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 64, CheckQuorum: true, PreVote: true, StepDownOnRemoval: true,
		Logger: raftLogger{slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	if leader {
		// Win an election (pre-vote, then vote) with member 2's help.
		settle := func() {
			for rn.HasReady() {
				rd := rn.Ready()
				ms.Append(rd.Entries)
				if rd.HardState != nil {
					ms.SetHardState(rd.HardState)
				}
				rn.Advance(rd) // steps the member's vote for itself
			}
		}
		rn.Campaign()
		settle()
		for _, typ := range []pb.MessageType{pb.MsgPreVoteResp, pb.MsgVoteResp} {
			term := rn.Status().HardState.GetTerm()
			if typ == pb.MsgPreVoteResp {
				term++
			}
			rn.Step(&pb.Message{Type: typ.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(term)})
			settle()
		}
		if rn.Status().RaftState != raft.StateLeader {
			t.Fatalf("fuzz node did not become leader: %v", rn.Status().RaftState)
		}
	}
	return rn, ms
}

// storageBase is a data directory written by a real replica: a bootstrap
// configuration, a snapshot, entries after it, a hard state.
var storageBase struct {
	once sync.Once
	recs map[string][]byte // pebble key → value
	err  error
}

func buildStorageBase(tb testing.TB) map[string][]byte {
	storageBase.once.Do(func() {
		dir, err := os.MkdirTemp("", "meridian-fuzz-base")
		if err != nil {
			storageBase.err = err
			return
		}
		defer os.RemoveAll(dir)
		port := testutil.FreePorts(tb, 1)[0]
		cfg := Config{ID: 1, Peers: []Peer{{ID: 1, Addr: fmt.Sprintf("127.0.0.1:%d", port)}}, DataDir: dir,
			TickInterval: 10 * time.Millisecond, ElectionTicks: 10, SnapshotEntries: 6, CatchUpEntries: 2,
			Logger: slog.New(slog.DiscardHandler)}
		sm := newKV()
		r, err := Open(cfg, sm)
		if err != nil {
			storageBase.err = err
			return
		}
		for i := 0; i < 10; i++ {
			if err = proposeRetry(r, fmt.Sprintf("k%d=v%d", i, i)); err != nil {
				break
			}
		}
		r.Close()
		if err != nil {
			storageBase.err = err
			return
		}
		db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{slog.New(slog.DiscardHandler)}})
		if err != nil {
			storageBase.err = err
			return
		}
		defer db.Close()
		recs := map[string][]byte{}
		it, err := db.NewIter(nil)
		if err != nil {
			storageBase.err = err
			return
		}
		for it.First(); it.Valid(); it.Next() {
			recs[string(it.Key())] = bytes.Clone(it.Value())
		}
		it.Close()
		storageBase.recs = recs
	})
	if storageBase.err != nil {
		tb.Fatal(storageBase.err)
	}
	return storageBase.recs
}

func proposeRetry(r *Replica, cmd string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.Propose(ctx, []byte(cmd))
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FuzzOpenStorage replaces, deletes or adds one stored record of a real
// data directory and opens it. The first input byte picks the record (one of
// the stored keys, or a new entry index past them), the second how the value
// is written: bit 0 reseals the fuzzed body with a correct checksum (so the
// fuzzer reaches the decoders and the consistency checks behind it), bit 1
// deletes the record instead. Open must refuse what it cannot trust with an
// error and never panic; what it accepts must run.
func FuzzOpenStorage(f *testing.F) {
	recs := buildStorageBase(f)
	var keys []string
	for k := range recs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	f.Add(byte(0), byte(0), []byte("garbage"))
	f.Add(byte(1), byte(1), []byte{0x08, 0x05, 0x10, 0x09})
	f.Add(byte(2), byte(2), []byte(nil))
	for i, k := range keys {
		v := recs[k]
		if len(v) > 4 {
			f.Add(byte(i), byte(1), v[4:])
			mut := bytes.Clone(v[4:])
			mut[len(mut)/2] ^= 0x01
			f.Add(byte(i), byte(1), mut)
		}
	}
	f.Fuzz(func(t *testing.T, which, how byte, body []byte) {
		dir := t.TempDir()
		db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{slog.New(slog.DiscardHandler)}})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range recs {
			if err := db.Set([]byte(k), v, pebble.NoSync); err != nil {
				t.Fatal(err)
			}
		}
		var key []byte
		if int(which) < len(keys) {
			key = []byte(keys[which])
		} else {
			key = entryKey(uint64(which))
		}
		val := body
		if how&1 != 0 {
			val = make([]byte, 4+len(body))
			binary.BigEndian.PutUint32(val, crc32.Checksum(body, crcTable))
			copy(val[4:], body)
		}
		if how&2 != 0 {
			err = db.Delete(key, pebble.NoSync)
		} else {
			err = db.Set(key, val, pebble.NoSync)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		cfg := Config{ID: 1, Peers: []Peer{{ID: 1, Addr: "127.0.0.1:0"}}, DataDir: dir,
			TickInterval: 10 * time.Millisecond, ElectionTicks: 10, SnapshotEntries: 6, CatchUpEntries: 2,
			Logger: slog.New(slog.DiscardHandler)}
		done := make(chan struct{})
		go func() {
			defer close(done)
			r, err := Open(cfg, newKV())
			if err != nil {
				return // refused: fine, as long as it did not panic
			}
			_ = r.Status() // one trip through the loop with the restored state
			r.Close()
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			buf := make([]byte, 1<<20)
			t.Fatalf("open/status/close hung:\n%s", buf[:runtime.Stack(buf, true)])
		}
	})
}

// FuzzUnwrapSnapshot decodes the membership header a snapshot carries (it
// arrives from peers and from disk).
func FuzzUnwrapSnapshot(f *testing.F) {
	bk := &book{Peers: []Peer{{ID: 1, Addr: "a:1"}, {ID: 2, Addr: "b:2", Learner: true}}, Index: 7}
	f.Add(wrapSnapshot(*bk, []byte("state")))
	f.Add([]byte("plain state"))
	f.Add(append(bytes.Clone(snapMagic), 0xff, 0xff, 0xff, 0xff, 0x0f))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, rest, err := unwrapSnapshot(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not marked corrupt: %v", err)
			}
			return
		}
		if b == nil && !bytes.Equal(rest, data) {
			t.Fatal("plain snapshot data changed")
		}
		if b != nil {
			// What decodes re-encodes to something that decodes the same.
			b2, rest2, err := unwrapSnapshot(wrapSnapshot(*b, rest))
			if err != nil || !bytes.Equal(rest2, rest) || len(b2.Peers) != len(b.Peers) {
				t.Fatalf("round trip: %v", err)
			}
		}
	})
}
