package server

// The request core both client ports call. A port decodes its wire request,
// fills a readRequest or writeRequest (or asks for a session), calls the
// core, and encodes the answer in its own wire format with its own error
// mapping; it never builds a tree.Command nor reads a node itself. (What
// stays in a port is what only that port has: the ZooKeeper port's
// getEphemerals, setWatches and read-only sessions, the native port's
// watch streams and session-owner check.)
//
//   - write: validate → identities (the ACL is judged where the command is
//     applied, on every member alike, from the identities it carries) →
//     the one tree.Command → Submit (fenced when asked) → the applied result.
//   - read: validate → consistency barrier → authorizeRead → the read →
//     the watch registration, all but the first two under the tree's read
//     lock, so a change applied after the read is notified to the watch.
//   - createSession, resumeSession, closeSession: a session's life.

import (
	"context"
	"crypto/rand"
	"errors"
	"time"

	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/session"
	"github.com/meridian-coord/meridian/internal/tree"
	"github.com/meridian-coord/meridian/internal/watch"
	"github.com/meridian-coord/meridian/internal/wire"
)

// ---- writes ----

// writeRequest is a write as a port hands it to the core.
type writeRequest struct {
	session int64
	auth    []tree.ID // the caller's identities; the ACL is checked against them in apply
	// readOnly: the request came on a ZooKeeper read-only session, which
	// may not write.
	readOnly bool
	op       tree.Op   // the write; for tree.OpMulti its operations are ops
	ops      []tree.Op // tree.OpMulti only
	// seen: the highest zxid the session has seen, which the write's zxid
	// must exceed (the clock envelope's minimum; 0: unknown).
	seen int64
	// fenced: apply only while token is the current token of lock.
	fenced bool
	lock   string
	token  uint64
}

func (w *writeRequest) validate() error {
	if w.readOnly {
		return errs.ErrNotReadOnly
	}
	return nil
}

// command is the one translation of a write request into a tree command.
func (w *writeRequest) command() *tree.Command {
	return &tree.Command{Session: w.session, Op: w.op, Ops: w.ops, Auth: w.auth}
}

// submitWrite validates w and hands its command to raft, for a caller that
// orders its submissions but waits for their results later (the ZooKeeper
// pipeline); write is submitWrite and the wait.
func (s *Server) submitWrite(ctx context.Context, w *writeRequest) *Future {
	if err := w.validate(); err != nil {
		return (&Future{s: s, done: make(chan struct{})}).fail(err)
	}
	cmd := w.command()
	ctx = withSeen(ctx, w.seen)
	if w.fenced {
		return s.Submit(ctx, fencedCommand(cmd, w.lock, w.token))
	}
	return s.Submit(ctx, treeCommand(cmd))
}

// write applies w and returns its result (see writeOutcome).
func (s *Server) write(ctx context.Context, w *writeRequest) (tree.Result, uint64, error) {
	ctx = withSeen(ctx, w.seen)
	return writeOutcome(s.submitWrite(ctx, w).Wait())
}

// writeOutcome is a write's answer from its Future: the applied result, the
// index it applied at, and the error: the proposal's, else the result's own
// (a failed multi keeps its per-op results in res.Multi).
func writeOutcome(a applied, err error) (tree.Result, uint64, error) {
	if err == nil {
		err = a.res.Err
	}
	return a.res, a.zxid, err
}

// ---- reads ----

// readKind is what a read returns, which decides the permission it needs
// (authorizeRead) and the watch it may set.
type readKind int

const (
	readExists       readKind = iota // stat only: no permission, as ZooKeeper
	readData                         // getData: READ
	readChildren                     // getChildren: READ
	readACL                          // getACL: READ or ADMIN
	readChildCount                   // getAllChildrenNumber: READ
	readCheckVersion                 // a check outside a multi: stat only, no permission
)

// watchKind is the watch a read of kind k sets when asked; false: it sets
// none.
func (k readKind) watchKind() (watch.Kind, bool) {
	switch k {
	case readExists:
		return watch.KindExist, true
	case readData:
		return watch.KindData, true
	case readChildren:
		return watch.KindChild, true
	}
	return 0, false
}

