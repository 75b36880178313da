package latency

import (
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func near(a, b time.Duration) bool       { return a >= b-b/100 && a <= b+b/100 } // HDR: 2 significant digits, within 1%
func ms(n float64) time.Duration         { return time.Duration(n * float64(time.Millisecond)) }

func TestQuorumAndAll(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	tr := New(1, []uint64{1, 2, 3, 4, 5}, []uint64{1, 2, 3, 4, 5}, time.Minute, 10*time.Second, c.now)
	// Five servers: a majority is self plus two peers.
	for i := 0; i < 10; i++ {
		seq := tr.StartRound()
		tr.Reply(2, seq, ms(10))
		tr.Reply(3, seq, ms(20)) // third of five: the quorum latency
		tr.Reply(4, seq, ms(80))
		tr.Reply(4, seq, ms(1)) // duplicate: ignored
		tr.Reply(5, seq, ms(150))
		c.add(100 * time.Millisecond)
	}
	s := tr.Snapshot()
	if len(s.Peers) != 4 || s.Peers[0].Peer != 2 || s.Peers[3].Peer != 5 {
		t.Fatalf("peers %+v", s.Peers)
	}
	if p := s.Peers[2].Total; p.Count != 10 || !near(p.P50, ms(80)) || !near(p.Max, ms(80)) {
		t.Fatalf("peer 4: %+v", p)
	}
	if q := s.Quorum.Total; q.Count != 10 || !near(q.P99, ms(20)) {
		t.Fatalf("quorum: %+v", q)
	}
	if a := s.All.Total; a.Count != 10 || !near(a.P50, ms(150)) {
		t.Fatalf("all: %+v", a)
	}
	if s.All.Lost != 0 || s.Quorum.Lost != 0 || s.Peers[0].Lost != 0 {
		t.Fatalf("nothing was lost: %+v", s)
	}
}

func TestLostRepliesAndExpiry(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	tr := New(1, []uint64{1, 2, 3}, []uint64{1, 2, 3}, time.Minute, time.Second, c.now)
	seq := tr.StartRound()
	tr.Reply(2, seq, ms(5)) // majority of three: self + one
	c.add(2 * time.Second)  // peer 3 never answers; the round expires
	tr.Reply(3, seq, ms(2000))
	s := tr.Snapshot()
	if s.Quorum.Total.Count != 1 || s.Quorum.Lost != 0 || s.All.Lost != 1 || s.All.Total.Count != 0 {
		t.Fatalf("quorum %+v all %+v", s.Quorum, s.All)
	}
	if s.Peers[1].Lost != 1 || s.Peers[1].Total.Count != 0 {
		t.Fatalf("peer 3: %+v", s.Peers[1])
	}
	// A partitioned server: no replies at all, so no quorum either.
	tr.StartRound()
	c.add(2 * time.Second)
	if s := tr.Snapshot(); s.Quorum.Lost != 1 || s.All.Lost != 2 {
		t.Fatalf("after a silent round: quorum %+v all %+v", s.Quorum, s.All)
	}
	// Unknown peers and rounds are ignored.
	tr.Reply(9, 1, ms(1))
	tr.Reply(2, 12345, ms(1))
}

func TestWindowForgetsOldSamples(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	tr := New(1, []uint64{1, 2}, []uint64{1, 2}, 10*time.Second, time.Second, c.now)
	seq := tr.StartRound()
	tr.Reply(2, seq, ms(500))
	c.add(6 * time.Second) // one rotation: still in the window
	seq = tr.StartRound()
	tr.Reply(2, seq, ms(5))
	if w := tr.Snapshot().Peers[0].Window; w.Count != 2 || !near(w.Max, ms(500)) {
		t.Fatalf("window after one rotation: %+v", w)
	}
	c.add(6 * time.Second) // second rotation: the 500 ms sample is gone
	s := tr.Snapshot().Peers[0]
	if s.Window.Count != 1 || !near(s.Window.Max, ms(5)) || s.Total.Count != 2 || !near(s.Total.Max, ms(500)) {
		t.Fatalf("window %+v total %+v", s.Window, s.Total)
	}
}

func TestOpenRoundsAreBounded(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	tr := New(1, []uint64{1, 2, 3}, []uint64{1, 2, 3}, time.Minute, time.Hour, c.now)
	for i := 0; i < MaxOpenRounds+10; i++ {
		tr.StartRound()
	}
	if n := len(tr.open); n != MaxOpenRounds {
		t.Fatalf("%d open rounds", n)
	}
	if s := tr.Snapshot(); s.All.Lost != 10 || s.Peers[0].Lost != 10 {
		t.Fatalf("evicted rounds not counted lost: %+v", s.All)
	}
}

func TestSingleServer(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	tr := New(1, []uint64{1}, []uint64{1}, time.Minute, time.Second, c.now)
	tr.StartRound()
	if s := tr.Snapshot(); len(s.Peers) != 0 || s.Quorum.Total.Count != 1 || s.Quorum.Total.Max != time.Microsecond || s.All.Total.Count != 1 || s.All.Lost != 0 {
		t.Fatalf("single server: %+v", s)
	}
}

// Learners do not make a quorum: their replies count for all-peers only.
func TestLearnersDoNotCount(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	voters := []uint64{1, 2, 3}
	tr := New(1, []uint64{1, 2, 3, 4}, voters, time.Minute, 10*time.Second, c.now)
	seq := tr.StartRound()
	tr.Reply(4, seq, ms(1)) // the learner answers first: no quorum yet
	tr.Reply(2, seq, ms(30))
	tr.Reply(3, seq, ms(90))
	if q := tr.Snapshot().Quorum.Total; q.Count != 1 || !near(q.Max, ms(30)) {
		t.Fatalf("voter's quorum: %+v", q)
	}
	// Seen from the learner: a majority of the three voters must answer.
	lt := New(4, []uint64{1, 2, 3, 4}, voters, time.Minute, 10*time.Second, c.now)
	seq = lt.StartRound()
	lt.Reply(1, seq, ms(10))
	lt.Reply(3, seq, ms(50))
	lt.Reply(2, seq, ms(70))
	if s := lt.Snapshot(); !near(s.Quorum.Total.Max, ms(50)) || !near(s.All.Total.Max, ms(70)) {
		t.Fatalf("learner's view: quorum %+v all %+v", s.Quorum.Total, s.All.Total)
	}
}

// BenchmarkSnapshot: one Snapshot of a 3-server tracker whose window holds
// wide-area round trips (about 62 ms, the west-east coast pair of "Tail
// Latency in ZooKeeper and a Simple Reimplementation", Michael Graczyk),
// what a leader's duties used to take every tick.
func BenchmarkSnapshot(b *testing.B) {
	c := &fakeClock{t: time.Unix(0, 0)}
	tr := New(1, []uint64{1, 2, 3}, []uint64{1, 2, 3}, time.Minute, 10*time.Second, c.now)
	for i := 0; i < 1000; i++ {
		seq := tr.StartRound()
		tr.Reply(2, seq, ms(0.5+float64(i%10)/10))
		tr.Reply(3, seq, ms(62+float64(i%50)/10))
		c.add(10 * time.Millisecond)
	}
	b.ReportAllocs()
	for b.Loop() {
		tr.Snapshot()
	}
}

// A paused peer answers the probes that waited in a burst when it resumes;
// those round trips are its pause, not the network, and stay out of Net
// (but in the Series, which shows everything).
func TestStalledPeerLeftOutOfNet(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	tr := New(1, []uint64{1, 2}, []uint64{1, 2}, time.Minute, 10*time.Second, c.now)
	tr.SetStallGap(600 * time.Millisecond)
	every := 200 * time.Millisecond
	steady := func(n int, rtt time.Duration) {
		for i := 0; i < n; i++ {
			seq := tr.StartRound()
			c.add(rtt)
			tr.Reply(2, seq, rtt)
			c.add(every - rtt)
		}
	}
	steady(50, ms(1))
	if s := tr.Snapshot().Peers[0]; s.Net.Count != 49 || s.Stalled != 1 || !near(s.Net.Max, ms(1)) {
		t.Fatalf("steady peer (its first reply is left out): net %+v stalled %d", s.Net, s.Stalled)
	}
	// Paused 4 s: twenty probes wait, then all are answered at once.
	var seqs []uint64
	var sent []time.Time
	for i := 0; i < 20; i++ {
		seqs = append(seqs, tr.StartRound())
		sent = append(sent, c.now())
		c.add(every)
	}
	for i, seq := range seqs {
		tr.Reply(2, seq, c.now().Sub(sent[i]))
	}
	steady(50, ms(1))
	s := tr.Snapshot().Peers[0]
	if s.Window.Max < 3*time.Second {
		t.Fatalf("the series keeps the stall: %+v", s.Window)
	}
	if s.Net.Count != 99 || s.Stalled != 21 || !near(s.Net.P99, ms(1)) || !near(s.Net.Max, ms(1)) {
		t.Fatalf("net samples must exclude the stall: net %+v stalled %d", s.Net, s.Stalled)
	}
	// A slow network answers every probe, one per interval, late: that
	// is the network, and it counts.
	c2 := &fakeClock{t: time.Unix(100, 0)}
	tr = New(1, []uint64{1, 2}, []uint64{1, 2}, time.Minute, 10*time.Second, c2.now)
	tr.SetStallGap(600 * time.Millisecond)
	type probe struct {
		seq  uint64
		sent time.Time
	}
	var open []probe
	for i := 0; i < 60; i++ { // a round trip of 1 s, probes every 200 ms
		open = append(open, probe{tr.StartRound(), c2.now()})
		if len(open) > 5 {
			p := open[0]
			open = open[1:]
			tr.Reply(2, p.seq, c2.now().Sub(p.sent))
		}
		c2.add(every)
	}
	// The first reply and the four probes in flight behind it predate the
	// first answer and are left out; the other 50 count.
	if s := tr.Snapshot().Peers[0]; s.Net.Count != 50 || s.Stalled != 5 || !near(s.Net.P50, time.Second) {
		t.Fatalf("a slow network is the network: net %+v stalled %d", s.Net, s.Stalled)
	}
}
