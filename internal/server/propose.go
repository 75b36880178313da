package server

// The proposer: Submit hands a command to raft and returns its Future,
// which Wait turns into the applied result. Every proposal of this member
// goes through it: a request's tree write (plain or fenced), a
// coordination command, and the leader's duties (expiry, reaping, the coord
// tick), which are submitted without a waiter.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/fsm"
	"github.com/meridian-coord/meridian/internal/tree"
	"github.com/meridian-coord/meridian/internal/wire"
)

// proposal is a command Submit can hand to raft: encode stamps it with its
// proposal id and the proposer's clock and returns the id and the log
// entry's bytes.
type proposal interface {
	encode(s *Server, nowMs int64) (id uint64, data []byte, err error)
	// route is the raft group that owns what the proposal acts on
	// (keyspaces.go); errs.ErrCrossKeyspace when that is several.
	route(s *Server) (*group, error)
}

// treeProposal is a tree command; it always gets a fresh proposal id.
type treeProposal tree.Command

// treeCommand makes cmd a proposal (a conversion, no allocation).
func treeCommand(cmd *tree.Command) proposal { return (*treeProposal)(cmd) }

func (p *treeProposal) encode(s *Server, nowMs int64) (uint64, []byte, error) {
	cmd := (*tree.Command)(p)
	cmd.ID = s.nextID()
	cmd.TimeMs = nowMs
	data, err := tree.EncodeCommand(cmd)
	return cmd.ID, data, err
}

func (p *treeProposal) route(s *Server) (*group, error) {
	cmd := (*tree.Command)(p)
	ops := cmd.Ops
	if cmd.Op.Type != tree.OpMulti {
		ops = []tree.Op{cmd.Op}
	}
	var g *group
	for _, op := range ops {
		h := s.root
		if op.Path != "" { // session commands name no path: the root's
			h = s.groupFor(op.Path)
		}
		if g != nil && h != g {
			return nil, errs.ErrCrossKeyspace
		}
		g = h
	}
	if g == nil {
		g = s.root
	}
	return g, nil
}

// coordProposal is a coordination command. A caller that must know the
// proposal id beforehand (a pop registers its grant under it) sets c.ID
// itself; otherwise it gets a fresh one.
type coordProposal coord.Command

func coordCommand(c *coord.Command) proposal { return (*coordProposal)(c) }

func (p *coordProposal) encode(s *Server, nowMs int64) (uint64, []byte, error) {
	c := (*coord.Command)(p)
	if c.ID == 0 {
		c.ID = s.nextID()
	}
	c.TimeMs = nowMs
	data, err := coord.Encode(c)
	return c.ID, data, err
}

// route: the object's group; the coordination tick and cluster settings
// are the root's.
func (p *coordProposal) route(s *Server) (*group, error) {
	if p.Op == coord.OpTick || p.Op == coord.OpSetting {
		return s.root, nil
	}
	return s.groupForName(p.Name), nil
}

// fencedProposal wraps a tree write so it applies only while token is the
// lock's current token (coord.OpFenced); the check and the write are one
// apply. The result arrives as a tree result.
type fencedProposal struct {
	cmd   *tree.Command
	lock  string
	token uint64
}

func fencedCommand(cmd *tree.Command, lock string, token uint64) proposal {
	return &fencedProposal{cmd: cmd, lock: lock, token: token}
}

func (p *fencedProposal) encode(s *Server, nowMs int64) (uint64, []byte, error) {
	if err := coord.ValidName(p.lock); err != nil {
		return 0, nil, err
	}
	p.cmd.TimeMs = nowMs
	inner, err := tree.EncodeCommand(p.cmd)
	if err != nil {
		return 0, nil, err
	}
	c := &coord.Command{ID: s.nextID(), TimeMs: nowMs, Session: p.cmd.Session, Op: coord.OpFenced,
		Name: p.lock, Token: p.token, Inner: inner}
	data, err := coord.Encode(c)
	return c.ID, data, err
}

