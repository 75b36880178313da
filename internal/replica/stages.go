package replica

import (
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// Where an entry's time goes on this member, for Config.ObserveStage.
//
// The raft loop stamps every entry when it first appears in a Ready's
// Entries (the leader: its proposal was stepped; a follower: the leader's
// append arrived) and reports, per entry:
//
//   - StageCommit: from that Ready to the Ready that first lists the entry
//     as committed. On the leader it is its own disk write overlapped with
//     the followers' round trip and theirs; on a follower it adds the
//     leader's next append (or heartbeat) that carries the commit index.
//   - StageApply: from the Ready that lists it committed to the end of its
//     apply, which includes the disk write of that Ready's new entries
//     and hard state when the entry was not on this member's disk yet
//     (an entry already written is applied before that write).
//
// Stamps are kept for at most maxStamps entries; a snapshot drops them.
// The cost is one time read per Ready and a slice append per entry.
const (
	StageCommit = "commit"
	StageApply  = "apply"
)

// maxStamps bounds the entries stamped and not yet committed (a follower
// far behind, a leader without a quorum): beyond it new entries go
// unstamped until older ones commit.
const maxStamps = 4096

type entryStamp struct {
	index uint64
	at    time.Time
}

// stamps is the raft loop's record of when uncommitted entries entered
// the log here, oldest first (raft loop only).
type stamps struct {
	s []entryStamp
}

// appended stamps ents with now, dropping stamps of entries they replace.
func (st *stamps) appended(ents []*pb.Entry, now time.Time) {
	if len(ents) == 0 {
		return
	}
	first := ents[0].GetIndex()
	for len(st.s) > 0 && st.s[len(st.s)-1].index >= first {
		st.s = st.s[:len(st.s)-1]
	}
	for _, e := range ents {
		if len(st.s) >= maxStamps {
			return
		}
		st.s = append(st.s, entryStamp{index: e.GetIndex(), at: now})
	}
}

// committed reports StageCommit for every stamped entry up to index and
// forgets them; it returns how many entries it reported.
func (st *stamps) committed(index uint64, now time.Time, observe func(string, time.Duration)) int {
	n := 0
	for n < len(st.s) && st.s[n].index <= index {
		observe(StageCommit, now.Sub(st.s[n].at))
		n++
	}
	if n > 0 {
		st.s = append(st.s[:0], st.s[n:]...)
	}
	return n
}

// reset forgets every stamp (a snapshot replaced the log).
func (st *stamps) reset() { st.s = st.s[:0] }

// observeApplied reports StageApply for n entries applied just now, known
// committed since readyAt.
func (r *Replica) observeApplied(n int, readyAt time.Time) {
	if n == 0 {
		return
	}
	d := r.clock().Sub(readyAt)
	for range n {
		r.cfg.ObserveStage(StageApply, d)
	}
}
