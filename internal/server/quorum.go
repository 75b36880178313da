package server

// A keyspace whose quorum is unreachable from this member (a zone-survival
// keyspace whose home region is lost, or this member cut off from it):
// its writes fail at once with a declared error instead of waiting out the
// request timeout, and its reads are served from this member's copy where
// the session's last zxid allows.
//
// The judgement is the root's latency probes' (replica.SilentVoters): a
// voter that has answered none for two election timeouts (quorumSilence;
// each at least three probe intervals) is unreachable; when a majority of
// the group's voters are, no leader can commit. Unless the group applied
// something here meanwhile: then it has one, and the probes are late.
// Both guards because on a starved machine (six members in one process
// under the race detector, two cores, load 13) live voters went two
// election timeouts without an answer counted (it came after its probe
// round expired), and writes that were committing were answered
// "unknown". Every tick (duties) each keyspace
// group is judged again; while it is judged without a quorum
//
//   - a write not yet handed to raft is refused (errs.ErrNoQuorum): it
//     was never proposed, so it is not applied;
//   - a write raft took before is answered errs.ErrNoQuorumInFlight, an
//     unknown outcome: it sits in some member's log and commits if its
//     leader gets its quorum back;
//   - a read that needs a ReadIndex round (linearizable, or for a session
//     that has seen a zxid above this member's copy) fails with
//     errs.ErrNoQuorumRead; other reads are served from the copy.
//
// A replica without probes (replica.Config.ProbeInterval < 0; the server
// never turns them off) judges no group so. The root group is not judged:
// its heartbeats carry failure detection and sessions, and a member cut
// off from the root's quorum is ZooKeeper's partitioned server (its
// clients move to another).

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/meridian-coord/meridian/internal/errs"
)

// quorumSilence is how many election timeouts a voter must have answered
// no probe for to count as unreachable in the quorum judgement.
const quorumSilence = 2

// noQuorum is the error a write to g meets while g is judged without a
// quorum (nil otherwise).
func (g *group) noQuorum() error {
	if p := g.quorumLost.Load(); p != nil {
		return fmt.Errorf("%w: %s", errs.ErrNoQuorum, *p)
	}
	return nil
}

// noQuorumRead is the error a read that needs a ReadIndex round of g
// meets while g is judged without a quorum (nil otherwise): no round can
// complete, so it fails now rather than at the request timeout.
func (g *group) noQuorumRead() error {
	if p := g.quorumLost.Load(); p != nil {
		return fmt.Errorf("%w: %s", errs.ErrNoQuorumRead, *p)
	}
	return nil
}

// checkQuorums judges every keyspace group's quorum (duties, every tick;
// election is the election timeout at the tick in use) and answers the
// writes waiting in a group judged without one. A group that applied
// anything within quorumSilence election timeouts has a quorum, whatever
// the probes say.
func (s *Server) checkQuorums(now time.Time, election time.Duration) {
	var where map[uint64]string
	for _, g := range s.keyspaceGroups.all() {
		if applied := g.rep.AppliedIndex(); applied != g.quorumApplied || g.quorumProgress.IsZero() {
			g.quorumApplied, g.quorumProgress = applied, now
		}
		voters, silent := g.rep.SilentVoters(now, quorumSilence)
		if len(voters) == 0 || len(silent) < len(voters)-len(voters)/2 ||
			now.Sub(g.quorumProgress) < quorumSilence*election {
			if g.quorumLost.Load() != nil {
				s.log.Info("keyspace quorum reachable again", "keyspace", g.ks.Prefix)
				g.quorumLost.Store(nil)
			}
			continue
		}
		if where == nil {
			where = map[uint64]string{}
			for _, m := range s.members() {
				where[m.ID] = m.Region + "/" + m.Zone
			}
		}
		detail := quorumDetail(g, voters, silent, where)
		if g.quorumLost.Load() == nil {
			s.log.Warn("keyspace has no quorum: writes refused until its voters answer", "keyspace", g.ks.Prefix, "detail", detail)
		}
		g.quorumLost.Store(&detail)
		g.waiters.failAll(fmt.Errorf("%w: %s", errs.ErrNoQuorumInFlight, detail))
	}
}

// quorumDetail says which keyspace and which of its voters, where.
func quorumDetail(g *group, voters, silent []uint64, where map[uint64]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "keyspace %s (home region %s, %s survival): voters", g.ks.Prefix, g.ks.Region, g.ks.Survival)
	for i, v := range silent {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %d (%s)", v, where[v])
	}
	fmt.Fprintf(&b, " of %v unreachable for %d election timeouts, %d needed", slices.Clone(voters), quorumSilence, len(voters)/2+1)
	return b.String()
}
