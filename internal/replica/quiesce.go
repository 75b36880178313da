package replica

import (
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Quiescence: idle groups stop ticking.
//
// Every raft leader heartbeats every tick and every member ticks every
// group, so a member running a hundred idle groups (regional keyspaces)
// spent half a core on heartbeats that said nothing new. A group other
// than the root (OpenGroup, unless GroupConfig.NeverQuiesce) therefore
// quiesces when it has nothing to do, as CockroachDB's ranges do:
//
//   - Its leader, after quiesceAfterTicks ticks in a row in which every
//     member's log matched its own (every Match equals its last index,
//     which is committed and applied; a member that has answered no
//     latency probe for an election timeout does not count: it is down or
//     cut off, and when it returns it ticks, being unquiesced, and its
//     pre-vote or its read wakes the group), with no read, held proposal,
//     membership change or leadership transfer pending, sends every
//     member a quiesce notice (its term and last index, kindGroupQuiesce,
//     behind the heartbeats that carried that commit index) and stops
//     ticking the group.
//   - A member that receives a notice from the leader it follows, in that
//     term, whose last index and commit index equal the notice's and
//     which has nothing of its own pending, stops ticking too, so it
//     never campaigns against a quiet leader. Any other notice is
//     ignored: that member keeps ticking.
//   - While quiesced the loop wakes only every half election timeout (no
//     raft tick, no heartbeat). Anything that happens wakes the group on
//     that member: a proposal, a read, a membership change, a campaign or
//     transfer request, a step-down notice, a change of the root's
//     membership, any raft message except a heartbeat response (a
//     quiesced leader sent no heartbeat; a response is a late answer to
//     one sent before it went quiet), and any Ready with messages to send.
//     A member that did not quiesce (its notice lost) eventually
//     pre-votes, which wakes the leader, whose heartbeats then resume.
//     A member that has known no leader for an election timeout (it
//     restarted while the group was quiet) asks the others to wake
//     (kindGroupWake): a learner never pre-votes, so without this it
//     would not learn the leader, nor serve a read, until the next write.
//   - A quiesced follower must still notice a dead or cut-off leader: the
//     root's latency probes (every ProbeInterval, between every member
//     pair) tell when the leader last answered. Once it has been silent
//     for an election timeout (at least three probe intervals, so one
//     late probe does not count), the follower wakes and ticks, and
//     raft's PreVote and CheckQuorum elect a new leader as if the leader
//     had died while the group was busy, one election timeout later. A
//     member without probes (ProbeInterval < 0) never quiesces.
//
// Quiescence changes only when raft ticks, never what raft decides: no
// message is forged or suppressed, a notice is advice. A member starts
// unquiesced (restart), and so does every group when the root's
// membership changes. It lives in the Replica's loop only: a Node (the
// simulation and the scripts) has no transport that carries notices, so
// it never quiesces.

// quiesceAfterTicks is how many idle ticks in a row a leader waits before
// quiescing its group: the heartbeats of those ticks carry the final
// commit index to every member before the notice does.
const quiesceAfterTicks = 3

// quiesceSender is a Network that carries quiesce notices (the TCP
// transport, for groups other than the root).
type quiesceSender interface {
	SendQuiesce(to, term, index uint64)
	SendWake(to uint64)
}

func (n transportNetwork) SendQuiesce(to, term, index uint64) {
	n.t.sendQuiesce(n.group, to, term, index)
}

func (n transportNetwork) SendWake(to uint64) { n.t.sendWake(n.group, to) }

// quiescence is a replica's quiescence state (raft loop only; quiet is
// mirrored in Replica.quiet for Quiesced).
type quiescence struct {
	enabled   bool      // a group that opted in, with probes to watch its leader
	quiet     bool      // not ticking
	started   time.Time // when the replica started
	since     time.Time // when it went quiet
	idleTicks int       // leader: idle ticks in a row
	// follower: since when it has known no leader, when it last asked the
	// others to wake
	leaderless, wakeAsked time.Time
	notices               uint64 // leader: notices sent (tests)
}

// Quiesced reports whether this group's replica has stopped ticking.
func (r *Replica) Quiesced() bool { return r.quiet.Load() }

// quiesceTick runs at the start of every tick (raft loop). It reports
// whether the tick is to be skipped: the group is quiet, or goes quiet
// now. A quiet follower whose leader stopped answering probes wakes here.
func (r *Replica) quiesceTick(now time.Time) bool {
	q := &r.quiesce
	if !q.enabled {
		return false
	}
	if q.quiet {
		lead := r.leader.Load()
		if lead == r.cfg.ID || lead == raft.None || !r.leaderSilent(lead, now) {
			return true
		}
		r.log.Info("quiesced group's leader stopped answering probes; ticking again", "leader", lead)
		r.unquiesce()
		return false
	}
	if r.leader.Load() != r.cfg.ID {
		q.idleTicks = 0
		r.askForLeader(now)
		return false
	}
	if !r.leaderIdle(now) {
		q.idleTicks = 0
		return false
	}
	q.idleTicks++
	if q.idleTicks < quiesceAfterTicks {
		return false
	}
	qs, ok := r.net.(quiesceSender)
	if !ok {
		return false
	}
	st := r.rn.BasicStatus()
	last, _ := r.mem.LastIndex()
	var to []uint64
	r.rn.WithProgress(func(id uint64, _ raft.ProgressType, _ tracker.Progress) {
		if id != r.cfg.ID {
			to = append(to, id)
		}
	})
	for _, id := range to {
		qs.SendQuiesce(id, st.GetTerm(), last)
	}
	q.notices += uint64(len(to))
	r.goQuiet(now)
	return true
}

// askForLeader: a member that has known no leader for an election
// timeout (it restarted while the group was quiet, or the leader died)
// asks every other member to tick again, once every election timeout. A
// quiet leader wakes and its heartbeats tell the member; a learner, which
// never campaigns, would otherwise wait for the group's next write.
func (r *Replica) askForLeader(now time.Time) {
	q := &r.quiesce
	if r.leader.Load() != raft.None {
		q.leaderless = time.Time{}
		return
	}
	if q.leaderless.IsZero() {
		q.leaderless = now
	}
	timeout := r.tick * time.Duration(r.cfg.ElectionTicks)
	qs, ok := r.net.(quiesceSender)
	if !ok || now.Sub(q.leaderless) < timeout || now.Sub(q.wakeAsked) < timeout {
		return
	}
	q.wakeAsked = now
	for _, p := range r.book.Peers {
		if p.ID != r.cfg.ID {
			qs.SendWake(p.ID)
		}
	}
}

// leaderIdle reports whether this leader has nothing to do: every
// member's log matches its own, all of it committed and applied, and
// nothing is pending.
func (r *Replica) leaderIdle(now time.Time) bool {
	st := r.rn.BasicStatus()
	last, _ := r.mem.LastIndex()
	_, applied := r.applied.get()
	if st.RaftState != raft.StateLeader || st.LeadTransferee != raft.None || st.GetCommit() != last || applied != last {
		return false
	}
	if len(r.pendingReads) > 0 || len(r.inflight) > 0 || len(r.held.msgs) > 0 || len(r.confWaits) > 0 ||
		len(r.confState.GetVotersOutgoing()) > 0 || r.rn.HasReady() {
		return false
	}
	matched := true
	r.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if pr.Match != last && (id == r.cfg.ID || !r.memberSilent(id, now)) {
			matched = false
		}
	})
	return matched
}

