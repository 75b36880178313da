package replica

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/raft/v3/confchange"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-coord/meridian/internal/errs"
)

// Runtime membership.
//
// raft decides who votes (its ConfState); the replica keeps beside it an
// address book: every member's transport address, its Meta (opaque to the
// replica; the server keeps region, zone and client addresses there) and
// whether it is a learner. The book is replicated with the configuration
// itself: a configuration change carries the records of the members it adds
// in its Context, applying it updates the book, and snapshots carry the
// book in front of the state machine's data. So every member, including one
// that joins later with an incomplete configuration file, ends up with the
// same book at the same index.

// ChangeType is what a MemberChange does.
type ChangeType int

const (
	AddVoter   ChangeType = iota // add a voter, or promote a learner
	AddLearner                   // add a learner, or demote a voter
	Remove                       // remove a member (voter or learner)
)

func (t ChangeType) String() string {
	switch t {
	case AddVoter:
		return "add-voter"
	case AddLearner:
		return "add-learner"
	case Remove:
		return "remove"
	}
	return fmt.Sprintf("ChangeType(%d)", int(t))
}

// MemberChange is one change of the configuration. Peer.Addr is needed to
// add a member that is not in the book; Remove needs only Peer.ID.
type MemberChange struct {
	Type ChangeType
	Peer Peer
	// PromoteWhenCaughtUp (AddLearner only): the leader promotes the learner
	// to voter by itself once its log is within PromoteLag entries of the
	// leader's and replicating normally. The request is replicated, so a
	// new leader carries it out too.
	PromoteWhenCaughtUp bool
}

// PromoteLag is how far behind the leader's last index a learner may be and
// still count as caught up for automatic promotion.
const PromoteLag = 1000

// MaxMemberChanges bounds the changes of one ChangeMembers call.
const MaxMemberChanges = 16

// book is the address book (see above).
type book struct {
	Peers []Peer `json:"peers"`
	// Changed: a runtime membership change was applied, after which the
	// configuration file's learners are no longer added automatically (the
	// operator's changes win over the file).
	Changed bool `json:"changed,omitempty"`
	// Index of the configuration change last applied (ZooKeeper's config
	// version); 0 before any.
	Index uint64 `json:"index,omitempty"`
}

func (b *book) find(id uint64) int {
	return slices.IndexFunc(b.Peers, func(p Peer) bool { return p.ID == id })
}

func (b *book) upsert(p Peer) {
	p.Meta = slices.Clone(p.Meta)
	if i := b.find(p.ID); i >= 0 {
		b.Peers[i] = p
	} else {
		b.Peers = append(b.Peers, p)
	}
	slices.SortFunc(b.Peers, func(x, y Peer) int { return cmpU64(x.ID, y.ID) })
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func inConf(cs *pb.ConfState, id uint64) bool {
	return slices.Contains(cs.GetVoters(), id) || slices.Contains(cs.GetLearners(), id) ||
		slices.Contains(cs.GetVotersOutgoing(), id) || slices.Contains(cs.GetLearnersNext(), id)
}

// isLearnerIn: a learner (or about to become one) and not a voter in
// either half of a joint configuration.
func isLearnerIn(cs *pb.ConfState, id uint64) bool {
	return (slices.Contains(cs.GetLearners(), id) || slices.Contains(cs.GetLearnersNext(), id)) &&
		!slices.Contains(cs.GetVoters(), id) && !slices.Contains(cs.GetVotersOutgoing(), id)
}

// ccContext is the Context of a configuration change entry.
type ccContext struct {
	ReqID uint64 `json:"req,omitempty"` // the proposer's waiter
	Peers []Peer `json:"peers,omitempty"`
}

func encodeContext(c ccContext) []byte {
	b, _ := json.Marshal(c) // plain data: cannot fail
	return b
}

// Snapshot data is the book followed by the state machine's data.
var snapMagic = []byte("MRDNSNP1")

func wrapSnapshot(b book, data []byte) []byte {
	bj, _ := json.Marshal(b)
	out := make([]byte, 0, len(snapMagic)+binary.MaxVarintLen64+len(bj)+len(data))
	out = append(out, snapMagic...)
	out = binary.AppendUvarint(out, uint64(len(bj)))
	out = append(out, bj...)
	return append(out, data...)
}

// unwrapSnapshot splits snapshot data; a snapshot written before the book
// existed (no magic) has none.
func unwrapSnapshot(data []byte) (*book, []byte, error) {
	if !bytes.HasPrefix(data, snapMagic) {
		return nil, data, nil
	}
	rest := data[len(snapMagic):]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) {
		return nil, nil, fmt.Errorf("%w: snapshot membership header", ErrCorrupt)
	}
	var b book
	if err := json.Unmarshal(rest[k:k+int(n)], &b); err != nil {
		return nil, nil, fmt.Errorf("%w: snapshot membership: %v", ErrCorrupt, err)
	}
	return &b, rest[k+int(n):], nil
}

