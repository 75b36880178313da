// Package coord owns Meridian's server-side coordination primitives that live
// in the replicated state machine: locks (exclusive and shared, FIFO wait
// queues, fencing tokens, lock-delay, release on session end), semaphores,
// elections, counters, FIFO work queues with visibility leases (queue.go) and
// barriers (barrier.go).
//
// Like the tree it is a pure, deterministic state machine: Apply takes a
// command and its log index and returns a result plus the grants and losses
// it caused. It never reads a clock (time arrives in commands), starts a
// goroutine, or does I/O. Every replica that applies the same log decides
// the same holders, in the same order, with the same tokens.
//
// A fencing token is the log index of the command that granted the lock, so
// tokens are strictly increasing per lock and across the service, survive
// leader changes and restarts, and are never reused. Shared holders granted
// by the same command share its token.
package coord

import (
	"sort"

	"github.com/meridian-coord/meridian/internal/errs"
)

// Limits; each is enforced in Apply with a clear error.
const (
	MaxLockNameBytes   = 256
	MaxWaitersPerLock  = 10000
	MaxLocksPerSession = 1000 // held or waited for
	MaxLocks           = 1000000
	MaxDelayMs         = 600000 // 10 minutes of lock-delay at most
	MaxPermits         = 10000  // permits of one semaphore
	MaxValueBytes      = 64 << 10
	MaxCounters        = 1000000
	MaxSettings        = 64
	MaxRegionBytes     = 64
	MaxLocalFirst      = 1000
	MaxSettingBytes    = 4 << 10
)

// Mode of a hold.
type Mode uint8

const (
	Exclusive Mode = 0
	Shared    Mode = 1
)

func (m Mode) String() string {
	if m == Shared {
		return "shared"
	}
	return "exclusive"
}

// OpType names a coordination command.
type OpType uint8

const (
	OpAcquire      OpType = 1 // Name (the lock), Mode, Wait, DelayMs
	OpRelease      OpType = 2 // Name (the lock)
	OpCancel       OpType = 3 // Name (the lock): stop waiting
	OpForceRelease OpType = 4 // Name (the lock), Target: an operator evicts a holder
	OpTick         OpType = 5 // TimeMs: lets delayed locks be granted
	OpFenced       OpType = 6 // Name (the lock), Token, Inner: a tree write applied only if Token holds the lock
	OpProclaim     OpType = 7 // Name (the election's lock), Value: the holder publishes a new value
	OpAdd          OpType = 8 // Name (the counter), Delta: atomic add; the result carries the new value

	// Queues (queue.go); Name is the queue's name.
	OpPush      OpType = 9  // Value: append an item; its id is this command's index
	OpPop       OpType = 10 // Wait, VisibilityMs, Detach: take the head item (or wait for one, FIFO)
	OpAck       OpType = 11 // Item, Attempt: the delivery is done; the item is gone
	OpNack      OpType = 12 // Item, Attempt: give the item back (front of the queue)
	OpCancelPop OpType = 13 // Waiter: withdraw the waiting pop proposed with that id

	// Barriers (barrier.go); Name is the barrier's name.
	OpBarrierSet    OpType = 14 // create a simple barrier (idempotent)
	OpBarrierRemove OpType = 15 // remove it, releasing everyone waiting (idempotent)
	OpEnter         OpType = 16 // Parties: enter a double barrier; waits until Parties have entered
	OpLeave         OpType = 17 // leave it; waits until every participant has left
	OpCancelEnter   OpType = 18 // withdraw a waiting enter (unless the barrier opened meanwhile)

	// Cluster settings (operator choices that must survive a leader change,
	// such as the preferred leader region); Name is the setting's name.
	OpSetting OpType = 19 // Value: the new value; empty deletes the setting
)