// quiesceNotice handles a leader's notice that the group goes quiet
// (raft loop): this member follows suit if its log is the notice's.
func (r *Replica) quiesceNotice(from, term, index uint64, now time.Time) {
	q := &r.quiesce
	if !q.enabled || q.quiet {
		return
	}
	st := r.rn.BasicStatus()
	last, _ := r.mem.LastIndex()
	if st.RaftState != raft.StateFollower || st.Lead != from || st.GetTerm() != term || last != index || st.GetCommit() != index {
		return // not from our leader, or our log differs: keep ticking
	}
	if len(r.pendingReads) > 0 || len(r.inflight) > 0 || len(r.held.msgs) > 0 || r.handover.campaignTerm != 0 || r.rn.HasReady() {
		return
	}
	r.goQuiet(now)
}

func (r *Replica) goQuiet(now time.Time) {
	r.quiesce.quiet, r.quiesce.since, r.quiesce.idleTicks = true, now, 0
	r.quiet.Store(true)
}

// unquiesce makes a quiet group tick again (raft loop).
func (r *Replica) unquiesce() {
	if !r.quiesce.quiet {
		return
	}
	r.quiesce.quiet, r.quiesce.idleTicks = false, 0
	r.quiet.Store(false)
}

// wakesOn reports whether a raft message wakes a quiet group: any but a
// heartbeat response, which answers a heartbeat sent before the leader
// went quiet.
func wakesOn(m *pb.Message) bool { return m.GetType() != pb.MsgHeartbeatResp }

