package chaos

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/meridian-coord/meridian/internal/errs"
)

// All times in these tests are in units of the election timeout et, so
// the expectations are ratios, not wall-clock figures.
const et = 500 * time.Millisecond

func at(n float64) int64 { return int64(n * float64(et)) }

func atD(n float64) time.Duration { return time.Duration(at(n)) }

// Only writes the cluster committed count: reads, definite refusals,
// unknown outcomes and failed lock operations do not.
func TestAckedWritesCountsOnlyCommittedWrites(t *testing.T) {
	k := "/chaos/kv/k0"
	kv := []porcupine.Operation{
		op(0, kvInput{Op: opSet, Key: k, Value: "a", Version: -1}, at(1), kvOutput{Version: 1}, at(1.1)), // counts
		op(1, kvInput{Op: opGet, Key: k}, at(2), kvOutput{Value: "a"}, at(2.1)),                          // a read
		op(2, kvInput{Op: opSet, Key: k, Value: "b", Version: 7}, at(3), kvOutput{Code: resBadVersion}, at(3.1)),
		op(3, kvInput{Op: opCreate, Key: k, Value: "c"}, at(4), kvOutput{Unknown: true}, -1),
		op(0, kvInput{Op: opMulti, Key: k, Value: "d", Version: 1}, at(5), kvOutput{}, at(5.1)), // counts
	}
	locks := []lockEvent{
		{Kind: evGrant, Call: at(6), Return: at(6.1)},                            // counts
		{Kind: evFenced, Call: at(7), Return: at(7.1), Err: errs.ErrStaleToken},  // refused
		{Kind: evFenced, Call: at(8), Return: -1, Err: errors.New("timeout")},    // unknown
		{Kind: evRelease, Call: at(9), Return: at(9.1)},                          // counts
		{Kind: evLost, Return: at(9.5)},                                          // not a write
		{Kind: evFenced, Call: at(10), Return: at(10.1), Value: "v", Version: 3}, // counts
	}
	durab := []durableCreate{
		{Path: "/x", Acked: true, Call: at(0.5), Return: at(0.6)}, // counts
		{Path: "/y", Acked: false, Call: at(11), Return: at(11.1)},
	}
	ws := ackedWrites(kv, locks, durab)
	var got []float64
	for _, w := range ws {
		got = append(got, float64(w.Return)/float64(et))
	}
	want := []float64{0.6, 1.1, 5.1, 6.1, 9.1, 10.1}
	if len(got) != len(want) {
		t.Fatalf("acknowledged writes at %v election timeouts, want %v", got, want)
	}
	for i := range want {
		if d := got[i] - want[i]; d > 1e-9 || d < -1e-9 {
			t.Fatalf("acknowledged writes at %v election timeouts, want %v", got, want)
		}
	}
}

func writesAt(pairs ...float64) []writeTimes {
	var ws []writeTimes
	for i := 0; i < len(pairs); i += 2 {
		ws = append(ws, writeTimes{Call: at(pairs[i]), Return: at(pairs[i+1])})
	}
	return ws
}

// A steady stream of writes with a fault the cluster rides out: the next
// write follows the fault at once, the longest window is the stream's
// spacing, nothing is violated.
func TestAvailabilityWithinBound(t *testing.T) {
	var pairs []float64
	for x := 0.0; x < 20; x += 0.2 {
		pairs = append(pairs, x, x+0.1)
	}
	faults := []FaultRecord{{Kind: PauseFollower, Start: atD(5.05), Undone: atD(9), End: atD(9)}}
	gap, v := measureAvailability(writesAt(pairs...), faults, atD(20), et)
	if len(v) != 0 || faults[0].OverBound {
		t.Fatalf("violations: %v", v)
	}
	// The first write invoked after 5.05 is the one called at 5.2 and
	// acknowledged at 5.3.
	if d := faults[0].ToNextWrite - atD(0.25); d > time.Microsecond || d < -time.Microsecond {
		t.Fatalf("to next write %v, want %v", faults[0].ToNextWrite, atD(0.25))
	}
	if faults[0].Bound != AvailabilityRatio*et {
		t.Fatalf("bound %v, want %d election timeouts", faults[0].Bound, AvailabilityRatio)
	}
	if gap.Len() > atD(0.21) || gap.Len() < atD(0.19) {
		t.Fatalf("longest gap %v, want one write spacing (%v)", gap, atD(0.2))
	}
}

