package fsm

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
)

func keyspaceFSM() *FSM { return New(Hooks{}, Options{Keyspace: true}) }

func wrapped(t *testing.T, ms uint64, inner []byte) []byte {
	b, err := WrapClock(ms, 0, inner)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A session's end in a keyspace group releases its barrier entry and its
// queue delivery in the same apply, as in the root.
func TestKeyspaceEndReleasesBarrierAndQueue(t *testing.T) {
	f := keyspaceFSM()
	apply(t, f, wrapped(t, 1000, coordEntry(t, &coord.Command{Op: coord.OpEnter, Name: "b", Session: 5, Parties: 2})))
	apply(t, f, wrapped(t, 1000, coordEntry(t, &coord.Command{Op: coord.OpPush, Name: "q", Value: []byte("x")})))
	r := apply(t, f, wrapped(t, 1000, coordEntry(t, &coord.Command{Op: coord.OpPop, Name: "q", Session: 5, TimeMs: 1000})))
	if r.CoordResult.Err != nil || !r.CoordResult.Granted {
		t.Fatalf("pop: %+v", r.CoordResult)
	}
	if b, ok := f.Coord().DoubleBarrier("b"); !ok || len(b.Entered) != 1 {
		t.Fatalf("barrier before the end: %+v %v", b, ok)
	}
	r = apply(t, f, wrapped(t, 2000, treeEntry(t, &tree.Command{Session: 5, TimeMs: 2000, Op: tree.Op{Type: tree.OpCloseSession}})))
	if r.TreeResult.Err != nil || len(r.Ended) != 1 || r.Ended[0] != (SessionEnd{ID: 5}) {
		t.Fatalf("close: %+v", r)
	}
	if _, ok := f.Coord().DoubleBarrier("b"); ok {
		t.Fatal("the ended session is still in the barrier")
	}
	if q := f.Coord().QueueStats("q"); q.Ready != 1 || q.InFlight != 0 {
		t.Fatalf("queue after the end: %+v", q)
	}
	if len(f.Participants()) != 0 {
		t.Fatalf("participants %v", f.Participants())
	}
}

// Adopted sessions are bounded: a new one beyond MaxParticipants is
// refused with ErrTooManySessions and not adopted; a participant goes on.
func TestKeyspaceParticipantLimit(t *testing.T) {
	f := keyspaceFSM()
	for id := int64(1); id <= MaxParticipants; id++ {
		f.tree.AdoptSession(id)
	}
	r := apply(t, f, wrapped(t, 1000, coordEntry(t, &coord.Command{Op: coord.OpAcquire, Name: "l", Session: MaxParticipants + 1})))
	if !errors.Is(r.CoordResult.Err, errs.ErrTooManySessions) {
		t.Fatalf("acquire beyond the limit: %v", r.CoordResult.Err)
	}
	r = apply(t, f, wrapped(t, 1000, treeEntry(t, &tree.Command{Session: MaxParticipants + 1,
		Op: tree.Op{Type: tree.OpCreate, Path: "/e", ACL: tree.OpenACL, Mode: tree.ModeEphemeral}})))
	if !errors.Is(r.TreeResult.Err, errs.ErrTooManySessions) {
		t.Fatalf("ephemeral beyond the limit: %v", r.TreeResult.Err)
	}
	if _, ok := f.Tree().Session(MaxParticipants + 1); ok || f.Tree().SessionCount() != MaxParticipants {
		t.Fatal("a refused session was adopted")
	}
	r = apply(t, f, wrapped(t, 1000, coordEntry(t, &coord.Command{Op: coord.OpAcquire, Name: "l", Session: 1})))
	if r.CoordResult.Err != nil {
		t.Fatalf("a participant's acquire: %v", r.CoordResult.Err)
	}
}

// Tombstones are bounded: beyond MaxTombstones the oldest is dropped early
// and the floor rises to its end plus a horizon.
func TestTombstoneLimit(t *testing.T) {
	s := newSessionTable()
	for id := int64(1); id <= MaxTombstones; id++ {
		s.end(id, 1000+id)
	}
	s.end(1, 5) // ended again: kept as it was
	if s.len() != MaxTombstones || s.floorMs != 0 || s.ended[1] != 1001 {
		t.Fatalf("len %d floor %d", s.len(), s.floorMs)
	}
	s.end(MaxTombstones+1, 2_000_000)
	if _, ok := s.ended[1]; ok || s.len() != MaxTombstones || s.floorMs != 1001+SessionHorizonMs {
		t.Fatalf("after the limit: len %d floor %d", s.len(), s.floorMs)
	}
	b := s.snapshot()
	r, ok := restoreSessionTable(b)
	if !ok || !reflect.DeepEqual(r.snapshot(), b) {
		t.Fatal("a full table does not round-trip")
	}
}

// A snapshot names no kind of group, but one kind's state is refused by
// the other: adopted sessions (and tombstones) by the root, the root's
// sessions by a keyspace group.
func TestSnapshotKindsDoNotMix(t *testing.T) {
	k := keyspaceFSM()
	apply(t, k, wrapped(t, 1000, coordEntry(t, &coord.Command{Op: coord.OpAcquire, Name: "l", Session: 5})))
	adopted, _ := k.Snapshot()
	if !bytes.HasPrefix(adopted, []byte("MRDS2")) {
		t.Fatalf("no tombstones: want version 2 (the clock moved the zxid), got %q", adopted[:5])
	}
	apply(t, k, wrapped(t, 2000, treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpExpire}, Sessions: []int64{5, 6}})))
	withTombs, _ := k.Snapshot()
	if !bytes.HasPrefix(withTombs, []byte("MRDS3")) {
		t.Fatalf("tombstones: want version 3, got %q", withTombs[:5])
	}
	root := New(Hooks{})
	apply(t, root, treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreateSession}, TimeoutMs: 5000,
		Password: []byte("0123456789abcdef")}))
	rootSnap, _ := root.Snapshot()
	for name, c := range map[string]struct {
		f    *FSM
		snap []byte
	}{
		"adopted into root":    {New(Hooks{}), adopted},
		"tombstones into root": {New(Hooks{}), withTombs},
		"root into a keyspace": {keyspaceFSM(), rootSnap},
	} {
		if err := c.f.Restore(9, c.snap); err == nil {
			t.Errorf("%s: restored", name)
		}
	}
	if err := keyspaceFSM().Restore(9, withTombs); err != nil {
		t.Fatal(err)
	}
	// Every truncation of a version 3 snapshot is refused or restores to
	// something that snapshots again; none panics.
	for i := range withTombs {
		f := keyspaceFSM()
		if f.Restore(9, withTombs[:i]) == nil {
			if _, err := f.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// The root group's state machine is unchanged: sessions are created and a
// close of an unknown session fails, leaving no tombstone.
func TestRootSessionsUnchanged(t *testing.T) {
	f := New(Hooks{}, Options{})
	r := apply(t, f, treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreateSession}, TimeoutMs: 5000,
		Password: []byte("0123456789abcdef")}))
	if r.Started.ID != 1 || f.IsKeyspace() {
		t.Fatalf("%+v", r)
	}
	r = apply(t, f, treeEntry(t, &tree.Command{Session: 9, Op: tree.Op{Type: tree.OpCloseSession}}))
	if !errors.Is(r.TreeResult.Err, errs.ErrSessionExpired) {
		t.Fatalf("close of an unknown session: %v", r.TreeResult.Err)
	}
	if tombs, floor := f.Tombstones(); len(tombs) != 0 || floor != 0 || f.Participants() != nil {
		t.Fatal("the root keeps tombstones")
	}
}

