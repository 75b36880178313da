package server

// Regional keyspaces on this member: every keyspace in the root group's
// table has its own raft group here (voter or learner, as its placement
// says), with its own state machine (fsm.NewKeyspace) and waiters. A
// request goes to the group that owns its path or object name (groupFor,
// groupForName): proposals to that group's replica, reads from its state.
// Sessions, the leader's duties and cluster settings stay in the root.
//
// A group is opened when this member applies the keyspace's creation (or
// finds it in the table at start-up or after installing a snapshot) and
// closed, its storage dropped, when it applies the removal. A member that
// routes a request before it applied a creation sends it to the root,
// which refuses it (errs.ErrWrongGroup) by then known here, and the
// Future routes it again (propose.go).

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/fsm"
	"github.com/meridian-coord/meridian/internal/placement"
	"github.com/meridian-coord/meridian/internal/replica"
	"github.com/meridian-coord/meridian/internal/tree"
)

// group is a raft group this member runs: the root (id 0) or a keyspace's.
type group struct {
	s       *Server
	id      uint64
	ks      fsm.Keyspace // zero for the root
	rep     *replica.Replica
	fsm     *fsm.FSM
	waiters *waiters
	dutyAt  time.Time // the last tick or reap proposed (keyspaceDuties' goroutine only)
	// endsAt: when each session's end was last proposed here (ditto),
	// so that one in flight is not proposed again every tick.
	endsAt map[int64]time.Time
	// ledSince: since when this member leads the group (zero: it does not).
	ledSince time.Time
	// baseNodes: the znodes of the group's state when new (its "/" and its
	// keyspace's root, which the root group's tree shows as the mount).
	baseNodes int
	// confAt: when the last change of the group's membership was proposed
	// here; warnedAt: when a missing replacement voter was last logged
	// (groupconf.go).
	confAt, warnedAt time.Time
	// writes: the entries proposed through each member while this member
	// led, since writesSince (followWrites; keyspaceDuties' goroutine only).
	writes      map[uint64]uint64
	writesSince time.Time
	// quorumLost: why this member judges the group without a quorum
	// (quorum.go); nil while it does not.
	quorumLost atomic.Pointer[string]
	// quorumApplied, quorumProgress: the applied index checkQuorums last
	// saw and when it last saw it move (duties goroutine only).
	quorumApplied  uint64
	quorumProgress time.Time
	// markedAt: when this member, leading, last proposed the group's
	// dependency marker (duties goroutine only; version.go).
	markedAt time.Time
}

func (g *group) root() bool { return g.id == 0 }

// members are the group's voters and learners now: its configuration
// follows the cluster's membership (groupconf.go), so the keyspace
// table's first configuration may be out of date.
func (g *group) members() (voters, learners []uint64) {
	for _, p := range g.rep.Members() {
		if p.Learner {
			learners = append(learners, p.ID)
		} else {
			voters = append(voters, p.ID)
		}
	}
	return voters, learners
}

// lastZxid is the zxid of the last entry the group applied here.
func (g *group) lastZxid() int64 {
	g.fsm.RLock()
	defer g.fsm.RUnlock()
	return g.fsm.LastZxid()
}

// groups are the keyspaces' groups this member runs, by group id.
type groups struct {
	mu sync.RWMutex
	m  map[uint64]*group
}

func (gs *groups) get(id uint64) *group {
	gs.mu.RLock()
	defer gs.mu.RUnlock()
	return gs.m[id]
}

func (gs *groups) count() int {
	gs.mu.RLock()
	defer gs.mu.RUnlock()
	return len(gs.m)
}

// all returns the groups in id order (the order their locks are taken in
// when several are held at once: root first, then ascending ids).
func (gs *groups) all() []*group {
	gs.mu.RLock()
	defer gs.mu.RUnlock()
	out := make([]*group, 0, len(gs.m))
	for _, g := range gs.m {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b *group) int { return cmp.Compare(a.id, b.id) })
	return out
}