// Command is one coordination command in the raft log.
type Command struct {
	ID      uint64 // proposal id, not interpreted
	TimeMs  int64  // proposer's clock, for lock-delay
	Session int64
	Op      OpType
	// Name is what the command acts on, by kind: a lock (acquire, release,
	// cancel, force-release, fenced, proclaim), a counter (add), a queue
	// (push, pop, ack, nack, cancel-pop), a barrier (barrier set and
	// remove, enter, leave, cancel-enter) or a setting (setting). The codec
	// writes it where it always wrote the field once called Lock.
	Name    string
	Mode    Mode
	Wait    bool   // acquire: queue if not free (false: try-lock)
	DelayMs int64  // acquire: lock-delay applied if this holder's session expires
	Permits int32  // acquire: >1 makes the lock a counting semaphore with that many permits
	Target  int64  // force-release: the session to evict
	Token   uint64 // fenced: the token presented
	Inner   []byte // fenced: an encoded tree command
	Value   []byte // acquire/proclaim: the holder's published value (an election's leader value)
	Delta   int64  // add: the amount added to the counter

	// Fields of the codec's extension block (queues, barriers).
	VisibilityMs int64  // pop: how long a delivery stays invisible before redelivery (0: DefaultVisibilityMs)
	Detach       bool   // pop: the delivery outlives the popping session (only its lease bounds it)
	Item         uint64 // ack/nack: the item id
	Attempt      uint32 // ack/nack: the delivery's attempt number (0: whichever is current)
	Waiter       uint64 // cancel-pop: the proposal id of the waiting pop
	Parties      int32  // enter: participants of the double barrier
	Region       string // acquire: the requester's region (local-first locks)
	LocalFirst   int32  // acquire: K > 0 makes the lock local-first (see grantNext); every acquirer must agree
}

// GrantKind says what a Grant hands to a waiting request.
type GrantKind uint8

const (
	GrantLock           GrantKind = iota // a lock hold
	GrantItem                            // a queue item, to the waiting pop Waiter
	GrantEnter                           // a double barrier opened: Session's enter returns
	GrantLeave                           // every participant left: Session's leave returns
	GrantBarrierRemoved                  // a simple barrier was removed: its waiters return (Session 0)
)

// Grant is something given by a command to a request waiting for it: a
// lock hold (the zero Kind), a queue delivery or a barrier release.
type Grant struct {
	Lock    string // the lock, queue or barrier name
	Session int64
	Token   uint64
	Mode    Mode
	Kind    GrantKind
	Waiter  uint64    // GrantItem: the proposal id of the pop it answers
	Item    *Delivery // GrantItem
}

// Loss is a hold taken away other than by its holder's own release: the
// holder must be told.
type Loss struct {
	Lock    string
	Session int64
	Token   uint64
	Reason  string // "session expired", "session closed", "forced release"
}

// Result is what Apply returns to the proposer.
type Result struct {
	Err      error
	Granted  bool      // acquire/cancel: the caller holds the lock now; pop: Item was delivered; enter/leave: go on
	Token    uint64    // when Granted
	Position int       // waiting: place among waiters (1 = next); enter: sessions inside; leave: still inside
	Counter  int64     // add: the counter's value after the add
	Pushed   uint64    // push: the new item's id
	Item     *Delivery // pop, cancel-pop: the delivery made to the caller (Granted)
}

// Holder is one current hold.
type Holder struct {
	Session int64
	Token   uint64
	Mode    Mode
	Value   []byte // published by the holder (elections); nil for plain locks
}

// Waiter is one queued acquire.
type Waiter struct {
	Session int64
	Mode    Mode
	DelayMs int64
	Value   []byte // becomes the holder's value when granted
	Region  string // the requester's region (kept for local-first locks)
}

