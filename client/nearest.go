package client

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/errs"
)

// Nearest server first. Unless Config.KeepEndpointOrder is set, the client
// measures the round trip to every endpoint when it starts and every
// RemeasureInterval after, and tries endpoints nearest first: the session
// lives on the nearest server, and failover goes to the next nearest.
// Sequential reads can be hedged across the two nearest (WithHedge).

const (
	// RemeasureInterval is how often endpoint round trips are measured again.
	RemeasureInterval = 30 * time.Second
	measureSamples    = 3 // the smallest of these is the endpoint's RTT
)

// unreachable sorts endpoints that did not answer after every other.
const unreachable = time.Duration(math.MaxInt64)

// measureEndpoints returns each endpoint's round trip (the least of a few
// Status calls), unreachable for those that did not answer within timeout,
// and the member id each one's Status named (0: none answered).
func measureEndpoints(ctx context.Context, cfg Config) ([]time.Duration, []uint64) {
	endpoints, timeout := cfg.Endpoints, cfg.DialTimeout
	out := make([]time.Duration, len(endpoints))
	ids := make([]uint64, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = unreachable
			conn := Dial(cfg, ep)
			defer conn.Close()
			api := pb.NewMeridianClient(conn)
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			for s := 0; s < measureSamples+1; s++ {
				start := time.Now()
				// The first call also opens the connection: not a sample.
				// Fail fast: a refused endpoint must not hold up the rest.
				st, err := api.Status(ctx, &pb.StatusRequest{})
				if err != nil {
					return
				}
				ids[i] = st.GetMemberId()
				if s > 0 {
					out[i] = min(out[i], time.Since(start))
				}
			}
		}()
	}
	wg.Wait()
	return out, ids
}

// orderByRTT returns endpoint indexes, nearest first (ties keep the given order).
func orderByRTT(rtt []time.Duration) []int {
	order := make([]int, len(rtt))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case rtt[a] < rtt[b]:
			return -1
		case rtt[a] > rtt[b]:
			return 1
		}
		return 0
	})
	return order
}

// remeasure refreshes the order for later failovers; it does not move a
// healthy session (a move costs a re-attach and watch re-registration).
func (c *Client) remeasure() {
	defer c.wg.Done()
	t := time.NewTicker(RemeasureInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		rtt, _ := measureEndpoints(c.life, c.cfg)
		c.setOrder(rtt)
	}
}

// setOrder installs a new nearest-first order, keeping the current
// endpoint's position pointing at the same endpoint.
func (c *Client) setOrder(rtt []time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := -1
	if c.mu.endpoint >= 0 {
		cur = c.mu.order[c.mu.endpoint]
	}
	c.mu.rtt = rtt
	c.mu.order = orderByRTT(rtt)
	if cur >= 0 {
		c.mu.endpoint = slices.Index(c.mu.order, cur)
	}
}

// EndpointRTTs returns the last measured round trip to each endpoint
// (absent: not measured, or unreachable).
func (c *Client) EndpointRTTs() map[string]time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]time.Duration{}
	for i, d := range c.mu.rtt {
		if d != unreachable {
			out[c.cfg.Endpoints[i]] = d
		}
	}
	return out
}

// hedgeAPI returns a connection to the nearest endpoint other than the
// current one, dialling it on first use.
func (c *Client) hedgeAPI() pb.MeridianClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.mu.order) < 2 || c.mu.endpoint < 0 {
		return nil
	}
	target := c.mu.order[0]
	if c.mu.endpoint == 0 {
		target = c.mu.order[1]
	}
	if c.mu.hedge != nil && c.mu.hedgeTo == target {
		return c.mu.hedgeAPI
	}
	if c.mu.hedge != nil {
		c.mu.hedge.Close()
		c.mu.hedge, c.mu.hedgeAPI = nil, nil
	}
	conn := c.dial(c.cfg.Endpoints[target])
	c.mu.hedge, c.mu.hedgeAPI, c.mu.hedgeTo = conn, c.newAPI(conn), target
	return c.mu.hedgeAPI
}

// hedgedRead runs a read through the session's server and, when rc asks
// for it and it is safe, at the same time on the nearest other server; the
// first answer wins and the other is cancelled. Asking several servers and
// taking the first answer keeps a read's tail close to its average ("Tail
// Latency in ZooKeeper and a Simple Reimplementation", Michael Graczyk).
//
// Only sequential reads without a watch are hedged, and only while the
// client has no watches: the other server cannot order its answer after
// this session's notifications. Both servers wait until they have applied
// everything the client has seen (min_zxid), so either answer is valid.
func hedgedRead[T any](c *Client, ctx context.Context, rc *readConfig, rpc func(context.Context, pb.MeridianClient, int64) (T, *pb.Header, error)) (T, error) {
	var zero T
	ctx, bound := c.bounded(ctx)
	defer bound.Stop()
	primary := func(ctx context.Context) (T, error) {
		var out T
		err := c.do(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
			r, h, err := rpc(ctx, api, sid)
			if err == nil {
				out = r
			}
			return h, err
		})
		return out, err
	}
	var other pb.MeridianClient
	if rc.hedge && rc.req.GetConsistency() == pb.Consistency_SEQUENTIAL && !rc.req.GetWatch() && c.watches.empty() {
		other = c.hedgeAPI()
	}
	if other == nil {
		return primary(ctx)
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	type result struct {
		v   T
		err error
	}
	results := make(chan result, 2)
	go func() {
		v, err := primary(ctx)
		results <- result{v, err}
	}()
	go func() {
		v, h, err := rpc(ctx, other, 0)
		if err == nil {
			c.mu.Lock()
			c.observe(h)
			c.mu.Unlock()
		}
		results <- result{v, errs.FromGRPC(err)}
	}()
	first := <-results
	if first.err == nil {
		return first.v, nil
	}
	second := <-results
	if second.err == nil {
		return second.v, nil
	}
	return zero, first.err
}