// toConfChange turns changes into one raft change (simple for one change,
// joint consensus left automatically for several).
func toConfChange(reqID uint64, changes []MemberChange, bk *book) (*pb.ConfChangeV2, error) {
	if len(changes) == 0 || len(changes) > MaxMemberChanges {
		return nil, fmt.Errorf("%w: %d changes (1 to %d)", errs.ErrBadMembership, len(changes), MaxMemberChanges)
	}
	cc := &pb.ConfChangeV2{}
	ctx := ccContext{ReqID: reqID}
	seen := map[uint64]bool{}
	for _, c := range changes {
		p := c.Peer
		if p.ID == 0 || seen[p.ID] {
			return nil, fmt.Errorf("%w: member id %d zero or repeated", errs.ErrBadMembership, p.ID)
		}
		seen[p.ID] = true
		var t pb.ConfChangeType
		switch c.Type {
		case AddVoter:
			t = pb.ConfChangeAddNode
		case AddLearner:
			t = pb.ConfChangeAddLearnerNode
		case Remove:
			t = pb.ConfChangeRemoveNode
		default:
			return nil, fmt.Errorf("%w: change type %d", errs.ErrBadMembership, c.Type)
		}
		cc.Changes = append(cc.Changes, &pb.ConfChangeSingle{Type: t.Enum(), NodeId: proto.Uint64(p.ID)})
		if c.Type == Remove {
			continue
		}
		if i := bk.find(p.ID); i >= 0 {
			old := bk.Peers[i]
			if p.Addr == "" {
				p.Addr = old.Addr
			}
			if p.Meta == nil {
				p.Meta = old.Meta
			}
		}
		if p.Addr == "" {
			return nil, fmt.Errorf("%w: member %d needs a peer address", errs.ErrBadMembership, p.ID)
		}
		p.Learner = c.Type == AddLearner
		p.AutoPromote = p.Learner && c.PromoteWhenCaughtUp
		ctx.Peers = append(ctx.Peers, p)
	}
	cc.Context = encodeContext(ctx)
	return cc, nil
}

// checkConfChange applies cc to a copy of cs the way raft will, so that an
// invalid change is refused here instead of panicking raft at apply.
func checkConfChange(cs *pb.ConfState, lastIndex uint64, cc *pb.ConfChangeV2) (*pb.ConfState, error) {
	chg := confchange.Changer{Tracker: tracker.MakeProgressTracker(1, 0), LastIndex: lastIndex}
	cfg, trk, err := confchange.Restore(chg, cs)
	if err != nil {
		return nil, err
	}
	chg.Tracker.Config, chg.Tracker.Progress = cfg, trk
	if cc.LeaveJoint() {
		cfg, trk, err = chg.LeaveJoint()
	} else if autoLeave, ok := cc.EnterJoint(); ok {
		cfg, trk, err = chg.EnterJoint(autoLeave, cc.Changes...)
	} else {
		cfg, trk, err = chg.Simple(cc.Changes...)
	}
	if err != nil {
		return nil, err
	}
	chg.Tracker.Config, chg.Tracker.Progress = cfg, trk
	out := chg.Tracker.ConfState()
	return out, nil
}