// A write invoked before the fault and answered after it does not count:
// it may have been committed before the fault.
func TestToNextWriteIgnoresWritesInvokedBeforeTheFault(t *testing.T) {
	ws := writesAt(0, 0.1, 0.9, 1.05, 3, 3.1)
	faults := []FaultRecord{{Kind: KillLeader, Start: atD(1), Undone: atD(2), End: atD(2)}}
	_, v := measureAvailability(ws, faults, atD(4), et)
	if len(v) != 0 {
		t.Fatalf("violations: %v", v)
	}
	if faults[0].ToNextWrite != atD(3.1)-atD(1) {
		t.Fatalf("to next write %v, want %v", faults[0].ToNextWrite, atD(3.1)-atD(1))
	}
}

// A leader pause with no write for longer than the bound fails twice: the
// fault's next write comes too late, and the window it left is too long
// and is blamed on it.
func TestAvailabilityPastBoundIsAViolation(t *testing.T) {
	r := float64(AvailabilityRatio)
	ws := writesAt(0, 0.1, 0.5, 0.6, 1.5+r, 1.6+r, 2+r, 2.1+r)
	faults := []FaultRecord{{Kind: PauseLeader, Start: atD(0.7), Undone: atD(6), End: atD(6)}}
	gap, v := measureAvailability(ws, faults, atD(3+r), et)
	if faults[0].ToNextWrite != atD(1.6+r)-atD(0.7) || !faults[0].OverBound {
		t.Fatalf("to next write %v", faults[0].ToNextWrite)
	}
	if gap.Fault != PauseLeader || gap.FaultIndex != 0 || gap.Start != atD(0.6) || gap.End != atD(1.6+r) {
		t.Fatalf("longest gap %+v", gap)
	}
	if len(v) != 2 {
		t.Fatalf("want two violations, got %q", v)
	}
	for _, s := range v {
		if !strings.Contains(s, PauseLeader) || !strings.Contains(s, "election timeout 500ms") {
			t.Errorf("violation does not name the fault and the bound: %q", s)
		}
	}
}

// A kill-all may add its planned down time to the bound.
func TestKillAllBoundAddsDownTime(t *testing.T) {
	r := float64(AvailabilityRatio)
	ws := writesAt(0, 0.1, 1+r+2, 1+r+2.5, 1+r+3, 1+r+3.1)
	faults := []FaultRecord{{Kind: KillAll, Start: atD(0.2), Undone: atD(5.2), End: atD(5.2), Down: atD(5)}}
	gap, v := measureAvailability(ws, faults, atD(r+5), et)
	if len(v) != 0 {
		t.Fatalf("violations: %v", v)
	}
	if want := atD(5) + AvailabilityRatio*et; faults[0].Bound != want || gap.Bound != want {
		t.Fatalf("bound %v (gap %v), want %v", faults[0].Bound, gap.Bound, want)
	}
	// The same outage with a 1-election-timeout planned down time fails.
	faults = []FaultRecord{{Kind: KillAll, Start: atD(0.2), Undone: atD(1.2), End: atD(1.2), Down: atD(1)}}
	if _, v := measureAvailability(ws, faults, atD(r+5), et); len(v) == 0 {
		t.Fatal("a kill-all outage past down time + bound passed")
	}
}

// No write after a fault: a violation once the bound has passed by the end
// of the workload, nothing when the workload ended sooner. The tail of the
// workload counts as a window too.
func TestNoWriteAfterFault(t *testing.T) {
	r := float64(AvailabilityRatio)
	ws := writesAt(0, 0.1, 0.5, 0.6)
	faults := []FaultRecord{{Kind: PartitionLeader, Start: atD(1), Undone: atD(2), End: atD(2)}}
	_, v := measureAvailability(ws, faults, atD(2), et)
	if len(v) != 0 || faults[0].ToNextWrite != -1 {
		t.Fatalf("short tail: violations %q, to next write %v", v, faults[0].ToNextWrite)
	}
	if faults[0].OverBound {
		t.Fatal("a fault the workload ended soon after is over its bound")
	}
	gap, v := measureAvailability(ws, faults, atD(r+2), et)
	if len(v) != 2 || faults[0].ToNextWrite != -1 || !faults[0].OverBound || gap.End != atD(r+2) || gap.Fault != PartitionLeader {
		t.Fatalf("long tail: violations %q, to next write %v, gap %+v", v, faults[0].ToNextWrite, gap)
	}
}

