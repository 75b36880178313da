// Package bench is Meridian's side-by-side benchmark suite: it starts real
// 3-server clusters of Meridian, ZooKeeper 3.8, etcd 3.4 and a Redis
// server on one machine, puts an emulated wide-area link (internal/netem)
// on every client→server and server→server path as a topology file says,
// runs the source documents' workloads against each system with the same
// client harness, and writes the figures (Markdown, JSON, PNG plots).
//
// It is a separate Go module so the peers' client libraries (go-zookeeper's
// recipes, etcd's clientv3, go-redis, gonum/plot) stay out of the server's
// dependency graph.
package bench

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"time"

	"gopkg.in/yaml.v3"
)

// Topology places 3 servers and the clients in regions and gives the
// round trip between every pair of regions.
type Topology struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	// RTTms[a][b] is the round trip between regions a and b in ms (either
	// order may be given).
	RTTms map[string]map[string]float64 `yaml:"rtt_ms"`
	// SameRegionRTTms is the round trip between two hosts of one region.
	SameRegionRTTms float64 `yaml:"same_region_rtt_ms"`
	// JitterPct: each direction's delay varies with a normal distribution
	// whose standard deviation is this percentage of the one-way delay.
	JitterPct float64  `yaml:"jitter_pct"`
	Servers   []string `yaml:"servers"` // region of each of the 3 servers
	Clients   []string `yaml:"clients"` // regions clients run in, round-robin
}

// LoadTopology reads and checks a topology file.
func LoadTopology(path string) (*Topology, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var t Topology
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := t.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &t, nil
}

func (t *Topology) check() error {
	if t.Name == "" {
		return fmt.Errorf("no name")
	}
	if len(t.Servers) != 3 {
		return fmt.Errorf("want 3 servers, have %d", len(t.Servers))
	}
	if len(t.Clients) == 0 {
		return fmt.Errorf("no client regions")
	}
	if t.JitterPct < 0 || t.JitterPct > 100 {
		return fmt.Errorf("jitter_pct %v out of [0,100]", t.JitterPct)
	}
	for _, a := range append(slices.Clone(t.Servers), t.Clients...) {
		for _, b := range append(slices.Clone(t.Servers), t.Clients...) {
			if _, ok := t.rtt(a, b); !ok {
				return fmt.Errorf("no round trip between %s and %s", a, b)
			}
		}
	}
	return nil
}

func (t *Topology) rtt(a, b string) (float64, bool) {
	if a == b {
		return t.SameRegionRTTms, true
	}
	if v, ok := t.RTTms[a][b]; ok {
		return v, true
	}
	v, ok := t.RTTms[b][a]
	return v, ok
}

// RTT returns the configured round trip between two regions.
func (t *Topology) RTT(a, b string) time.Duration {
	v, _ := t.rtt(a, b)
	return time.Duration(v * float64(time.Millisecond))
}

// ClientRegion returns the region of client i.
func (t *Topology) ClientRegion(i int) string { return t.Clients[i%len(t.Clients)] }

// NearestServer returns the server a client in region r talks to: the
// first with the smallest round trip (as a ZooKeeper client given its
// local server first would).
func (t *Topology) NearestServer(r string) int {
	best := 0
	for i, s := range t.Servers {
		if t.RTT(r, s) < t.RTT(r, t.Servers[best]) {
			best = i
		}
	}
	return best
}

// UniformServers reports whether every pair of servers has the same round trip.
func (t *Topology) UniformServers() bool {
	d := t.RTT(t.Servers[0], t.Servers[1])
	return t.RTT(t.Servers[0], t.Servers[2]) == d && t.RTT(t.Servers[1], t.Servers[2]) == d
}