// leaderSilent reports whether lead has answered no latency probe for an
// election timeout (or three probe intervals, if longer), counted from
// when the group went quiet at the earliest.
func (r *Replica) leaderSilent(lead uint64, now time.Time) bool {
	return r.silentSince(lead, r.quiesce.since, now)
}

// memberSilent reports whether member id has answered no latency probe
// for an election timeout while this replica ran.
func (r *Replica) memberSilent(id uint64, now time.Time) bool {
	return r.silentSince(id, r.quiesce.started, now)
}

// silentSince: id's last probe answer, or from if later, is more than an
// election timeout (at least three probe intervals) before now.
func (r *Replica) silentSince(id uint64, from, now time.Time) bool {
	last := r.lat.LastReply(id)
	if last.Before(from) {
		last = from
	}
	return now.Sub(last) > r.silenceLimit()
}

// SilentVoters returns the group's voters and those of them, other than
// this member, that have answered no latency probe of the root's for
// timeouts election timeouts (each at least three probe intervals) while
// this replica ran: with timeouts 1, the judgement leaderSilent makes of
// a quiet group's leader, made of every voter. When a majority is silent
// no leader can commit (a write proposed now will not apply until they
// answer again). Both are nil when this member sends no probes (nothing
// to judge by). Any goroutine.
func (r *Replica) SilentVoters(now time.Time, timeouts int) (voters, silent []uint64) {
	if r.cfg.ProbeInterval <= 0 || r.lat == nil {
		return nil, nil
	}
	limit := time.Duration(timeouts) * max(time.Duration(r.tickNow.Load())*time.Duration(r.cfg.ElectionTicks), 3*r.cfg.ProbeInterval)
	for _, p := range r.conf.Load().peers {
		if p.Learner {
			continue
		}
		voters = append(voters, p.ID)
		if p.ID == r.cfg.ID {
			continue
		}
		last := r.lat.LastReply(p.ID)
		if last.Before(r.quiesce.started) {
			last = r.quiesce.started
		}
		if now.Sub(last) > limit {
			silent = append(silent, p.ID)
		}
	}
	return voters, silent
}

func (r *Replica) silenceLimit() time.Duration {
	return max(r.tick*time.Duration(r.cfg.ElectionTicks), 3*r.cfg.ProbeInterval)
}

// tickPeriod is how often the loop ticks: the raft tick, or while quiet
// every half election timeout, to watch the leader.
func (r *Replica) tickPeriod() time.Duration {
	if r.quiesce.quiet {
		return max(r.tick, r.tick*time.Duration(r.cfg.ElectionTicks)/2)
	}
	return r.tick
}

// wakeGroups wakes every group on this member (the root, when its
// membership changed): they tick until they quiesce again.
func (r *Replica) wakeGroups() {
	r.groupMu.Lock()
	defer r.groupMu.Unlock()
	for _, g := range r.groups {
		select {
		case g.eventc <- loopEvent{kind: evWake}:
		default:
		}
	}
}
