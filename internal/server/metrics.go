package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are declared here, in one place. Each server has its own registry
// so several servers can live in one process (tests, `meridian dev`).
type metrics struct {
	reg           *prometheus.Registry
	proposals     *prometheus.CounterVec
	applyDuration prometheus.Histogram
	fsyncDuration prometheus.Histogram
	leaderChanges prometheus.Counter
	isLeader      prometheus.Gauge
	term          prometheus.Gauge
	appliedIndex  prometheus.Gauge
	sessions      prometheus.Gauge
	watches       prometheus.Gauge
	znodes        prometheus.Gauge
	requests      *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		proposals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_proposals_total", Help: "Proposals by outcome (applied, rejected, timeout).",
		}, []string{"result"}),
		applyDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meridian_apply_duration_seconds", Help: "Time to apply one log entry to the tree.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12),
		}),
		fsyncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meridian_raft_fsync_duration_seconds", Help: "Time to persist one raft Ready (one synced Pebble batch).",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_leader_changes_total", Help: "Leader changes seen."}),
		isLeader:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_is_leader", Help: "1 if this member leads."}),
		term:          prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_raft_term", Help: "Current raft term."}),
		appliedIndex:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_applied_index", Help: "Last applied log index (zxid)."}),
		sessions:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_sessions", Help: "Live sessions."}),
		watches:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_watches", Help: "Watch registrations on this member."}),
		znodes:        prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_znodes", Help: "Znodes in the tree."}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_requests_total", Help: "Client requests by method (the native RPC, or zk:<opname> on the ZooKeeper port) and outcome code.",
		}, []string{"method", "code"}),
	}
	m.reg.MustRegister(m.proposals, m.applyDuration, m.fsyncDuration, m.leaderChanges, m.isLeader, m.term,
		m.appliedIndex, m.sessions, m.watches, m.znodes, m.requests,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