type confReq struct {
	ctx     context.Context
	changes []MemberChange
	errc    chan error
}

// confWait is a ChangeMembers caller waiting for its change to be applied.
type confWait struct {
	ctx      context.Context // the caller's: the wait is dropped when it ends
	errc     chan error
	atLeader bool // proposed on the leader: must be in the next Ready's entries
	appended bool
}

// ChangeMembers changes the configuration and returns once this member has
// applied the change. Several changes go through joint consensus in one
// call. One change is in flight at a time: errs.ErrReconfigInProgress while
// another is. Invalid changes (removing the last voter, an unknown member,
// a new member without an address) are errs.ErrBadMembership or
// errs.ErrNewConfigNoQuorum and change nothing. It may be called on any
// member; raft forwards the change to the leader, which validates it again
// (a follower's view may be stale; a change the leader refuses then ends in
// ctx's deadline).
func (r *Replica) ChangeMembers(ctx context.Context, changes []MemberChange) error {
	if r.stopped() {
		return errs.ErrStopped
	}
	req := confReq{ctx: ctx, changes: changes, errc: make(chan error, 1)}
	select {
	case r.confc <- req:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.stopc:
		return errs.ErrStopped
	}
	select {
	case err := <-req.errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-r.stopc:
		return errs.ErrStopped
	}
}

// Members returns the address book: every member of the current
// configuration, sorted by id.
func (r *Replica) Members() []Peer {
	return slices.Clone(r.conf.Load().peers)
}

// Configuration returns the members and the log index of the configuration
// change that made them (0: the initial configuration, never changed).
func (r *Replica) Configuration() ([]Peer, uint64) {
	c := r.conf.Load()
	return slices.Clone(c.peers), c.index
}

// confView is the book as other goroutines see it.
type confView struct {
	peers []Peer
	index uint64
}

// proposeMembers (raft loop) validates and proposes a change.
func (r *Replica) proposeMembers(req confReq) {
	if r.confState == nil || len(r.confState.GetVoters()) == 0 {
		req.errc <- errs.ErrNotLeader // joining: not part of a configuration yet
		return
	}
	if len(r.confState.GetVotersOutgoing()) > 0 || len(r.confWaits) > 0 {
		req.errc <- errs.ErrReconfigInProgress
		return
	}
	r.confSeq++
	cc, err := toConfChange(r.confSeq, req.changes, &r.book)
	if err != nil {
		req.errc <- err
		return
	}
	for _, c := range req.changes {
		if c.Type == Remove && !inConf(r.confState, c.Peer.ID) {
			req.errc <- fmt.Errorf("%w: %d is not a member", errs.ErrBadMembership, c.Peer.ID)
			return
		}
	}
	last, _ := r.mem.LastIndex()
	if err := validateChange(r.confState, last, cc); err != nil {
		req.errc <- err
		return
	}
	if err := r.rn.ProposeConfChange(cc); err != nil {
		req.errc <- errs.ErrNotLeader
		return
	}
	r.confWaits[r.confSeq] = &confWait{ctx: req.ctx, errc: req.errc, atLeader: r.leader.Load() == r.cfg.ID}
}

// validateChange maps raft's verdict on cc to our errors.
func validateChange(cs *pb.ConfState, lastIndex uint64, cc *pb.ConfChangeV2) error {
	out, err := checkConfChange(cs, lastIndex, cc)
	if err != nil {
		if len(cs.GetVotersOutgoing()) > 0 {
			return errs.ErrReconfigInProgress
		}
		if strings.Contains(err.Error(), "removed all voters") {
			return errs.ErrNewConfigNoQuorum
		}
		return fmt.Errorf("%w: %v", errs.ErrBadMembership, err)
	}
	if len(out.GetVoters()) == 0 {
		return errs.ErrNewConfigNoQuorum
	}
	return nil
}