// FuzzKeyspaceApply: in a keyspace group, arbitrary entries never panic,
// two members decide the same, and the state round-trips a snapshot.
func FuzzKeyspaceApply(f *testing.F) {
	eph := func(s int64) []byte {
		b, _ := tree.EncodeCommand(&tree.Command{Session: s, Op: tree.Op{Type: tree.OpCreate, Path: "/e",
			ACL: tree.OpenACL, Mode: tree.ModeEphemeral}})
		return b
	}
	expire, _ := tree.EncodeCommand(&tree.Command{Op: tree.Op{Type: tree.OpExpire}, Sessions: []int64{1, 2}})
	acquire, _ := coord.Encode(&coord.Command{Op: coord.OpAcquire, Name: "l", Session: 2, Wait: true})
	wrap := func(ms uint64, inner []byte) []byte { b, _ := WrapClock(ms, 0, inner); return b }
	for _, seed := range [][]byte{eph(1), eph(3), expire, acquire, wrap(5000, eph(1)), wrap(3_000_000, eph(4)), nil} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := keyspaceFSM(), keyspaceFSM()
		entries := [][]byte{wrap(1000, eph(1)), wrap(1000, acquire), data, wrap(2000, expire), data,
			wrap(2_000_000, acquire), data}
		for i, e := range entries {
			ra, rb := a.Apply(uint64(i+1), e), b.Apply(uint64(i+1), bytes.Clone(e))
			if !reflect.DeepEqual(ra, rb) {
				t.Fatalf("members diverge at %d:\n%+v\n%+v", i+1, ra, rb)
			}
		}
		snap, err := a.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		c := keyspaceFSM()
		if err := c.Restore(a.Applied(), snap); err != nil {
			t.Fatal(err)
		}
		if again, _ := c.Snapshot(); !bytes.Equal(snap, again) {
			t.Fatal("snapshot does not round-trip")
		}
	})
}
