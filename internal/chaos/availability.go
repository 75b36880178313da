package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// AvailabilityRatio is how many election timeouts a fault may keep the
// cluster from acknowledging writes. An election needs one election
// timeout to notice the leader is gone, up to a second (randomized) one
// when a vote splits, and a round trip or two to commit; clients then
// find the new leader (a failed call, a redirect, a reconnect). Eight
// election timeouts leave room for all of that on a loaded machine and
// still fail a failure detector that waits many seconds. A kill-all adds
// its planned down time: the processes restart, replay their logs and
// elect within the same allowance.
const AvailabilityRatio = 8

// electionTicks is the servers' election timeout in raft ticks (the
// server's default, set explicitly in each node's config).
const electionTicks = 10

// faultBound is the longest a fault may keep writes from being
// acknowledged, measured from the moment it took hold.
func faultBound(f FaultRecord, electionTimeout time.Duration) time.Duration {
	b := AvailabilityRatio * electionTimeout
	if f.Kind == KillAll {
		b += f.Down
	}
	return b
}

// ackedWrite times: a write the cluster committed and said so. Only
// successes count: a register write, create, delete or multi that
// returned OK (either API), a fenced write accepted, a lock granted or
// released, a durable create acknowledged. Each of these went through
// raft. Definite refusals (BadVersion, NodeExists, a stale fencing token)
// are left out: some are decided without a commit, so they show that a
// server answers, not that the cluster can write.
type writeTimes struct{ Call, Return int64 }

func ackedWrites(kv []porcupine.Operation, locks []lockEvent, durab []durableCreate) []writeTimes {
	var out []writeTimes
	for _, op := range kv {
		in, _ := op.Input.(kvInput)
		o, _ := op.Output.(kvOutput)
		if in.Op == opGet || o.Unknown || o.Code != resOK || op.Return < 0 {
			continue
		}
		out = append(out, writeTimes{op.Call, op.Return})
	}
	for _, e := range locks {
		switch {
		case e.Return < 0 || e.Err != nil:
		case e.Kind == evGrant, e.Kind == evFenced, e.Kind == evRelease:
			out = append(out, writeTimes{e.Call, e.Return})
		}
	}
	for _, d := range durab {
		if d.Acked && d.Return > 0 {
			out = append(out, writeTimes{d.Call, d.Return})
		}
	}
	slices.SortFunc(out, func(a, b writeTimes) int { return cmp.Compare(a.Return, b.Return) })
	return out
}

// Gap is a window with no acknowledged write during the workload.
type Gap struct {
	Start, End time.Duration
	// Fault is the kind of the fault the window overlapped ("" when none
	// had been injected), FaultIndex its index in Result.Faults (-1).
	Fault      string
	FaultIndex int
	Bound      time.Duration
}

// Len is the window's length.
func (g Gap) Len() time.Duration { return g.End - g.Start }

func (g Gap) String() string {
	f := g.Fault
	if f == "" {
		f = "no fault"
	}
	return fmt.Sprintf("%v (%v–%v, %s)", g.Len().Round(time.Millisecond), g.Start.Round(time.Millisecond), g.End.Round(time.Millisecond), f)
}

// firstWriteAfter is the acknowledgment time of the first write invoked
// at or after t (-1: none). A write invoked before a fault and answered
// after it could have been committed before it; counting only writes
// invoked afterwards measures the cluster after the fault.
func firstWriteAfter(ws []writeTimes, t int64) int64 {
	for _, w := range ws { // sorted by Return
		if w.Call >= t {
			return w.Return
		}
	}
	return -1
}

// measureAvailability fills each fault's ToNextWrite and Bound, finds the
// windows with no acknowledged write from the first acknowledged write to
// end (the end of the workload), and returns the longest with the
// violations: a fault followed by no write within its bound, a window
// longer than the bound of the fault it overlapped.
func measureAvailability(ws []writeTimes, faults []FaultRecord, end, electionTimeout time.Duration) (Gap, []string) {
	var v []string
	for i := range faults {
		f := &faults[i]
		f.Bound = faultBound(*f, electionTimeout)
		next := firstWriteAfter(ws, int64(f.Start))
		if next < 0 || time.Duration(next) > end {
			f.ToNextWrite = -1
			if left := end - f.Start; left > f.Bound {
				f.OverBound = true
				v = append(v, fmt.Sprintf("availability: %s at %v: no acknowledged write in the %v to the end of the workload (bound %v = %s)",
					f.Kind, f.Start.Round(time.Millisecond), left.Round(time.Millisecond), f.Bound, boundText(*f, electionTimeout)))
			}
			continue
		}
		f.ToNextWrite = time.Duration(next) - f.Start
		if f.ToNextWrite > f.Bound {
			f.OverBound = true
			v = append(v, fmt.Sprintf("availability: %s at %v: first acknowledged write after %v (bound %v = %s)",
				f.Kind, f.Start.Round(time.Millisecond), f.ToNextWrite.Round(time.Millisecond), f.Bound, boundText(*f, electionTimeout)))
		}
	}
	longest := Gap{FaultIndex: -1}
	if len(ws) == 0 || time.Duration(ws[0].Return) > end {
		return longest, v
	}
	base := AvailabilityRatio * electionTimeout
	prev := time.Duration(ws[0].Return)
	check := func(g Gap) {
		g.FaultIndex = overlapped(faults, g)
		g.Bound = base
		if g.FaultIndex >= 0 {
			g.Fault = faults[g.FaultIndex].Kind
			g.Bound = faults[g.FaultIndex].Bound
		}
		if g.Len() > longest.Len() {
			longest = g
		}
		if g.Len() > g.Bound {
			why := "no fault"
			if g.FaultIndex >= 0 {
				why = boundText(faults[g.FaultIndex], electionTimeout)
			}
			v = append(v, fmt.Sprintf("availability: no acknowledged write for %v (%v–%v, overlapping %s; bound %v = %s)",
				g.Len().Round(time.Millisecond), g.Start.Round(time.Millisecond), g.End.Round(time.Millisecond),
				orNone(g.Fault), g.Bound, why))
		}
	}
	for _, w := range ws[1:] {
		t := time.Duration(w.Return)
		if t > end {
			break
		}
		if t-prev > longest.Len() || t-prev > base {
			check(Gap{Start: prev, End: t})
		}
		prev = t
	}
	if end > prev {
		check(Gap{Start: prev, End: end})
	}
	return longest, v
}

func orNone(s string) string {
	if s == "" {
		return "no fault"
	}
	return s
}

// boundText explains a bound in election timeouts.
func boundText(f FaultRecord, electionTimeout time.Duration) string {
	s := fmt.Sprintf("%d × election timeout %v", AvailabilityRatio, electionTimeout)
	if f.Kind == KillAll {
		s = fmt.Sprintf("planned down time %v + %s", f.Down.Round(time.Millisecond), s)
	}
	return s
}

// overlapped picks the fault a window is blamed on: the first whose
// [Start, End] meets it, else the last one injected before it began (its
// aftermath), else -1.
func overlapped(faults []FaultRecord, g Gap) int {
	last := -1
	for i, f := range faults {
		if f.Start <= g.End && f.End >= g.Start {
			return i
		}
		if f.Start <= g.Start {
			last = i
		}
	}
	return last
}
