package server

import (
	"errors"
	"testing"

	gozk "github.com/go-zookeeper/zk"
	dto "github.com/prometheus/client_model/go"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/errs"
)

// TestZKRequestsCounted: requests on the ZooKeeper port are counted in
// meridian_requests_total as zk:<opname>, with the code label the native
// API gives the same outcome (a duplicate create is counted with the same
// code on both ports).
func TestZKRequestsCounted(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	tc.leader()
	s := tc.servers[0]
	count := func(method string, err error) float64 {
		var m dto.Metric
		s.metrics.requests.WithLabelValues(method, codeLabel(err)).Write(&m)
		return m.GetCounter().GetValue()
	}
	type key struct {
		method string
		err    error
	}
	want := map[key]float64{
		{"zk:connect", nil}:                 1,
		{"zk:create", nil}:                  1,
		{"zk:create", errs.ErrNodeExists}:   1,
		{"zk:getData", nil}:                 1,
		{"zk:getData", errs.ErrNoNode}:      1,
		{"zk:setData", errs.ErrBadVersion}:  1,
		{"zk:exists", nil}:                  1,
		{"zk:multi", errs.ErrBadVersion}:    1,
		{"zk:delete", nil}:                  1,
		{"Create", errs.ErrNodeExists}:      1,
		{"zk:setData", nil}:                 0,
		{"zk:create", errs.ErrBadArguments}: 0,
	}
	before := map[key]float64{}
	for k := range want {
		before[k] = count(k.method, k.err)
	}

	zc, _ := zkConnect(t, tc.zkAddrs())
	acl := gozk.WorldACL(gozk.PermAll)
	if _, err := zc.Create("/m", []byte("v"), 0, acl); err != nil {
		t.Fatal(err)
	}
	if _, err := zc.Create("/m", nil, 0, acl); !errors.Is(err, gozk.ErrNodeExists) {
		t.Fatalf("duplicate create: %v", err)
	}
	if _, _, err := zc.Get("/m"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := zc.Get("/missing"); !errors.Is(err, gozk.ErrNoNode) {
		t.Fatalf("get of a missing node: %v", err)
	}
	if _, err := zc.Set("/m", nil, 7); !errors.Is(err, gozk.ErrBadVersion) {
		t.Fatalf("stale set: %v", err)
	}
	if ok, _, err := zc.Exists("/m"); err != nil || !ok {
		t.Fatalf("exists: %v %v", ok, err)
	}
	if _, err := zc.Multi(&gozk.CheckVersionRequest{Path: "/m", Version: 7}, &gozk.DeleteRequest{Path: "/m", Version: -1}); err == nil {
		t.Fatal("multi with a failing check succeeded")
	}
	if err := zc.Delete("/m", -1); err != nil {
		t.Fatal(err)
	}
	// The same outcome on the native port, for the code label.
	c := tc.client()
	if _, _, err := c.Create(ctx(t), "/n", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Create(ctx(t), "/n", nil, client.CreateOptions{}); !errors.Is(err, client.ErrNodeExists) {
		t.Fatalf("native duplicate create: %v", err)
	}

	for k, n := range want {
		if got := count(k.method, k.err) - before[k]; got != n {
			t.Errorf("meridian_requests_total{method=%q,code=%q} moved by %v, want %v", k.method, codeLabel(k.err), got, n)
		}
	}
}