// route: the lock's group, which must own the write too (its apply refuses
// a write elsewhere: errs.ErrCrossKeyspace).
func (p *fencedProposal) route(s *Server) (*group, error) {
	g, err := (*treeProposal)(p.cmd).route(s)
	if err != nil {
		return nil, err
	}
	if h := s.groupForName(p.lock); h != g {
		return nil, errs.ErrCrossKeyspace
	}
	return g, nil
}

// keyspaceProposal is a keyspace command: the root group's.
type keyspaceProposal fsm.KeyspaceCommand

func keyspaceCommand(c *fsm.KeyspaceCommand) proposal { return (*keyspaceProposal)(c) }

func (p *keyspaceProposal) encode(s *Server, nowMs int64) (uint64, []byte, error) {
	c := (*fsm.KeyspaceCommand)(p)
	c.ID, c.TimeMs = s.nextID(), nowMs
	data, err := fsm.EncodeKeyspaceCommand(c)
	return c.ID, data, err
}

func (p *keyspaceProposal) route(s *Server) (*group, error) { return s.root, nil }

// dutyProposal is a command of the leader's duties: proposed once, bounded
// by an election timeout, with no waiter (nobody waits for its result, and
// the next tick proposes again if it was lost), and not counted as a
// client write in the placement load.
type dutyProposal struct{ proposal }

// inGroup proposes p to group g whatever it names (a group's own duties).
type inGroup struct {
	proposal
	g *group
}

func (p inGroup) route(*Server) (*group, error) { return p.g, nil }

func leaderDuty(p proposal) proposal { return dutyProposal{p} }

// applied is what a Future's Wait returns: the zxid the command applied
// at (its log index unless it came in a clock envelope) and its result
// (res for tree commands and fenced writes, coord for coordination
// commands, keyspace for keyspace commands).
type applied struct {
	index    uint64 // the entry's log index in its group
	zxid     uint64
	res      tree.Result
	coord    coord.Result // for coordination commands
	keyspace fsm.KeyspaceResult
	err      error // set when the outcome became unknowable (leader change)
}

// appliedOf is the Future's result of an applied entry.
func appliedOf(r *fsm.Result) applied {
	return applied{index: r.Index, zxid: uint64(r.Zxid), res: r.TreeResult, coord: r.CoordResult, keyspace: r.KeyspaceResult}
}

// refused reports whether an applied result is a refusal that applied
// nothing and that proposing again fixes: by a group that does not own
// the request (routed before this member knew of a keyspace), or of an
// entry without dependencies by a group past its dependency marker
// (encoded before this member saw the cluster version rise).
func (a applied) refused() bool {
	for _, err := range []error{a.res.Err, a.coord.Err, a.keyspace.Err} {
		if errors.Is(err, errs.ErrWrongGroup) || errors.Is(err, errs.ErrClusterVersion) {
			return true
		}
	}
	return false
}

// Future is a submitted proposal. Done is closed once its outcome is known
// (applied on this member, failed to submit, or unknowable after a leader
// change); Wait returns it, or a timeout when the request's deadline
// passes first. Wait is for one goroutine: the one that submitted.
type Future struct {
	s      *Server
	g      *group // the group proposed to
	p      proposal
	parent context.Context // what Submit was given, for a routed retry
	view   *view           // viewOf(parent), looked up while it is fresh in the cache
	tries  int             // routed retries so far
	id     uint64          // 0: not registered with the waiters (failed, or a duty)
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	err    error // the submission's error (done is closed)

	// Guarded by g.waiters.mu.
	term       uint64    // raft term when proposed
	staleSince time.Time // when its term ended (zero: not yet)

	result applied // written once, by whoever removes it from the waiters, before done is closed
	// When it was submitted, raft's loop took it (and whether this member
	// led then) and its result was delivered: meridian_proposal_stage_seconds.
	submitted, proposed, delivered time.Time
	proposedOnLeader               bool

	// WaitOnce's outcome once known: outErr, or result when it is nil
	// (not a copy of it: a Future is allocated per write).
	waited bool
	outErr error
}

