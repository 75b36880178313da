// Package session owns session liveness bookkeeping, which is not
// replicated: the leader's deadlines (Tracker), followers' keepalive batches
// bound for the leader (Batcher), and ZooKeeper's timeout negotiation.
//
// Sessions themselves (id, timeout, password) live in the replicated tree.
// Expiry is decided here, on the leader, by its monotonic clock, and carried
// out by proposing a replicated expire command; this package never changes
// the tree itself.
package session

import (
	"encoding/binary"
	"errors"
	"sort"
	"sync"
	"time"
)

// Clock is a monotonic clock; production uses time.Now.
type Clock interface{ Now() time.Time }

// pendingLapse is how long an expiry proposal may stay in flight before the
// tracker offers the session for expiry again (the proposal may have been
// dropped by a leader change).
const pendingLapse = 5 * time.Second

type entry struct {
	timeout  time.Duration
	deadline time.Time
	pending  time.Time // zero when no expire proposal is in flight
}

// Tracker holds a deadline per session. It is safe for concurrent use.
type Tracker struct {
	clock Clock
	mu    sync.Mutex
	m     map[int64]*entry
}

// NewTracker returns an empty tracker.
func NewTracker(clock Clock) *Tracker { return &Tracker{clock: clock, m: map[int64]*entry{}} }

// Add tracks a session (or refreshes a known one) with a full timeout from now.
func (t *Tracker) Add(id int64, timeout time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[id] = &entry{timeout: timeout, deadline: t.clock.Now().Add(timeout)}
}

// Touch records a keepalive; false if the session is unknown.
func (t *Tracker) Touch(id int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[id]
	if ok {
		e.deadline = t.clock.Now().Add(e.timeout)
	}
	return ok
}

// TouchBatch records keepalives forwarded by a follower.
func (t *Tracker) TouchBatch(ids []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	for _, id := range ids {
		if e, ok := t.m[id]; ok {
			e.deadline = now.Add(e.timeout)
		}
	}
}

// Remove forgets a session (closed or expired by the replicated command).
func (t *Tracker) Remove(id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, id)
}

// Expired returns up to limit sessions whose deadline has passed and that
// have no expiry proposal in flight, sorted by id.
func (t *Tracker) Expired(limit int) []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	var out []int64
	for id, e := range t.m {
		if now.After(e.deadline) && (e.pending.IsZero() || now.Sub(e.pending) >= pendingLapse) {
			out = append(out, id)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// MarkPending records that an expiry proposal for ids is in flight, so
// Expired does not offer them again until it lapses.
func (t *Tracker) MarkPending(ids []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	for _, id := range ids {
		if e, ok := t.m[id]; ok {
			e.pending = now
		}
	}
}

// ResetAll makes the tracker hold exactly these sessions, each with a fresh
// full timeout: a new leader cannot know when followers last heard from their
// clients, so it never expires sessions in a burst.
func (t *Tracker) ResetAll(sessions map[int64]time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	t.m = make(map[int64]*entry, len(sessions))
	for id, to := range sessions {
		t.m[id] = &entry{timeout: to, deadline: now.Add(to)}
	}
}

// Len returns the number of tracked sessions.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// NextDeadline returns the earliest deadline, if any session is tracked.
func (t *Tracker) NextDeadline() (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var first time.Time
	for _, e := range t.m {
		if first.IsZero() || e.deadline.Before(first) {
			first = e.deadline
		}
	}
	return first, !first.IsZero()
}

// Negotiate clamps a requested timeout to ZooKeeper's [2, 20] ticks.
func Negotiate(requested, tick time.Duration) time.Duration {
	return min(max(requested, 2*tick), 20*tick)
}

// Batcher collects session ids touched on a follower until the next flush to
// the leader. It is safe for concurrent use and holds at most max ids; more
// distinct ids than that are dropped and counted (their sessions get the
// next keepalive).
type Batcher struct {
	max     int
	mu      sync.Mutex
	ids     map[int64]struct{}
	dropped uint64
}

// NewBatcher returns a batcher holding at most max ids.
func NewBatcher(max int) *Batcher { return &Batcher{max: max, ids: map[int64]struct{}{}} }

// Touch adds id to the next batch.
func (b *Batcher) Touch(id int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.ids[id]; ok {
		return
	}
	if len(b.ids) >= b.max {
		b.dropped++
		return
	}
	b.ids[id] = struct{}{}
}

// Flush returns the batch, sorted, and starts a new one.
func (b *Batcher) Flush() []int64 {
	b.mu.Lock()
	ids := b.ids
	b.ids = map[int64]struct{}{}
	b.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	out := make([]int64, 0, len(ids))
	for id := range ids {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Dropped returns how many touches were dropped at the limit.
func (b *Batcher) Dropped() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped
}

// MaxTouches bounds one decoded batch.
const MaxTouches = 1 << 20

const touchesVersion = 1

// ErrBadTouches reports a malformed keepalive batch.
var ErrBadTouches = errors.New("session: malformed keepalive batch")

// EncodeTouches encodes sorted ids compactly: version, count, then varint
// deltas.
func EncodeTouches(ids []int64) []byte {
	b := make([]byte, 0, 2+len(ids)*3)
	b = append(b, touchesVersion)
	b = binary.AppendUvarint(b, uint64(len(ids)))
	var prev int64
	for i, id := range ids {
		if i == 0 {
			b = binary.AppendVarint(b, id)
		} else {
			b = binary.AppendVarint(b, id-prev)
		}
		prev = id
	}
	return b
}

// DecodeTouches decodes a batch; it is strict and never panics.
func DecodeTouches(b []byte) ([]int64, error) {
	if len(b) < 2 || b[0] != touchesVersion {
		return nil, ErrBadTouches
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > MaxTouches || n > uint64(len(b)) {
		return nil, ErrBadTouches
	}
	b = b[k:]
	out := make([]int64, 0, n)
	var prev int64
	for i := uint64(0); i < n; i++ {
		v, k := binary.Varint(b)
		if k <= 0 {
			return nil, ErrBadTouches
		}
		b = b[k:]
		if i > 0 {
			v += prev
		}
		out = append(out, v)
		prev = v
	}
	if len(b) != 0 {
		return nil, ErrBadTouches
	}
	return out, nil
}
