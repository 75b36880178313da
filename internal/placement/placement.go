// Package placement decides where the leader should be. Every commit costs
// the leader a round trip to the nearest majority of voters, and every write
// costs its client's server a round trip to the leader; so the best leader
// is the voter that minimises that sum weighted by where writes come from
// (the "center of gravity" policy of Aleksey Charapko's "Keep the Data
// Where You Use It"). Moves are damped: the best
// candidate must beat the current leader by a margin, in several consecutive
// evaluations, and not sooner than a minimum interval after the last move.
//
// Like the state machine, the package is pure: decisions are a function of
// the inputs and the policy's own small history, so they can be replayed
// and tested without a cluster.
package placement

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Input is one evaluation's view of the cluster.
type Input struct {
	Voters []uint64
	Leader uint64
	// RTT returns the measured round trip between two servers (either
	// direction), ok false when nobody measured it.
	RTT func(a, b uint64) (time.Duration, bool)
	// Load is the write rate arriving at each server (voters and learners),
	// in any unit; only proportions matter.
	Load map[uint64]float64
	// Prefer, when non-zero, pins leadership to that voter (an operator's
	// choice) regardless of costs.
	Prefer uint64
}

// Cost is the access-weighted commit latency with l as leader: the
// load-weighted mean over servers s of rtt(s, l) plus l's quorum latency
// (its round trip to the (majority-1)-th nearest other voter). ok is false
// when a needed round trip is unknown or there is no load.
func Cost(in Input, l uint64) (time.Duration, bool) {
	var others []time.Duration
	for _, v := range in.Voters {
		if v == l {
			continue
		}
		d, ok := in.RTT(l, v)
		if !ok {
			return 0, false
		}
		others = append(others, d)
	}
	slices.Sort(others)
	need := len(in.Voters)/2 + 1 - 1 // the leader's own vote counts
	var quorum time.Duration
	if need > 0 {
		if need > len(others) {
			return 0, false
		}
		quorum = others[need-1]
	}
	var total, weight float64
	for s, w := range in.Load {
		if w <= 0 {
			continue
		}
		var d time.Duration
		if s != l {
			var ok bool
			if d, ok = in.RTT(s, l); !ok {
				return 0, false
			}
		}
		total += w * float64(d+quorum)
		weight += w
	}
	if weight == 0 {
		return 0, false
	}
	return time.Duration(total / weight), true
}

// A Chooser names the voter it would have lead (the policies of "Keep the
// Data Where You Use It" differ only here); ok false when it cannot tell.
// The Policy damps its choices.
type Chooser interface {
	Choose(in Input) (best uint64, ok bool)
	Name() string
}

// CenterOfGravity picks the voter of least Cost: topology-aware, it can
// settle between several busy regions (the best performer in "Keep the
// Data Where You Use It").
type CenterOfGravity struct{}

func (CenterOfGravity) Name() string { return "center-of-gravity" }

func (CenterOfGravity) Choose(in Input) (uint64, bool) {
	best, bestCost, found := uint64(0), time.Duration(0), false
	for _, v := range in.Voters {
		if c, ok := Cost(in, v); ok && (!found || c < bestCost || (c == bestCost && v < best)) {
			best, bestCost, found = v, c, true
		}
	}
	return best, found
}

// Majority picks where most writes arrive (the nearest voter to it, if that
// server is a learner): single-region heuristics, good when one region
// dominates, locked onto one region when several share the work.
type Majority struct{}

func (Majority) Name() string { return "majority" }

func (Majority) Choose(in Input) (uint64, bool) {
	top, topLoad := uint64(0), 0.0
	for s, w := range in.Load {
		if w > topLoad || (w == topLoad && w > 0 && s < top) {
			top, topLoad = s, w
		}
	}
	if topLoad == 0 {
		return 0, false
	}
	return nearestVoter(in, top)
}

// EMA keeps an exponential moving average of the "average server" of the
// writes, with voters numbered in the order given (meant to follow
// geography), and moves at most one step along that order per decision.
// "Keep the Data Where You Use It" found it slow and easily misled by real
// geography; it is here for comparison.
type EMA struct {
	Alpha float64 // weight of the newest evaluation (default 0.3)
	avg   float64
	init  bool
}

func (e *EMA) Name() string { return "ema" }

func (e *EMA) Choose(in Input) (uint64, bool) {
	if e.Alpha <= 0 {
		e.Alpha = 0.3
	}
	var sum, weight float64
	for s, w := range in.Load {
		v, ok := nearestVoter(in, s)
		if !ok || w <= 0 {
			continue
		}
		sum += w * float64(slices.Index(in.Voters, v))
		weight += w
	}
	if weight == 0 {
		return 0, false
	}
	if !e.init {
		e.avg, e.init = float64(slices.Index(in.Voters, in.Leader)), true
	}
	e.avg = e.Alpha*(sum/weight) + (1-e.Alpha)*e.avg
	cur := slices.Index(in.Voters, in.Leader)
	target := int(e.avg + 0.5)
	switch {
	case cur < 0:
		return 0, false
	case target > cur:
		return in.Voters[cur+1], true
	case target < cur:
		return in.Voters[cur-1], true
	}
	return in.Leader, true
}

// nearestVoter is s itself if it votes, else the voter nearest to it.
func nearestVoter(in Input, s uint64) (uint64, bool) {
	if slices.Contains(in.Voters, s) {
		return s, true
	}
	best, bestD, found := uint64(0), time.Duration(0), false
	for _, v := range in.Voters {
		if d, ok := in.RTT(s, v); ok && (!found || d < bestD) {
			best, bestD, found = v, d, true
		}
	}
	return best, found
}