// groupFor is the group that owns path: a keyspace's that runs here, else
// the root (which refuses a path a keyspace owns, see above).
func (s *Server) groupFor(path string) *group {
	s.mu.RLock()
	ks, ok := s.fsm.KeyspaceFor(path)
	s.mu.RUnlock()
	return s.groupOf(ks, ok)
}

// groupForName is the group that owns a coordination object's name.
func (s *Server) groupForName(name string) *group {
	s.mu.RLock()
	ks, ok := s.fsm.KeyspaceForName(name)
	s.mu.RUnlock()
	return s.groupOf(ks, ok)
}

// groupOf is keyspace ks's group when found (ok) and running here, else
// the root.
func (s *Server) groupOf(ks fsm.Keyspace, ok bool) *group {
	if ok {
		if g := s.keyspaceGroups.get(ks.Group); g != nil {
			return g
		}
	}
	return s.root
}

// clocked reports whether proposals carry clock envelopes: once a
// keyspace exists, zxids must be comparable across groups (fsm/clock.go).
func (s *Server) clocked() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.fsm.Keyspaces().Len() > 0
}

// syncKeyspaces opens a group for every keyspace in the table that has
// none here and closes those whose keyspace is gone (start-up, a snapshot
// installed). Called from the root's raft loop or before it serves.
func (s *Server) syncKeyspaces() {
	s.mu.RLock()
	list := s.fsm.Keyspaces().List()
	s.mu.RUnlock()
	want := map[uint64]bool{}
	for _, ks := range list {
		want[ks.Group] = true
		s.openKeyspace(ks)
	}
	for _, g := range s.keyspaceGroups.all() {
		if !want[g.id] {
			s.closeKeyspace(g.id, true)
		}
	}
}

// openKeyspace starts ks's group on this member unless it runs already.
func (s *Server) openKeyspace(ks fsm.Keyspace) {
	s.keyspaceMu.Lock()
	defer s.keyspaceMu.Unlock()
	if s.keyspaceGroups.get(ks.Group) != nil {
		return
	}
	g := &group{s: s, id: ks.Group, ks: ks, waiters: newWaiters()}
	g.baseNodes = fsm.NewKeyspace(fsm.Hooks{}, ks).Tree().NodeCount()
	g.fsm = fsm.NewKeyspace(fsm.Hooks{Applied: s.triggerLocked, Restored: func() { s.restoredKeyspace(g) }}, ks)
	rep, err := s.rep.OpenGroup(replica.GroupConfig{Group: ks.Group, Voters: ks.Voters, Learners: ks.Learners,
		OnLeaderChange: func(leader, term uint64) {
			g.waiters.newTerm(term, time.Now())
			s.leaders.record(ks.Group, leader, term, time.Now())
		},
		ObserveFsync: func(d time.Duration) { s.metrics.fsyncDuration.Observe(d.Seconds()) },
		ObserveStage: func(stage string, d time.Duration) { s.metrics.observeStage(false, stage, d) },
	}, (*groupMachine)(g))
	if err != nil {
		s.log.Error("cannot run a keyspace's group; its requests fail here", "keyspace", ks.Prefix, "group", ks.Group, "err", err)
		return
	}
	g.rep = rep
	s.keyspaceGroups.mu.Lock()
	s.keyspaceGroups.m[ks.Group] = g
	s.keyspaceGroups.mu.Unlock()
	s.log.Info("keyspace group running", "keyspace", ks.Prefix, "group", ks.Group, "home", ks.Region,
		"survival", ks.Survival.String(), "voters", ks.Voters)
	go func() {
		select {
		case <-rep.Failed():
			s.log.Error("keyspace group failed; member stopping", "keyspace", ks.Prefix, "err", rep.FailErr())
			s.fail(fmt.Errorf("keyspace %s: %w", ks.Prefix, rep.FailErr()))
		case <-s.stop:
		}
	}()
}

