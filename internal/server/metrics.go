package server

import (
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/replica"
)

// metrics are declared here, in one place. Each server has its own registry
// so several servers can live in one process (tests, `meridian dev`).
//
// Request metrics are recorded in one place per port: the gRPC
// interceptors (core.go) and the ZooKeeper connection's completion of a
// request (zkConn.finish). Their op label comes from a fixed table (the
// native service's methods, ZooKeeper's opcodes); anything else is
// "unknown", so a client cannot add series.
type metrics struct {
	reg             *prometheus.Registry
	proposals       *prometheus.CounterVec
	applyDuration   prometheus.Histogram
	fsyncDuration   prometheus.Histogram
	proposalStage   *prometheus.HistogramVec
	leaderChanges   prometheus.Counter
	isLeader        prometheus.Gauge
	hasLeader       prometheus.Gauge
	leaderID        prometheus.Gauge
	term            prometheus.Gauge
	commitIndex     prometheus.Gauge
	appliedIndex    prometheus.Gauge
	snapshotIndex   prometheus.Gauge
	applyVersion    prometheus.Gauge
	clusterVersion  prometheus.Gauge
	sessions        prometheus.Gauge
	watches         prometheus.Gauge
	znodes          prometheus.Gauge
	keyspaces       prometheus.Gauge
	keyspaceLeader  *prometheus.GaugeVec
	requests        *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	buildInfo       *prometheus.GaugeVec
	readWaits       *prometheus.CounterVec

	// Children looked up once, on first use as WithLabelValues makes them:
	// WithLabelValues hashes its labels and takes the vector's lock on
	// every call, and a write passes through several of these on each of
	// the three members (its request, its proposal, its stages), thousands
	// of times a second. Keys come from fixed tables only (stage names,
	// named opcodes, proposal outcomes), so the caches stay small.
	stages    sync.Map // stageKey → prometheus.Observer
	zkOps     sync.Map // int32 opcode → *opMetrics, named opcodes only
	nativeOps sync.Map // method name → *opMetrics, grpcOps only
	proposalC sync.Map // result → prometheus.Counter

	collectors []prometheus.Collector // every one registered (register)
}

type stageKey struct {
	stage string
	root  bool
}

// opMetrics are one ZooKeeper opcode's or native method's children: its
// method label, its "ok" count and its latency.
type opMetrics struct {
	method   string // zkMethod's label
	ok       prometheus.Counter
	duration prometheus.Observer
}

// zkOp returns opcode op's children; nil for an opcode without a name
// (zkMethod's "zk:unknown"), which is not cached: a client chooses the
// opcodes it sends, and the cache must not grow with them.
func (m *metrics) zkOp(op int32) *opMetrics {
	if v, ok := m.zkOps.Load(op); ok {
		return v.(*opMetrics)
	}
	method := zkMethod(op)
	if method == "zk:unknown" {
		return nil
	}
	z := &opMetrics{method: method, ok: m.requests.WithLabelValues(method, "ok"),
		duration: m.requestDuration.WithLabelValues(portZK, strings.TrimPrefix(method, "zk:"))}
	v, _ := m.zkOps.LoadOrStore(op, z)
	return v.(*opMetrics)
}

// countZK counts one ZooKeeper request with opcode op and outcome code in
// meridian_requests_total (method zkMethod(op)).
func (m *metrics) countZK(op int32, code string) {
	z := m.zkOp(op)
	switch {
	case z == nil:
		m.requests.WithLabelValues(zkMethod(op), code).Inc()
	case code == "ok":
		z.ok.Inc()
	default:
		m.requests.WithLabelValues(z.method, code).Inc()
	}
}

// observeZK records the latency of a ZooKeeper request with opcode op.
func (m *metrics) observeZK(op int32, d time.Duration) {
	if z := m.zkOp(op); z != nil {
		z.duration.Observe(d.Seconds())
		return
	}
	m.observeRequest(portZK, strings.TrimPrefix(zkMethod(op), "zk:"), d)
}

