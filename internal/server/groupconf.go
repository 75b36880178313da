package server

import (
	"context"
	"slices"
	"time"

	"github.com/meridian-coord/meridian/internal/fsm"
	"github.com/meridian-coord/meridian/internal/replica"
)

// A keyspace group's membership follows the cluster's. The group's leader
// compares the group's configuration with the cluster's members and
// proposes, to the group, one change at a time (groupDutyEvery apart):
//
//  1. a voter that left the cluster is replaced first: a member that
//     keeps the keyspace's survival goal (zone survival: a member of the
//     home region in a zone no remaining voter is in; region survival: a
//     member of a region holding fewer than two voters, the home first,
//     then the nearest) is made a voter;
//  2. then every member that left the cluster leaves the group;
//  3. then every member of the cluster that is not in the group joins it
//     as a learner, so that it serves the keyspace's reads locally.
//
// Without a replacement (no member fits) the group keeps its remaining
// voters, and a warning says so. The keyspace table keeps the group's
// first configuration (what every member bootstraps the group from); the
// group's own configuration is the current one (meridian keyspace ls shows
// it).

// followMembership proposes group g's next configuration change, if any.
// Called by g's leader only (keyspaceDuties), with distance from
// lazyDistance (shared by the round's groups).
func (s *Server) followMembership(g *group, members []Member, distance func(from, to string) (time.Duration, bool), now time.Time) {
	if now.Sub(g.confAt) < groupDutyEvery {
		return
	}
	change, why, ok := groupChange(g.ks, g.rep.Members(), members, distance)
	if !ok {
		if why != "" && now.Sub(g.warnedAt) >= time.Minute {
			g.warnedAt = now
			s.log.Warn("keyspace group keeps fewer voters: "+why, "keyspace", g.ks.Prefix)
		}
		return
	}
	// The change carries the member's record from the cluster's book.
	for _, p := range s.rep.Members() {
		if p.ID == change.Peer.ID {
			p.Learner, p.AutoPromote = change.Type == replica.AddLearner, change.PromoteWhenCaughtUp
			change.Peer = p
		}
	}
	g.confAt = now
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.requestTimeout())
		defer cancel()
		if err := g.rep.ChangeMembers(ctx, []replica.MemberChange{change}); err != nil {
			s.log.Debug("keyspace group membership", "keyspace", g.ks.Prefix, "change", change.Type, "member", change.Peer.ID, "err", err)
			return
		}
		s.log.Info("keyspace group membership changed", "keyspace", g.ks.Prefix, "change", change.Type.String(), "member", change.Peer.ID)
	}()
}

// groupChange is the next change that brings a group's configuration conf
// toward the cluster's members (see the top of this file); false when
// there is none, with why when a voter that left has no replacement.
func groupChange(ks fsm.Keyspace, conf []replica.Peer, members []Member, distance func(from, to string) (time.Duration, bool)) (replica.MemberChange, string, bool) {
	cluster := map[uint64]Member{}
	for _, m := range members {
		cluster[m.ID] = m
	}
	var voters []Member // the group's voters still in the cluster
	var gone []replica.Peer
	lostVoter := false
	inGroup := map[uint64]bool{}
	for _, p := range conf {
		inGroup[p.ID] = true
		m, ok := cluster[p.ID]
		switch {
		case !ok:
			gone = append(gone, p)
			lostVoter = lostVoter || !p.Learner
		case !p.Learner:
			voters = append(voters, m)
		}
	}
	why := ""
	if lostVoter {
		if c, ok := replacementVoter(ks, voters, members, distance); ok {
			if inGroup[c.ID] {
				return replica.MemberChange{Type: replica.AddVoter, Peer: replica.Peer{ID: c.ID}}, "", true
			}
			// Not in the group yet: joins as a learner that the leader
			// makes a voter once it has caught up.
			return replica.MemberChange{Type: replica.AddLearner, Peer: replica.Peer{ID: c.ID}, PromoteWhenCaughtUp: true}, "", true
		}
		why = "no member of the cluster can replace the voter that left while keeping the survival goal"
	}
	if len(gone) > 0 && len(voters) > 0 {
		return replica.MemberChange{Type: replica.Remove, Peer: replica.Peer{ID: gone[0].ID}}, why, true
	}
	for _, m := range members {
		if !inGroup[m.ID] {
			return replica.MemberChange{Type: replica.AddLearner, Peer: replica.Peer{ID: m.ID}}, why, true
		}
	}
	return replica.MemberChange{}, why, false
}

// replacementVoter picks a member to replace a voter that left ks's group,
// among members that are not voters already, keeping the survival goal.
func replacementVoter(ks fsm.Keyspace, voters, members []Member, distance func(from, to string) (time.Duration, bool)) (Member, bool) {
	isVoter := map[uint64]bool{}
	zones := map[string]bool{}
	perRegion := map[string]int{}
	for _, v := range voters {
		isVoter[v.ID] = true
		if v.Region == ks.Region {
			zones[v.Zone] = true
		}
		perRegion[v.Region]++
	}
	candidates := slices.DeleteFunc(slices.Clone(members), func(m Member) bool { return isVoter[m.ID] })
	slices.SortFunc(candidates, func(a, b Member) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	if ks.Survival != fsm.SurvivalRegion {
		for _, m := range candidates {
			if m.Region == ks.Region && !zones[m.Zone] {
				return m, true
			}
		}
		return Member{}, false
	}
	// Region survival: at most two voters a region, the home first, then
	// the nearest region that has room (by measured distance, then name).
	rank := func(r string) (time.Duration, bool) {
		if r == ks.Region {
			return 0, true
		}
		if distance == nil {
			return 0, false
		}
		return distance(ks.Region, r)
	}
	var best Member
	found := false
	var bestD time.Duration
	var bestKnown bool
	for _, m := range candidates {
		if perRegion[m.Region] >= 2 {
			continue
		}
		d, known := rank(m.Region)
		better := !found || (known && !bestKnown) || (known == bestKnown && (d < bestD || (d == bestD && m.Region < best.Region)))
		if better {
			best, bestD, bestKnown, found = m, d, known, true
		}
	}
	return best, found
}
