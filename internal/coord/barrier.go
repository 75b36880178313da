package coord

import (
	"sort"

	"github.com/meridian-coord/meridian/internal/errs"
)

// Barriers.
//
// A simple barrier (ZooKeeper's barrier recipe) is a name that exists or
// not: set creates it, remove deletes it, and a waiter returns once it does
// not exist. It belongs to no session (as the recipe's persistent node), so
// it stays until removed. Waiting is a linearizable read plus a wake-up from
// the apply that removes it; it writes nothing to the log.
//
// A double barrier (ZooKeeper's double barrier recipe) has a fixed number of
// parties. Enter waits until that many sessions are inside at once; the
// apply of the last enter opens it and releases every waiting enter. Leave
// waits until every participant has left; the apply of the last leave
// releases every waiting leave and deletes the barrier, so the name can be
// used for another round. Before it opens, leaving (or a timed-out enter)
// withdraws the entry and returns at once. While it is open, new sessions
// cannot enter (ErrBarrierOpen).
//
// A session that ends leaves every double barrier it is in. Before the
// barrier opens this withdraws its entry: it never releases the others'
// enter, since the barrier needs that many live participants at once. After
// it opened, its end counts as a leave, so it may release the others' leave.

// Barrier limits; each is enforced in Apply with its own error.
const (
	MaxBarriers           = 100000 // simple barriers (ErrTooManyBarriers)
	MaxDoubleBarriers     = 100000 // double barriers with participants (ErrTooManyBarriers)
	MaxParties            = 10000  // participants of one double barrier (ErrBadArguments beyond)
	MaxBarriersPerSession = 1000   // double barriers one session is in (ErrTooManyBarriers)
)

type dbarrier struct {
	parties int32
	open    bool
	entered []int64 // inside, in entry order
	leaving []int64 // left after it opened; waiting for the rest
}

type barriers struct {
	simple   map[string]struct{}
	double   map[string]*dbarrier
	bSession map[int64]map[string]struct{}
}

func (b *barriers) init() {
	b.simple = map[string]struct{}{}
	b.double = map[string]*dbarrier{}
	b.bSession = map[int64]map[string]struct{}{}
}

func (s *State) applyBarrier(c *Command, live LiveFunc) (Result, []Grant, []Loss) {
	switch c.Op {
	case OpBarrierSet:
		if _, ok := s.simple[c.Name]; !ok {
			if len(s.simple) >= MaxBarriers {
				return Result{Err: errs.ErrTooManyBarriers}, nil, nil
			}
			s.simple[c.Name] = struct{}{}
		}
		return Result{}, nil, nil
	case OpBarrierRemove:
		if _, ok := s.simple[c.Name]; !ok {
			return Result{}, nil, nil
		}
		delete(s.simple, c.Name)
		return Result{}, []Grant{{Lock: c.Name, Kind: GrantBarrierRemoved}}, nil
	case OpEnter:
		return s.enter(c, live)
	case OpLeave:
		return s.leave(c)
	default: // OpCancelEnter
		return s.cancelEnter(c), nil, nil
	}
}

func indexOf(ss []int64, v int64) int {
	for i, x := range ss {
		if x == v {
			return i
		}
	}
	return -1
}

func without(ss []int64, i int) []int64 { return append(ss[:i:i], ss[i+1:]...) }

func (s *State) enter(c *Command, live LiveFunc) (Result, []Grant, []Loss) {
	if c.Parties < 1 || c.Parties > MaxParties {
		return Result{Err: errs.ErrBadArguments}, nil, nil
	}
	if !live(c.Session) {
		return Result{Err: errs.ErrSessionExpired}, nil, nil
	}
	b := s.double[c.Name]
	if b != nil {
		if b.parties != c.Parties {
			return Result{Err: errs.ErrBadArguments}, nil, nil // every participant must agree on the count
		}
		if indexOf(b.entered, c.Session) >= 0 { // a retry finds its own entry
			if b.open {
				return Result{Granted: true}, nil, nil
			}
			return Result{Position: len(b.entered)}, nil, nil
		}
		if b.open || indexOf(b.leaving, c.Session) >= 0 {
			return Result{Err: errs.ErrBarrierOpen}, nil, nil
		}
	}
	if len(s.bSession[c.Session]) >= MaxBarriersPerSession {
		return Result{Err: errs.ErrTooManyBarriers}, nil, nil
	}
	if b == nil {
		if len(s.double) >= MaxDoubleBarriers {
			return Result{Err: errs.ErrTooManyBarriers}, nil, nil
		}
		b = &dbarrier{parties: c.Parties}
		s.double[c.Name] = b
	}
	b.entered = append(b.entered, c.Session)
	s.trackB(c.Session, c.Name)
	if int32(len(b.entered)) < b.parties {
		return Result{Position: len(b.entered)}, nil, nil
	}
	b.open = true
	var grants []Grant
	for _, id := range b.entered {
		if id != c.Session {
			grants = append(grants, Grant{Lock: c.Name, Session: id, Kind: GrantEnter})
		}
	}
	return Result{Granted: true}, grants, nil
}

