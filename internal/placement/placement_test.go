package placement

import (
	"testing"
	"time"
)

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

// The three regions of "Tail Latency in ZooKeeper and a Simple
// Reimplementation" (Michael Graczyk): 1 and 2 close (CA, OR: 20 ms), 3 far
// (VA: 70 ms).
func matrix(pairs map[[2]uint64]time.Duration) func(a, b uint64) (time.Duration, bool) {
	return func(a, b uint64) (time.Duration, bool) {
		if d, ok := pairs[[2]uint64{a, b}]; ok {
			return d, true
		}
		d, ok := pairs[[2]uint64{b, a}]
		return d, ok
	}
}

var threeRegions = matrix(map[[2]uint64]time.Duration{{1, 2}: ms(20), {1, 3}: ms(70), {2, 3}: ms(60)})

func TestCost(t *testing.T) {
	in := Input{Voters: []uint64{1, 2, 3}, RTT: threeRegions, Load: map[uint64]float64{1: 1}}
	for l, want := range map[uint64]time.Duration{1: ms(20), 2: ms(40), 3: ms(70 + 60)} {
		if got, ok := Cost(in, l); !ok || got != want {
			t.Errorf("cost with leader %d: %v %v, want %v", l, got, ok, want)
		}
	}
	// Load split 3:1 between servers 3 and 1.
	in.Load = map[uint64]float64{3: 3, 1: 1}
	if got, _ := Cost(in, 3); got != ms(60+70.0/4) { // quorum(3)=60; server 1's quarter pays 70 more
		t.Errorf("weighted cost at 3: %v", got)
	}
	if _, ok := Cost(Input{Voters: []uint64{1, 2, 3}, RTT: threeRegions}, 1); ok {
		t.Error("cost without load")
	}
	missing := matrix(map[[2]uint64]time.Duration{{1, 2}: ms(20)})
	if _, ok := Cost(Input{Voters: []uint64{1, 2, 3}, RTT: missing, Load: map[uint64]float64{1: 1}}, 3); ok {
		t.Error("cost with an unknown round trip")
	}
}

func TestPolicyMovesAfterConsecutiveWinsAndInterval(t *testing.T) {
	p := &Policy{Consecutive: 3, MinInterval: 10 * time.Second}
	t0 := time.Unix(0, 0)
	in := Input{Voters: []uint64{1, 2, 3}, Leader: 3, RTT: threeRegions, Load: map[uint64]float64{1: 1}}
	p.Observe(t0.Add(-time.Hour), 2) // an earlier leader: this is not the first one seen
	// Leader 3 just took over: even 3 consecutive wins wait for MinInterval.
	for i := 0; i < 3; i++ {
		if d := p.Decide(t0.Add(time.Duration(i)*time.Second), in); d.Move || d.Target != 1 {
			t.Fatalf("evaluation %d: %+v", i, d)
		}
	}
	d := p.Decide(t0.Add(11*time.Second), in)
	if !d.Move || d.Target != 1 {
		t.Fatalf("after the interval: %+v", d)
	}
	// Now leader 1: it is best; nothing moves.
	in.Leader = 1
	if d := p.Decide(t0.Add(12*time.Second), in); d.Move || d.Target != 1 {
		t.Fatalf("at the best leader: %+v", d)
	}
}

func TestPolicyHysteresis(t *testing.T) {
	p := &Policy{Consecutive: 1, MinInterval: time.Nanosecond}
	t0 := time.Unix(0, 0)
	near := matrix(map[[2]uint64]time.Duration{{1, 2}: ms(10), {1, 3}: ms(11), {2, 3}: ms(10.5)})
	// Load on 2 and 1 nearly balanced: 1 is a little better than 2, not by 20%.
	in := Input{Voters: []uint64{1, 2, 3}, Leader: 2, RTT: near, Load: map[uint64]float64{1: 1.1, 2: 1}}
	p.Decide(t0, in)
	if d := p.Decide(t0.Add(time.Second), in); d.Move {
		t.Fatalf("moved for less than the margin: %+v", d)
	}
	// A streak is broken by an evaluation that names someone else.
	p2 := &Policy{Consecutive: 2, MinInterval: time.Nanosecond}
	in = Input{Voters: []uint64{1, 2, 3}, Leader: 3, RTT: threeRegions, Load: map[uint64]float64{1: 1}}
	p2.Decide(t0, in)
	p2.Decide(t0.Add(time.Second), in) // 1/2
	in.Load = map[uint64]float64{2: 1}
	if d := p2.Decide(t0.Add(2*time.Second), in); d.Move || d.Target != 2 {
		t.Fatalf("streak for 2 starts over: %+v", d)
	}
	if d := p2.Decide(t0.Add(3*time.Second), in); !d.Move || d.Target != 2 {
		t.Fatalf("second win for 2: %+v", d)
	}
}

