package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/testutil"
)

func TestPlacementReportCodec(t *testing.T) {
	in := map[uint64]time.Duration{2: 1500 * time.Microsecond, 3: 70 * time.Millisecond}
	r, err := decodeReport(encodeReport(12.5, in))
	if err != nil || r.load != 12.5 || len(r.rtt) != 2 || r.rtt[3] != 70*time.Millisecond || r.rtt[2] != 1500*time.Microsecond {
		t.Fatalf("round trip: %+v %v", r, err)
	}
	good := encodeReport(1, in)
	for n := 0; n < len(good); n++ {
		if _, err := decodeReport(good[:n]); err == nil {
			t.Fatalf("truncated to %d bytes: decoded", n)
		}
	}
	if _, err := decodeReport(append(good, 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
}

// Member 3 sits 50 ms (round trip) from the others, all writes arrive at
// member 1, and member 3 leads: with placement auto, leadership moves to
// the near pair, where a commit no longer pays the far round trip.
func TestPlacementMovesLeaderToTheWork(t *testing.T) {
	const oneWay = 25 * time.Millisecond
	tc := newTestCluster(t, 3, func(c *Config) {
		c.Placement = "auto"
		c.PlacementMinIntervalMs = 1000
		// Every link to or from member 3 passes a delaying proxy: each
		// server's config names its own proxy for each peer.
		real := slices.Clone(c.Members)
		c.Members = slices.Clone(c.Members)
		c.ListenPeer = real[c.ID-1].Peer
		for j := range c.Members {
			if uint64(j+1) == c.ID {
				continue
			}
			d := time.Duration(0)
			if c.ID == 3 || j == 2 {
				d = oneWay
			}
			c.Members[j].Peer = testutil.NewProxy(t, real[j].Peer, d).Addr
		}
	})
	_ = tc
	lead := tc.leader()
	cx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if lead != 2 {
		if err := tc.servers[lead].Replica().TransferLeadership(cx, 3); err != nil {
			t.Fatalf("put the leader far away: %v", err)
		}
	}
	writer := tc.client(tc.cfgs[0].Self().GRPC)
	if _, _, err := writer.Create(ctx(t), "/load", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		if _, err := writer.Set(ctx(t), "/load", []byte(fmt.Sprint(i)), -1); err != nil && !isUnknownOutcome(err) {
			t.Fatal(err)
		}
		if l := tc.servers[0].Replica().Leader(); l == 1 || l == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leadership stayed on member %d; last decision: %+v", tc.servers[0].Replica().Leader(),
				tc.servers[2].PlacementDecision())
		}
	}
	// And it stays near: the far member never wins while the load is here.
	stop := time.Now().Add(3 * time.Second)
	for time.Now().Before(stop) {
		if _, err := writer.Set(ctx(t), "/load", []byte("x"), -1); err != nil && !isUnknownOutcome(err) {
			t.Fatal(err)
		}
		if l := tc.servers[0].Replica().Leader(); l == 3 {
			t.Fatal("leadership went back to the far member")
		}
	}
}

// Ticks from measurements: behind 60 ms round trips, every server's raft
// tick grows from the configured 20 ms, at most doubling per step, to
// twice the median network round trip (election timeout 10 ticks = 20
// round trips) within the 10 % growth hysteresis, capped by max_tick_ms,
// and the cluster keeps committing. The rule waits for 10 s of probes and
// then moves every 5 s: 20, 40, 80, then about 120 ms.
func TestTickFollowsMeasuredRTT(t *testing.T) {
	const oneWay = 30 * time.Millisecond
	tc := newTestCluster(t, 3, func(c *Config) {
		c.MaxTickMs = 400
		real := slices.Clone(c.Members)
		c.Members = slices.Clone(c.Members)
		c.ListenPeer = real[c.ID-1].Peer
		for j := range c.Members {
			if uint64(j+1) != c.ID {
				c.Members[j].Peer = testutil.NewProxy(t, real[j].Peer, oneWay).Addr
			}
		}
	})
	tc.leader()
	deadline := time.Now().Add(45 * time.Second)
	for {
		ok := true
		var ticks []time.Duration
		for _, s := range tc.servers {
			tick := s.Replica().Status().Tick
			ticks = append(ticks, tick)
			if tick < 108*time.Millisecond {
				ok = false
			}
			if tick > 400*time.Millisecond {
				t.Fatalf("tick %v above max_tick_ms", tick)
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ticks %v: want ≥ 108ms (2 × 60ms round trips, less the 10%% hysteresis)", ticks)
		}
		time.Sleep(500 * time.Millisecond)
	}
	c := tc.client(tc.servers[0].GRPCAddr())
	if _, _, err := c.Create(ctx(t), "/after", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// meridian leader prefer: the preference is replicated, the leader moves to
// a voter in that region and, after a forced move elsewhere, back again.
func TestLeaderPreferRegion(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) {
		c.Members = slices.Clone(c.Members)
		for i := range c.Members {
			c.Members[i].Region = fmt.Sprintf("r%d", i+1)
		}
	})
	lead := tc.leader()
	cl := tc.client()
	if err := cl.PreferLeaderRegion(ctx(t), "nowhere"); err == nil {
		t.Fatal("a region without voters was accepted")
	}
	want := (lead+1)%3 + 1 // a member that does not lead now (1-based)
	region := fmt.Sprintf("r%d", want)
	if err := cl.PreferLeaderRegion(ctx(t), region); err != nil {
		t.Fatal(err)
	}
	waitLeader := func(id uint64) {
		t.Helper()
		waitUntil(t, fmt.Sprintf("leader %d", id), func() bool {
			for _, s := range tc.servers {
				if s.Replica().Status().Leader != id {
					return false
				}
			}
			return true
		})
	}
	waitLeader(uint64(want))
	st, err := cl.Status(ctx(t))
	if err != nil || st.GetPreferRegion() != region {
		t.Fatalf("status: %v %v", st.GetPreferRegion(), err)
	}
	// Moved away by hand, leadership comes back to the preferred region.
	other := uint64(want%3 + 1)
	if err := cl.TransferLeader(ctx(t), other); err != nil {
		t.Fatal(err)
	}
	waitLeader(uint64(want))
	// Cleared: nothing pulls it any more (placement is off in this
	// cluster), and the leader says so.
	if err := cl.PreferLeaderRegion(ctx(t), ""); err != nil {
		t.Fatal(err)
	}
	if err := cl.TransferLeader(ctx(t), other); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the leader to drop the preference", func() bool {
		l := tc.servers[0].Replica().Status().Leader
		return l != 0 && strings.Contains(tc.servers[l-1].PlacementDecision().Reason, "no leader region is preferred")
	})
	if st, err := cl.Status(ctx(t)); err != nil || st.GetPreferRegion() != "" {
		t.Fatalf("status after clearing: %q %v", st.GetPreferRegion(), err)
	}
}