// readRequest is a read as a port hands it to the core.
type readRequest struct {
	path    string
	kind    readKind
	auth    []tree.ID
	version int32 // readCheckVersion: the version expected (-1: any)

	// The consistency barrier before the read (readBarrier); none set:
	// read what this member has applied. view, when set, is the client's
	// view (view.go): the read waits for what it requires instead of
	// minZxid, and records what it saw.
	linear  bool
	minZxid int64
	view    *view

	// watch asks for a watch of the read's kind, set under the same lock
	// as the read (for exists even on a missing node). watcher receives it
	// (a ZooKeeper connection); nil: the hub of session, which must be
	// live (the native port).
	watch   bool
	watcher watch.Watcher
	session int64
}

// readResult is what a read found; which fields are set depends on the
// read's kind.
type readResult struct {
	data     []byte
	stat     tree.Stat
	children []string
	acl      []tree.ACL // redacted for a caller without ADMIN (redactACL)
	count    int        // readChildCount
}

func (r *readRequest) validate() error {
	if r.watch {
		if _, ok := r.kind.watchKind(); !ok {
			return errs.ErrBadArguments
		}
		if r.watcher == nil && r.session == 0 {
			return errs.ErrBadArguments
		}
	}
	return tree.ValidatePath(r.path, false)
}

// read serves r. respond, when set, is called with the answer under the
// tree's read lock, with the index the read saw: a change applied after the
// read must not have its watch notification queued before the reply, or a
// client that sets up its watch when the reply arrives (go-zookeeper does)
// drops the event and the watch is spent. ZooKeeper replies in apply order
// for the same reason. A request refused before the read is answered
// through respond too, with this member's applied index.
//
// The read is served by the group that owns r.path (keyspaces.go), and
// the zxid it reports is that group's last applied.
func (s *Server) read(ctx context.Context, r *readRequest, respond func(res readResult, zxid int64, err error)) (readResult, uint64, error) {
	var res readResult
	err := r.validate()
	g := s.root
	if err == nil && r.view != nil {
		err = s.viewRoute(ctx, r.view)
	}
	if err == nil {
		g = s.groupFor(r.path)
	}
	switch {
	case err != nil:
	case r.view != nil:
		err = s.viewBarrier(ctx, g, r.linear, r.view)
	case r.linear || r.minZxid > 0:
		err = s.readBarrier(ctx, g, r.linear, r.minZxid)
	}
	if err == nil && r.watch && r.watcher == nil && !g.root() && !s.sessionLive(r.session) {
		err = errs.ErrSessionExpired // sessions are the root's (checked below for the root's own reads)
	}
	if err != nil {
		if respond != nil {
			respond(res, g.lastZxid(), err)
		}
		return res, 0, err
	}
	g.fsm.RLock()
	defer g.fsm.RUnlock()
	res, err = s.readWatchLocked(g, r)
	zxid := g.fsm.LastZxid()
	if r.view != nil {
		r.view.observe(g.id, g.fsm.Applied())
	}
	if respond != nil {
		respond(res, zxid, err)
	}
	return res, uint64(zxid), err
}

// sessionLive reports whether session id is live (the root group's table).
func (s *Server) sessionLive(id int64) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.mu.tree.Session(id)
	return ok
}

// readWatchLocked is a read of g and its watch registration. Caller holds
// g's lock for reading.
func (s *Server) readWatchLocked(g *group, r *readRequest) (readResult, error) {
	if r.watch && r.watcher == nil && g.root() {
		if _, ok := s.mu.tree.Session(r.session); !ok {
			return readResult{}, errs.ErrSessionExpired
		}
	}
	res, err := readLocked(g.fsm.Tree(), r)
	if !r.watch {
		return res, err
	}
	k, _ := r.kind.watchKind()
	wk, ok := watchKindFor(k, err)
	if !ok {
		return res, err
	}
	w := r.watcher
	if w == nil {
		w = s.hubs.get(r.session, s.cfg.MaxQueuedEvents)
	}
	if werr := s.watches.Add(w, r.path, wk); werr != nil {
		return res, werr
	}
	if h := zkWatchSetHook.Load(); h != nil && r.watcher != nil {
		(*h)(r.path)
	}
	return res, err
}

