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
	"strconv"
	"strings"
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
	JitterPct float64 `yaml:"jitter_pct"`
	// Servers: the region of each server, or "region/zone" to name its
	// availability zone too (then every server names one). Three servers
	// for every system; Meridian alone runs more (the keyspaces workload).
	Servers []string `yaml:"servers"`
	Clients []string `yaml:"clients"` // regions clients run in, round-robin
	// ZoneRTTms is the round trip between two zones of one region; with
	// zones named, SameRegionRTTms is the round trip within one zone. A
	// client sits in the zone of the first server of its region.
	ZoneRTTms float64 `yaml:"zone_rtt_ms"`
	// Zones is each server's zone, split off Servers when the file names
	// them ("" each where it does not).
	Zones []string `yaml:"-"`
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
	if err := t.splitZones(); err != nil {
		return err
	}
	if len(t.Servers) < 3 {
		return fmt.Errorf("want at least 3 servers, have %d", len(t.Servers))
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

// splitZones splits "region/zone" server entries into Servers and Zones.
// Either every server names its zone or none does; a zone is named once.
func (t *Topology) splitZones() error {
	if len(t.Zones) == len(t.Servers) && len(t.Zones) > 0 {
		return nil // already split
	}
	t.Zones = make([]string, len(t.Servers))
	named, seen := 0, map[string]bool{}
	for i, s := range t.Servers {
		region, zone, ok := strings.Cut(s, "/")
		if !ok {
			continue
		}
		if region == "" || zone == "" || strings.Contains(zone, "/") {
			return fmt.Errorf("server %q: want region or region/zone", s)
		}
		if seen[s] {
			return fmt.Errorf("server %q: zone named twice", s)
		}
		seen[s] = true
		named++
		t.Servers[i], t.Zones[i] = region, zone
	}
	if named != 0 && named != len(t.Servers) {
		return fmt.Errorf("%d of %d servers name a zone: name one for every server or none", named, len(t.Servers))
	}
	if named == 0 && t.ZoneRTTms != 0 {
		return fmt.Errorf("zone_rtt_ms without zones (servers as region/zone)")
	}
	if named > 0 && t.ZoneRTTms <= 0 {
		return fmt.Errorf("servers name zones: zone_rtt_ms is required")
	}
	return nil
}

// HasZones reports whether the servers name their zones.
func (t *Topology) HasZones() bool { return len(t.Zones) > 0 && t.Zones[0] != "" }

// ServerRTT is the round trip between servers i and j: across regions the
// regions' round trip; within a region, the zones' when both are named
// and differ.
func (t *Topology) ServerRTT(i, j int) time.Duration {
	if t.HasZones() && t.Servers[i] == t.Servers[j] && t.Zones[i] != t.Zones[j] {
		return time.Duration(t.ZoneRTTms * float64(time.Millisecond))
	}
	return t.RTT(t.Servers[i], t.Servers[j])
}

// ClientServerRTT is the round trip from a client in region r to server
// i: the client sits in the zone of its region's first server.
func (t *Topology) ClientServerRTT(r string, i int) time.Duration {
	if t.HasZones() && t.Servers[i] == r {
		if home := slices.Index(t.Servers, r); t.Zones[home] != t.Zones[i] {
			return time.Duration(t.ZoneRTTms * float64(time.Millisecond))
		}
	}
	return t.RTT(r, t.Servers[i])
}

// RegionServers returns the indexes of the servers in region r.
func (t *Topology) RegionServers(r string) []int {
	var out []int
	for i, s := range t.Servers {
		if s == r {
			out = append(out, i)
		}
	}
	return out
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

// MeridianStartLeader is the server (0-based) a run moves Meridian's
// leader to before its workloads, from the --meridian-leader flag, or -1
// to leave it where it is. "" (the default): on a topology whose servers
// all sit in one region, the last one, where ZooKeeper's election puts
// its own leader there (the highest id among equal logs), so that both
// systems are measured with the same server leading and a run's figures
// do not hang on which server won an election; elsewhere placement
// chooses. "election": where the election put it. "N": server N.
func (t *Topology) MeridianStartLeader(flag string) (int, error) {
	switch flag {
	case "election":
		return -1, nil
	case "":
		if len(t.RegionServers(t.Servers[0])) < len(t.Servers) {
			return -1, nil
		}
		return len(t.Servers) - 1, nil
	}
	n, err := strconv.Atoi(flag)
	if err != nil || n < 1 || n > len(t.Servers) {
		return 0, fmt.Errorf("--meridian-leader %q: not election or a server number from 1 to %d", flag, len(t.Servers))
	}
	return n - 1, nil
}
