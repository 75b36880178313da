package chaos

import (
	"context"
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
		deadline := time.Now().Add(4 * et)
		for {
			s, err := cl.Status(ctx, old)
			if err == nil && s.GetLeaderId() == leader && s.GetTerm() == term {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pause %d: resumed leader %d does not follow %d in term %d: %v %v", i+1, old, leader, term, s, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(2 * et)
		for _, id := range []uint64{1, 2, 3} {
			s, err := cl.Status(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if s.GetLeaderId() != leader || s.GetTerm() != term {
				t.Fatalf("pause %d: after the old leader resumed, member %d sees leader %d term %d; want %d term %d (disturbed)",
					i+1, id, s.GetLeaderId(), s.GetTerm(), leader, term)
			}
		}
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