// closeKeyspace stops group id here and, when drop, deletes its storage.
func (s *Server) closeKeyspace(id uint64, drop bool) {
	s.keyspaceMu.Lock()
	defer s.keyspaceMu.Unlock()
	s.keyspaceGroups.mu.Lock()
	g := s.keyspaceGroups.m[id]
	delete(s.keyspaceGroups.m, id)
	s.keyspaceGroups.mu.Unlock()
	if g == nil {
		return
	}
	s.leaders.forget(id)
	g.rep.Close()
	if drop {
		if err := s.rep.DropGroup(id); err != nil {
			s.log.Warn("dropping a removed keyspace's storage", "group", id, "err", err)
		}
	}
}

// groupMachine is a keyspace group's state machine as its replica drives it.
type groupMachine group

func (m *groupMachine) Apply(index, term uint64, data []byte) error {
	g := (*group)(m)
	r := g.fsm.Apply(index, data)
	if r.Refused != nil {
		return r.Refused // the group's replica fails, and the member with it
	}
	g.afterApply(&r)
	return nil
}

func (m *groupMachine) Snapshot() ([]byte, error) { return m.fsm.Snapshot() }

// SnapshotView lets the group's replica write its snapshots off its loop.
func (m *groupMachine) SnapshotView() (replica.SnapshotView, error) { return m.fsm.View(), nil }

// Restore installs a snapshot of the group; observers, barrier waiters and
// waiting requests whose grant was in the skipped range re-read the
// state, as after the root's (stateMachine.Restore).
func (m *groupMachine) Restore(index uint64, data []byte) error {
	g := (*group)(m)
	if err := g.fsm.Restore(index, data); err != nil {
		return err
	}
	g.fsm.RLock()
	c := g.fsm.Coord()
	g.fsm.RUnlock()
	g.s.obs.notifyAll()
	g.s.barrierObs.notifyAll()
	g.s.regrant(c, func(name string) bool { // the table is the root's: its lock is not held here
		g.s.mu.RLock()
		defer g.s.mu.RUnlock()
		ks, ok := g.s.fsm.KeyspaceForName(name)
		return ok && ks.Group == g.id
	})
	return nil
}

// afterApply is what this member does after a keyspace group applied an
// entry: grants to waiting requests, observers, and the proposer's Future.
// Sessions start and end only in the root group.
func (g *group) afterApply(r *fsm.Result) {
	s := g.s
	if r.Skipped != nil {
		s.log.Error("undecodable log entry skipped", "group", g.id, "index", r.Index, "err", r.Skipped)
		return
	}
	s.afterCoord(r)
	g.waiters.deliver(r.ID, appliedOf(r))
}

// restoredKeyspace is a keyspace fsm's Restored hook: watches below the
// keyspace re-register, as after the root's (restoredLocked).
func (s *Server) restoredKeyspace(g *group) {
	for _, h := range s.hubs.all() {
		s.watches.RemoveAll(h)
		h.reset()
	}
	if s.zk != nil {
		s.zk.closeAllConns(fmt.Sprintf("keyspace %s's state replaced by a leader snapshot", g.ks.Prefix))
	}
}

// createKeyspace places a keyspace for prefix homed in home with the
// survival goal and proposes it to the root group; it returns the
// keyspace as applied. The placement is computed here from the membership
// (regions and zones) and the measured round trips between regions.
func (s *Server) createKeyspace(ctx context.Context, prefix, home string, survival fsm.Survival) (fsm.Keyspace, uint64, error) {
	if err := fsm.ValidKeyspacePrefix(prefix); err != nil {
		return fsm.Keyspace{}, 0, err
	}
	var members []placement.Member
	for _, m := range s.members() {
		members = append(members, placement.Member{ID: m.ID, Region: m.Region, Zone: m.Zone})
	}
	goal := placement.SurviveZone
	if survival == fsm.SurvivalRegion {
		goal = placement.SurviveRegion
	}
	voters, learners, err := placement.Keyspace(members, home, goal, s.regionDistance())
	if err != nil {
		return fsm.Keyspace{}, 0, fmt.Errorf("%w: %v", errs.ErrInvalidKeyspace, err)
	}
	out, err := s.Submit(ctx, keyspaceCommand(&fsm.KeyspaceCommand{Op: fsm.KeyspaceCreate, Prefix: prefix, Region: home,
		Survival: survival, Voters: voters, Learners: learners})).Wait()
	if err == nil {
		err = out.keyspace.Err
	}
	if err != nil {
		return fsm.Keyspace{}, 0, err
	}
	// The group runs here once this member applied the creation (it has:
	// the Future completed in that apply), so requests may follow at once.
	return out.keyspace.Keyspace, out.zxid, nil
}