type lock struct {
	permits    int32 // 1: a mutex (exclusive/shared); >1: a semaphore, each holder takes one permit
	holders    []Holder
	waiters    []Waiter
	delays     map[int64]int64 // holder session -> lock-delay ms
	delayUntil int64           // ms: no grants before this time
	// Local-first hand-off (localFirst = K > 0): lastRegion is the region
	// of the latest grant, streak how many grants in a row went to a waiter
	// of that region ahead of an older waiter from elsewhere.
	localFirst int32
	streak     int32
	lastRegion string
}

// State is the lock table, counters, queues and barriers. Not safe for
// concurrent use.
type State struct {
	locks     map[string]*lock
	bySession map[int64]map[string]struct{}
	counters  map[string]int64 // atomic counters; a counter at 0 is dropped
	settings  map[string]string
	// delayed indexes the locks with a lock-delay pending (delayUntil set):
	// the only ones a tick can change, so ticks (frequent when queue leases
	// expire) and NeedsTick do not visit every lock.
	delayed map[string]struct{}
	queues
	barriers
}

// New returns an empty state.
func New() *State {
	s := &State{locks: map[string]*lock{}, bySession: map[int64]map[string]struct{}{}, counters: map[string]int64{},
		settings: map[string]string{}, delayed: map[string]struct{}{}}
	s.queues.init()
	s.barriers.init()
	return s
}

// LiveFunc reports whether a session is live (from the tree's session table).
type LiveFunc func(session int64) bool

// ValidName checks a lock name: 1..256 bytes, no control characters.
func ValidName(name string) error {
	if len(name) == 0 || len(name) > MaxLockNameBytes {
		return errs.ErrBadArguments
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return errs.ErrBadArguments
		}
	}
	return nil
}

// Apply applies one command at log index index.
func (s *State) Apply(index uint64, c *Command, live LiveFunc) (Result, []Grant, []Loss) {
	switch c.Op {
	case OpTick:
		// Locks without a pending delay have nothing a tick could grant:
		// their grantable waiters were granted when the lock was freed.
		var grants []Grant
		for _, name := range sortedKeys(s.delayed) {
			grants = append(grants, s.grantNext(name, index, c.TimeMs)...)
		}
		return Result{}, append(grants, s.expireLeases(c.TimeMs)...), nil
	case OpAcquire, OpRelease, OpCancel, OpForceRelease, OpFenced, OpProclaim, OpAdd:
	case OpPush, OpPop, OpAck, OpNack, OpCancelPop:
		if err := ValidName(c.Name); err != nil {
			return Result{Err: err}, nil, nil
		}
		return s.applyQueue(index, c, live)
	case OpBarrierSet, OpBarrierRemove, OpEnter, OpLeave, OpCancelEnter:
		if err := ValidName(c.Name); err != nil {
			return Result{Err: err}, nil, nil
		}
		return s.applyBarrier(c, live)
	case OpSetting:
		return s.setting(c), nil, nil
	default:
		return Result{Err: errs.ErrUnimplemented}, nil, nil
	}
	if err := ValidName(c.Name); err != nil {
		return Result{Err: err}, nil, nil
	}
	switch c.Op {
	case OpAcquire:
		return s.acquire(index, c, live)
	case OpRelease:
		return s.release(index, c)
	case OpCancel:
		return s.cancel(index, c)
	case OpForceRelease:
		return s.forceRelease(index, c)
	case OpProclaim:
		return s.proclaim(c)
	case OpAdd:
		return s.add(c)
	default: // OpFenced: the caller checks with CheckToken and applies Inner
		return Result{Err: s.CheckToken(c.Name, c.Token)}, nil, nil
	}
}