// checkForwarded, on the leader, neutralises a forwarded configuration
// change that raft would panic applying: a follower validated it against
// its own, possibly stale, configuration.
func (r *Replica) checkForwarded(m *pb.Message) {
	if m.GetType() != pb.MsgProp || r.leader.Load() != r.cfg.ID || r.confState == nil {
		return
	}
	last, _ := r.mem.LastIndex()
	for i, e := range m.GetEntries() {
		if e.GetType() != pb.EntryConfChangeV2 && e.GetType() != pb.EntryConfChange {
			continue
		}
		cc := &pb.ConfChangeV2{}
		if e.GetType() == pb.EntryConfChange {
			var v1 pb.ConfChange
			if proto.Unmarshal(e.GetData(), &v1) != nil {
				m.GetEntries()[i] = &pb.Entry{Type: pb.EntryNormal.Enum()}
				continue
			}
			cc = v1.AsV2()
		} else if proto.Unmarshal(e.GetData(), cc) != nil {
			m.GetEntries()[i] = &pb.Entry{Type: pb.EntryNormal.Enum()}
			continue
		}
		if _, err := checkConfChange(r.confState, last, cc); err != nil {
			r.log.Warn("refusing a forwarded membership change", "from", m.GetFrom(), "err", err)
			m.GetEntries()[i] = &pb.Entry{Type: pb.EntryNormal.Enum()}
		}
	}
}

// noteAppended (raft loop, per Ready) marks waiters whose change reached
// the log, and fails those proposed on the leader whose change raft
// replaced with an empty entry (another change was pending).
func (r *Replica) noteAppended(ents []*pb.Entry) {
	if len(r.confWaits) == 0 {
		return
	}
	for _, e := range ents {
		if e.GetType() != pb.EntryConfChangeV2 {
			continue
		}
		var cc pb.ConfChangeV2
		if proto.Unmarshal(e.GetData(), &cc) != nil {
			continue
		}
		var c ccContext
		if json.Unmarshal(cc.GetContext(), &c) == nil {
			if w := r.confWaits[c.ReqID]; w != nil {
				w.appended = true
			}
		}
	}
	for id, w := range r.confWaits {
		if w.atLeader && !w.appended {
			delete(r.confWaits, id)
			w.errc <- errs.ErrReconfigInProgress
		}
	}
}

// applyConfChange (raft loop) applies a committed configuration change to
// raft and to the book. It reports whether the change added a member to a
// running group: the caller then snapshots at once, because raft sends a new
// member the latest snapshot and refuses, on the new member's side, one
// whose configuration does not include it yet.
func (r *Replica) applyConfChange(index uint64, cc *pb.ConfChangeV2) bool {
	prev := r.confState
	r.confState = r.rn.ApplyConfChange(cc)
	var c ccContext
	if len(cc.GetContext()) > 0 {
		if err := json.Unmarshal(cc.GetContext(), &c); err != nil {
			r.log.Warn("membership change without a readable context", "err", err)
		}
	}
	nb := book{Peers: slices.Clone(r.book.Peers), Changed: r.book.Changed, Index: index}
	for _, p := range c.Peers {
		nb.upsert(p)
	}
	// A member is dropped from the book once a change takes it out of the
	// configuration (not before it ever entered: the bootstrap adds voters
	// one entry at a time, and configured learners join later).
	nb.Peers = slices.DeleteFunc(nb.Peers, func(p Peer) bool {
		return prev != nil && inConf(prev, p.ID) && !inConf(r.confState, p.ID)
	})
	for i := range nb.Peers {
		if inConf(r.confState, nb.Peers[i].ID) {
			nb.Peers[i].Learner = isLearnerIn(r.confState, nb.Peers[i].ID)
			nb.Peers[i].AutoPromote = nb.Peers[i].AutoPromote && nb.Peers[i].Learner
		}
	}
	if c.ReqID != 0 {
		nb.Changed = true
	}
	r.setBook(nb)
	if w := r.confWaits[c.ReqID]; c.ReqID != 0 && w != nil {
		delete(r.confWaits, c.ReqID)
		w.errc <- nil
	}
	r.log.Info("membership changed", "voters", r.confState.GetVoters(), "learners", r.confState.GetLearners(),
		"outgoing", r.confState.GetVotersOutgoing())
	if prev == nil || len(prev.GetVoters()) == 0 {
		return false // bootstrap
	}
	for _, c := range cc.GetChanges() {
		if !inConf(prev, c.GetNodeId()) && inConf(r.confState, c.GetNodeId()) {
			return true
		}
	}
	return false
}

