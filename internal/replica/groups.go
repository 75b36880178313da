package replica

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/meridian-coord/meridian/internal/errs"
)

// Several raft groups on one member.
//
// The replica Open returns is the member's root group: it owns the Pebble
// store, the peer transport (one authenticated connection per member pair)
// and the latency probes. OpenGroup starts another group on the same
// member that shares all three: its log and snapshots live in the same
// store under the group's key prefix (storage.go), its messages travel the
// root's connections in group frames (transport.go), and its tick follows
// the same measured round trips. Each group has its own raft loop, state
// machine, log, leader and snapshots; a group knows nothing of the others.
//
// A group is born the same on every member: its first configuration
// (which members vote, which only learn) is decided by whoever creates it
// (the server, from a command in the root group's log) and given to
// OpenGroup on every member, which writes it as the group's first snapshot
// (index 1, term 1) before raft starts. No member bootstraps it alone and
// no configuration change is needed, so members that open it at different
// times still agree on its history; a member that opens it late catches up
// from the others like any lagging follower.
//
// An idle group quiesces (quiesce.go): once every member's log matches
// its leader's and nothing is pending, the leader tells the members and
// all of them stop ticking it, so it sends no heartbeats; any proposal,
// read or message wakes it, and a quiesced follower whose leader stops
// answering the root's latency probes for an election timeout ticks again
// so that raft elects another. The root never quiesces: its heartbeats
// carry the failure detection and session keepalives every member relies
// on. GroupConfig.NeverQuiesce keeps a group ticking.
//
// A group's membership follows the root's through the group's own
// configuration changes, which its leader proposes (the server's keyspace
// duties): a member added to the cluster joins every group as a learner,
// one removed leaves them. An address change reaches a group's book only
// through a new configuration of that group.

// groupEventQueue bounds a group's queue of transport reports
// (unreachable peers, snapshots sent, step-down and quiesce notices), which
// are rare and, but for snapshot reports, dropped when it is full; the
// root's 1,024 would be 48 KiB of heap per group on every member.
const groupEventQueue = 64

// MaxGroups bounds the groups one member runs besides its root group;
// OpenGroup refuses more with errs.ErrTooManyGroups.
const MaxGroups = 1000

// GroupConfig describes a raft group other than the root.
type GroupConfig struct {
	// Group identifies the group on every member: non-zero, unique.
	Group uint64
	// Voters and Learners are the group's first configuration, the same on
	// every member: member ids of the root group's address book, disjoint,
	// at least one voter; a member in neither does not take part. Ignored
	// when the group already has state on this member.
	Voters, Learners []uint64
	// NeverQuiesce keeps the group ticking when idle (quiesce.go); by
	// default an idle group quiesces, unless the root sends no latency
	// probes (Config.ProbeInterval < 0) to watch its leader with.
	NeverQuiesce bool
	// OnLeaderChange, OnConfigChange, ObserveFsync, ObserveStage: as in
	// Config.
	OnLeaderChange func(leader, term uint64)
	OnConfigChange func(index uint64)
	ObserveFsync   func(time.Duration)
	ObserveStage   func(stage string, d time.Duration)
}

// OpenGroup starts group gc.Group on this member (the root replica), over
// sm, sharing the root's store and connections; an existing group's state
// is restored from the store. The group stops with Close, or when the root
// closes.
func (r *Replica) OpenGroup(gc GroupConfig, sm StateMachine) (*Replica, error) {
	return r.openGroup(gc, sm, nil)
}

// openGroup is OpenGroup; wrap, if set, stands between the group and the
// transport (tests that lose messages).
func (r *Replica) openGroup(gc GroupConfig, sm StateMachine, wrap func(Network) Network) (*Replica, error) {
	if r.root != nil {
		return nil, errors.New("replica: groups are opened on the root group")
	}
	if gc.Group == 0 {
		return nil, errors.New("replica: group 0 is the root group")
	}
	if r.stopped() {
		return nil, errs.ErrStopped
	}
	r.groupMu.Lock()
	defer r.groupMu.Unlock()
	if _, ok := r.groups[gc.Group]; ok {
		return nil, fmt.Errorf("replica: group %d already runs on this member", gc.Group)
	}
	if len(r.groups) >= MaxGroups {
		return nil, fmt.Errorf("%w: %d groups run on this member", errs.ErrTooManyGroups, len(r.groups))
	}
	cfg := r.cfg
	cfg.Logger = r.cfg.Logger.With("group", gc.Group)
	cfg.OnLeaderChange, cfg.OnConfigChange, cfg.ObserveFsync = gc.OnLeaderChange, gc.OnConfigChange, gc.ObserveFsync
	cfg.ObserveStage = gc.ObserveStage
	cfg.OnSideMessage = nil
	cfg.Join = false
	cfg.defaults()
	d := r.disk.group(gc.Group)
	peers, err := groupPeers(r.Members(), gc)
	if err != nil {
		return nil, err
	}
	cfg.Peers = peers
	if err := bootstrapGroup(d, peers, gc, sm); err != nil {
		return nil, fmt.Errorf("replica: group %d: %w", gc.Group, err)
	}
	g, _, err := newReplica(cfg, sm, d, nil)
	if err != nil {
		return nil, fmt.Errorf("replica: group %d: %w", gc.Group, err)
	}
	g.root, g.group, g.disk, g.lat = r, gc.Group, d, r.lat
	g.net = transportNetwork{t: r.tr, group: gc.Group}
	if wrap != nil {
		g.net = wrap(g.net)
	}
	g.quiesce.enabled, g.quiesce.started = !gc.NeverQuiesce && cfg.ProbeInterval > 0, time.Now()
	g.propc, g.recvc = make(chan proposal, 1024), make(chan *pb.Message, 4096)
	g.readc, g.eventc = make(chan *readReq, 1024), make(chan loopEvent, groupEventQueue)
	g.transferc, g.campaignc, g.statusc = make(chan uint64, 1), make(chan chan error), make(chan chan Status)
	g.confc = make(chan confReq)
	if err := r.tr.addGroup(gc.Group, (*events)(g)); err != nil {
		return nil, err
	}
	if r.groups == nil {
		r.groups = map[uint64]*Replica{}
	}
	r.groups[gc.Group] = g
	g.snaps.async = make(chan snapResult, 1)
	go g.loop()
	return g, nil
}