func (s *State) acquire(index uint64, c *Command, live LiveFunc) (Result, []Grant, []Loss) {
	permits := max(c.Permits, 1)
	if c.Mode != Exclusive && c.Mode != Shared || c.DelayMs < 0 || c.DelayMs > MaxDelayMs || len(c.Value) > MaxValueBytes ||
		permits > MaxPermits || (permits > 1 && c.Mode == Shared) || len(c.Region) > MaxRegionBytes ||
		c.LocalFirst < 0 || c.LocalFirst > MaxLocalFirst || (c.LocalFirst > 0 && permits > 1) {
		return Result{Err: errs.ErrBadArguments}, nil, nil
	}
	region := c.Region
	if c.LocalFirst == 0 {
		region = "" // only local-first locks use it
	}
	if !live(c.Session) {
		return Result{Err: errs.ErrSessionExpired}, nil, nil
	}
	l := s.locks[c.Name]
	if l != nil && (l.permits != permits || l.localFirst != c.LocalFirst) {
		// A name is a mutex or a semaphore of one size, FIFO or local-first
		// with one K, whoever asks.
		return Result{Err: errs.ErrBadArguments}, nil, nil
	}
	if l != nil {
		// Idempotent: a retried acquire (after an unknown outcome) finds its
		// own hold or its own place in the queue.
		for _, h := range l.holders {
			if h.Session == c.Session {
				return Result{Granted: true, Token: h.Token}, nil, nil
			}
		}
		for i, w := range l.waiters {
			if w.Session == c.Session {
				return Result{Position: i + 1}, nil, nil
			}
		}
	}
	if len(s.bySession[c.Session]) >= MaxLocksPerSession {
		return Result{Err: errs.ErrTooManyLocks}, nil, nil
	}
	if l == nil {
		if len(s.locks) >= MaxLocks {
			return Result{Err: errs.ErrTooManyLocks}, nil, nil
		}
		l = &lock{permits: permits, localFirst: c.LocalFirst}
		s.locks[c.Name] = l
	}
	free := len(l.waiters) == 0 && c.TimeMs >= l.delayUntil && l.admits(c.Mode)
	if free {
		if l.localFirst > 0 {
			l.lastRegion, l.streak = region, 0
		}
		s.hold(c.Name, l, Holder{Session: c.Session, Token: index, Mode: c.Mode, Value: c.Value}, c.DelayMs)
		return Result{Granted: true, Token: index}, []Grant{{Lock: c.Name, Session: c.Session, Token: index, Mode: c.Mode}}, nil
	}
	if !c.Wait {
		s.dropIfEmpty(c.Name, l)
		return Result{Err: errs.ErrLockHeld}, nil, nil
	}
	if len(l.waiters) >= MaxWaitersPerLock {
		return Result{Err: errs.ErrTooManyWaiters}, nil, nil
	}
	l.waiters = append(l.waiters, Waiter{Session: c.Session, Mode: c.Mode, DelayMs: c.DelayMs, Value: c.Value, Region: region})
	s.track(c.Session, c.Name)
	return Result{Position: len(l.waiters)}, nil, nil
}

// admits reports whether a new holder of mode m fits: a free permit of a
// semaphore; for a mutex, no holder, or only shared ones for a shared hold.
func (l *lock) admits(m Mode) bool {
	if l.permits > 1 {
		return int32(len(l.holders)) < l.permits
	}
	if len(l.holders) == 0 {
		return true
	}
	return m == Shared && l.holders[0].Mode == Shared
}

func (s *State) hold(name string, l *lock, h Holder, delayMs int64) {
	l.holders = append(l.holders, h)
	if delayMs > 0 {
		if l.delays == nil {
			l.delays = map[int64]int64{}
		}
		l.delays[h.Session] = delayMs
	}
	s.track(h.Session, name)
}

func (s *State) track(session int64, name string) {
	m := s.bySession[session]
	if m == nil {
		m = map[string]struct{}{}
		s.bySession[session] = m
	}
	m[name] = struct{}{}
}

func (s *State) untrack(session int64, name string) {
	if m := s.bySession[session]; m != nil {
		delete(m, name)
		if len(m) == 0 {
			delete(s.bySession, session)
		}
	}
}