// removeKeyspace removes an empty keyspace: its group must hold nothing
// but its root znode (checked on its leader's state after a linearizable
// barrier), then the root group removes it from the table.
func (s *Server) removeKeyspace(ctx context.Context, prefix string) (uint64, error) {
	s.mu.RLock()
	ks, ok := s.fsm.KeyspaceFor(prefix)
	s.mu.RUnlock()
	if !ok || ks.Prefix != prefix {
		return 0, errs.ErrNoKeyspace
	}
	if g := s.keyspaceGroups.get(ks.Group); g != nil {
		if err := s.readBarrier(ctx, g, true, 0); err != nil {
			return 0, err
		}
		g.fsm.RLock()
		_, st, err := g.fsm.Tree().Get(prefix)
		empty := err == nil && st.NumChildren == 0 && bytes.Equal(g.fsm.Coord().Snapshot(), coord.New().Snapshot())
		g.fsm.RUnlock()
		if !empty {
			return 0, fmt.Errorf("%w: %s holds znodes or coordination state", errs.ErrKeyspaceNotEmpty, prefix)
		}
	}
	out, err := s.Submit(ctx, keyspaceCommand(&fsm.KeyspaceCommand{Op: fsm.KeyspaceRemove, Prefix: prefix})).Wait()
	if err == nil {
		err = out.keyspace.Err
	}
	return out.zxid, err
}

// regionDistance is the measured round trip between two regions: the
// median of the round trips between their members, from this member's
// view (the round trips it measured itself); false when unmeasured.
func (s *Server) regionDistance() func(from, to string) (time.Duration, bool) {
	region := map[uint64]string{}
	for _, m := range s.members() {
		region[m.ID] = m.Region
	}
	rtt := map[[2]string][]time.Duration{}
	self := region[s.cfg.ID]
	for _, p := range s.rep.Latency().Peers {
		if p.Net.Count == 0 {
			continue
		}
		k := [2]string{self, region[p.Peer]}
		rtt[k] = append(rtt[k], p.Net.P50)
		rtt[[2]string{k[1], k[0]}] = append(rtt[[2]string{k[1], k[0]}], p.Net.P50)
	}
	return func(from, to string) (time.Duration, bool) {
		ds := rtt[[2]string{from, to}]
		if len(ds) == 0 {
			return 0, false
		}
		slices.Sort(ds)
		return ds[len(ds)/2], true
	}
}

// lazyDistance is regionDistance, computed on its first use and kept: the
// latency summary behind it is costly (it was most of an idle member's
// CPU when every round computed it for every keyspace the member leads),
// and a round needs it only to replace a voter that left.
func (s *Server) lazyDistance() func(from, to string) (time.Duration, bool) {
	var d func(from, to string) (time.Duration, bool)
	return func(from, to string) (time.Duration, bool) {
		if d == nil {
			d = s.regionDistance()
		}
		return d(from, to)
	}
}