// countProposal counts a proposal's outcome (applied, rejected, timeout,
// unknown).
func (m *metrics) countProposal(result string) {
	if c, ok := m.proposalC.Load(result); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c, _ := m.proposalC.LoadOrStore(result, m.proposals.WithLabelValues(result))
	c.(prometheus.Counter).Inc()
}

// Ports, the port label of meridian_request_duration_seconds.
const (
	portGRPC = "grpc"
	portZK   = "zk"
)

// requestBuckets cover 100 µs to about 13 s, doubling: a local read is a
// few hundred microseconds, a cross-region write tens to hundreds of
// milliseconds, and the request timeout (10 s by default) the end.
var requestBuckets = prometheus.ExponentialBuckets(100e-6, 2, 18)

// stageBuckets cover 25 µs to about 13 s, doubling: a proposal's stages
// range from a queue hop of microseconds to a wide-area commit.
var stageBuckets = prometheus.ExponentialBuckets(25e-6, 2, 20)

// Stages of meridian_proposal_stage_seconds the server measures; the
// replica measures replica.StageCommit and replica.StageApply.
const (
	stageQueue        = "queue"
	stageWaitLeader   = "wait_leader"
	stageWaitFollower = "wait_follower"
	stageWake         = "wake"
)

// observeStage records d in a group's stage.
func (m *metrics) observeStage(root bool, stage string, d time.Duration) {
	k := stageKey{stage, root}
	if o, ok := m.stages.Load(k); ok {
		o.(prometheus.Observer).Observe(d.Seconds())
		return
	}
	group := "keyspace"
	if root {
		group = "root"
	}
	o, _ := m.stages.LoadOrStore(k, m.proposalStage.WithLabelValues(stage, group))
	o.(prometheus.Observer).Observe(d.Seconds())
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
		proposalStage: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "meridian_proposal_stage_seconds",
			Help: "Where a write's time goes on this member, by stage (queue: request to raft's loop taking it; " +
				"wait_leader, wait_follower: taken to applied here, proposed on the group's leader or forwarded by a follower; " +
				"wake: applied to the request resuming; commit: an entry in this member's log to known committed; " +
				"apply: known committed to applied, including the disk write it waits behind) and group (root, keyspace).",
			Buckets: stageBuckets,
		}, []string{"stage", "group"}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_leader_changes_total", Help: "Leader changes seen."}),
		isLeader:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_is_leader", Help: "1 if this member leads."}),
		hasLeader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_has_leader",
			Help: "1 if this member knows a leader (it is then part of a quorum: see /readyz), else 0."}),
		leaderID: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_leader_id",
			Help: "Member id of the leader this member knows, 0 for none."}),
		term: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_raft_term", Help: "Current raft term."}),
		commitIndex: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_commit_index",
			Help: "Highest log index this member knows to be committed."}),
		appliedIndex: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_applied_index", Help: "Last applied log index (zxid)."}),
		snapshotIndex: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_snapshot_index",
			Help: "Log index of this member's latest snapshot; the log before it is compacted."}),
		applyVersion: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_apply_version",
			Help: "The entry formats this member's binary applies (its apply version)."}),
		clusterVersion: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_cluster_version",
			Help: "The cluster version the root's leader recorded: the lowest apply version over the members (0: none recorded yet)."}),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_sessions", Help: "Live sessions."}),
		watches:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_watches", Help: "Watch registrations on this member."}),
		znodes:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_znodes", Help: "Znodes in the tree."}),
		keyspaces: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_keyspaces",
			Help: "Regional keyspaces in the table (each its own raft group on every member)."}),
		keyspaceLeader: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meridian_keyspace_leader_id",
			Help: "The leader of each regional keyspace's group as this member sees it (0: none known, or not running here)."}, []string{"keyspace"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_requests_total", Help: "Client requests by method (the native RPC, or zk:<opname> on the ZooKeeper port) and outcome code.",
		}, []string{"method", "code"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "meridian_request_duration_seconds",
			Help: "Time from reading a client request to queueing its reply, by port (grpc, zk) and op (the native method, " +
				"or the ZooKeeper opcode's name; unknown for anything else). Native streams are not observed.",
			Buckets: requestBuckets,
		}, []string{"port", "op"}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meridian_build_info",
			Help: "Always 1; the labels name this binary's version, the Go release that built it and the ZooKeeper protocol version served."},
			[]string{"version", "go_version", "zookeeper_version"}),
		readWaits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_read_waits_total",
			Help: "Reads (and writes carrying what their client saw) that waited before this member could serve them: " +
				"apply (for an index this member had not applied yet, local) or read_index (a round trip to the group's leader)."},
			[]string{"kind"}),
	}
	m.readWaits.WithLabelValues("apply")
	m.readWaits.WithLabelValues("read_index")
	m.buildInfo.WithLabelValues(Version, runtime.Version(), ZooKeeperVersion).Set(1)
	m.register(m.proposals, m.applyDuration, m.fsyncDuration, m.proposalStage, m.leaderChanges, m.isLeader, m.hasLeader,
		m.leaderID, m.term, m.commitIndex, m.appliedIndex, m.snapshotIndex, m.applyVersion, m.clusterVersion, m.sessions, m.watches, m.znodes, m.keyspaces, m.keyspaceLeader,
		m.requests, m.requestDuration, m.buildInfo, m.readWaits,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// register adds cs to the registry, remembering them so a test can list
// every metric name the server may export (contrib's dashboards and alerts
// use only those).
func (m *metrics) register(cs ...prometheus.Collector) {
	m.reg.MustRegister(cs...)
	m.collectors = append(m.collectors, cs...)
}

// grpcOps is the op label's table for the native port: the methods of
// the Meridian service.
var grpcOps = func() map[string]bool {
	ops := map[string]bool{}
	for _, md := range pb.Meridian_ServiceDesc.Methods {
		ops[md.MethodName] = true
	}
	for _, sd := range pb.Meridian_ServiceDesc.Streams {
		ops[sd.StreamName] = true
	}
	return ops
}()

// nativeOp returns the children of the native method named name (the
// last element of its full name); nil for a name outside grpcOps, which
// is not cached.
func (m *metrics) nativeOp(name string) *opMetrics {
	if v, ok := m.nativeOps.Load(name); ok {
		return v.(*opMetrics)
	}
	if !grpcOps[name] {
		return nil
	}
	o := &opMetrics{method: name, ok: m.requests.WithLabelValues(name, "ok"),
		duration: m.requestDuration.WithLabelValues(portGRPC, name)}
	v, _ := m.nativeOps.LoadOrStore(name, o)
	return v.(*opMetrics)
}

// countNative counts one native call of the method named name with
// outcome code in meridian_requests_total.
func (m *metrics) countNative(name, code string) {
	if o := m.nativeOp(name); o != nil && code == "ok" {
		o.ok.Inc()
		return
	}
	m.requests.WithLabelValues(name, code).Inc()
}

// observeNative records the latency of a native call of fullMethod (op
// "unknown" outside the service, as grpcOp).
func (m *metrics) observeNative(fullMethod string, d time.Duration) {
	if o := m.nativeOp(methodName(fullMethod)); o != nil {
		o.duration.Observe(d.Seconds())
		return
	}
	m.observeRequest(portGRPC, grpcOp(fullMethod), d)
}

// observeRequest records one request's latency. op must come from a fixed
// table (grpcOps, zkMethod's opcodes).
func (m *metrics) observeRequest(port, op string, d time.Duration) {
	m.requestDuration.WithLabelValues(port, op).Observe(d.Seconds())
}

// grpcOp is the op label of a native method (its last path element, as
// meridian_requests_total's method), "unknown" outside the service.
func grpcOp(fullMethod string) string {
	if op := methodName(fullMethod); grpcOps[op] {
		return op
	}
	return "unknown"
}

// setRaftGauges sets the gauges that follow the replica's status.
func (m *metrics) setRaftGauges(st replica.Status) {
	hasLeader := 0.0
	if st.Leader != 0 {
		hasLeader = 1
	}
	m.hasLeader.Set(hasLeader)
	m.leaderID.Set(float64(st.Leader))
	m.term.Set(float64(st.Term))
	m.commitIndex.Set(float64(st.Commit))
	m.appliedIndex.Set(float64(st.Applied))
	m.snapshotIndex.Set(float64(st.SnapshotIndex))
}