// Done is closed when the outcome is known; Wait then returns at once.
func (f *Future) Done() <-chan struct{} { return f.done }

// Wait waits until this member has applied the proposal and returns its
// result. errs.ErrTimeout: the request's deadline passed first;
// errs.ErrOutcomeUnknown: the member stopped, or the proposal's term ended
// long enough ago that it may have been lost (see waiters.sweep). A
// proposal a group refused as not its own (errs.ErrWrongGroup: routed
// before this member applied a keyspace's creation, and so not applied)
// or for want of dependencies (errs.ErrClusterVersion, version.go) is
// routed, encoded and proposed again, at most maxRouteTries times.
func (f *Future) Wait() (applied, error) {
	a, err := f.WaitOnce()
	for err == nil && a.refused() && f.tries < maxRouteTries {
		f = f.retry()
		a, err = f.WaitOnce()
	}
	return a, err
}

// maxRouteTries bounds Wait's retries of a proposal refused by the wrong
// group: one is enough (the refusal is applied after the creation it
// missed), a second covers a keyspace removed and created again meanwhile.
const maxRouteTries = 2

// WaitOnce is Wait without the retry: the ZooKeeper pipeline retries a
// write only after its predecessor's reply, so retried writes keep the
// session's order (retry).
func (f *Future) WaitOnce() (applied, error) {
	if !f.waited {
		f.waited = true
		f.outErr = f.wait()
	}
	if f.outErr != nil {
		return applied{}, f.outErr
	}
	return f.result, nil
}

// retry proposes f's proposal again, routed anew.
func (f *Future) retry() *Future {
	return f.s.submit(f.parent, f.p, f.tries+1)
}

// wait waits for the outcome: nil when f.result holds the applied result
// (read only then: after a timeout, deliver may still be writing it).
func (f *Future) wait() error {
	if f.id == 0 {
		return f.err
	}
	s := f.s
	defer f.cancel()
	defer f.g.waiters.remove(f.id)
	switch wire.WaitDone(f.ctx, f.done, s.stop) {
	case wire.WaitedDone:
		if err := f.result.err; err != nil {
			s.metrics.countProposal("unknown")
			return err
		}
		s.metrics.countProposal("applied")
		if f.view != nil {
			f.view.observe(f.g.id, f.result.index)
		}
		f.observeStages()
		return nil
	case wire.WaitedEnded:
		s.metrics.countProposal("timeout")
		return errs.ErrTimeout
	default:
		// Stopped. raft has it and may commit it after all (forwarded to
		// the leader): not "stopped", which says it was not applied and
		// lets clients retry it.
		s.metrics.countProposal("unknown")
		return errs.ErrOutcomeUnknown
	}
}

// observeStages records an applied proposal's stages on this member.
func (f *Future) observeStages() {
	if f.proposed.IsZero() || f.delivered.IsZero() {
		return
	}
	m, root := f.s.metrics, f.g.root()
	m.observeStage(root, stageQueue, f.proposed.Sub(f.submitted))
	wait := stageWaitFollower
	if f.proposedOnLeader {
		wait = stageWaitLeader
	}
	m.observeStage(root, wait, max(f.delivered.Sub(f.proposed), 0)) // applied before Propose returned: 0
	m.observeStage(root, stageWake, time.Since(f.delivered))
}

// fail ends a Future whose submission failed.
func (f *Future) fail(err error) *Future {
	f.err = err
	if f.cancel != nil {
		f.cancel()
	}
	close(f.done)
	return f
}