// barrierAll brings every group this member runs up to what v requires
// (viewBarrier): a client resuming its session, or re-registering watches
// anywhere in the tree (a watch stream), must find every group at least
// as fresh as what it saw. With spareLost, a keyspace that has no quorum
// (errs.ErrNoQuorumRead) does not fail the barrier: it stays below v's
// floor, so the client's first read of it waits (or fails) then; a
// resume must not cost a session that may never use that keyspace.
func (s *Server) barrierAll(ctx context.Context, v *view, spareLost bool) error {
	if err := s.viewBarrier(ctx, s.root, false, v); err != nil {
		return err
	}
	for _, g := range s.keyspaceGroups.all() {
		if err := s.viewBarrier(ctx, g, false, v); err != nil && !(spareLost && errors.Is(err, errs.ErrNoQuorumRead)) {
			return err
		}
	}
	return nil
}

// wholeTree read-locks every group's state, the root's first, then the
// keyspaces' by id (the one order in which several are held), and returns
// a reader over all of them with the unlock.
func (s *Server) wholeTree() (wholeReader, func()) {
	gs := s.keyspaceGroups.all()
	s.mu.RLock()
	for _, g := range gs {
		g.fsm.RLock()
	}
	r := wholeReader{s: s, groups: map[uint64]*group{}, at: s.fsm.LastZxid()}
	for _, g := range gs {
		r.groups[g.id] = g
		r.at = max(r.at, g.fsm.LastZxid())
	}
	return r, func() {
		for i := len(gs) - 1; i >= 0; i-- {
			gs[i].fsm.RUnlock()
		}
		s.mu.RUnlock()
	}
}

// wholeReader reads a node from the group that owns it (watch.NodeReader);
// At is the highest zxid any group has applied, a bound on the change a
// missing node's deletion was (the client counts it as seen).
type wholeReader struct {
	s      *Server
	groups map[uint64]*group
	at     int64
}

func (r wholeReader) Exists(path string) (tree.Stat, error) { return r.treeFor(path).Exists(path) }

// treeFor is the tree of the group that owns path (the root's when the
// keyspace's group does not run here: the root then has no such node).
func (r wholeReader) treeFor(path string) *tree.Tree {
	if ks, ok := r.s.fsm.KeyspaceFor(path); ok {
		if g := r.groups[ks.Group]; g != nil {
			return g.fsm.Tree()
		}
	}
	return r.s.fsm.Tree()
}

func (r wholeReader) At() int64 { return r.at }

// locks are the locks named with prefix in every group, by name, at most
// limit.
func (r wholeReader) locks(prefix string, limit int) []coord.LockInfo {
	out := r.s.fsm.Coord().List(prefix, limit)
	for _, g := range r.groups {
		out = append(out, g.fsm.Coord().List(prefix, limit)...)
	}
	slices.SortFunc(out, func(a, b coord.LockInfo) int { return cmp.Compare(a.Name, b.Name) })
	return out[:min(len(out), limit)]
}

// lock is the lock name as its group has it.
func (r wholeReader) lock(name string) (coord.LockInfo, bool) {
	if ks, ok := r.s.fsm.KeyspaceForName(name); ok {
		if g := r.groups[ks.Group]; g != nil {
			return g.fsm.Coord().Get(name)
		}
	}
	return r.s.fsm.Coord().Get(name)
}

// ephemerals are session's ephemeral znodes under prefix in every group
// (ZooKeeper's getEphemerals), sorted.
func (r wholeReader) ephemerals(session int64, prefix string) []string {
	out := r.s.fsm.Tree().Ephemerals(session, prefix)
	for _, g := range r.groups {
		out = append(out, g.fsm.Tree().Ephemerals(session, prefix)...)
	}
	slices.Sort(out)
	return out
}

// coordOf read-locks the group owning the coordination object name and
// returns its state, its last zxid and the unlock.
func (s *Server) coordOf(name string) (*coord.State, uint64, func()) {
	g := s.groupForName(name)
	g.fsm.RLock()
	return g.fsm.Coord(), uint64(g.fsm.LastZxid()), g.fsm.RUnlock
}

// ---- the native API's keyspace methods ----

