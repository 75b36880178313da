package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/latency"
)

// Every server answers Latency with its measured round trips to each peer
// and its quorum latency, and exports the same as metrics.
func TestLatencyAPIAndMetrics(t *testing.T) {
	ports := freePorts(t, 3)
	tc := newTestCluster(t, 3, func(c *Config) {
		c.ListenHTTP = fmt.Sprintf("127.0.0.1:%d", ports[c.ID-1])
		c.Members[c.ID-1].Region = []string{"", "west", "west", "east"}[c.ID]
	})
	tc.leader()
	conn, err := grpc.NewClient(tc.servers[2].GRPCAddr(), tc.dialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := pb.NewMeridianClient(conn)
	var r *pb.LatencyResponse
	for deadline := time.Now().Add(10 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, err = api.Latency(ctx, &pb.LatencyRequest{})
		cancel()
		if err == nil && len(r.GetPeers()) == 2 && r.GetPeers()[0].GetRtt().GetTotal().GetCount() >= 3 &&
			r.GetPeers()[1].GetRtt().GetTotal().GetCount() >= 3 && r.GetQuorum().GetWindow().GetCount() >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no latency measured: %v %v", r, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.GetMemberId() != 3 || r.GetRegion() != "east" || r.GetWindowMs() != 60000 ||
		r.GetPeers()[0].GetPeerId() != 1 || r.GetPeers()[0].GetRegion() != "west" {
		t.Fatalf("latency response %v", r)
	}
	if st := r.GetPeers()[0].GetRtt().GetWindow(); st.GetP50Us() <= 0 || st.GetMaxUs() < st.GetP50Us() || st.GetMaxUs() > 5e6 {
		t.Fatalf("rtt stats %v", st)
	}

	_, body := tc.httpGet(fmt.Sprintf("https://127.0.0.1:%d/metrics", ports[2]), false)
	for _, m := range []string{`meridian_peer_rtt_seconds{peer="1",quantile="0.99"}`, `meridian_quorum_latency_seconds{quantile="0.5"}`,
		`meridian_peer_probes_lost_total{peer="2"}`, "meridian_quorum_rounds_lost_total"} {
		if !strings.Contains(body, m) {
			t.Fatalf("/metrics lacks %s", m)
		}
	}
}

func TestExpirySlack(t *testing.T) {
	tick := 100 * time.Millisecond
	snap := func(p999s ...time.Duration) latency.Snapshot {
		var s latency.Snapshot
		for i, d := range p999s {
			s.Peers = append(s.Peers, latency.PeerSeries{Peer: uint64(i + 2), Series: latency.Series{Window: latency.Stats{Count: 1, P999: d}}})
		}
		return s
	}
	for _, tc := range []struct {
		snap latency.Snapshot
		want time.Duration
	}{
		{snap(), tick}, // nothing measured yet (or a single server): one tick
		{snap(time.Millisecond, 2*time.Millisecond), tick + 2*time.Millisecond},
		{snap(150*time.Millisecond, 40*time.Millisecond), tick + 150*time.Millisecond}, // the slowest peer
		{snap(time.Minute), maxExpirySlack},
	} {
		if got := expirySlack(tick, tc.snap); got != tc.want {
			t.Errorf("expirySlack(%v) = %v, want %v", tc.snap.Peers, got, tc.want)
		}
	}
}