// Submit hands p to raft now, bounded by ctx and the request timeout, and
// returns its Future. Submitting before waiting lets a caller that submits
// in order (one ZooKeeper connection's pipelined writes) keep its writes
// in order while their commits overlap: raft steps them in the order
// given, and a follower forwards them to the leader in that order.
//
// With no leader known raft drops a proposal, so it can never apply; that
// case waits for an election (a restarted server learns the leader within
// a heartbeat or two) and proposes again, until the request deadline,
// rather than failing a client that reconnected a moment too early.
func (s *Server) Submit(ctx context.Context, p proposal) *Future {
	return s.submit(ctx, p, 0)
}

func (s *Server) submit(ctx context.Context, p proposal, tries int) *Future {
	f := &Future{s: s, p: p, parent: ctx, view: viewOf(ctx), tries: tries, done: make(chan struct{})}
	g, err := p.route(s)
	if err != nil {
		return f.fail(err)
	}
	f.g = g
	if err := g.noQuorum(); err != nil { // never proposed: not applied
		return f.fail(err)
	}
	if d, ok := p.(dutyProposal); ok {
		return s.submitDuty(f, d.proposal)
	}
	id, data, err := s.encodeFor(ctx, g, p)
	if err != nil {
		return f.fail(err)
	}
	f.ctx, f.cancel = s.withTimeout(ctx)
	s.placement.writes.Add(1)
	f.submitted = time.Now()
	for {
		err := s.submitOnce(f, id, data)
		if err == nil {
			return f
		}
		if !errors.Is(err, errs.ErrNotLeader) {
			return f.fail(err)
		}
		if err := g.noQuorum(); err != nil { // raft dropped it: not applied
			return f.fail(err)
		}
		select {
		case <-time.After(s.cfg.tick()):
		case <-f.ctx.Done():
			return f.fail(err)
		case <-s.stop:
			return f.fail(errs.ErrStopped)
		}
	}
}

// submitOnce registers f under id and proposes data once, to f's group.
func (s *Server) submitOnce(f *Future, id uint64, data []byte) error {
	f.g.waiters.add(id, f.g.rep.Term(), f)
	leads := f.g.rep.IsLeader()
	if err := f.g.rep.Propose(f.ctx, data); err != nil {
		f.g.waiters.remove(id)
		select {
		case <-f.done:
			// Applied meanwhile after all (and answered): a retry under
			// the same id must not register it again.
		default:
			s.metrics.countProposal("rejected")
			return err
		}
	}
	f.id = id
	f.proposed, f.proposedOnLeader = time.Now(), leads
	return nil
}

// submitDuty proposes a leader duty's command once, bounded by an election
// timeout; its Future is done at once, with the proposal's error.
func (s *Server) submitDuty(f *Future, p proposal) *Future {
	_, data, err := s.encodeFor(f.parent, f.g, p)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.tick()*time.Duration(s.cfg.ElectionTicks))
		err = f.g.rep.Propose(ctx, data)
		cancel()
	}
	if err != nil {
		return f.fail(err)
	}
	close(f.done)
	return f
}

// encodeFor encodes p for group g: in a clock envelope once keyspaces
// exist (fsm/clock.go), carrying this member's clock, the highest zxid
// the requesting session has seen (ctx's seenZxid, bounded by this clock
// plus maxZxidAhead, so that no client can push a group's zxids far
// ahead) and, when ctx carries the client's view, what it saw in other
// groups (view.go: the write's dependencies), in a dependency envelope
// once every member writes them and without them before (version.go).
func (s *Server) encodeFor(ctx context.Context, g *group, p proposal) (uint64, []byte, error) {
	now := time.Now().UnixMilli()
	id, data, err := p.encode(s, now)
	if err != nil || (g.root() && !s.clocked()) {
		return id, data, err
	}
	var deps []fsm.Dep
	if v := viewOf(ctx); v != nil {
		if deps, err = s.depsFor(ctx, v, g); err != nil {
			return id, nil, err
		}
	}
	bound := (now + maxZxidAhead.Milliseconds()) << fsm.LogicalBits
	minZxid := uint64(min(max(seenZxid(ctx), 0), bound))
	if s.depsTrusted() {
		data, err = fsm.WrapDeps(uint64(now), minZxid, deps, data)
	} else {
		// A member's binary would skip a dependency envelope (version.go).
		data, err = fsm.WrapClock(uint64(now), minZxid, data)
	}
	if err == nil {
		err = s.checkVersion(data)
	}
	return id, data, err
}