func (a *api) CreateKeyspace(ctx context.Context, r *pb.KeyspaceRequest) (*pb.KeyspaceResponse, error) {
	survival := fsm.SurvivalZone
	switch r.GetSurvival() {
	case "", "zone":
	case "region":
		survival = fsm.SurvivalRegion
	default:
		return nil, a.done("CreateKeyspace", fmt.Errorf("%w: survival %q: zone or region", errs.ErrInvalidKeyspace, r.GetSurvival()))
	}
	ks, zxid, err := a.s.createKeyspace(ctx, r.GetPrefix(), r.GetHome(), survival)
	if err != nil {
		return nil, a.done("CreateKeyspace", err)
	}
	return &pb.KeyspaceResponse{Header: a.header(zxid), Keyspace: a.s.keyspaceInfo(ks)}, a.done("CreateKeyspace", nil)
}

func (a *api) RemoveKeyspace(ctx context.Context, r *pb.KeyspaceRequest) (*pb.KeyspaceResponse, error) {
	zxid, err := a.s.removeKeyspace(ctx, r.GetPrefix())
	if err != nil {
		return nil, a.done("RemoveKeyspace", err)
	}
	return &pb.KeyspaceResponse{Header: a.header(zxid), Keyspace: &pb.Keyspace{Prefix: r.GetPrefix()}}, a.done("RemoveKeyspace", nil)
}

func (a *api) ListKeyspaces(ctx context.Context, r *pb.ListKeyspacesRequest) (*pb.ListKeyspacesResponse, error) {
	if err := a.s.readBarrier(ctx, a.s.root, true, 0); err != nil {
		return nil, a.done("ListKeyspaces", err)
	}
	a.s.mu.RLock()
	list := a.s.fsm.Keyspaces().List()
	a.s.mu.RUnlock()
	out := &pb.ListKeyspacesResponse{Header: a.header(0)}
	for _, ks := range list {
		out.Keyspaces = append(out.Keyspaces, a.s.keyspaceInfo(ks))
	}
	return out, a.done("ListKeyspaces", nil)
}

// keyspaceInfo is ks as the API shows it, with this member's view of its
// group.
func (s *Server) keyspaceInfo(ks fsm.Keyspace) *pb.Keyspace {
	out := &pb.Keyspace{Prefix: ks.Prefix, Home: ks.Region, Survival: ks.Survival.String(), Group: ks.Group,
		Voters: slices.Clone(ks.Voters), Learners: slices.Clone(ks.Learners)}
	if g := s.keyspaceGroups.get(ks.Group); g != nil {
		out.LeaderId, out.LastZxid = g.rep.Leader(), g.lastZxid()
		out.Voters, out.Learners = g.members()
	}
	return out
}

// ---- a keyspace group's duties, on its leader ----

// endedSessions remembers how recent sessions ended in the root (closed
// or expired), so that a keyspace group's leader ends them there the same
// way: an expiry applies lock-delays, a close does not. Bounded: the oldest
// half is forgotten past maxRememberedEnds (an end it forgets is then
// proposed as an expiry).
type endedSessions struct {
	mu      sync.Mutex
	expired map[int64]bool
	order   []int64
}

const maxRememberedEnds = 100_000

func (e *endedSessions) add(id int64, expired bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.expired == nil {
		e.expired = map[int64]bool{}
	}
	if len(e.order) >= maxRememberedEnds {
		for _, old := range e.order[:maxRememberedEnds/2] {
			delete(e.expired, old)
		}
		e.order = append(e.order[:0], e.order[maxRememberedEnds/2:]...)
	}
	e.expired[id] = expired
	e.order = append(e.order, id)
}

// closed reports whether id ended by its client's close, as far as known.
func (e *endedSessions) closed(id int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.expired[id]
	return ok && !exp
}