// NewGroupNode is NewNode for a group other than the root, born as
// OpenGroup makes it: cfg.Peers is the root group's address book, gc the
// group's first configuration (the same on every member), and an empty
// store first gets the group's first snapshot (bootstrapGroup). A Node
// does not quiesce.
func NewGroupNode(cfg Config, gc GroupConfig, sm StateMachine, store Storage, net Network, opts NodeOptions) (*Node, error) {
	if gc.Group == 0 {
		return nil, errors.New("replica: group 0 is the root group")
	}
	peers, err := groupPeers(cfg.Peers, gc)
	if err != nil {
		return nil, err
	}
	cfg.Peers, cfg.Join = peers, false
	if err := bootstrapGroup(store, peers, gc, sm); err != nil {
		return nil, fmt.Errorf("replica: group %d: %w", gc.Group, err)
	}
	n, err := NewNode(cfg, sm, store, net, opts)
	if err != nil {
		return nil, fmt.Errorf("replica: group %d: %w", gc.Group, err)
	}
	n.r.group = gc.Group
	return n, nil
}

// Group is this replica's group id (0: the root group).
func (r *Replica) Group() uint64 { return r.group }

// groupPeers is the group's address book: the root's members that take
// part, learners marked.
func groupPeers(members []Peer, gc GroupConfig) ([]Peer, error) {
	if len(gc.Voters) == 0 {
		return nil, errors.New("replica: a group needs a voter")
	}
	role := map[uint64]bool{} // id -> learner
	for _, id := range gc.Voters {
		if _, dup := role[id]; dup || id == 0 {
			return nil, fmt.Errorf("replica: group member %d listed twice or zero", id)
		}
		role[id] = false
	}
	for _, id := range gc.Learners {
		if _, dup := role[id]; dup || id == 0 {
			return nil, fmt.Errorf("replica: group member %d listed twice or zero", id)
		}
		role[id] = true
	}
	var out []Peer
	for _, p := range members {
		learner, ok := role[p.ID]
		if !ok {
			continue
		}
		p.Learner, p.AutoPromote, p.Meta = learner, false, slices.Clone(p.Meta)
		out = append(out, p)
		delete(role, p.ID)
	}
	// An id of the group's first configuration that is no longer a member
	// of the cluster (removed since) has no address: it stays in the first
	// configuration, the same on every member, until the group's leader
	// removes it from the group, and nothing is sent to it.
	slices.SortFunc(out, func(x, y Peer) int { return cmpU64(x.ID, y.ID) })
	return out, nil
}

// groupStart is the index and term of a group's first snapshot.
const groupStart = 1

// bootstrapGroup writes a new group's first snapshot (its configuration
// and sm's empty state) unless the group already has state in d.
func bootstrapGroup(d Storage, peers []Peer, gc GroupConfig, sm StateMachine) error {
	hs, snap, ents, err := d.Load()
	if err != nil {
		return err
	}
	if !raft.IsEmptyHardState(hs) || !raft.IsEmptySnap(snap) || len(ents) > 0 {
		return nil
	}
	data, err := sm.Snapshot()
	if err != nil {
		return err
	}
	cs := &pb.ConfState{Voters: slices.Clone(gc.Voters), Learners: slices.Clone(gc.Learners)}
	slices.Sort(cs.Voters)
	slices.Sort(cs.Learners)
	first := &pb.Snapshot{
		Data:     wrapSnapshot(book{Peers: peers, Index: groupStart}, data),
		Metadata: &pb.SnapshotMetadata{ConfState: cs, Index: new(uint64(groupStart)), Term: new(uint64(groupStart))},
	}
	return d.Save(&pb.HardState{Term: new(uint64(groupStart)), Commit: new(uint64(groupStart))}, nil, first, true)
}

// closeGroups closes every group (the root's Close, before the transport
// and the store they share).
func (r *Replica) closeGroups() {
	r.groupMu.Lock()
	gs := make([]*Replica, 0, len(r.groups))
	for _, g := range r.groups {
		gs = append(gs, g)
	}
	r.groupMu.Unlock()
	for _, g := range gs {
		g.Close()
	}
}

// closeGroup is a group's Close: its loop stops and its frames are
// dropped from now on; the store and the connections stay the root's.
func (r *Replica) closeGroup() {
	close(r.stopc)
	<-r.donec
	r.root.tr.removeGroup(r.group)
	r.root.groupMu.Lock()
	delete(r.root.groups, r.group)
	r.root.groupMu.Unlock()
}

// DropGroup deletes a closed group's state from the store (a group whose
// keyspace was removed). It refuses while the group runs.
func (r *Replica) DropGroup(group uint64) error {
	if r.root != nil || group == 0 {
		return errors.New("replica: groups are dropped by the root group")
	}
	r.groupMu.Lock()
	_, running := r.groups[group]
	r.groupMu.Unlock()
	if running {
		return fmt.Errorf("replica: group %d still runs", group)
	}
	return r.disk.group(group).drop()
}