// maxZxidAhead: a session's claimed last zxid counts up to this far past
// the proposer's clock (clocks further apart than this lose the "after
// what the session saw" ordering of zxids, not their monotonicity).
const maxZxidAhead = time.Minute

// seenKey carries the highest zxid a request's session has seen, for the
// clock envelope of what it proposes.
type seenKey struct{}

// withSeen returns ctx carrying zxid as the session's last seen.
func withSeen(ctx context.Context, zxid int64) context.Context {
	if zxid <= 0 {
		return ctx
	}
	return context.WithValue(ctx, seenKey{}, zxid)
}

func seenZxid(ctx context.Context) int64 {
	if ctx == nil {
		return 0
	}
	if z, ok := ctx.Value(seenKey{}).(int64); ok {
		return z
	}
	if ci := callOf(ctx); ci != nil { // a native call's
		return ci.seen
	}
	return 0
}

func (s *Server) nextID() uint64 {
	return s.idPrefix | (s.idSeq.Add(1) & (1<<56 - 1))
}

// waiters hands apply results back to the Futures of the requests that
// proposed them.
type waiters struct {
	mu   sync.Mutex
	m    map[uint64]*Future
	term uint64 // the current raft term, as last told
}

func newWaiters() *waiters { return &waiters{m: make(map[uint64]*Future)} }

func (w *waiters) add(id, term uint64, f *Future) {
	f.term = term
	w.mu.Lock()
	w.m[id] = f
	w.mu.Unlock()
}

// newTerm records that the raft term is now term (from the leader-change
// callback): proposals of earlier terms start their grace.
func (w *waiters) newTerm(term uint64, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if term <= w.term {
		return
	}
	w.term = term
	for _, f := range w.m {
		if f.term < term && f.staleSince.IsZero() {
			f.staleSince = now
		}
	}
}

// sweep fails, as outcome unknown, every proposal whose term ended at
// least grace ago. A leader change does not decide a proposal's fate:
// one in the log when leadership moved commits with the new leader's first
// entry, and one forwarded to a leader that was handing over is passed on
// to the next (replica's held proposals), so answering at the change (as
// before) told clients "unknown" about writes that then applied, on every
// planned move. After grace (two election timeouts) a proposal of an
// earlier term has applied, and so been answered, unless it was lost with
// an old leader or is still travelling: nothing tells which.
func (w *waiters) sweep(now time.Time, grace time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, f := range w.m {
		if !f.staleSince.IsZero() && now.Sub(f.staleSince) >= grace {
			delete(w.m, id)
			f.result = applied{err: errs.ErrOutcomeUnknown}
			close(f.done)
		}
	}
}

// failAll answers every waiting proposal with err, an unknown outcome
// (quorum.go: the group lost its quorum with them in flight).
func (w *waiters) failAll(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, f := range w.m {
		delete(w.m, id)
		f.result = applied{err: err}
		close(f.done)
	}
}

func (w *waiters) remove(id uint64) {
	w.mu.Lock()
	delete(w.m, id)
	w.mu.Unlock()
}

// deliver answers the proposal id with its applied result, if it was
// proposed here and is still waited for.
func (w *waiters) deliver(id uint64, a applied) {
	w.mu.Lock()
	f, ok := w.m[id]
	delete(w.m, id)
	w.mu.Unlock()
	if ok {
		f.result = a
		f.delivered = time.Now()
		close(f.done)
	}
}