// keyspaceDuties (every tick) has this member, for each keyspace group it
// leads, hand the leadership to a voter of the home region if this member
// is not in it; and otherwise end there the sessions the root no longer knows (a session's
// ephemerals, locks, leases and barrier entries in a keyspace go with it:
// closes one by one, expiries in batches), and propose the group's own
// coordination tick and reaping when due. A lost proposal is proposed
// again on a later tick (at most every groupDutyEvery per group).
func (s *Server) keyspaceDuties(now time.Time) {
	members := s.members()
	region := map[uint64]string{}
	for _, m := range members {
		region[m.ID] = m.Region
	}
	distance := s.lazyDistance()
	for _, g := range s.keyspaceGroups.all() {
		if !g.rep.IsLeader() {
			g.endsAt, g.ledSince, g.writes = nil, time.Time{}, nil
			g.rep.TakeProposalOrigins()
			continue
		}
		if g.ledSince.IsZero() {
			g.ledSince = now
		}
		s.followMembership(g, members, distance, now)
		s.markDeps(g, now, s.cfg.tick()*time.Duration(s.cfg.ElectionTicks))
		// Not at once: a leader that just took over away from home (an
		// operator's move, the home voters' trouble) leads a while first,
		// and a hand-off is not repeated while one is under way.
		if region[s.cfg.ID] != g.ks.Region && now.Sub(g.ledSince) >= groupDutyEvery && now.Sub(g.dutyAt) >= groupDutyEvery {
			// A region-survival keyspace's leader belongs in its home
			// region (the voters there commit with the nearest other
			// region): hand leadership to the first home voter that
			// answers the latency probes. Not to one that does not: raft
			// refuses proposals while a transfer is under way, so every
			// attempt at a lost home region stalled writes for an
			// election timeout. The group's voters now, not the table's
			// first ones (groupconf.go).
			voters, silent := g.rep.SilentVoters(now, 1)
			for _, v := range voters {
				if region[v] == g.ks.Region && !slices.Contains(silent, v) {
					g.dutyAt = now
					go func(rep *replica.Replica, to uint64) {
						ctx, cancel := context.WithTimeout(context.Background(), s.cfg.requestTimeout())
						defer cancel()
						if err := rep.TransferLeadership(ctx, to); err != nil {
							s.log.Debug("keyspace leader home", "keyspace", g.ks.Prefix, "to", to, "err", err)
						}
					}(g.rep, v)
					break
				}
			}
			continue
		}
		if s.followWrites(g, now, region) {
			continue
		}
		g.fsm.RLock()
		participants := g.fsm.Participants()
		needTick := g.fsm.Coord().NeedsTick(now.UnixMilli())
		needReap := g.fsm.Tree().NeedsReap(now.UnixMilli())
		g.fsm.RUnlock()
		var expire []int64
		var closed []int64
		if g.endsAt == nil {
			g.endsAt = map[int64]time.Time{}
		}
		for id, at := range g.endsAt {
			if now.Sub(at) >= groupDutyEvery {
				delete(g.endsAt, id)
			}
		}
		s.mu.RLock()
		rootZxid := s.fsm.LastZxid()
		for _, id := range participants {
			if _, live := s.mu.tree.Session(id); live {
				continue
			}
			// A session's id is the zxid of its creation in the root:
			// above what the root applied here, it was created after this
			// member's root state, which does not know it yet. Its
			// absence is not its end (the root's lag is not the
			// session's).
			if id > rootZxid {
				continue
			}
			if _, inFlight := g.endsAt[id]; inFlight {
				continue
			}
			g.endsAt[id] = now
			if s.ended.closed(id) {
				closed = append(closed, id)
			} else if len(expire) < tree.MaxExpireBatch {
				expire = append(expire, id)
			}
		}
		s.mu.RUnlock()
		duty := func(p proposal) {
			if _, err := s.Submit(context.Background(), leaderDuty(inGroup{p, g})).Wait(); err != nil {
				s.log.Debug("keyspace duty", "keyspace", g.ks.Prefix, "err", err)
			}
		}
		for _, id := range closed {
			duty(treeCommand(&tree.Command{Session: id, Op: tree.Op{Type: tree.OpCloseSession}}))
		}
		if len(expire) > 0 {
			duty(treeCommand(&tree.Command{Op: tree.Op{Type: tree.OpExpire}, Sessions: expire}))
		}
		if (needTick || needReap) && now.Sub(g.dutyAt) >= groupDutyEvery {
			g.dutyAt = now
			if needTick {
				duty(coordCommand(&coord.Command{Op: coord.OpTick}))
			}
			if needReap {
				duty(treeCommand(&tree.Command{Op: tree.Op{Type: tree.OpReap}}))
			}
		}
	}
}

