package replica

import (
	"maps"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Handover after a step-down.
//
// A leader that can send but not hear (its inbound links cut, or its
// acknowledgements lost) keeps its followers' election timers reset with
// heartbeats until raft's CheckQuorum deposes it, one to two election
// timeouts after the cut; the followers, just reset by its last heartbeat,
// then waited their own randomized one to two more before a pre-vote, and
// refused each other's pre-votes meanwhile because they had heard from a
// leader recently (the lease that keeps PreVote and CheckQuorum from being
// disrupted). Two to four election timeouts with nothing committed.
//
// Instead, a leader that steps down at the same term with no leader in
// sight (CheckQuorum, or removal from the group) tells every voter it led,
// over the links it can still send on, and names the voter whose log it
// last knew to be the longest. A member that follows that leader in that
// term forgets it (raft's ForgetLeader, meant for exactly this: an outside
// signal that the leader is gone), so it grants pre-votes at once, and
// drops what that leader sent in that term and arrives later (a heartbeat
// queued before the notice would renew the lease). The named member
// campaigns one tick after the notice, so the others have theirs when its
// pre-vote reaches them. The election itself is raft's: votes still
// require an up-to-date log, so a notice changes only when an election
// starts, never its outcome. A notice that is lost, or reaches members
// that moved on to a later term, changes nothing; they time out as before.
// A leader that is cut off completely reaches nobody, and its followers
// time out on their own.
type handover struct {
	match map[uint64]uint64 // leader: each voter's Match at the last tick

	// follower: the leader that stepped down (and its term), whose
	// leader messages of that term are dropped from now on
	deposed, deposedTerm uint64
	// follower named to campaign: at or after campaignAt, if still
	// without a leader in campaignTerm
	campaignTerm uint64
	campaignAt   time.Time
}

// noteProgress records, while leading, how far each voter's log is known
// to match, for naming a successor should the next tick depose this
// leader (raft resets its progress when it steps down).
func (r *Replica) noteProgress() {
	if r.leader.Load() != r.cfg.ID {
		return
	}
	if r.handover.match == nil {
		r.handover.match = map[uint64]uint64{}
	}
	clear(r.handover.match)
	r.rn.WithProgress(func(id uint64, typ raft.ProgressType, pr tracker.Progress) {
		if typ == raft.ProgressTypePeer && id != r.cfg.ID {
			r.handover.match[id] = pr.Match
		}
	})
}

// abdicated reports the term this member led if the Ready shows it
// stepping down in that term with no leader to follow (0 otherwise).
func (r *Replica) abdicated(ss *raft.SoftState, hs *pb.HardState) uint64 {
	if ss == nil || r.leader.Load() != r.cfg.ID || ss.RaftState == raft.StateLeader || ss.Lead != raft.None {
		return 0
	}
	term := r.term.Load()
	if hs != nil && hs.GetTerm() != term {
		return 0 // deposed by a later term: its leader is on the way
	}
	return term
}

// announceStepDown sends the step-down notice for term to every voter,
// naming the one with the longest known log (ties: the lowest id).
func (r *Replica) announceStepDown(term uint64) {
	var successor, best uint64
	for id, m := range r.handover.match {
		if successor == 0 || m > best || (m == best && id < successor) {
			successor, best = id, m
		}
	}
	r.log.Info("stepped down without a quorum; telling the followers", "term", term, "successor", successor)
	for _, id := range slices.Sorted(maps.Keys(r.handover.match)) { // in order: scripts and the simulation replay
		r.net.SendStepDown(id, term, successor)
	}
}

// leaderSteppedDown handles a notice from member from that it no longer
// leads term (raft loop).
func (r *Replica) leaderSteppedDown(from, term, successor uint64, now time.Time) {
	st := r.rn.BasicStatus()
	if st.RaftState != raft.StateFollower || st.Lead != from || st.GetTerm() != term {
		return // not our leader, or not in this term: we moved on
	}
	if err := r.rn.ForgetLeader(); err != nil {
		r.log.Debug("forget leader", "err", err)
		return
	}
	r.handover.deposed, r.handover.deposedTerm = from, term
	if successor == r.cfg.ID {
		r.handover.campaignTerm, r.handover.campaignAt = term, now.Add(r.tick)
	}
	r.log.Info("leader stepped down; forgot it", "leader", from, "term", term, "campaign", successor == r.cfg.ID)
}

// campaignIfNamed starts the election this member was named for, once its
// tick has passed, if it is still a follower without a leader in that
// term (raft loop, on every tick).
func (r *Replica) campaignIfNamed(now time.Time) {
	h := &r.handover
	if h.campaignTerm == 0 || now.Before(h.campaignAt) {
		return
	}
	term := h.campaignTerm
	h.campaignTerm = 0
	st := r.rn.BasicStatus()
	if st.RaftState != raft.StateFollower || st.Lead != raft.None || st.GetTerm() != term {
		return
	}
	if err := r.rn.Campaign(); err != nil {
		r.log.Debug("campaign after handover", "err", err)
	}
}

// staleLeaderMessage reports a message its sender sent as leader of a
// term it has since announced stepping down from.
func (h *handover) staleLeaderMessage(m *pb.Message) bool {
	if h.deposed == 0 || m.GetFrom() != h.deposed || m.GetTerm() != h.deposedTerm {
		return false
	}
	switch m.GetType() {
	case pb.MsgApp, pb.MsgHeartbeat, pb.MsgSnap:
		return true
	}
	return false
}
