package session

import (
	"math/rand"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClock is a Clock the test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Unix(1000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func expect(t *testing.T, what string, got, want []int64) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func TestExpiryAfterTimeout(t *testing.T) {
	clk := newClock()
	tr := NewTracker(clk)
	tr.Add(1, time.Second)
	tr.Add(2, 3*time.Second)
	clk.advance(time.Second)
	expect(t, "at the deadline", tr.Expired(10), nil)
	clk.advance(time.Millisecond)
	expect(t, "just past", tr.Expired(10), []int64{1})
	expect(t, "not pending: offered again", tr.Expired(10), []int64{1})
	clk.advance(2 * time.Second)
	expect(t, "both", tr.Expired(10), []int64{1, 2})
	if tr.Len() != 2 {
		t.Fatalf("Expired must not forget sessions: len %d", tr.Len())
	}
	tr.Remove(1)
	expect(t, "after remove", tr.Expired(10), []int64{2})
	if tr.Touch(1) {
		t.Fatal("touch of a removed session succeeded")
	}
	tr.Remove(1) // idempotent
	if tr.Len() != 1 {
		t.Fatalf("len %d", tr.Len())
	}
}

func TestTouchExtends(t *testing.T) {
	clk := newClock()
	tr := NewTracker(clk)
	tr.Add(1, time.Second)
	tr.Add(2, time.Second)
	for range 10 {
		clk.advance(900 * time.Millisecond)
		if !tr.Touch(1) {
			t.Fatal("touch of a known session failed")
		}
	}
	expect(t, "only the untouched one", tr.Expired(10), []int64{2})
	clk.advance(1100 * time.Millisecond)
	expect(t, "touch stopped", tr.Expired(10), []int64{1, 2})
	// A touch after the deadline but before the expiry applies revives it:
	// the leader has not proposed anything yet.
	tr.Touch(2)
	expect(t, "revived", tr.Expired(10), []int64{1})
	if tr.Touch(99) {
		t.Fatal("touch of an unknown session succeeded")
	}
}

func TestTouchBatch(t *testing.T) {
	clk := newClock()
	tr := NewTracker(clk)
	tr.Add(1, time.Second)
	tr.Add(2, time.Second)
	clk.advance(800 * time.Millisecond)
	tr.TouchBatch([]int64{2, 99, 2})
	clk.advance(800 * time.Millisecond)
	expect(t, "batch touched 2", tr.Expired(10), []int64{1})
	if tr.Len() != 2 {
		t.Fatal("TouchBatch must not add unknown sessions")
	}
}

func TestAddRestartsKnownSession(t *testing.T) {
	clk := newClock()
	tr := NewTracker(clk)
	tr.Add(1, 10*time.Second)
	tr.Add(1, time.Second) // shorter timeout: the earlier deadline must count
	clk.advance(1500 * time.Millisecond)
	expect(t, "shortened", tr.Expired(10), []int64{1})
	tr.MarkPending([]int64{1})
	tr.Add(1, time.Second) // clears the mark
	clk.advance(1500 * time.Millisecond)
	expect(t, "re-added", tr.Expired(10), []int64{1})
	if tr.Len() != 1 {
		t.Fatalf("len %d", tr.Len())
	}
}

func TestPendingAndRetry(t *testing.T) {
	clk := newClock()
	tr := NewTracker(clk)
	for id := int64(1); id <= 3; id++ {
		tr.Add(id, time.Second)
	}
	clk.advance(2 * time.Second)
	ids := tr.Expired(10)
	expect(t, "overdue", ids, []int64{1, 2, 3})
	tr.MarkPending(ids[:2])
	expect(t, "pending hidden", tr.Expired(10), []int64{3})
	tr.MarkPending([]int64{3, 42}) // unknown id ignored
	expect(t, "all pending", tr.Expired(10), nil)
	// The proposal for 1 applied; 2's was lost; 3's is still in flight.
	tr.Remove(1)
	clk.advance(PendingLapse - time.Millisecond)
	expect(t, "before the lapse", tr.Expired(10), nil)
	clk.advance(2 * time.Millisecond)
	expect(t, "retry after the lapse", tr.Expired(10), []int64{2, 3})
	// A session touched while its proposal was in flight is not retried.
	tr.MarkPending([]int64{2, 3})
	clk.advance(PendingLapse - 500*time.Millisecond)
	tr.Touch(3)
	clk.advance(600 * time.Millisecond)
	expect(t, "touched one stays", tr.Expired(10), []int64{2})
	d, ok := tr.NextDeadline()
	if !ok || !d.Before(clk.Now()) {
		t.Fatalf("next deadline %v %v, want in the past (2 is overdue)", d, ok)
	}
}

func TestExpiredLimitOldestFirst(t *testing.T) {
	clk := newClock()
	tr := NewTracker(clk)
	tr.Add(5, time.Second)
	clk.advance(time.Second)
	tr.Add(1, time.Second)
	tr.Add(9, time.Second)
	clk.advance(2 * time.Second)
	expect(t, "limit 1: longest overdue", tr.Expired(1), []int64{5})
	expect(t, "limit 2", tr.Expired(2), []int64{1, 5})
	expect(t, "limit 0", tr.Expired(0), nil)
	expect(t, "no limit", tr.Expired(100), []int64{1, 5, 9})
	tr.MarkPending(tr.Expired(2))
	expect(t, "rest", tr.Expired(2), []int64{9})
}

func TestResetAllGivesFreshTimeouts(t *testing.T) {
	clk := newClock()
	tr := NewTracker(clk)
	tr.Add(1, time.Second)
	tr.Add(3, time.Second)
	tr.MarkPending([]int64{1})
	clk.advance(10 * time.Second) // long overdue on the old leader's books
	tr.ResetAll(map[int64]time.Duration{1: time.Second, 7: 2 * time.Second})
	expect(t, "new leader, at once", tr.Expired(10), nil)
	if tr.Len() != 2 {
		t.Fatalf("len %d, want exactly the given sessions", tr.Len())
	}
	if tr.Touch(3) {
		t.Fatal("session 3 is not in the new set")
	}
	d, ok := tr.NextDeadline()
	if !ok || !d.Equal(clk.Now().Add(time.Second)) {
		t.Fatalf("next deadline %v %v", d, ok)
	}
	clk.advance(1500 * time.Millisecond)
	expect(t, "full timeout later (pending mark cleared)", tr.Expired(10), []int64{1})
	clk.advance(time.Second)
	expect(t, "both", tr.Expired(10), []int64{1, 7})
	tr.ResetAll(nil)
	if _, ok := tr.NextDeadline(); ok || tr.Len() != 0 {
		t.Fatal("ResetAll(nil) must empty the tracker")
	}
}

func TestNextDeadline(t *testing.T) {
	clk := newClock()
	tr := NewTracker(clk)
	if _, ok := tr.NextDeadline(); ok {
		t.Fatal("empty tracker has a deadline")
	}
	start := clk.Now()
	tr.Add(1, 2*time.Second)
	tr.Add(2, 3*time.Second)
	if d, _ := tr.NextDeadline(); !d.Equal(start.Add(2 * time.Second)) {
		t.Fatalf("got %v", d)
	}
	clk.advance(time.Second)
	tr.Touch(1) // now due at start+3s, like 2
	if d, _ := tr.NextDeadline(); !d.Equal(start.Add(3 * time.Second)) {
		t.Fatalf("after touch got %v", d)
	}
	clk.advance(3 * time.Second)
	tr.MarkPending([]int64{1, 2})
	if d, _ := tr.NextDeadline(); !d.Equal(clk.Now().Add(PendingLapse)) {
		t.Fatalf("pending: got %v", d)
	}
	tr.Remove(1)
	tr.Remove(2)
	if _, ok := tr.NextDeadline(); ok {
		t.Fatal("deadline after all removed")
	}
}

// TestTrackerMatchesModel drives the tracker and a plain map model with the
// same random operations and compares Expired and NextDeadline.
func TestTrackerMatchesModel(t *testing.T) {
	type mEntry struct {
		timeout           time.Duration
		deadline, pending time.Time
	}
	rng := rand.New(rand.NewSource(1))
	clk := newClock()
	tr := NewTracker(clk)
	model := map[int64]*mEntry{}
	due := func(e *mEntry) time.Time {
		if !e.pending.IsZero() && e.pending.Add(PendingLapse).After(e.deadline) {
			return e.pending.Add(PendingLapse)
		}
		return e.deadline
	}
	for step := range 20000 {
		id := int64(rng.Intn(40))
		now := clk.Now()
		switch rng.Intn(9) {
		case 0, 1:
			to := time.Duration(1+rng.Intn(5000)) * time.Millisecond
			tr.Add(id, to)
			model[id] = &mEntry{timeout: to, deadline: now.Add(to)}
		case 2, 3:
			got := tr.Touch(id)
			e, ok := model[id]
			if ok {
				e.deadline = now.Add(e.timeout)
			}
			if got != ok {
				t.Fatalf("step %d: Touch(%d) = %v", step, id, got)
			}
		case 4:
			tr.Remove(id)
			delete(model, id)
		case 5:
			clk.advance(time.Duration(rng.Intn(2000)) * time.Millisecond)
		case 6, 7:
			var want []int64
			for id, e := range model {
				if now.After(due(e)) {
					want = append(want, id)
				}
			}
			slices.Sort(want)
			got := tr.Expired(1 << 20)
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: Expired %v, want %v", step, got, want)
			}
			if len(got) > 0 && rng.Intn(2) == 0 {
				tr.MarkPending(got)
				for _, id := range got {
					model[id].pending = now
				}
			}
		case 8:
			var want time.Time
			for _, e := range model {
				if d := due(e); want.IsZero() || d.Before(want) {
					want = d
				}
			}
			got, ok := tr.NextDeadline()
			if ok != !want.IsZero() || !got.Equal(want) {
				t.Fatalf("step %d: NextDeadline %v %v, want %v", step, got, ok, want)
			}
		}
		if tr.Len() != len(model) {
			t.Fatalf("step %d: len %d, want %d", step, tr.Len(), len(model))
		}
	}
}

func TestTrackerConcurrent(t *testing.T) {
	clk := newClock()
	tr := NewTracker(clk)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(g)))
			for range 2000 {
				id := int64(rng.Intn(100))
				switch rng.Intn(7) {
				case 0:
					tr.Add(id, time.Duration(1+rng.Intn(100))*time.Millisecond)
				case 1:
					tr.Touch(id)
				case 2:
					tr.TouchBatch([]int64{id, id + 1})
				case 3:
					tr.MarkPending(tr.Expired(10))
				case 4:
					tr.Remove(id)
				case 5:
					clk.advance(time.Millisecond)
					tr.NextDeadline()
				case 6:
					if rng.Intn(50) == 0 {
						tr.ResetAll(map[int64]time.Duration{id: time.Second})
					}
					tr.Len()
				}
			}
		}()
	}
	wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.due) != len(tr.byID) {
		t.Fatalf("heap %d entries, map %d", len(tr.due), len(tr.byID))
	}
	for i, e := range tr.due {
		if e.index != i || tr.byID[e.id] != e {
			t.Fatalf("heap entry %d inconsistent", i)
		}
	}
}

