package server

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/latency"
)

// Measured peer latency (internal/latency, fed by the replica's probes),
// served to the API and to Prometheus.

func (a *api) Latency(ctx context.Context, r *pb.LatencyRequest) (*pb.LatencyResponse, error) {
	snap := a.s.rep.Latency()
	region := map[uint64]string{}
	for _, m := range a.s.members() {
		region[m.ID] = m.Region
	}
	out := &pb.LatencyResponse{MemberId: snap.Self, Region: region[snap.Self], WindowMs: snap.Window.Milliseconds(),
		Quorum: toLatencySeries(snap.Quorum), All: toLatencySeries(snap.All)}
	for _, p := range snap.Peers {
		out.Peers = append(out.Peers, &pb.PeerLatency{PeerId: p.Peer, Region: region[p.Peer], Rtt: toLatencySeries(p.Series)})
	}
	return out, a.done("Latency", nil)
}

func toLatencySeries(s latency.Series) *pb.LatencySeries {
	return &pb.LatencySeries{Window: toLatencyStats(s.Window), Total: toLatencyStats(s.Total), Lost: s.Lost}
}

func toLatencyStats(s latency.Stats) *pb.LatencyStats {
	us := func(d time.Duration) int64 { return d.Microseconds() }
	return &pb.LatencyStats{Count: s.Count, MeanUs: us(s.Mean), P50Us: us(s.P50), P90Us: us(s.P90),
		P99Us: us(s.P99), P999Us: us(s.P999), MinUs: us(s.Min), MaxUs: us(s.Max)}
}

// latencyCollector exports the sliding-window quantiles at scrape time, so
// dashboards see the same figures as `meridian probe`.
type latencyCollector struct {
	snap                func() latency.Snapshot
	rtt, quorum, all    *prometheus.Desc
	rttLost, quorumLost *prometheus.Desc
}

func newLatencyCollector(snap func() latency.Snapshot) *latencyCollector {
	return &latencyCollector{
		snap: snap,
		rtt: prometheus.NewDesc("meridian_peer_rtt_seconds",
			"Round trip to a peer over the raft connection, quantiles over the sliding window.", []string{"peer", "quantile"}, nil),
		quorum: prometheus.NewDesc("meridian_quorum_latency_seconds",
			"Per probe round, time until a majority (this server included) answered; quantiles over the window.", []string{"quantile"}, nil),
		all: prometheus.NewDesc("meridian_all_peers_latency_seconds",
			"Per probe round, time until every peer answered; quantiles over the window.", []string{"quantile"}, nil),
		rttLost: prometheus.NewDesc("meridian_peer_probes_lost_total",
			"Probes to a peer that got no answer in time.", []string{"peer"}, nil),
		quorumLost: prometheus.NewDesc("meridian_quorum_rounds_lost_total",
			"Probe rounds in which no majority answered in time.", nil, nil),
	}
}

func (c *latencyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.rtt, c.quorum, c.all, c.rttLost, c.quorumLost} {
		ch <- d
	}
}

func (c *latencyCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.snap()
	quantiles := func(st latency.Stats, emit func(q string, v float64)) {
		if st.Count == 0 {
			return
		}
		for _, q := range []struct {
			name string
			v    time.Duration
		}{{"0.5", st.P50}, {"0.9", st.P90}, {"0.99", st.P99}, {"0.999", st.P999}, {"1", st.Max}} {
			emit(q.name, q.v.Seconds())
		}
	}
	for _, p := range s.Peers {
		peer := strconv.FormatUint(p.Peer, 10)
		quantiles(p.Window, func(q string, v float64) {
			ch <- prometheus.MustNewConstMetric(c.rtt, prometheus.GaugeValue, v, peer, q)
		})
		ch <- prometheus.MustNewConstMetric(c.rttLost, prometheus.CounterValue, float64(p.Lost), peer)
	}
	quantiles(s.Quorum.Window, func(q string, v float64) {
		ch <- prometheus.MustNewConstMetric(c.quorum, prometheus.GaugeValue, v, q)
	})
	quantiles(s.All.Window, func(q string, v float64) {
		ch <- prometheus.MustNewConstMetric(c.all, prometheus.GaugeValue, v, q)
	})
	ch <- prometheus.MustNewConstMetric(c.quorumLost, prometheus.CounterValue, float64(s.Quorum.Lost))
}
