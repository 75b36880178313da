package server

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/meridian-coord/meridian/client"
)

// scrape fetches and parses one server's /metrics.
func scrape(t *testing.T, tc *testCluster, url string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := tc.httpGet(url, false)
	if code != 200 {
		t.Fatalf("%s: %d", url, code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return mfs
}

// gaugeValue is the value of the unlabelled gauge name, failing when absent.
func gaugeValue(t *testing.T, mfs map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	mf := mfs[name]
	if mf == nil || len(mf.GetMetric()) != 1 {
		t.Fatalf("/metrics lacks %s", name)
	}
	return mf.GetMetric()[0].GetGauge().GetValue()
}

// histogramCount is the sample count of histogram name's series whose
// labels include want; -1 when there is none.
func histogramCount(mfs map[string]*dto.MetricFamily, name string, want map[string]string) int64 {
	for _, m := range mfs[name].GetMetric() {
		match := 0
		for _, lp := range m.GetLabel() {
			if v, ok := want[lp.GetName()]; ok && v == lp.GetValue() {
				match++
			}
		}
		if match == len(want) {
			return int64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}

// TestMetricsRequestLatencyAndRaftGauges: after requests on both client
// ports, every member's /metrics has the request latency histogram per
// port and op, both ports' requests in meridian_requests_total, and raft
// gauges that agree: every member has a leader, all name the same one,
// applied ≤ commit, and the leader reports round trips to both peers.
func TestMetricsRequestLatencyAndRaftGauges(t *testing.T) {
	ports := freePorts(t, 3)
	tc := newTestCluster(t, 3, func(c *Config) { c.ListenHTTP = fmt.Sprintf("127.0.0.1:%d", ports[c.ID-1]) })
	lead := tc.leader()
	c := tc.client(tc.endpoints()[lead])
	if _, _, err := c.Create(ctx(t), "/metrics-native", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Get(ctx(t), "/metrics-native"); err != nil {
		t.Fatal(err)
	}
	zc, _ := zkConnect(t, []string{tc.cfgs[lead].Self().ZK})
	defer zc.Close()
	if _, err := zc.Create("/metrics-zk", []byte("v"), 0, gozk.WorldACL(gozk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := zc.Get("/metrics-zk"); err != nil {
		t.Fatal(err)
	}
	url := func(i int) string { return fmt.Sprintf("https://127.0.0.1:%d/metrics", ports[i]) }

	mfs := scrape(t, tc, url(lead))
	for _, want := range []map[string]string{
		{"port": "grpc", "op": "Create"}, {"port": "grpc", "op": "GetData"},
		{"port": "zk", "op": "create"}, {"port": "zk", "op": "getData"},
	} {
		if n := histogramCount(mfs, "meridian_request_duration_seconds", want); n < 1 {
			t.Errorf("meridian_request_duration_seconds%v: count %d, want ≥ 1", want, n)
		}
	}
	if mf := mfs["meridian_request_duration_seconds"]; mf != nil {
		if b := mf.GetMetric()[0].GetHistogram().GetBucket(); len(b) == 0 || b[0].GetUpperBound() > 1e-3 || b[len(b)-1].GetUpperBound() < 10 {
			t.Errorf("request buckets %v..%v, want from ≤ 1 ms to ≥ 10 s", b[0].GetUpperBound(), b[len(b)-1].GetUpperBound())
		}
	}
	counted := map[string]bool{}
	for _, m := range mfs["meridian_requests_total"].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "method" {
				counted[lp.GetValue()] = true
			}
		}
	}
	for _, method := range []string{"Create", "zk:create", "zk:getData"} {
		if !counted[method] {
			t.Errorf("meridian_requests_total has no method=%q", method)
		}
	}
	build := mfs["meridian_build_info"].GetMetric()
	if len(build) != 1 || build[0].GetGauge().GetValue() != 1 {
		t.Fatalf("meridian_build_info: %v", build)
	}
	labels := map[string]string{}
	for _, lp := range build[0].GetLabel() {
		labels[lp.GetName()] = lp.GetValue()
	}
	if labels["version"] != Version || labels["go_version"] != runtime.Version() || labels["zookeeper_version"] != ZooKeeperVersion {
		t.Errorf("meridian_build_info labels %v", labels)
	}

	// The raft gauges follow the replica on the server's tick: wait until
	// every member reports a leader, then check they agree.
	deadline := time.Now().Add(10 * time.Second)
	for i := range tc.servers {
		for gaugeValue(t, scrape(t, tc, url(i)), "meridian_has_leader") != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("member %d: meridian_has_leader stays 0", i+1)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Peer round trips come from the latency probes' window: wait until
	// the leader has p50 and p99 for both peers.
	for {
		rtt := map[string]bool{}
		for _, m := range scrape(t, tc, url(lead))["meridian_peer_rtt_seconds"].GetMetric() {
			var peer, q string
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "peer":
					peer = lp.GetValue()
				case "quantile":
					q = lp.GetValue()
				}
			}
			if (q == "0.5" || q == "0.99") && m.GetGauge().GetValue() > 0 {
				rtt[peer+"/"+q] = true
			}
		}
		if len(rtt) == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leader's meridian_peer_rtt_seconds: %v, want p50 and p99 for 2 peers", rtt)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range tc.servers {
		mfs := scrape(t, tc, url(i))
		if id := gaugeValue(t, mfs, "meridian_leader_id"); id != float64(lead+1) {
			t.Errorf("member %d: meridian_leader_id %v, want %d", i+1, id, lead+1)
		}
		applied, commit := gaugeValue(t, mfs, "meridian_applied_index"), gaugeValue(t, mfs, "meridian_commit_index")
		if applied < 1 || applied > commit {
			t.Errorf("member %d: applied %v, commit %v: want 1 ≤ applied ≤ commit", i+1, applied, commit)
		}
		if term := gaugeValue(t, mfs, "meridian_raft_term"); term < 1 {
			t.Errorf("member %d: term %v", i+1, term)
		}
		if snap := gaugeValue(t, mfs, "meridian_snapshot_index"); snap > applied {
			t.Errorf("member %d: snapshot index %v beyond applied %v", i+1, snap, applied)
		}
		want := 0.0
		if i == lead {
			want = 1
		}
		if v := gaugeValue(t, mfs, "meridian_is_leader"); v != want {
			t.Errorf("member %d: meridian_is_leader %v, want %v", i+1, v, want)
		}
	}
}

// TestRequestOpLabelsBounded: an op outside the fixed tables is labelled
// unknown on either port.
func TestRequestOpLabelsBounded(t *testing.T) {
	if got := grpcOp("/meridian.v1.Meridian/Create"); got != "Create" {
		t.Errorf("grpcOp(Create) = %q", got)
	}
	if got := grpcOp("/other.Service/Anything"); got != "unknown" {
		t.Errorf("grpcOp(other) = %q, want unknown", got)
	}
	if got := zkMethod(requestOpcode([]byte{0, 0, 0, 1, 0, 0, 0x7f, 0})); got != "zk:unknown" {
		t.Errorf("unknown opcode labelled %q", got)
	}
	if got := zkMethod(requestOpcode([]byte{0, 0, 0, 1})); got != "zk:unknown" {
		t.Errorf("short packet labelled %q", got)
	}
	if got := zkMethod(requestOpcode([]byte{0, 0, 0, 1, 0, 0, 0, 4})); got != "zk:getData" {
		t.Errorf("opcode 4 labelled %q, want zk:getData", got)
	}
}