// setBook (raft loop) installs a new book everywhere it is used.
func (r *Replica) setBook(b book) {
	r.book = b
	peers := slices.Clone(b.Peers)
	r.conf.Store(&confView{peers: peers, index: b.Index})
	if r.tr != nil {
		r.tr.setPeers(r.dialPeers(peers))
	}
	ids := make([]uint64, 0, len(peers))
	var vs []uint64
	for _, p := range peers {
		ids = append(ids, p.ID)
		if !p.Learner {
			vs = append(vs, p.ID)
		}
	}
	if r.lat != nil && r.root == nil { // a group shares the root's probes
		r.lat.SetPeers(ids, vs)
	}
	if r.root == nil {
		r.wakeGroups() // a group's members may have moved: tick until quiet again
	}
	if r.cfg.OnConfigChange != nil {
		r.cfg.OnConfigChange(b.Index)
	}
}

// autoPromote (raft loop, every tick), on the leader, promotes one learner
// that asked for it once it has caught up; retried every election timeout
// until applied.
func (r *Replica) autoPromote() {
	if r.leader.Load() != r.cfg.ID || r.confState == nil || len(r.confState.GetVotersOutgoing()) > 0 || len(r.confWaits) > 0 {
		return
	}
	if r.clock().Sub(r.promoteAsked) < r.cfg.TickInterval*time.Duration(r.cfg.ElectionTicks) {
		return
	}
	var want []Peer
	for _, p := range r.book.Peers {
		if p.AutoPromote && p.Learner && slices.Contains(r.confState.GetLearners(), p.ID) {
			want = append(want, p)
		}
	}
	if len(want) == 0 {
		return
	}
	st := r.rn.Status()
	last, _ := r.mem.LastIndex()
	for _, p := range want {
		pr, ok := st.Progress[p.ID]
		if !ok || pr.State != tracker.StateReplicate || pr.Match+PromoteLag < last {
			continue
		}
		p.Learner, p.AutoPromote = false, false
		cc := &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: pb.ConfChangeAddNode.Enum(), NodeId: proto.Uint64(p.ID)}},
			Context: encodeContext(ccContext{Peers: []Peer{p}})}
		if validateChange(r.confState, last, cc) != nil {
			continue
		}
		r.promoteAsked = r.clock()
		if err := r.rn.ProposeConfChange(cc); err != nil {
			r.log.Debug("propose promotion", "err", err)
		} else {
			r.log.Info("promoting a caught-up learner", "id", p.ID, "match", pr.Match, "last", last)
		}
		return // one change at a time
	}
}

// expireConfWaits (raft loop, every tick) drops waiters whose caller gave
// up, so that the next change is not refused as in progress forever. The
// abandoned change may still be applied.
func (r *Replica) expireConfWaits() {
	for id, w := range r.confWaits {
		if w.ctx.Err() != nil {
			delete(r.confWaits, id)
			w.errc <- w.ctx.Err()
		}
	}
}

// dialPeers is how this member reaches peers: the configuration file's
// address for a member it names (each server may reach the same member by
// its own route, e.g. through a proxy), else the replicated one.
func (r *Replica) dialPeers(peers []Peer) []Peer {
	out := slices.Clone(peers)
	for i := range out {
		if j := slices.IndexFunc(r.cfg.Peers, func(p Peer) bool { return p.ID == out[i].ID }); j >= 0 {
			out[i].Addr = r.cfg.Peers[j].Addr
			if out[i].Identity == "" {
				out[i].Identity = r.cfg.Peers[j].Identity
			}
		}
	}
	return out
}