// readLocked authorizes and performs the read r (no watch) on t. Caller
// holds t's group's lock for reading.
func readLocked(t *tree.Tree, r *readRequest) (res readResult, err error) {
	if err := authorizeRead(t, r.path, r.kind, r.auth); err != nil {
		return res, err
	}
	switch r.kind {
	case readExists:
		res.stat, err = t.Exists(r.path)
	case readData:
		res.data, res.stat, err = t.Get(r.path)
	case readChildren:
		res.children, res.stat, err = t.Children(r.path)
	case readACL:
		if res.acl, res.stat, err = t.GetACL(r.path); err == nil {
			res.acl = redactACL(t, r.path, res.acl, r.auth)
		}
	case readChildCount:
		res.count, err = t.AllChildrenNumber(r.path)
	case readCheckVersion:
		res.stat, err = t.Exists(r.path)
		if err == nil && r.version != -1 && res.stat.Version != r.version {
			err = errs.ErrBadVersion
		}
	default:
		err = errs.ErrBadArguments
	}
	return res, err
}

// ---- sessions ----

// newSession is a session just created: its id, the timeout negotiated
// from the one asked for, and its password.
type newSession struct {
	id       int64
	timeout  time.Duration
	password []byte
}

// createSession negotiates the timeout, draws a password, refuses a
// session past MaxSessions (admitSession) and proposes the session; index
// is the entry that created it.
func (s *Server) createSession(ctx context.Context, requested time.Duration) (newSession, uint64, error) {
	ns := newSession{timeout: session.Negotiate(requested, s.cfg.sessionTick()), password: make([]byte, 16)}
	if _, err := rand.Read(ns.password); err != nil {
		return newSession{}, 0, err
	}
	if err := s.admitSession(); err != nil {
		return newSession{}, 0, err
	}
	out, err := s.Submit(ctx, treeCommand(&tree.Command{Op: tree.Op{Type: tree.OpCreateSession},
		TimeoutMs: int32(ns.timeout.Milliseconds()), Password: ns.password})).Wait()
	if err == nil {
		err = out.res.Err
	}
	if err != nil {
		return newSession{}, 0, err
	}
	ns.id = out.res.SessionID
	return ns, out.zxid, nil
}

// resumeSession admits a client back into session id with its password,
// once this member has applied everything up to v's floor, the zxid the
// client says it has seen (after a
// linearizable barrier first, when linear): a member behind what the
// client has seen must not serve it older data. errs.ErrSessionExpired:
// no such live session, or the wrong password (the same answer, so a
// guessed id learns nothing). The session's keepalive is recorded.
func (s *Server) resumeSession(ctx context.Context, id int64, password []byte, v *view, linear bool) (tree.SessionInfo, error) {
	var err error
	if linear {
		err = s.readBarrier(ctx, s.root, true, 0)
	}
	if err == nil {
		// Every group as fresh as what the client saw; a keyspace without
		// a quorum does not cost the session (barrierAll, spareLost).
		err = s.barrierAll(ctx, v, true)
	}
	if err != nil {
		return tree.SessionInfo{}, err
	}
	s.mu.RLock()
	si, ok := s.mu.tree.Session(id)
	ok = ok && s.mu.tree.SessionPasswordMatches(id, password)
	s.mu.RUnlock()
	if !ok {
		return tree.SessionInfo{}, errs.ErrSessionExpired
	}
	s.touch(si.ID)
	return si, nil
}

// closeSession ends a session (its ephemerals, watches and locks go with
// it); auth are the caller's identities, carried as any write's.
//
// ZooKeeper deletes a session's ephemerals before its close returns, so
// the close is also proposed to every keyspace group where this member
// knows the session acted (its writes through this member applied here
// before they were answered); a group's leader ends it elsewhere as well
// (keyspaceDuties), which covers a session that acted through another
// member and an expiry.
func (s *Server) closeSession(ctx context.Context, id int64, auth []tree.ID) (uint64, error) {
	_, zxid, err := s.write(ctx, &writeRequest{session: id, auth: auth, op: tree.Op{Type: tree.OpCloseSession}})
	if err != nil {
		return zxid, err
	}
	for _, g := range s.keyspaceGroups.all() {
		g.fsm.RLock()
		_, acted := g.fsm.Tree().Session(id)
		g.fsm.RUnlock()
		if !acted {
			continue
		}
		cmd := &tree.Command{Session: id, Auth: auth, Op: tree.Op{Type: tree.OpCloseSession}}
		out, err := s.Submit(withSeen(ctx, int64(zxid)), inGroup{treeCommand(cmd), g}).Wait()
		if err != nil {
			return zxid, err // the root closed it: the group's leader ends it there too
		}
		zxid = max(zxid, out.zxid)
	}
	return zxid, nil
}

