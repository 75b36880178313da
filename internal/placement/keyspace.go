package placement

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Where a regional keyspace's voters go.
//
// A keyspace is homed in one region and survives either the loss of a zone
// of that region or the loss of a whole region; every member that is not
// one of its voters holds a non-voting replica (a learner), so every
// member reads every keyspace locally. The rule follows CockroachDB's
// survival goals:
//
//   - Zone survival: three voters in three distinct zones of the home
//     region. A commit is an intra-region quorum (two of three), so it
//     costs the round trip to the nearer of the two other zones, not a
//     wide-area one; the loss of one zone leaves a quorum, the loss of the
//     region stops writes (the data stays readable on every learner).
//   - Region survival: five voters in at least three regions, at most two
//     in any region, two of them in the home region (in distinct zones
//     where it has them), the rest in the regions nearest the home region.
//     No region holds a majority, so losing any one leaves a quorum; a
//     commit led from the home region costs the round trip to the nearest
//     other voter region. Where five cannot be placed that way, three in
//     three regions, one each.
//
// The choice is deterministic: members are taken by zone name, then
// region distance (then name), then lowest id, so every proposer given the
// same membership and distances decides the same. Keeping the leader in
// the home region is the group's leadership preference, not part of this
// choice.

// Survival is what a keyspace survives.
type Survival int

const (
	SurviveZone   Survival = 1 // the loss of one zone of the home region
	SurviveRegion Survival = 2 // the loss of a whole region
)

// Member is a member as keyspace placement sees it.
type Member struct {
	ID     uint64
	Region string
	Zone   string
}

// KeyspaceVoters is the number of voters of a zone-survival keyspace.
const KeyspaceVoters = 3

// Keyspace chooses a keyspace's voters and learners among members. home
// is the home region; distance, when not nil, orders the other regions by
// how far they are from home (smaller is nearer; regions it does not know
// sort after those it does, by name). An error says why the membership
// cannot give that survival.
func Keyspace(members []Member, home string, survive Survival, distance func(from, to string) (time.Duration, bool)) (voters, learners []uint64, err error) {
	if home == "" {
		return nil, nil, fmt.Errorf("a keyspace needs a home region")
	}
	byRegion := map[string][]Member{}
	seen := map[uint64]bool{}
	for _, m := range members {
		if m.ID == 0 || seen[m.ID] {
			return nil, nil, fmt.Errorf("member id %d is zero or listed twice", m.ID)
		}
		seen[m.ID] = true
		byRegion[m.Region] = append(byRegion[m.Region], m)
	}
	if len(byRegion[home]) == 0 {
		return nil, nil, fmt.Errorf("no member is in region %q (regions: %v)", home, regionNames(byRegion))
	}
	switch survive {
	case SurviveZone:
		voters = spread(byRegion[home], KeyspaceVoters)
		if len(voters) < KeyspaceVoters {
			return nil, nil, fmt.Errorf("zone survival needs members in %d zones of region %q; it has %d (%v)",
				KeyspaceVoters, home, len(zones(byRegion[home])), zones(byRegion[home]))
		}
	case SurviveRegion:
		others := make([]string, 0, len(byRegion))
		for r := range byRegion {
			if r != home {
				others = append(others, r)
			}
		}
		slices.SortFunc(others, func(a, b string) int { return compareRegions(home, a, b, distance) })
		if len(others) < 2 {
			return nil, nil, fmt.Errorf("region survival needs members in 3 regions; there are %d (%v)", len(others)+1, regionNames(byRegion))
		}
		// Five voters, at most two a region, two at home; else three, one
		// in each of the home region and the two nearest.
		for _, perRegion := range []int{2, 1} {
			want := 2*perRegion + 1
			voters = spread(byRegion[home], perRegion)
			for _, r := range others {
				if len(voters) == want {
					break
				}
				voters = append(voters, spread(byRegion[r], min(perRegion, want-len(voters)))...)
			}
			if len(voters) == want && len(spread(byRegion[home], perRegion)) == perRegion {
				break
			}
			voters = nil
		}
		if voters == nil {
			return nil, nil, fmt.Errorf("region survival needs 3 voters in 3 regions, one of them %q", home)
		}
	default:
		return nil, nil, fmt.Errorf("unknown survival goal %d", survive)
	}
	isVoter := map[uint64]bool{}
	for _, v := range voters {
		isVoter[v] = true
	}
	for _, m := range members {
		if !isVoter[m.ID] {
			learners = append(learners, m.ID)
		}
	}
	slices.Sort(voters)
	slices.Sort(learners)
	return voters, learners, nil
}

// spread takes up to n members of one region, one per zone, zones by name
// and the lowest id in each; when the region has fewer zones than n, no
// second member of a zone is taken (two voters in one zone would not
// survive that zone).
func spread(ms []Member, n int) []uint64 {
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b Member) int {
		return cmp.Or(cmp.Compare(a.Zone, b.Zone), cmp.Compare(a.ID, b.ID))
	})
	var out []uint64
	for i, m := range ms {
		if len(out) == n {
			break
		}
		if i > 0 && ms[i-1].Zone == m.Zone {
			continue
		}
		out = append(out, m.ID)
	}
	return out
}

func zones(ms []Member) []string {
	var out []string
	for _, m := range ms {
		if !slices.Contains(out, m.Zone) {
			out = append(out, m.Zone)
		}
	}
	slices.Sort(out)
	return out
}

func regionNames(by map[string][]Member) []string {
	out := make([]string, 0, len(by))
	for r := range by {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// compareRegions orders a and b by distance from home: known distances
// first, nearest first, then by name.
func compareRegions(home, a, b string, distance func(from, to string) (time.Duration, bool)) int {
	if distance != nil {
		da, oka := distance(home, a)
		db, okb := distance(home, b)
		switch {
		case oka && !okb:
			return -1
		case okb && !oka:
			return 1
		case oka && okb && da != db:
			return cmp.Compare(da, db)
		}
	}
	return cmp.Compare(a, b)
}