// Keyspace leadership follows its writes inside the home region.
//
// A write that reaches a follower is forwarded to the leader and answered
// only once the follower has learnt of its commit and applied it: one
// more intra-region round trip and another turn of two raft loops, which
// the keyspaces benchmark measured as doubling the write's latency (a
// client's nearest server is a home voter, but the election picks any of
// the three). With placement: auto, a keyspace group's leader therefore
// counts the entries proposed through each member (replica's
// TakeProposalOrigins) over followWindow and hands leadership to the home
// voter through which most of them came, when that is more than half of
// them, at least twice its own, and at least followMinWrites; it leads at
// least PlacementMinIntervalMs before handing over, so that two members
// sharing the writes do not pass leadership back and forth.
const (
	followWindow    = 2 * time.Second
	followMinWrites = 20
)

// followWrites is that rule for group g, led here (keyspaceDuties'
// goroutine): it reports whether it started a hand-off.
func (s *Server) followWrites(g *group, now time.Time, region map[uint64]string) bool {
	if s.cfg.Placement != "auto" {
		g.rep.TakeProposalOrigins()
		return false
	}
	if g.writes == nil {
		g.writes, g.writesSince = map[uint64]uint64{}, now
	}
	var total uint64
	for id, n := range g.rep.TakeProposalOrigins() {
		g.writes[id] += n
	}
	if now.Sub(g.writesSince) < followWindow {
		return false
	}
	counts := g.writes
	g.writes, g.writesSince = map[uint64]uint64{}, now
	var to uint64
	voters, _ := g.members()
	for id, n := range counts {
		total += n
		if id != s.cfg.ID && region[id] == g.ks.Region && slices.Contains(voters, id) && n > counts[to] {
			to = id
		}
	}
	minLead := time.Duration(s.cfg.PlacementMinIntervalMs) * time.Millisecond
	if to == 0 || total < followMinWrites || 2*counts[to] <= total || counts[to] < 2*counts[s.cfg.ID] ||
		now.Sub(g.ledSince) < minLead || now.Sub(g.dutyAt) < groupDutyEvery {
		return false
	}
	g.dutyAt = now
	s.log.Info("keyspace leadership follows its writes", "keyspace", g.ks.Prefix, "to", to,
		"writes_through_it", counts[to], "writes_here", counts[s.cfg.ID], "writes", total)
	go func(rep *replica.Replica) {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.requestTimeout())
		defer cancel()
		if err := rep.TransferLeadership(ctx, to); err != nil {
			s.log.Debug("keyspace leadership to its writes", "keyspace", g.ks.Prefix, "to", to, "err", err)
		}
	}(g.rep)
	return true
}

// groupDutyEvery spaces a keyspace group's duty proposals (a session's
// end, its tick, its reaping), so that one still in flight is not
// proposed again every tick.
const groupDutyEvery = 500 * time.Millisecond

// treeCounts are the znodes and ephemerals of the whole tree (the root
// group's and every keyspace's, each znode once) and the live sessions
// (the root's: keyspace groups only adopt them).
func (s *Server) treeCounts() (nodes, ephemerals, sessions int) {
	s.mu.RLock()
	nodes, ephemerals, sessions = s.mu.tree.NodeCount(), s.mu.tree.EphemeralCount(), s.mu.tree.SessionCount()
	s.mu.RUnlock()
	for _, g := range s.keyspaceGroups.all() {
		g.fsm.RLock()
		nodes += g.fsm.Tree().NodeCount() - g.baseNodes
		ephemerals += g.fsm.Tree().EphemeralCount()
		g.fsm.RUnlock()
	}
	return nodes, ephemerals, sessions
}