// ---- helpers ----

// watchKindFor is the watch a read registers: exists on an existing node sets
// a data watch, as ZooKeeper's client expects; on a missing node an exist
// watch. Other reads register only when they succeeded (ok false: none).
func watchKindFor(k watch.Kind, err error) (watch.Kind, bool) {
	switch {
	case err == nil && k == watch.KindExist:
		return watch.KindData, true
	case err == nil:
		return k, true
	case k == watch.KindExist && errors.Is(err, errs.ErrNoNode):
		return k, true
	}
	return k, false
}

// withTimeout bounds a request by the caller's deadline and the server's
// request timeout, whichever comes first.
func (s *Server) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	d := s.cfg.requestTimeout()
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return ctx, func() {} // the caller's comes first: no second timer
	}
	return context.WithTimeout(ctx, d)
}

// readBarrier makes the next local read of group g linearizable (linear)
// or at least as fresh as minZxid (sequential, ZooKeeper semantics).
//
// Without keyspaces a zxid is a log index, and a member behind minZxid
// waits until it has applied that index. With them, zxids are clocks
// comparable across groups (fsm/clock.go), and the zxid a client saw may
// come from another group: a group whose last applied zxid is below it
// first confirms, with a ReadIndex round, that it has applied everything
// committed before the read began, which includes every write the client
// saw in any group (docs/architecture.md, "Ordering").
func (s *Server) readBarrier(ctx context.Context, g *group, linear bool, minZxid int64) error {
	// The timeout (a timer) is made only for a read that waits: most
	// sequential reads do not.
	timedOut := func(err error) error {
		if errors.Is(err, context.DeadlineExceeded) {
			return errs.ErrTimeout
		}
		return err
	}
	if !linear && minZxid > 0 && minZxid > g.lastZxid() {
		if g.root() && !s.clocked() {
			ctx, cancel := s.withTimeout(ctx)
			defer cancel()
			wire.Waits(ctx) // a wait: the connection reads on
			return timedOut(waitZxid(ctx, g, minZxid))
		}
		linear = true
	}
	if linear {
		if err := g.noQuorumRead(); err != nil { // quorum.go: no round can complete
			return err
		}
		s.metrics.readWaits.WithLabelValues("read_index").Inc()
		ctx, cancel := s.withTimeout(ctx)
		defer cancel()
		wire.Waits(ctx)
		_, err := g.rep.ReadIndex(ctx)
		return timedOut(err)
	}
	return nil
}

// waitZxid waits until g has applied the entry of zxid (the client saw
// it, so it is committed), entry by entry: a zxid is its entry's log
// index only while the group's entries never carried a clock; once
// keyspaces existed, and after they are removed, zxids run ahead of
// indexes (clock.go), and a wait for index zxid would outlast the
// request.
func waitZxid(ctx context.Context, g *group, zxid int64) error {
	for {
		applied := g.rep.AppliedIndex() // before the zxid: no entry slips between
		if g.lastZxid() >= zxid {
			return nil
		}
		if err := g.rep.WaitApplied(ctx, applied+1); err != nil {
			return err
		}
	}
}

// admitSession refuses a new session while the cluster holds MaxSessions
// live ones (as applied here). Checked before proposing, not in apply: the
// limit is this member's configuration, and apply must not depend on it.
func (s *Server) admitSession() error {
	s.mu.RLock()
	n := s.mu.tree.SessionCount()
	s.mu.RUnlock()
	if n >= s.cfg.MaxSessions {
		s.log.Warn("session limit reached; refusing a new session", "live", n, "max_sessions", s.cfg.MaxSessions)
		return errs.ErrTooManySessions
	}
	return nil
}