func TestNegotiate(t *testing.T) {
	tick := 2 * time.Second
	for _, c := range []struct{ in, want time.Duration }{
		{0, 4 * time.Second},
		{-time.Second, 4 * time.Second},
		{time.Second, 4 * time.Second},
		{4 * time.Second, 4 * time.Second},
		{10 * time.Second, 10 * time.Second},
		{40 * time.Second, 40 * time.Second},
		{41 * time.Second, 40 * time.Second},
		{time.Hour, 40 * time.Second},
	} {
		if got := Negotiate(c.in, tick); got != c.want {
			t.Errorf("Negotiate(%v, %v) = %v, want %v", c.in, tick, got, c.want)
		}
	}
}

func BenchmarkTouchAndExpire(b *testing.B) {
	clk := newClock()
	tr := NewTracker(clk)
	const n = 100000
	for id := range int64(n) {
		tr.Add(id, 10*time.Second)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tr.Touch(int64(i % n))
		if i%1000 == 0 {
			clk.advance(time.Millisecond)
			tr.Expired(10000)
		}
	}
}

// Slack postpones expiry uniformly: a session overdue by less than the
// slack is not offered; a keepalive that lands within it saves the session.
func TestExpiredAfterSlack(t *testing.T) {
	clk := newClock()
	tr := NewTracker(clk)
	tr.Add(1, time.Second)
	tr.Add(2, 2*time.Second)
	clk.advance(1500 * time.Millisecond)
	expect(t, "no slack", tr.ExpiredAfter(10, 0), []int64{1})
	expect(t, "within a 600ms slack", tr.ExpiredAfter(10, 600*time.Millisecond), nil)
	clk.advance(200 * time.Millisecond) // 1.7s: session 1 is 700ms overdue
	expect(t, "past the slack", tr.ExpiredAfter(10, 600*time.Millisecond), []int64{1})
	tr.Touch(1)                         // the late keepalive arrived
	clk.advance(900 * time.Millisecond) // 2.6s: 1 is due at 2.7s, 2 overdue by 600ms
	expect(t, "slack is per call", tr.ExpiredAfter(10, 500*time.Millisecond), []int64{2})
	expect(t, "negative slack counts as none", tr.ExpiredAfter(10, -time.Hour), []int64{2})
}
