package bench

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/meridian-coord/meridian/client"
)

// Far-region reads (the placement proof): a client in a region with no voter
// reads through the nearest voter, through a learner (non-voting replica)
// in its own region, and hedged across the two nearest voters.

// GeoReadParams sizes the workload.
type GeoReadParams struct {
	Reads int // per series
}

// FarRegion returns the client region farthest from its nearest server,
// among those with no server ("" when every client region has one).
func FarRegion(t *Topology) string {
	far, worst := "", time.Duration(0)
	for _, r := range clientRegions(t) {
		d := t.RTT(r, t.Servers[t.NearestServer(r)])
		hasServer := false
		for _, s := range t.Servers {
			hasServer = hasServer || s == r
		}
		if !hasServer && d > worst {
			far, worst = r, d
		}
	}
	return far
}

// RunGeoRead starts Meridian with a learner in the far region (its own
// cluster, so the other workloads' clusters are unchanged) and measures a
// far client's reads of one key.
func RunGeoRead(e *Env, bin string, p GeoReadParams, progress func(string)) ([]Result, error) {
	t := e.Topo
	far := FarRegion(t)
	if far == "" {
		return nil, nil
	}
	c, err := StartMeridianWith(e, bin, MeridianOptions{LearnerRegion: far})
	if err != nil {
		return nil, err
	}
	// The voters by round trip from the far region.
	order := []int{0, 1, 2}
	sort.SliceStable(order, func(i, j int) bool { return t.RTT(far, t.Servers[order[i]]) < t.RTT(far, t.Servers[order[j]]) })
	near, second := order[0], order[1]
	eps := c.Native[far]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := client.New(ctx, client.Config{Endpoints: []string{eps[near]}, KeepEndpointOrder: true, SessionTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	const key = "/georead"
	if _, _, err := w.Create(ctx, key, make([]byte, 100), client.CreateOptions{}); err != nil {
		w.Close()
		return nil, err
	}
	w.Close()
	// The learner applies the write a one-way delay later.
	lc, err := client.New(ctx, client.Config{Endpoints: []string{eps[3]}, KeepEndpointOrder: true, SessionTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	for {
		if _, _, err := lc.Get(ctx, key, client.WithConsistency(client.Sequential)); err == nil {
			break
		} else if ctx.Err() != nil {
			lc.Close()
			return nil, fmt.Errorf("the learner in %s never saw %s: %w", far, key, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	lc.Close()
	type series struct {
		name  string
		eps   []string
		cons  client.Consistency
		hedge bool
	}
	nearName := fmt.Sprintf("nearest voter (%s, %v)", t.Servers[near], t.RTT(far, t.Servers[near]))
	all := []series{
		{"sequential, " + nearName, []string{eps[near]}, client.Sequential, false},
		{"sequential, learner in " + far, []string{eps[3]}, client.Sequential, false},
		{fmt.Sprintf("sequential hedged, %s + %s", t.Servers[near], t.Servers[second]), []string{eps[near], eps[second]}, client.Sequential, true},
		{"linearizable, " + nearName, []string{eps[near]}, client.Linearizable, false},
		{"linearizable, learner in " + far, []string{eps[3]}, client.Linearizable, false},
	}
	var out []Result
	for _, s := range all {
		res := Result{Workload: "georead", Topology: t.Name, Flavor: s.name, Clients: 1, Hist: newHist(), Leader: leaderRegion(c, t)}
		nctx, ncancel := context.WithTimeout(context.Background(), 30*time.Second)
		cl, err := client.New(nctx, client.Config{Endpoints: s.eps, KeepEndpointOrder: true, SessionTimeout: 10 * time.Second,
			HedgeSequentialReads: s.hedge})
		ncancel()
		if err != nil {
			res.Errors++
		} else {
			for i := 0; i < p.Reads; i++ {
				rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
				start := time.Now()
				_, _, err := cl.Get(rctx, key, client.WithConsistency(s.cons))
				el := time.Since(start)
				rcancel()
				if err != nil {
					res.Errors++
					continue
				}
				res.Hist.RecordValue(el.Microseconds())
			}
			cl.Close()
		}
		res.Summary = summarize(res.Hist)
		progress(fmt.Sprintf("georead %s %s: avg %.1f ms p99 %.1f ms (%d errors)", t.Name, s.name, res.Summary.Avg, res.Summary.P99, res.Errors))
		out = append(out, res)
	}
	return out, nil
}