// grantNext grants waiters at the head of the queue, FIFO, as far as modes
// allow: one exclusive, or a run of shared ones.
//
// A local-first lock (localFirst = K) hands a free lock to the oldest
// waiter from the region of the latest grant, ahead of older waiters from
// elsewhere, at most K times in a row; then the head of the queue gets it.
// Hand-offs stay in a region (one commit, no wide-area notification) while
// no waiter from elsewhere waits more than K extra hand-offs.
func (s *State) grantNext(name string, index uint64, nowMs int64) []Grant {
	l := s.locks[name]
	if l == nil || nowMs < l.delayUntil {
		return nil
	}
	l.delayUntil = 0
	delete(s.delayed, name)
	var grants []Grant
	for len(l.waiters) > 0 {
		i := 0
		if l.localFirst > 0 && len(l.holders) == 0 && l.streak < l.localFirst && l.waiters[0].Region != l.lastRegion {
			for j, w := range l.waiters {
				if w.Region == l.lastRegion {
					i = j
					break
				}
			}
		}
		w := l.waiters[i]
		if !l.admits(w.Mode) {
			break
		}
		if l.localFirst > 0 {
			if i > 0 {
				l.streak++
			} else {
				l.streak = 0
			}
			l.lastRegion = w.Region
		}
		if i == 0 {
			l.waiters = l.waiters[1:]
		} else {
			l.waiters = append(l.waiters[:i:i], l.waiters[i+1:]...)
		}
		s.hold(name, l, Holder{Session: w.Session, Token: index, Mode: w.Mode, Value: w.Value}, w.DelayMs)
		grants = append(grants, Grant{Lock: name, Session: w.Session, Token: index, Mode: w.Mode})
	}
	s.dropIfEmpty(name, l)
	return grants
}

func (s *State) dropIfEmpty(name string, l *lock) {
	if len(l.holders) == 0 && len(l.waiters) == 0 && l.delayUntil == 0 {
		delete(s.locks, name)
	}
}

// removeHolder drops session's hold on l; false if it held none.
func (s *State) removeHolder(name string, l *lock, session int64) (Holder, bool) {
	for i, h := range l.holders {
		if h.Session == session {
			l.holders = append(l.holders[:i:i], l.holders[i+1:]...)
			delete(l.delays, session)
			s.untrack(session, name)
			return h, true
		}
	}
	return Holder{}, false
}

func (s *State) removeWaiter(name string, l *lock, session int64) bool {
	for i, w := range l.waiters {
		if w.Session == session {
			l.waiters = append(l.waiters[:i:i], l.waiters[i+1:]...)
			s.untrack(session, name)
			return true
		}
	}
	return false
}

func (s *State) release(index uint64, c *Command) (Result, []Grant, []Loss) {
	l := s.locks[c.Name]
	if l == nil {
		return Result{Err: errs.ErrLockNotHeld}, nil, nil
	}
	if _, ok := s.removeHolder(c.Name, l, c.Session); !ok {
		return Result{Err: errs.ErrLockNotHeld}, nil, nil
	}
	return Result{}, s.grantNext(c.Name, index, c.TimeMs), nil
}

// cancel withdraws a waiting acquire. If the lock was granted meanwhile the
// caller holds it: the result says so, and the caller keeps it.
func (s *State) cancel(index uint64, c *Command) (Result, []Grant, []Loss) {
	l := s.locks[c.Name]
	if l == nil {
		return Result{}, nil, nil
	}
	for _, h := range l.holders {
		if h.Session == c.Session {
			return Result{Granted: true, Token: h.Token}, nil, nil
		}
	}
	if s.removeWaiter(c.Name, l, c.Session) {
		// Removing a waiter can unblock shared waiters behind an exclusive one.
		return Result{}, s.grantNext(c.Name, index, c.TimeMs), nil
	}
	return Result{}, nil, nil
}

