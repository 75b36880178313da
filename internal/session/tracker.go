package session

import (
	"container/heap"
	"slices"
	"sync"
	"time"
)

// Clock is a monotonic clock; production uses time.Now (whose readings carry
// a monotonic component, so wall-clock steps do not expire sessions).
type Clock interface{ Now() time.Time }

// PendingLapse is how long an expiry proposal may stay in flight before the
// tracker offers the session for expiry again: the proposal may have been
// lost to a leader change or a full queue.
const PendingLapse = 5 * time.Second

type entry struct {
	id       int64
	timeout  time.Duration
	deadline time.Time
	pending  time.Time // when MarkPending last covered it; zero if none

	// due is the entry's heap key. It never exceeds the true due time
	// (deadline, or the end of a pending mark), so Touch can extend a
	// deadline without reordering the heap; Expired and NextDeadline correct
	// stale keys lazily when they surface.
	due   time.Time
	index int // position in the heap
}

// trueDue is when the entry next needs attention.
func (e *entry) trueDue() time.Time {
	if !e.pending.IsZero() {
		if lapse := e.pending.Add(PendingLapse); lapse.After(e.deadline) {
			return lapse
		}
	}
	return e.deadline
}

type dueHeap []*entry

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	// Ties go to the lower id so Expired's choice under a limit is deterministic.
	if c := h[i].due.Compare(h[j].due); c != 0 {
		return c < 0
	}
	return h[i].id < h[j].id
}
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *dueHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

// Tracker holds a deadline per session on the leader. It is safe for
// concurrent use. Touch is O(1); Expired costs O(k log n) for the k sessions
// it looks at, not a scan of every session.
type Tracker struct {
	clock Clock

	mu   sync.Mutex
	byID map[int64]*entry
	due  dueHeap
}

// NewTracker returns an empty tracker reading time from clock.
func NewTracker(clock Clock) *Tracker {
	return &Tracker{clock: clock, byID: map[int64]*entry{}}
}

// Add tracks a new session, or restarts a known one (clearing any pending
// mark), with deadline now + timeout.
func (t *Tracker) Add(id int64, timeout time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.addLocked(id, timeout, t.clock.Now())
}

func (t *Tracker) addLocked(id int64, timeout time.Duration, now time.Time) {
	e := t.byID[id]
	if e == nil {
		e = &entry{id: id}
		t.byID[id] = e
		e.timeout, e.deadline, e.due = timeout, now.Add(timeout), now.Add(timeout)
		heap.Push(&t.due, e)
		return
	}
	e.timeout, e.deadline, e.pending = timeout, now.Add(timeout), time.Time{}
	t.lowerKey(e)
}

// lowerKey restores due <= trueDue after the true due time moved earlier.
func (t *Tracker) lowerKey(e *entry) {
	if d := e.trueDue(); d.Before(e.due) {
		e.due = d
		heap.Fix(&t.due, e.index)
	}
}

// Touch records a keepalive: deadline = now + the session's timeout. It
// reports false if the session is unknown. A pending expiry mark stays: the
// proposal in flight decides, and if it is lost the mark lapses and the now
// extended deadline keeps the session alive.
func (t *Tracker) Touch(id int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.byID[id]
	if ok {
		t.touchLocked(e, t.clock.Now())
	}
	return ok
}

func (t *Tracker) touchLocked(e *entry, now time.Time) {
	e.deadline = now.Add(e.timeout)
	t.lowerKey(e) // only if the clock went backwards
}

// TouchBatch records keepalives forwarded by a follower; unknown ids are
// ignored.
func (t *Tracker) TouchBatch(ids []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	for _, id := range ids {
		if e, ok := t.byID[id]; ok {
			t.touchLocked(e, now)
		}
	}
}

// Remove forgets a session; the closing or expiring command applied.
func (t *Tracker) Remove(id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.byID[id]; ok {
		delete(t.byID, id)
		heap.Remove(&t.due, e.index)
	}
}

// settleLocked re-keys the top of the heap while its key is stale (earlier
// than its true due time). Then, since no key exceeds its true due time,
// due[0].due is the earliest true due time of all sessions.
func (t *Tracker) settleLocked() {
	for len(t.due) > 0 {
		e := t.due[0]
		d := e.trueDue()
		if !e.due.Before(d) {
			return
		}
		e.due = d
		heap.Fix(&t.due, 0)
	}
}

// Expired returns at most limit sessions whose deadline has passed and that
// have no live pending mark, sorted by id. When more are overdue, those
// overdue longest are returned first. They stay tracked (and are returned
// again by later calls) until Remove, or until MarkPending hides them.
func (t *Tracker) Expired(limit int) []int64 { return t.ExpiredAfter(limit, 0) }

// ExpiredAfter is Expired for sessions overdue by more than slack: the
// leader's allowance for keepalives still on their way (see
// server.expirySlack). A uniform slack keeps the heap order valid.
func (t *Tracker) ExpiredAfter(limit int, slack time.Duration) []int64 {
	if limit <= 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now().Add(-max(slack, 0))
	var out []*entry
	for len(out) < limit && len(t.due) > 0 {
		e := t.due[0]
		if !now.After(e.due) {
			break
		}
		// Keys are corrected only here, when they come due: a session
		// touched many times is re-keyed at most once per timeout.
		if d := e.trueDue(); e.due.Before(d) {
			e.due = d
			heap.Fix(&t.due, 0)
			continue
		}
		// Overdue with no live mark. Set it aside so the loop moves on; it
		// goes back below with its key unchanged.
		out = append(out, heap.Pop(&t.due).(*entry))
	}
	ids := make([]int64, len(out))
	for i, e := range out {
		heap.Push(&t.due, e)
		ids[i] = e.id
	}
	slices.Sort(ids)
	if len(ids) == 0 {
		return nil
	}
	return ids
}

// MarkPending records that an expire proposal for ids is in flight: Expired
// does not offer them again for PendingLapse, after which, if the session is
// still tracked (the proposal was lost) and still overdue, it is offered
// again. Unknown ids are ignored.
func (t *Tracker) MarkPending(ids []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	for _, id := range ids {
		if e, ok := t.byID[id]; ok {
			e.pending = now // only delays the true due time: the key stays valid
		}
	}
}

// ResetAll makes the tracker hold exactly these sessions, each with a fresh
// full timeout from now and no pending mark. A new leader calls it: it cannot
// know when followers last heard from their clients, so it never expires
// sessions in a burst.
func (t *Tracker) ResetAll(sessions map[int64]time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	t.byID = make(map[int64]*entry, len(sessions))
	t.due = make(dueHeap, 0, len(sessions))
	for id, timeout := range sessions {
		t.addLocked(id, timeout, now)
	}
}

// Len returns the number of tracked sessions.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

// NextDeadline returns the earliest time at which Expired may return a
// session: the earliest deadline, or for a session with a pending mark, the
// later of its deadline and the mark's lapse. It is in the past when some
// session is overdue already. ok is false when nothing is tracked.
func (t *Tracker) NextDeadline() (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.settleLocked()
	if len(t.due) == 0 {
		return time.Time{}, false
	}
	return t.due[0].due, true
}

// Negotiate clamps a requested session timeout to ZooKeeper's bounds,
// [2*tick, 20*tick]. tick must be positive.
func Negotiate(requested, tick time.Duration) time.Duration {
	return min(max(requested, 2*tick), 20*tick)
}