// Decision is what an evaluation concluded, with its reasons.
type Decision struct {
	Move   bool
	Target uint64
	Reason string
	Costs  map[uint64]time.Duration // per voter that could be evaluated
}

// Policy damps moves. Zero values take the defaults noted.
type Policy struct {
	Margin      float64       // the best must cost less than (1-Margin) × current (default 0.2)
	MinGain     time.Duration // and save at least this much (default 2ms)
	Consecutive int           // evaluations in a row naming the same better voter (default 3)
	// MinInterval: the least time between a leadership change and a move
	// (default 30s). The first leader a policy sees after its process
	// starts is exempt: a new cluster places its leader as soon as
	// Consecutive evaluations agree, instead of waiting MinInterval.
	MinInterval time.Duration
	// Chooser names the best voter (default CenterOfGravity). With another
	// chooser the margin is not applied (its pick has no cost to compare)
	// but Consecutive and MinInterval are: the n-consecutive rule of "Keep
	// the Data Where You Use It".
	Chooser Chooser

	leader    uint64
	seen      bool      // a leader has been observed since start
	since     time.Time // when leader became leader, as far as this policy knows
	candidate uint64
	streak    int
}

func (p *Policy) defaults() {
	if p.Margin <= 0 {
		p.Margin = 0.2
	}
	if p.MinGain <= 0 {
		p.MinGain = 2 * time.Millisecond
	}
	if p.Consecutive <= 0 {
		p.Consecutive = 3
	}
	if p.MinInterval <= 0 {
		p.MinInterval = 30 * time.Second
	}
	if p.Chooser == nil {
		p.Chooser = CenterOfGravity{}
	}
}

// Observe records the current leader (0: none known). Followers call it
// too, so that whichever server leads next knows how recently leadership
// changed.
func (p *Policy) Observe(now time.Time, leader uint64) {
	p.defaults()
	if leader == 0 || leader == p.leader {
		return
	}
	// A new leader (moved here or elected) stays at least MinInterval,
	// except the first one this process sees.
	p.since = now
	if !p.seen {
		p.since = now.Add(-p.MinInterval)
	}
	p.leader, p.seen, p.candidate, p.streak = leader, true, 0, 0
}

// Decide evaluates in at time now.
func (p *Policy) Decide(now time.Time, in Input) Decision {
	p.Observe(now, in.Leader)
	d := Decision{Target: in.Leader, Costs: map[uint64]time.Duration{}}
	if in.Prefer != 0 && slices.Contains(in.Voters, in.Prefer) {
		d.Target = in.Prefer
		d.Move = in.Prefer != in.Leader
		d.Reason = fmt.Sprintf("operator prefers %d", in.Prefer)
		return d
	}
	for _, v := range in.Voters {
		if c, ok := Cost(in, v); ok {
			d.Costs[v] = c
		}
	}
	if _, cog := p.Chooser.(CenterOfGravity); !cog {
		return p.decideBy(now, in, d)
	}
	cur, ok := d.Costs[in.Leader]
	if !ok {
		d.Reason = "current leader's cost unknown (no load or missing measurements)"
		p.candidate, p.streak = 0, 0
		return d
	}
	ids := make([]uint64, 0, len(d.Costs))
	for v := range d.Costs {
		ids = append(ids, v)
	}
	sort.Slice(ids, func(i, j int) bool {
		if d.Costs[ids[i]] != d.Costs[ids[j]] {
			return d.Costs[ids[i]] < d.Costs[ids[j]]
		}
		return ids[i] < ids[j]
	})
	best := ids[0]
	gain := cur - d.Costs[best]
	if best == in.Leader || float64(d.Costs[best]) > (1-p.Margin)*float64(cur) || gain < p.MinGain {
		d.Reason = fmt.Sprintf("leader %d is best or within the margin (cost %v, best %d at %v)", in.Leader, cur, best, d.Costs[best])
		p.candidate, p.streak = 0, 0
		return d
	}
	return p.damp(now, in, d, best, fmt.Sprintf("saves %v", gain))
}

// decideBy applies a chooser other than center of gravity.
func (p *Policy) decideBy(now time.Time, in Input, d Decision) Decision {
	best, ok := p.Chooser.Choose(in)
	if !ok || best == in.Leader {
		d.Reason = fmt.Sprintf("%s keeps %d", p.Chooser.Name(), in.Leader)
		p.candidate, p.streak = 0, 0
		return d
	}
	return p.damp(now, in, d, best, p.Chooser.Name()+" prefers it")
}

// damp turns a better candidate into a move after Consecutive agreeing
// evaluations and MinInterval since the last leadership change.
func (p *Policy) damp(now time.Time, in Input, d Decision, best uint64, why string) Decision {
	if best != p.candidate {
		p.candidate, p.streak = best, 0
	}
	p.streak++
	d.Target = best
	switch {
	case p.streak < p.Consecutive:
		d.Reason = fmt.Sprintf("%d over %d: %s (%d/%d evaluations)", best, in.Leader, why, p.streak, p.Consecutive)
	case now.Sub(p.since) < p.MinInterval:
		d.Reason = fmt.Sprintf("%d over %d: %s, but the leader changed %v ago (min %v)", best, in.Leader, why, now.Sub(p.since).Round(time.Millisecond), p.MinInterval)
	default:
		d.Move = true
		d.Reason = fmt.Sprintf("move to %d from %d: %s, %d evaluations in a row (%s)", best, in.Leader, why, p.streak, p.Chooser.Name())
	}
	return d
}