// add adds Delta to a counter (missing counters are 0) and returns the new
// value; overflow is refused rather than wrapped.
func (s *State) add(c *Command) (Result, []Grant, []Loss) {
	old, ok := s.counters[c.Name]
	if !ok && len(s.counters) >= MaxCounters {
		return Result{Err: errs.ErrTooManyLocks}, nil, nil
	}
	v := old + c.Delta
	if (c.Delta > 0 && v < old) || (c.Delta < 0 && v > old) {
		return Result{Err: errs.ErrBadArguments}, nil, nil
	}
	if v == 0 {
		delete(s.counters, c.Name)
	} else {
		s.counters[c.Name] = v
	}
	return Result{Counter: v}, nil, nil
}

// setting sets or (empty value) deletes a cluster setting.
func (s *State) setting(c *Command) Result {
	if err := ValidName(c.Name); err != nil || len(c.Value) > MaxSettingBytes {
		return Result{Err: errs.ErrBadArguments}
	}
	if len(c.Value) == 0 {
		delete(s.settings, c.Name)
		return Result{}
	}
	if _, ok := s.settings[c.Name]; !ok && len(s.settings) >= MaxSettings {
		return Result{Err: errs.ErrQuotaExceeded}
	}
	s.settings[c.Name] = string(c.Value)
	return Result{}
}

// Setting returns a cluster setting ("" if unset).
func (s *State) Setting(name string) string { return s.settings[name] }

// CounterValue returns a counter's value (0 if never set).
func (s *State) CounterValue(name string) int64 { return s.counters[name] }

// proclaim replaces the holder's published value (etcd's Proclaim): only
// the session holding the lock may.
func (s *State) proclaim(c *Command) (Result, []Grant, []Loss) {
	if len(c.Value) > MaxValueBytes {
		return Result{Err: errs.ErrBadArguments}, nil, nil
	}
	if l := s.locks[c.Name]; l != nil {
		for i := range l.holders {
			if l.holders[i].Session == c.Session {
				l.holders[i].Value = c.Value
				return Result{Granted: true, Token: l.holders[i].Token}, nil, nil
			}
		}
	}
	return Result{Err: errs.ErrLockNotHeld}, nil, nil
}

func (s *State) forceRelease(index uint64, c *Command) (Result, []Grant, []Loss) {
	l := s.locks[c.Name]
	if l == nil {
		return Result{Err: errs.ErrLockNotHeld}, nil, nil
	}
	h, ok := s.removeHolder(c.Name, l, c.Target)
	if !ok {
		return Result{Err: errs.ErrLockNotHeld}, nil, nil
	}
	loss := []Loss{{Lock: c.Name, Session: h.Session, Token: h.Token, Reason: "forced release"}}
	return Result{}, s.grantNext(c.Name, index, c.TimeMs), loss
}

// SessionEnded releases everything session held or waited for, at log index
// index and time nowMs. If expired (not a clean close), holders' lock-delay
// applies: the lock is not granted again before nowMs + delay.
//
// Its session-bound queue deliveries (not detached ones) go back to their
// queues (and on to waiting consumers), its waiting pops are withdrawn, and
// it leaves every double barrier it is in.
func (s *State) SessionEnded(index uint64, nowMs int64, session int64, expired bool) ([]Grant, []Loss) {
	return s.SessionsEnded(index, nowMs, []int64{session}, expired)
}

