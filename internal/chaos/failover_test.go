package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestPausedLeaderReplaced: a leader paused (SIGSTOP) for longer than the
// election timeout is replaced by the other two, again and again, and when
// it resumes it steps down without disturbing its successor. The failure
// detector must not learn from the pauses: the probes a paused server
// answers late are its pause, not the network, so the raft tick stays at
// its configured floor throughout. (Before, each pause raised the measured
// "round trip" until the tick reached its ceiling, ten times the floor, and
// paused leaders then went unreplaced for seconds.)
func TestPausedLeaderReplaced(t *testing.T) {
	const tickMs = 50
	cl := startCluster(t, ClusterConfig{TickMs: tickMs})
	et := cl.ElectionTimeout()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := cl.Leader(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// Let the probes fill the latency window, so the tick rule has its
	// samples before the first pause.
	time.Sleep(6 * time.Second)

	const pauses = 4
	for i := 0; i < pauses; i++ {
		old, err := cl.Leader(ctx, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		st, err := cl.Status(ctx, old)
		if err != nil {
			t.Fatal(err)
		}
		oldTerm := st.GetTerm()
		others := []uint64{}
		for id := uint64(1); id <= 3; id++ {
			if id != old {
				others = append(others, id)
			}
		}
		paused := time.Now()
		cl.Pause(old)
		// Both others must name the same new leader in a later term.
		var elected time.Duration
		var leader, term uint64
		for elected == 0 {
			if time.Since(paused) > 8*et {
				cl.Resume(old)
				t.Fatalf("pause %d: leader %d paused %v (election timeout %v) and not replaced", i+1, old, time.Since(paused), et)
			}
			a, errA := cl.Status(ctx, others[0])
			b, errB := cl.Status(ctx, others[1])
			if errA == nil && errB == nil && a.GetLeaderId() != 0 && a.GetLeaderId() != old &&
				a.GetLeaderId() == b.GetLeaderId() && a.GetTerm() > oldTerm && a.GetTerm() == b.GetTerm() {
				elected, leader, term = time.Since(paused), a.GetLeaderId(), a.GetTerm()
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("pause %d: leader %d replaced by %d (term %d→%d) after %v; election timeout %v", i+1, old, leader, oldTerm, term, elected, et)
		// raft campaigns after a randomized one to two election timeouts
		// of silence; the vote and this polling (new TLS connections) come
		// on top, so the bound leaves one more election timeout.
		if elected > 3*et {
			t.Errorf("pause %d: replaced after %v, want within 3 election timeouts (%v)", i+1, elected, 3*et)
		}
		// Paused longer than the clients' session timeout, like the chaos
		// battery's pause-leader fault.
		time.Sleep(3*time.Second - time.Since(paused))
		cl.Resume(old)
		// The old leader hears the new term and follows; nobody campaigns
		// again because of it.
		followsUndisturbed(t, ctx, cl, fmt.Sprintf("pause %d: resumed", i+1), old, leader, term)
	}
	// The tick never left its floor: every member still reports it, and
	// none logged a change (the rule runs every 5 s and logs each move).
	for _, nd := range cl.Nodes {
		s, err := cl.Status(ctx, nd.ID)
		if err != nil {
			t.Fatal(err)
		}
		if s.GetTickMs() != tickMs || s.GetElectionTimeoutMs() != int64(et/time.Millisecond) {
			t.Errorf("member %d: tick %d ms, election timeout %d ms; want the floor %d ms, %v", nd.ID, s.GetTickMs(), s.GetElectionTimeoutMs(), tickMs, et)
		}
	}
	moves, err := tickMoves(cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range moves {
		t.Errorf("tick moved: %s", m)
	}
}

// TestDeafLeaderReplaced: a leader that can send but not hear (every link
// into it cut) is deposed by raft's CheckQuorum, and then hands over: its
// followers, whose election timers its heartbeats kept resetting, hear
// from it that it stepped down and elect one of them at once instead of
// waiting out their own election timeouts first. Measured from the old
// leader's step-down to both others naming the new leader in a later
// term: within half an election timeout (the named member campaigns one
// tick after the notice); without the notice, at least the followers' own
// election timeout.
func TestDeafLeaderReplaced(t *testing.T) {
	cl := startCluster(t, ClusterConfig{TickMs: 100, Proxied: true})
	et := cl.ElectionTimeout()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := 0; i < 3; i++ {
		old, err := cl.Leader(ctx, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		st, err := cl.Status(ctx, old)
		if err != nil {
			t.Fatal(err)
		}
		oldTerm := st.GetTerm()
		var others []uint64
		for _, nd := range cl.Nodes {
			if nd.ID != old {
				others = append(others, nd.ID)
				cl.Block(nd.ID, old)
			}
		}
		cut := time.Now()
		var steppedDown, elected time.Duration
		var leader, term uint64
		for elected == 0 {
			if time.Since(cut) > 8*et {
				cl.Heal()
				t.Fatalf("cut %d: leader %d deaf for %v (election timeout %v) and not replaced (stepped down after %v)", i+1, old, time.Since(cut), et, steppedDown)
			}
			if steppedDown == 0 {
				if s, err := cl.Status(ctx, old); err == nil && s.GetLeaderId() != old {
					steppedDown = time.Since(cut)
				}
			}
			a, errA := cl.Status(ctx, others[0])
			b, errB := cl.Status(ctx, others[1])
			if errA == nil && errB == nil && a.GetLeaderId() != 0 && a.GetLeaderId() != old &&
				a.GetLeaderId() == b.GetLeaderId() && a.GetTerm() > oldTerm && a.GetTerm() == b.GetTerm() {
				elected, leader, term = time.Since(cut), a.GetLeaderId(), a.GetTerm()
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("cut %d: leader %d stepped down after %v, replaced by %d (term %d→%d) after %v; election timeout %v",
			i+1, old, steppedDown, leader, oldTerm, term, elected, et)
		if steppedDown == 0 {
			t.Errorf("cut %d: a new leader was elected before the polling saw the old one step down", i+1)
		} else if h := elected - steppedDown; h > et/2 {
			t.Errorf("cut %d: new leader %v after the old one stepped down, want within half an election timeout (%v)", i+1, h, et/2)
		}
		// CheckQuorum's one to two election timeouts, the handover, and
		// this polling (new TLS connections) on a loaded machine.
		if elected > 3*et {
			t.Errorf("cut %d: replaced after %v, want within 3 election timeouts (%v)", i+1, elected, 3*et)
		}
		cl.Heal()
		// Healed, the old leader follows the new one; nobody campaigns again.
		followsUndisturbed(t, ctx, cl, fmt.Sprintf("cut %d: healed", i+1), old, leader, term)
	}
}

// followsUndisturbed waits up to four election timeouts for the old
// leader, back from its fault, to follow leader in term, then checks two
// election timeouts later that every member still does: nobody campaigned
// because of it.
func followsUndisturbed(t *testing.T, ctx context.Context, cl *Cluster, what string, old, leader, term uint64) {
	t.Helper()
	et := cl.ElectionTimeout()
	deadline := time.Now().Add(4 * et)
	for {
		s, err := cl.Status(ctx, old)
		if err == nil && s.GetLeaderId() == leader && s.GetTerm() == term {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s leader %d does not follow %d in term %d: %v %v", what, old, leader, term, s, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(2 * et)
	for _, nd := range cl.Nodes {
		s, err := cl.Status(ctx, nd.ID)
		if err != nil {
			t.Fatal(err)
		}
		if s.GetLeaderId() != leader || s.GetTerm() != term {
			t.Fatalf("%s leader %d back: member %d sees leader %d term %d; want %d term %d (disturbed)",
				what, old, nd.ID, s.GetLeaderId(), s.GetTerm(), leader, term)
		}
	}
}
