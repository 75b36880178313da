package placement

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// nine: three regions (the round trips of "Tail Latency in ZooKeeper and a
// Simple Reimplementation"'s three datacenters: CA, OR, VA) with three
// zones each; ids 1-3 in CA, 4-6 in OR, 7-9 in VA.
func nine() []Member {
	var ms []Member
	id := uint64(1)
	for _, r := range []string{"ca", "or", "va"} {
		for _, z := range []string{"a", "b", "c"} {
			ms = append(ms, Member{ID: id, Region: r, Zone: z})
			id++
		}
	}
	return ms
}

func wan(from, to string) (time.Duration, bool) {
	rtt := map[string]time.Duration{"ca-or": 21, "ca-va": 62, "or-va": 67}
	if from > to {
		from, to = to, from
	}
	d, ok := rtt[from+"-"+to]
	return d * time.Millisecond, ok
}

func TestKeyspacePlacement(t *testing.T) {
	cases := []struct {
		name     string
		members  []Member
		home     string
		survive  Survival
		distance func(string, string) (time.Duration, bool)
		voters   []uint64
		err      string
	}{
		{name: "zone survival: three zones of the home region", members: nine(), home: "or", survive: SurviveZone, voters: []uint64{4, 5, 6}},
		{name: "zone survival: one member per zone, lowest id", home: "ca", survive: SurviveZone, voters: []uint64{1, 3, 4},
			members: []Member{{1, "ca", "a"}, {2, "ca", "a"}, {3, "ca", "b"}, {4, "ca", "c"}, {5, "ca", "c"}, {6, "or", "a"}}},
		{name: "zone survival: two zones only", home: "ca", survive: SurviveZone, err: `needs members in 3 zones of region "ca"; it has 2 ([a b])`,
			members: []Member{{1, "ca", "a"}, {2, "ca", "a"}, {3, "ca", "b"}, {6, "or", "a"}}},
		{name: "unknown home region", members: nine(), home: "eu", survive: SurviveZone, err: `no member is in region "eu" (regions: [ca or va])`},
		{name: "region survival: two at home, two in the nearest, one in the next", members: nine(), home: "ca", survive: SurviveRegion,
			distance: wan, voters: []uint64{1, 2, 4, 5, 7}},
		{name: "region survival from VA: OR is farther than CA", members: nine(), home: "va", survive: SurviveRegion,
			distance: wan, voters: []uint64{1, 2, 4, 7, 8}},
		{name: "region survival without distances: by name", members: nine(), home: "va", survive: SurviveRegion,
			voters: []uint64{1, 2, 4, 7, 8}},
		{name: "region survival: one member a region gives three voters", home: "ca", survive: SurviveRegion, distance: wan, voters: []uint64{1, 2, 3},
			members: []Member{{1, "ca", "a"}, {2, "or", "a"}, {3, "va", "a"}}},
		{name: "region survival: home with one zone", home: "ca", survive: SurviveRegion, distance: wan, voters: []uint64{1, 3, 5},
			members: []Member{{1, "ca", "a"}, {2, "ca", "a"}, {3, "or", "a"}, {4, "or", "b"}, {5, "va", "a"}, {6, "va", "b"}}},
		{name: "region survival: two regions", home: "ca", survive: SurviveRegion, err: "needs members in 3 regions; there are 2 ([ca or])",
			members: []Member{{1, "ca", "a"}, {2, "ca", "b"}, {3, "or", "a"}}},
		{name: "duplicate id", home: "ca", survive: SurviveZone, err: "listed twice", members: []Member{{1, "ca", "a"}, {1, "ca", "b"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			voters, learners, err := Keyspace(tc.members, tc.home, tc.survive, tc.distance)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(voters, tc.voters) {
				t.Fatalf("voters %v, want %v", voters, tc.voters)
			}
			// Everyone else learns; nobody is both.
			all := append(slices.Clone(voters), learners...)
			slices.Sort(all)
			if len(all) != len(tc.members) {
				t.Fatalf("voters %v and learners %v do not partition %d members", voters, learners, len(tc.members))
			}
			for i := 1; i < len(all); i++ {
				if all[i] == all[i-1] {
					t.Fatalf("member %d is both voter and learner", all[i])
				}
			}
			checkSurvival(t, tc.members, tc.home, tc.survive, voters)
		})
	}
}

// checkSurvival checks the property the choice is for: losing any one
// zone of the home region (zone survival) or any one region (region
// survival) leaves a majority of voters.
func checkSurvival(t *testing.T, members []Member, home string, survive Survival, voters []uint64) {
	t.Helper()
	where := map[uint64]Member{}
	for _, m := range members {
		where[m.ID] = m
	}
	failureDomain := func(m Member) string {
		if survive == SurviveZone {
			return m.Region + "/" + m.Zone
		}
		return m.Region
	}
	lost := map[string]int{}
	for _, v := range voters {
		if survive == SurviveZone && where[v].Region != home {
			t.Fatalf("zone survival voter %d outside the home region", v)
		}
		lost[failureDomain(where[v])]++
	}
	for d, n := range lost {
		if len(voters)-n <= len(voters)/2 {
			t.Fatalf("losing %s (%d of %d voters) loses the quorum: voters %v", d, n, len(voters), voters)
		}
	}
	if survive == SurviveRegion && lost[home] == 0 {
		t.Fatalf("no voter in the home region: %v", voters)
	}
}