// SessionsEnded is SessionEnded for every session one command ends (an
// expire batch). Every ended session leaves every queue before any lock is
// granted again: granting between two of them would hand the lock, with
// this command's index as token, to a session ending in the same command,
// and then again to the next waiter with the same token — two holders of
// one token, so the first one's fenced writes would pass.
func (s *State) SessionsEnded(index uint64, nowMs int64, sessions []int64, expired bool) ([]Grant, []Loss) {
	reason := "session closed"
	if expired {
		reason = "session expired"
	}
	touched := map[string]bool{}
	var losses []Loss
	for _, session := range sessions {
		names := make([]string, 0, len(s.bySession[session]))
		for name := range s.bySession[session] {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			l := s.locks[name]
			if l == nil {
				continue
			}
			delay := l.delays[session]
			if h, ok := s.removeHolder(name, l, session); ok {
				losses = append(losses, Loss{Lock: name, Session: session, Token: h.Token, Reason: reason})
				if expired && delay > 0 && nowMs+delay > l.delayUntil {
					l.delayUntil = nowMs + delay
					s.delayed[name] = struct{}{}
				}
			}
			s.removeWaiter(name, l, session)
			touched[name] = true
		}
	}
	names := make([]string, 0, len(touched))
	for name := range touched {
		names = append(names, name)
	}
	sort.Strings(names)
	var grants []Grant
	for _, name := range names {
		grants = append(grants, s.grantNext(name, index, nowMs)...)
		if l := s.locks[name]; l != nil {
			s.dropIfEmpty(name, l)
		}
	}
	grants = append(grants, s.queueSessionsEnded(sessions, nowMs)...)
	grants = append(grants, s.barrierSessionsEnded(sessions)...)
	return grants, losses
}

// NeedsTick reports whether some lock waits for its lock-delay to pass by
// nowMs (the leader then proposes OpTick). Locks whose delay passed with no
// waiters are cleaned up by the tick too.
//
// It is also true when a queue delivery's visibility lease has passed, so
// the tick returns it to its queue.
func (s *State) NeedsTick(nowMs int64) bool {
	if s.leaseDue(nowMs) {
		return true
	}
	for name := range s.delayed {
		if l := s.locks[name]; l != nil && nowMs >= l.delayUntil {
			return true
		}
	}
	return false
}

// CheckToken returns nil if token is the token of an exclusive holder of
// name, else errs.ErrStaleToken.
func (s *State) CheckToken(name string, token uint64) error {
	l := s.locks[name]
	if l == nil || len(l.holders) != 1 || l.holders[0].Mode != Exclusive || l.holders[0].Token != token {
		return errs.ErrStaleToken
	}
	return nil
}

// LockInfo describes one lock for listings.
type LockInfo struct {
	Name         string
	Permits      int32
	LocalFirst   int32  // K of a local-first lock (0: FIFO)
	Streak       int32  // local-first: grants in a row ahead of older waiters
	LastRegion   string // local-first: region of the latest grant
	Holders      []Holder
	Waiters      []Waiter
	DelayUntilMs int64
}

// Get returns one lock's state.
func (s *State) Get(name string) (LockInfo, bool) {
	l := s.locks[name]
	if l == nil {
		return LockInfo{}, false
	}
	holders := make([]Holder, len(l.holders))
	for i, h := range l.holders {
		h.Value = append([]byte(nil), h.Value...)
		holders[i] = h
	}
	return LockInfo{Name: name, Permits: l.permits, Holders: holders,
		Waiters: append([]Waiter(nil), l.waiters...), DelayUntilMs: l.delayUntil,
		LocalFirst: l.localFirst, Streak: l.streak, LastRegion: l.lastRegion}, true
}

// List returns locks whose name starts with prefix, sorted, at most limit.
func (s *State) List(prefix string, limit int) []LockInfo {
	var out []LockInfo
	for _, name := range s.sortedNames() {
		if len(out) >= limit {
			break
		}
		if len(name) >= len(prefix) && name[:len(prefix)] == prefix {
			info, _ := s.Get(name)
			out = append(out, info)
		}
	}
	return out
}

func (s *State) sortedNames() []string {
	names := make([]string, 0, len(s.locks))
	for n := range s.locks {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Held lists the locks session holds or waits for, sorted.
func (s *State) Held(session int64) []string {
	var out []string
	for n := range s.bySession[session] {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Len returns the number of locks with holders, waiters or a pending delay.
func (s *State) Len() int { return len(s.locks) }