// leave: Granted when the caller may go on (it was the last one inside, or
// it withdrew before the barrier opened); otherwise Position is the number
// still inside and the caller waits for a GrantLeave.
func (s *State) leave(c *Command) (Result, []Grant, []Loss) {
	b := s.double[c.Name]
	if b == nil {
		return Result{Err: errs.ErrNotParticipant}, nil, nil
	}
	if indexOf(b.leaving, c.Session) >= 0 {
		return Result{Position: len(b.entered)}, nil, nil
	}
	i := indexOf(b.entered, c.Session)
	if i < 0 {
		return Result{Err: errs.ErrNotParticipant}, nil, nil
	}
	b.entered = without(b.entered, i)
	if !b.open {
		s.untrackB(c.Session, c.Name)
		s.dropBarrierIfEmpty(c.Name, b)
		return Result{Granted: true}, nil, nil
	}
	b.leaving = append(b.leaving, c.Session)
	if len(b.entered) > 0 {
		return Result{Position: len(b.entered)}, nil, nil
	}
	return Result{Granted: true}, s.releaseLeavers(c.Name, b, c.Session), nil
}

// releaseLeavers ends a round: every waiting leave returns and the name is
// free for the next round.
func (s *State) releaseLeavers(name string, b *dbarrier, except int64) []Grant {
	var grants []Grant
	for _, id := range b.leaving {
		s.untrackB(id, name)
		if id != except {
			grants = append(grants, Grant{Lock: name, Session: id, Kind: GrantLeave})
		}
	}
	delete(s.double, name)
	return grants
}

// cancelEnter withdraws a waiting enter; Granted if the barrier opened first
// (the caller is inside and must leave).
func (s *State) cancelEnter(c *Command) Result {
	b := s.double[c.Name]
	if b == nil {
		return Result{}
	}
	i := indexOf(b.entered, c.Session)
	if i < 0 {
		return Result{}
	}
	if b.open {
		return Result{Granted: true}
	}
	b.entered = without(b.entered, i)
	s.untrackB(c.Session, c.Name)
	s.dropBarrierIfEmpty(c.Name, b)
	return Result{}
}

func (s *State) dropBarrierIfEmpty(name string, b *dbarrier) {
	if len(b.entered) == 0 && len(b.leaving) == 0 {
		delete(s.double, name)
	}
}

func (s *State) trackB(session int64, name string) {
	m := s.bSession[session]
	if m == nil {
		m = map[string]struct{}{}
		s.bSession[session] = m
	}
	m[name] = struct{}{}
}

func (s *State) untrackB(session int64, name string) {
	if m := s.bSession[session]; m != nil {
		delete(m, name)
		if len(m) == 0 {
			delete(s.bSession, session)
		}
	}
}

// barrierSessionsEnded takes the sessions out of every double barrier they are in.
func (s *State) barrierSessionsEnded(sessions []int64) []Grant {
	ending := map[int64]bool{}
	for _, id := range sessions {
		ending[id] = true
	}
	var grants []Grant
	for _, session := range sessions {
		names := make([]string, 0, len(s.bSession[session]))
		for name := range s.bSession[session] {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			b := s.double[name]
			if b == nil {
				continue
			}
			if i := indexOf(b.leaving, session); i >= 0 {
				b.leaving = without(b.leaving, i)
			}
			if i := indexOf(b.entered, session); i >= 0 {
				b.entered = without(b.entered, i)
				if b.open && len(b.entered) == 0 {
					// Leavers ending in this same command get no grant.
					for _, g := range s.releaseLeavers(name, b, session) {
						if !ending[g.Session] {
							grants = append(grants, g)
						}
					}
					continue
				}
			}
			s.dropBarrierIfEmpty(name, b)
		}
		delete(s.bSession, session)
	}
	return grants
}

// BarrierExists reports whether a simple barrier is set.
func (s *State) BarrierExists(name string) bool {
	_, ok := s.simple[name]
	return ok
}

// DoubleBarrierInfo describes one double barrier.
type DoubleBarrierInfo struct {
	Name    string
	Parties int32
	Open    bool
	Entered []int64 // inside, in entry order
	Leaving []int64 // left, waiting for the rest
}

// DoubleBarrier returns a double barrier's state (false: nobody is in it).
func (s *State) DoubleBarrier(name string) (DoubleBarrierInfo, bool) {
	b := s.double[name]
	if b == nil {
		return DoubleBarrierInfo{}, false
	}
	return DoubleBarrierInfo{Name: name, Parties: b.parties, Open: b.open,
		Entered: append([]int64(nil), b.entered...), Leaving: append([]int64(nil), b.leaving...)}, true
}

// Barriers lists the simple barriers that are set and the double barriers
// with participants, each by name and at most limit, and how many of each
// there are.
func (s *State) Barriers(limit int) (simple []string, double []DoubleBarrierInfo, simpleTotal, doubleTotal int) {
	for n := range s.simple {
		simple = append(simple, n)
	}
	sort.Strings(simple)
	names := make([]string, 0, len(s.double))
	for n := range s.double {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names[:min(limit, len(names))] {
		info, _ := s.DoubleBarrier(n)
		double = append(double, info)
	}
	return simple[:min(limit, len(simple))], double, len(s.simple), len(names)
}