// A window before any fault is held to the base bound and blamed on none.
func TestGapWithoutFault(t *testing.T) {
	r := float64(AvailabilityRatio)
	ws := writesAt(0, 0.1, r+1, r+1.1)
	gap, v := measureAvailability(ws, nil, atD(r+1.2), et)
	if gap.Fault != "" || gap.FaultIndex != -1 || len(v) != 1 || !strings.Contains(v[0], "no fault") {
		t.Fatalf("gap %+v violations %q", gap, v)
	}
}

// Shards' figures merge into the distribution one run would have given,
// through their JSON files.
func TestAvailabilityStatsMerge(t *testing.T) {
	res := func(seed uint64, next ...time.Duration) *Result {
		r := &Result{Seed: seed, ElectionTimeout: et, LongestGap: Gap{Start: 0, End: next[0], Fault: KillLeader, Bound: AvailabilityRatio * et}}
		for _, n := range next {
			r.Faults = append(r.Faults, FaultRecord{Kind: KillLeader, ToNextWrite: n, Bound: AvailabilityRatio * et, OverBound: n > AvailabilityRatio*et})
		}
		return r
	}
	dir := t.TempDir()
	a, b := NewAvailabilityStats(), NewAvailabilityStats()
	for i := 1; i <= 50; i++ {
		a.Add(res(uint64(i), atD(float64(i)/10)))
		b.Add(res(uint64(100+i), atD(float64(50+i)/10)))
	}
	b.Add(res(200, -1)) // no next write; its gap is not counted
	b.Add(&Result{Seed: 300, ElectionTimeout: et, Faults: []FaultRecord{{Kind: SlowLinks, ToNextWrite: -1}, {Kind: SlowLinks, ToNextWrite: -1}},
		TickMoves: []string{"node 1: raft tick from measured ...", "node 2: raft tick from measured ..."}})
	pa, pb := dir+"/a.json", dir+"/b.json"
	if err := a.WriteFile(pa); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteFile(pb); err != nil {
		t.Fatal(err)
	}
	all := NewAvailabilityStats()
	for _, p := range []string{pa, pb} {
		s, err := ReadAvailabilityStats(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := all.Merge(s); err != nil {
			t.Fatal(err)
		}
	}
	d := Distribute(all.ToNextWriteMs[KillLeader])
	// Samples 0.1..10 election timeouts in steps of 0.1: p50 is 5, p90 is 9.
	if d.Count != 100 || d.P50 != ms(atD(5)) || d.P90 != ms(atD(9)) || d.Max != ms(atD(10)) {
		t.Fatalf("merged distribution %+v", d)
	}
	if all.NoNextWrite[KillLeader] != 1 || all.Scenarios != 102 {
		t.Fatalf("merged: none %d scenarios %d", all.NoNextWrite[KillLeader], all.Scenarios)
	}
	if all.TickMoves != 2 || all.TickMoveScenarios != 1 || all.TickMovesWith[SlowLinks] != 1 || len(all.TickMovesWith) != 1 {
		t.Fatalf("merged tick moves %d in %d scenarios (%v), want 2 in 1 (slow-links 1)", all.TickMoves, all.TickMoveScenarios, all.TickMovesWith)
	}
	// Past 8 election timeouts: 8.1..10 is 20 faults, and their gaps.
	if all.OverBound[KillLeader] != 20 || all.OverBound["gap:"+KillLeader] != 20 {
		t.Fatalf("over bound %v", all.OverBound)
	}
	if !strings.Contains(all.Table(), KillLeader) {
		t.Fatalf("table:\n%s", all.Table())
	}
	other := NewAvailabilityStats()
	other.ElectionTimeoutMs = 1000
	if err := all.Merge(other); err == nil {
		t.Fatal("stats of different election timeouts merged")
	}
}