func TestPolicyPreferAndUnknowns(t *testing.T) {
	p := &Policy{}
	t0 := time.Unix(0, 0)
	in := Input{Voters: []uint64{1, 2, 3}, Leader: 1, RTT: threeRegions, Load: map[uint64]float64{1: 1}, Prefer: 3}
	if d := p.Decide(t0, in); !d.Move || d.Target != 3 {
		t.Fatalf("operator preference: %+v", d)
	}
	in.Prefer = 9 // not a voter: ignored
	if d := p.Decide(t0, in); d.Move {
		t.Fatalf("preference for a non-voter: %+v", d)
	}
	in.Prefer, in.Load = 0, nil
	if d := p.Decide(t0, in); d.Move || d.Reason == "" {
		t.Fatalf("no load: %+v", d)
	}
}

// The other policies of "Keep the Data Where You Use It" (Aleksey
// Charapko), behind the same damping.
func TestMajorityAndEMAChoosers(t *testing.T) {
	line := matrix(map[[2]uint64]time.Duration{{1, 2}: ms(20), {2, 3}: ms(20), {1, 3}: ms(40), {4, 3}: ms(5), {4, 1}: ms(45), {4, 2}: ms(25)})
	in := Input{Voters: []uint64{1, 2, 3}, Leader: 1, RTT: line, Load: map[uint64]float64{1: 1, 3: 2}}
	if v, ok := (Majority{}).Choose(in); !ok || v != 3 {
		t.Fatalf("majority: %d %v", v, ok)
	}
	// The busiest server is a learner (4): the voter nearest to it.
	in.Load = map[uint64]float64{4: 5, 1: 1}
	if v, ok := (Majority{}).Choose(in); !ok || v != 3 {
		t.Fatalf("majority via a learner: %d %v", v, ok)
	}
	// EMA moves one neighbour at a time: from 1 towards 3 through 2.
	e := &EMA{Alpha: 1}
	in.Load = map[uint64]float64{3: 1}
	if v, _ := e.Choose(in); v != 2 {
		t.Fatalf("ema first step: %d", v)
	}
	in.Leader = 2
	if v, _ := e.Choose(in); v != 3 {
		t.Fatalf("ema second step: %d", v)
	}

	p := &Policy{Chooser: Majority{}, Consecutive: 2, MinInterval: time.Nanosecond}
	in = Input{Voters: []uint64{1, 2, 3}, Leader: 1, RTT: line, Load: map[uint64]float64{3: 1}}
	t0 := time.Unix(0, 0)
	if d := p.Decide(t0, in); d.Move || d.Target != 3 {
		t.Fatalf("first evaluation: %+v", d)
	}
	if d := p.Decide(t0.Add(time.Second), in); !d.Move || d.Target != 3 {
		t.Fatalf("second evaluation: %+v", d)
	}
}

// The first leader a policy sees (a new cluster) is placed as soon as
// Consecutive evaluations agree; a later change waits MinInterval again.
func TestPolicyFirstLeaderNeedsNoInterval(t *testing.T) {
	p := &Policy{Consecutive: 2, MinInterval: time.Hour}
	t0 := time.Unix(0, 0)
	in := Input{Voters: []uint64{1, 2, 3}, Leader: 3, RTT: threeRegions, Load: map[uint64]float64{1: 1}}
	p.Observe(t0, 0) // no leader yet: nothing recorded
	if d := p.Decide(t0, in); d.Move {
		t.Fatalf("first evaluation moved: %+v", d)
	}
	if d := p.Decide(t0.Add(time.Second), in); !d.Move || d.Target != 1 {
		t.Fatalf("second agreeing evaluation of the first leader: %+v", d)
	}
	in.Leader = 2 // leadership changed (not where the policy wanted): wait again
	for i := 2; i < 5; i++ {
		if d := p.Decide(t0.Add(time.Duration(i)*time.Second), in); d.Move {
			t.Fatalf("moved %ds after a leadership change: %+v", i, d)
		}
	}
}
