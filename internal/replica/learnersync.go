package replica

import (
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// A learner's deferred sync.
//
// A learner is not in any quorum: nothing is committed because it holds an
// entry, so its disk write need not finish before the commit. It still
// synced every Ready as a voter does, and with several groups on a cluster
// most members are learners of most groups: in a nine-member cluster with
// a zone-survival keyspace per region, every write was nine fsyncs on
// nine disks where the commit needs two. A learner now writes its entries
// unsynced and syncs at most LearnerSync later (one fsync for whatever
// arrived meanwhile, in every group of the member's store).
//
// Its acknowledgements wait for that sync. A learner that acknowledged an
// entry and then lost it in a crash would never get it back: the leader
// keeps the learner's Match and takes its later refusals below Match for
// stale ones (etcd raft's Progress.MaybeDecrTo), and a learner promoted
// to voter would count towards quorums with entries it does not hold. So
// every message that vouches for the disk (vouchesDurable) leaves after a
// sync that covers it, in the order raft made them.
//
// What a crash loses is a suffix of the log (the write-ahead log is
// written in order, and a synced record syncs all before it), entries
// committed elsewhere and fetched again. A Ready that changes the term or
// the vote syncs at once (a vote must never be forgotten), as does a
// snapshot from the leader, and anything written once the member is a
// voter; each such sync releases what was held.

// unsynced is what waits for a learner's sync (raft loop only).
type unsynced struct {
	since time.Time     // the first unsynced write; zero: none
	at    time.Time     // when the sync is due
	held  []*pb.Message // acknowledgements, in order
}

// mayDeferSync reports whether a Ready that raft wants synced (entries, or
// a new term or vote in hs) may be written unsynced: only on a learner,
// and only when hs keeps the term and vote this member last wrote.
func (r *Replica) mayDeferSync(hs *pb.HardState) bool {
	if r.cfg.LearnerSync < 0 || r.confState == nil || !isLearnerIn(r.confState, r.cfg.ID) {
		return false
	}
	if hs == nil {
		return true
	}
	prev, _, err := r.mem.InitialState()
	if err != nil {
		return false
	}
	return hs.GetTerm() == prev.GetTerm() && hs.GetVote() == prev.GetVote()
}

// wrote records an unsynced write made at now; the sync is due within d.
func (u *unsynced) wrote(now time.Time, d time.Duration) {
	if u.since.IsZero() {
		u.since, u.at = now, now.Add(d)
	}
}

// pending: writes wait for the sync, so an acknowledgement made now may
// vouch for them (and would pass held ones): it waits too.
func (u *unsynced) pending() bool { return !u.since.IsZero() || len(u.held) > 0 }

// hold keeps m until the next sync.
func (u *unsynced) hold(m *pb.Message) { u.held = append(u.held, m) }

// due: the sync is due at now.
func (u *unsynced) due(now time.Time) bool { return !u.since.IsZero() && !now.Before(u.at) }

// deadline is when the sync is due (zero: nothing waits).
func (u *unsynced) deadline() time.Time { return u.at }

// synced is called after a sync that covered every earlier write: it sends
// what was held.
func (u *unsynced) synced(net Network) {
	for _, m := range u.held {
		net.Send(m)
	}
	clear(u.held)
	u.held = u.held[:0]
	u.since, u.at = time.Time{}, time.Time{}
}

// syncUnsynced syncs the store and sends the held acknowledgements.
func (r *Replica) syncUnsynced() error {
	start := time.Now()
	if err := r.store.Sync(); err != nil {
		return err
	}
	r.cfg.ObserveFsync(time.Since(start))
	r.unsynced.synced(r.net)
	return nil
}
