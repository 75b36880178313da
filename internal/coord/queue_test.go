package coord

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/meridian-coord/meridian/internal/errs"
)

func alive(int64) bool { return true }

func apply(s *State, index uint64, c *Command) (Result, []Grant) {
	c.ID = index
	r, g, _ := s.Apply(index, c, alive)
	return r, g
}

func wantErr(t *testing.T, what string, r Result, want error) {
	t.Helper()
	if !errors.Is(r.Err, want) {
		t.Fatalf("%s: got %v, want %v", what, r.Err, want)
	}
}

// TestQueueLimits reaches every queue limit and checks its error and that
// the state is unchanged by the refused command.
func TestQueueLimits(t *testing.T) {
	big := make([]byte, MaxItemBytes)
	t.Run("item size", func(t *testing.T) {
		s := New()
		r, _ := apply(s, 1, &Command{Op: OpPush, Name: "q", Value: make([]byte, MaxItemBytes+1)})
		wantErr(t, "oversized item", r, errs.ErrItemTooLarge)
		if r, _ := apply(s, 2, &Command{Op: OpPush, Name: "q", Value: big}); r.Err != nil {
			t.Fatal(r.Err)
		}
	})
	t.Run("queue length", func(t *testing.T) {
		s := New()
		idx := uint64(0)
		for i := 0; i < MaxQueueItems-1; i++ {
			idx++
			if r, _ := apply(s, idx, &Command{Op: OpPush, Name: "q"}); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		// In-flight items count: the queue holds them until they are acked.
		idx++
		if r, _ := apply(s, idx, &Command{Op: OpPop, Name: "q", Session: 1}); !r.Granted {
			t.Fatal("pop failed")
		}
		idx++
		if r, _ := apply(s, idx, &Command{Op: OpPush, Name: "q"}); r.Err != nil {
			t.Fatal(r.Err)
		}
		idx++
		r, _ := apply(s, idx, &Command{Op: OpPush, Name: "q"})
		wantErr(t, "push beyond MaxQueueItems", r, errs.ErrQueueFull)
		// A nack is never refused: the item was counted already.
		idx++
		if r, _ := apply(s, idx, &Command{Op: OpNack, Name: "q", Session: 1, Item: 1}); r.Err != nil {
			t.Fatal(r.Err)
		}
		if st := s.QueueStats("q"); st.Ready != MaxQueueItems || st.InFlight != 0 || st.Head != 1 {
			t.Fatalf("stats after nack: %+v", st)
		}
	})
	t.Run("queue bytes", func(t *testing.T) {
		s := New()
		for i := 1; i <= MaxQueueBytes/MaxItemBytes; i++ {
			if r, _ := apply(s, uint64(i), &Command{Op: OpPush, Name: "q", Value: big}); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		r, _ := apply(s, 1<<20, &Command{Op: OpPush, Name: "q", Value: []byte{1}})
		wantErr(t, "push beyond MaxQueueBytes", r, errs.ErrQueueFull)
	})
	t.Run("queues and queued bytes", func(t *testing.T) {
		s := New()
		idx := uint64(0)
		for i := 0; i < MaxQueues; i++ {
			idx++
			if r, _ := apply(s, idx, &Command{Op: OpPush, Name: fmt.Sprint("q", i)}); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		idx++
		r, _ := apply(s, idx, &Command{Op: OpPush, Name: "one-more"})
		wantErr(t, "push to a new queue beyond MaxQueues", r, errs.ErrTooManyQueues)
		idx++
		r, _ = apply(s, idx, &Command{Op: OpPop, Name: "one-more", Session: 1, Wait: true})
		wantErr(t, "waiting pop creating a queue beyond MaxQueues", r, errs.ErrTooManyQueues)
		// Fill existing queues up to the cluster-wide byte limit.
		for i := 0; s.qBytes+MaxItemBytes <= MaxQueuedBytes; i++ {
			idx++
			if r, _ := apply(s, idx, &Command{Op: OpPush, Name: fmt.Sprint("q", i/1000), Value: big}); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		idx++
		r, _ = apply(s, idx, &Command{Op: OpPush, Name: "q9999", Value: big})
		wantErr(t, "push beyond MaxQueuedBytes", r, errs.ErrTooManyQueues)
	})
	t.Run("waiting consumers", func(t *testing.T) {
		s := New()
		for i := 1; i <= MaxConsumersPerQueue; i++ {
			if r, _ := apply(s, uint64(i), &Command{Op: OpPop, Name: "q", Session: int64(i), Wait: true}); r.Position != i {
				t.Fatalf("consumer %d: %+v", i, r)
			}
		}
		r, _ := apply(s, 1<<20, &Command{Op: OpPop, Name: "q", Session: 1 << 20, Wait: true})
		wantErr(t, "consumer beyond MaxConsumersPerQueue", r, errs.ErrTooManyConsumers)
	})
	t.Run("in flight per session", func(t *testing.T) {
		s := New()
		idx := uint64(0)
		for i := 0; i < MaxInFlightPerSession+1; i++ {
			idx++
			apply(s, idx, &Command{Op: OpPush, Name: "q"})
		}
		// Deliveries and waiting pops count together; detached ones do not.
		for i := 0; i < MaxInFlightPerSession-1; i++ {
			idx++
			if r, _ := apply(s, idx, &Command{Op: OpPop, Name: "q", Session: 7}); !r.Granted {
				t.Fatalf("pop %d: %+v", i, r)
			}
		}
		idx++
		if r, _ := apply(s, idx, &Command{Op: OpPop, Name: "q", Session: 7, Detach: true}); !r.Granted {
			t.Fatalf("detached pop: %+v", r)
		}
		idx++
		if r, _ := apply(s, idx, &Command{Op: OpPop, Name: "empty", Session: 7, Wait: true}); r.Position != 1 {
			t.Fatalf("waiting pop: %+v", r)
		}
		idx++
		r, _ := apply(s, idx, &Command{Op: OpPop, Name: "q", Session: 7})
		wantErr(t, "pop beyond MaxInFlightPerSession", r, errs.ErrTooManyInFlight)
		// Another session is not affected.
		idx++
		if r, _ := apply(s, idx, &Command{Op: OpPop, Name: "q", Session: 8}); !r.Granted {
			t.Fatalf("other session: %+v", r)
		}
	})
}

func TestBarrierLimits(t *testing.T) {
	s := New()
	idx := uint64(0)
	for i := 0; i < MaxBarriersPerSession; i++ {
		idx++
		if r, _ := apply(s, idx, &Command{Op: OpEnter, Name: fmt.Sprint("b", i), Session: 1, Parties: 2}); r.Position != 1 {
			t.Fatalf("enter %d: %+v", i, r)
		}
	}
	idx++
	r, _ := apply(s, idx, &Command{Op: OpEnter, Name: "another", Session: 1, Parties: 2})
	wantErr(t, "enter beyond MaxBarriersPerSession", r, errs.ErrTooManyBarriers)
	for i := 0; i < MaxParties-1; i++ {
		idx++
		apply(s, idx, &Command{Op: OpEnter, Name: "crowd", Session: int64(100 + i), Parties: MaxParties})
	}
	idx++
	if r, g := apply(s, idx, &Command{Op: OpEnter, Name: "crowd", Session: 99, Parties: MaxParties}); !r.Granted || len(g) != MaxParties-1 {
		t.Fatalf("last of %d parties: %+v, %d releases", MaxParties, r, len(g))
	}
	s2 := New()
	for i := 0; i < MaxBarriers; i++ {
		idx++
		apply(s2, idx, &Command{Op: OpBarrierSet, Name: fmt.Sprint("b", i)})
	}
	idx++
	r, _ = apply(s2, idx, &Command{Op: OpBarrierSet, Name: "one-more"})
	wantErr(t, "set beyond MaxBarriers", r, errs.ErrTooManyBarriers)
	if r, _ := apply(s2, idx+1, &Command{Op: OpBarrierSet, Name: "b0"}); r.Err != nil {
		t.Fatalf("setting an existing barrier at the limit: %v", r.Err)
	}
	for i := 0; i < MaxDoubleBarriers; i++ {
		idx++
		apply(s2, idx, &Command{Op: OpEnter, Name: fmt.Sprint("d", i), Session: int64(i/MaxBarriersPerSession + 1), Parties: 2})
	}
	idx++
	r, _ = apply(s2, idx, &Command{Op: OpEnter, Name: "one-more", Session: 1 << 30, Parties: 2})
	wantErr(t, "enter beyond MaxDoubleBarriers", r, errs.ErrTooManyBarriers)
}

func TestQueueAndBarrierNamesValidated(t *testing.T) {
	s := New()
	for _, op := range []OpType{OpPush, OpPop, OpAck, OpNack, OpCancelPop, OpBarrierSet, OpBarrierRemove, OpEnter, OpLeave, OpCancelEnter} {
		for _, name := range []string{"", "a\x00b"} {
			r, _ := apply(s, 1, &Command{Op: op, Name: name, Session: 1, Parties: 1})
			wantErr(t, fmt.Sprintf("op %d name %q", op, name), r, errs.ErrBadArguments)
		}
	}
}

// TestLeaseExpiryOrder: leases that pass in one tick return in queue-name
// then id order, whatever order they were delivered in; settled deliveries
// leave the lease heap at once, so NeedsTick never asks for a useless tick.
func TestLeaseExpiryOrder(t *testing.T) {
	s := New()
	idx := uint64(0)
	for _, q := range []string{"b", "a"} {
		for i := 0; i < 3; i++ {
			idx++
			apply(s, idx, &Command{Op: OpPush, Name: q, Value: []byte(fmt.Sprint(q, i))})
		}
	}
	for _, q := range []string{"b", "a"} {
		for i := 0; i < 3; i++ {
			idx++
			apply(s, idx, &Command{Op: OpPop, Name: q, Session: 1, VisibilityMs: int64(1000 - 100*i), TimeMs: 0})
		}
	}
	if s.NeedsTick(699) || !s.NeedsTick(1000) {
		t.Fatal("NeedsTick does not follow the earliest lease")
	}
	idx++
	apply(s, idx, &Command{Op: OpTick, TimeMs: 1000})
	for _, q := range []string{"a", "b"} {
		st := s.QueueStats(q)
		if st.Ready != 3 || st.InFlight != 0 || st.Head != map[string]uint64{"b": 1, "a": 4}[q] {
			t.Fatalf("queue %s after expiry: %+v", q, st)
		}
	}
	for i := 0; i < 10000; i++ {
		idx++
		apply(s, idx, &Command{Op: OpPush, Name: "c"})
		idx++
		r, _ := apply(s, idx, &Command{Op: OpPop, Name: "c", Session: 2, VisibilityMs: MaxVisibilityMs})
		idx++
		apply(s, idx, &Command{Op: OpAck, Name: "c", Session: 2, Item: r.Item.ID})
	}
	if len(s.leases) != s.nInflight || s.nInflight != 0 || s.NeedsTick(1<<62) {
		t.Fatalf("lease heap holds %d entries for %d deliveries", len(s.leases), s.nInflight)
	}
}

// TestCodecCompatibility: commands an older binary could write encode byte
// for byte as before (no extension block), so a member not yet upgraded
// still decodes them; the extension round-trips; bad extensions are refused.
func TestCodecCompatibility(t *testing.T) {
	// Written by the binary before queues existed (commit a26b512).
	old := []byte{0xc1, 0x01, 0x00, 0x01, 0x07, 0xd0, 0x0f, 0x0a, 0xc8, 0x01, 0x00, 0x00, 0x04, 0x00, 0x01, 0x78, 0x00, 0x02, 0x76, 0x31}
	c, err := Decode(old)
	if err != nil {
		t.Fatal(err)
	}
	want := &Command{ID: 7, TimeMs: 1000, Session: 5, Op: OpAcquire, Wait: true, DelayMs: 100, Permits: 2, Name: "x", Value: []byte("v1")}
	if fmt.Sprintf("%+v", c) != fmt.Sprintf("%+v", want) {
		t.Fatalf("old encoding decodes as %+v", c)
	}
	if again, _ := Encode(c); !bytes.Equal(again, old) {
		t.Fatalf("re-encoding changed the bytes:\n%x\n%x", again, old)
	}
	q := &Command{ID: 9, Session: 3, Op: OpPop, Name: "q", Wait: true, VisibilityMs: 5000, Detach: true}
	b, err := Encode(q)
	if err != nil {
		t.Fatal(err)
	}
	q2, err := Decode(b)
	if err != nil || fmt.Sprintf("%+v", q2) != fmt.Sprintf("%+v", q) {
		t.Fatalf("extension round trip: %+v %v", q2, err)
	}
	for _, c := range []*Command{{Op: OpAck, Name: "q", Item: 1, Attempt: 3}, {Op: OpEnter, Name: "b", Parties: MaxParties}, {Op: OpCancelPop, Name: "q", Waiter: 1 << 60}} {
		b, _ := Encode(c)
		if c2, err := Decode(b); err != nil || fmt.Sprintf("%+v", c2) != fmt.Sprintf("%+v", c) {
			t.Fatalf("round trip %+v: %+v %v", c, c2, err)
		}
	}
	for name, mut := range map[string]func([]byte) []byte{
		"unknown extension version": func(b []byte) []byte { b[len(b)-8] = 2; return b },
		"trailing byte":             func(b []byte) []byte { return append(b, 0) },
		"truncated extension":       func(b []byte) []byte { return b[:len(b)-1] },
	} {
		b, _ := Encode(&Command{Op: OpPop, Name: "q", VisibilityMs: 5000, Detach: true, Item: 1, Attempt: 1, Waiter: 1, Parties: 1})
		if _, err := Decode(mut(bytes.Clone(b))); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	if _, err := Encode(&Command{Op: OpEnter, Name: "b", Parties: MaxParties + 1}); !errors.Is(err, errs.ErrBadArguments) {
		t.Fatalf("Encode with too many parties: %v", err)
	}
	if _, err := Encode(&Command{Op: OpAcquire, Name: "b", Permits: MaxPermits + 1}); !errors.Is(err, errs.ErrBadArguments) {
		t.Fatalf("Encode with too many permits: %v", err)
	}
}

// queueState builds a state with every kind of queue and barrier entry.
func queueState() *State {
	s := New()
	apply(s, 1, &Command{Op: OpAcquire, Name: "a", Session: 1})
	apply(s, 2, &Command{Op: OpPush, Name: "q", Value: []byte("x")})
	apply(s, 3, &Command{Op: OpPush, Name: "q", Value: []byte("y")})
	apply(s, 4, &Command{Op: OpPop, Name: "q", Session: 1, TimeMs: 100})
	apply(s, 5, &Command{Op: OpPop, Name: "w", Session: 2, Wait: true, Detach: true})
	apply(s, 6, &Command{Op: OpBarrierSet, Name: "b"})
	apply(s, 7, &Command{Op: OpEnter, Name: "d", Session: 1, Parties: 2})
	apply(s, 8, &Command{Op: OpEnter, Name: "d2", Session: 1, Parties: 2})
	apply(s, 9, &Command{Op: OpEnter, Name: "d2", Session: 2, Parties: 2})
	apply(s, 10, &Command{Op: OpLeave, Name: "d2", Session: 2})
	return s
}

func TestSnapshotVersions(t *testing.T) {
	// Only locks and counters: version 1, as older binaries write and read.
	s := New()
	s.Apply(1, &Command{Op: OpAcquire, Name: "a", Session: 1}, alive)
	if snap := s.Snapshot(); snap[0] != snapshotV1 {
		t.Fatalf("lock-only snapshot has version %d", snap[0])
	}
	// A version 1 snapshot written by the binary before queues existed
	// (commit a26b512).
	v1 := []byte{0x01, 0x01, 0x01, 0x61, 0x00, 0x01, 0x01, 0x02, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x05, 0x19, 0x42}
	r, err := Restore(v1)
	if err != nil {
		t.Fatal(err)
	}
	if got := show(r); got != "a: holder(s1,t1,exclusive)\n" {
		t.Fatalf("v1 snapshot restored as %q", got)
	}
	q := queueState()
	snap := q.Snapshot()
	if snap[0] != snapshotV2 {
		t.Fatalf("snapshot with queues has version %d", snap[0])
	}
	checkSnapshot(t, q)
	// Corruption anywhere is detected; truncation too.
	for i := range snap {
		bad := bytes.Clone(snap)
		bad[i] ^= 0x41
		if _, err := Restore(bad); err == nil {
			t.Fatalf("flipped byte %d not detected", i)
		}
	}
	for n := 0; n < len(snap); n++ {
		if _, err := Restore(snap[:n]); err == nil {
			t.Fatalf("truncation to %d not detected", n)
		}
	}
	// Draining everything goes back to version 1.
	apply(q, 20, &Command{Op: OpAck, Name: "q", Session: 1, Item: 2})
	apply(q, 21, &Command{Op: OpPop, Name: "q", Session: 1})
	apply(q, 22, &Command{Op: OpAck, Name: "q", Session: 1, Item: 3})
	apply(q, 23, &Command{Op: OpBarrierRemove, Name: "b"})
	q.SessionEnded(24, 0, 2, false)
	q.SessionEnded(25, 0, 1, false)
	if snap := q.Snapshot(); snap[0] != snapshotV1 || q.Len() != 0 {
		t.Fatalf("drained state: version %d, %s", snap[0], show(q))
	}
}

// TestQueueDeterminism applies one random history of queue, barrier and
// session commands to a state that replays it all and to states restored
// from a snapshot (at every step, and once midway): results, grants and
// snapshots must match byte for byte, whatever the maps' iteration order or
// the lease heap's layout.
func TestQueueDeterminism(t *testing.T) {
	seen := map[string]int{}
	defer func() {
		// The history must reach the interesting paths, or the test proves little.
		for _, k := range []string{"Kind:1", "Kind:2", "Kind:3", "Kind:4", "Attempt:3", "Granted:true", "Position:2"} {
			if seen[k] == 0 && !t.Failed() {
				t.Errorf("random histories never produced %s", k)
			}
		}
	}()
	for seed := int64(1); seed <= 20; seed++ {
		rng := newRand(seed)
		a, mid := New(), (*State)(nil)
		every := New()
		var ts int64
		for i := uint64(1); i <= 400; i++ {
			ts += int64(rng.Intn(400))
			sess := int64(rng.Intn(4) + 1)
			q := fmt.Sprint("q", rng.Intn(2))
			var c *Command
			switch rng.Intn(11) {
			case 0, 1:
				c = &Command{Op: OpPush, Name: q, Value: []byte(fmt.Sprint(i))}
			case 2, 3:
				c = &Command{Op: OpPop, Name: q, Session: sess, Wait: rng.Intn(2) == 0, Detach: rng.Intn(4) == 0, VisibilityMs: int64(rng.Intn(3000) + 1)}
			case 4:
				c = &Command{Op: OpAck, Name: q, Session: sess, Item: uint64(rng.Intn(int(i)) + 1)}
			case 5:
				c = &Command{Op: OpNack, Name: q, Session: sess, Item: uint64(rng.Intn(int(i)) + 1)}
			case 6:
				c = &Command{Op: OpTick}
			case 7:
				c = &Command{Op: []OpType{OpEnter, OpLeave, OpCancelEnter}[rng.Intn(3)], Name: "b", Session: sess, Parties: 3}
			case 8:
				c = &Command{Op: OpCancelPop, Name: q, Session: sess, Waiter: uint64(rng.Intn(int(i)) + 1)}
			case 9:
				c = &Command{Op: []OpType{OpBarrierSet, OpBarrierRemove}[rng.Intn(2)], Name: "g"}
			}
			if c != nil {
				c.TimeMs, c.ID = ts, i
			}
			step := func(s *State) string {
				if c == nil {
					g, _ := s.SessionEnded(i, ts, sess, rng.Intn(2) == 0)
					return fmtGrants(g)
				}
				r, g, _ := s.Apply(i, c, alive)
				item := r.Item
				r.Item = nil
				return fmt.Sprintf("%+v %+v %s", r, item, fmtGrants(g))
			}
			// The session-end branch draws from rng: draw once, replay for all.
			state := *rng
			outA := step(a)
			*rng = state
			outE := step(every)
			for _, k := range []string{"Kind:1", "Kind:2", "Kind:3", "Kind:4", "Attempt:3", "Granted:true", "Position:2"} {
				seen[k] += strings.Count(outA, k)
			}
			if outA != outE {
				t.Fatalf("seed %d step %d: replayed %s, restored-every-step %s", seed, i, outA, outE)
			}
			if mid != nil {
				*rng = state
				if outM := step(mid); outM != outA {
					t.Fatalf("seed %d step %d: replayed %s, restored-midway %s", seed, i, outA, outM)
				}
			}
			checkLeases(t, a)
			snap := a.Snapshot()
			if !bytes.Equal(snap, every.Snapshot()) || (mid != nil && !bytes.Equal(snap, mid.Snapshot())) {
				t.Fatalf("seed %d step %d: snapshots differ", seed, i)
			}
			var err error
			if every, err = Restore(snap); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, i, err)
			}
			if i == 200 {
				mid, _ = Restore(snap)
			}
		}
	}
}

// newRand is a tiny deterministic generator (copyable, so a step can be
// replayed with the same draws).
type xrand struct{ s uint64 }

func newRand(seed int64) *xrand { return &xrand{uint64(seed)*0x9E3779B97F4A7C15 + 1} }

func (r *xrand) Intn(n int) int {
	r.s ^= r.s << 13
	r.s ^= r.s >> 7
	r.s ^= r.s << 17
	return int(r.s % uint64(n))
}

func fmtGrants(gs []Grant) string {
	var out string
	for _, g := range gs {
		item := g.Item
		g.Item = nil
		out += fmt.Sprintf("%+v %+v;", g, item)
	}
	return out
}

// An expire batch that ends a consumer holding an item and the next waiting
// consumer hands the item back to the first consumer that outlives the
// command, not to a session ending in it (the queue analogue of
// TestExpireBatchTokenReuse).
func TestExpireBatchQueueHandOff(t *testing.T) {
	s := New()
	apply(s, 1, &Command{Op: OpPush, Name: "q", Value: []byte("job")})
	if r, _ := apply(s, 2, &Command{Op: OpPop, Name: "q", Session: 10, VisibilityMs: 60000}); !r.Granted {
		t.Fatal("first pop not granted")
	}
	apply(s, 3, &Command{Op: OpPop, Name: "q", Session: 20, Wait: true, VisibilityMs: 60000})
	apply(s, 4, &Command{Op: OpPop, Name: "q", Session: 30, Wait: true, VisibilityMs: 60000})
	grants, _ := s.SessionsEnded(5, 0, []int64{10, 20}, true)
	if len(grants) != 1 || grants[0].Session != 30 {
		t.Fatalf("grants %+v: want the item for session 30 only", grants)
	}
}

// TestQueueAndBarrierListings: the listings a monitor shows name the
// queues and barriers in use, by name, at most the limit, with the totals.
func TestQueueAndBarrierListings(t *testing.T) {
	s := New()
	idx := uint64(0)
	do := func(c *Command) {
		idx++
		if r, _ := apply(s, idx, c); r.Err != nil {
			t.Fatalf("%+v: %v", c, r.Err)
		}
	}
	for _, q := range []string{"qc", "qa", "qb"} {
		do(&Command{Op: OpPush, Name: q, Value: []byte("xy")})
	}
	do(&Command{Op: OpPush, Name: "qa"})
	do(&Command{Op: OpPop, Name: "qa", Session: 1})
	do(&Command{Op: OpBarrierSet, Name: "b2"})
	do(&Command{Op: OpBarrierSet, Name: "b1"})
	do(&Command{Op: OpEnter, Name: "d1", Session: 1, Parties: 3})
	qs, n := s.Queues(2)
	if n != 3 || len(qs) != 2 || qs[0].Name != "qa" || qs[0].Ready != 1 || qs[0].InFlight != 1 || qs[1].Name != "qb" || qs[1].Bytes != 2 {
		t.Fatalf("Queues(2) = %+v, %d", qs, n)
	}
	simple, double, ns, nd := s.Barriers(1)
	if ns != 2 || nd != 1 || len(simple) != 1 || simple[0] != "b1" || len(double) != 1 || double[0].Name != "d1" ||
		double[0].Parties != 3 || len(double[0].Entered) != 1 {
		t.Fatalf("Barriers(1) = %v, %+v, %d, %d", simple, double, ns, nd)
	}
	if qs, n := New().Queues(10); len(qs) != 0 || n != 0 {
		t.Fatalf("empty state: %v, %d", qs, n)
	}
}
