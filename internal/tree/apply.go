package tree

import (
	"fmt"
	"sort"

	"github.com/meridian-coord/meridian/internal/errs"
)

// txn carries the state of one Apply: the zxid, the command, the events
// produced so far and, inside a multi, the undo log.
type txn struct {
	t      *Tree
	zxid   int64
	cmd    *Command
	events []Event
	logged bool // record undo entries (multi)
	undo   []undoEntry
}

type undoKind uint8

const (
	undoStat   undoKind = iota // restore stat, data and ACL of n
	undoCreate                 // n was added: take it out again
	undoDelete                 // n was removed: put it back
)

// family is a node's child stats, as an undo entry keeps them.
type family struct {
	pzxid    int64
	cversion int32
}

type undoEntry struct {
	kind undoKind
	n    *node
	stat nodeStat
	fam  family
	key  string
	null bool
	acl  *[]ACL
}

// Apply applies one committed command as the change zxid and returns the
// result for the proposer and the watch events it produced. The zxid stamps
// the stats (czxid, mzxid, pzxid) and the events, and is the id of a
// session the command creates; the caller (internal/fsm) chooses it, strictly
// increasing from one command to the next, and never below 1. A failed
// command changes nothing and produces no events.
func (t *Tree) Apply(zxid int64, cmd *Command) (Result, []Event) {
	if cmd == nil {
		return Result{Err: errs.ErrBadArguments}, nil
	}
	x := &txn{t: t, zxid: zxid, cmd: cmd}
	typ := cmd.Op.Type
	fail := func(err error) (Result, []Event) {
		return Result{Err: err, Op: OpResult{Type: typ, Err: err}}, nil
	}
	if len(cmd.Auth) > MaxAuthIDs {
		return fail(errs.ErrBadArguments)
	}
	switch typ {
	case OpCreate, OpDelete, OpSetData, OpSetACL, OpCheck:
		r, err := x.do(&cmd.Op, false)
		if err != nil {
			return fail(err)
		}
		r.Type = typ
		return Result{Op: r}, x.events
	case OpMulti:
		return x.multi()
	case OpCreateSession:
		id, err := x.createSession()
		if err != nil {
			return fail(err)
		}
		return Result{Op: OpResult{Type: typ}, SessionID: id}, nil
	case OpCloseSession:
		s := t.sessions[cmd.Session]
		if s == nil {
			return fail(errs.ErrSessionExpired)
		}
		deleted := x.endSession(s)
		return Result{Op: OpResult{Type: typ}, Deleted: deleted}, x.events
	case OpExpire:
		if len(cmd.Sessions) > MaxExpireBatch {
			return fail(errs.ErrBadArguments)
		}
		var deleted []string
		for _, id := range cmd.Sessions {
			if s := t.sessions[id]; s != nil {
				deleted = append(deleted, x.endSession(s)...)
			}
		}
		return Result{Op: OpResult{Type: typ}, Deleted: deleted}, x.events
	case OpReap:
		var deleted []string
		for _, n := range t.reapable(cmd.TimeMs) {
			// Reapable nodes are childless: removing one changes (and
			// may copy, Tree.own) its parent, never another of them. The
			// lookup keeps that so.
			x.remove(t.nodes.get(n.path()))
			deleted = append(deleted, n.path())
		}
		return Result{Op: OpResult{Type: typ}, Deleted: deleted}, x.events
	case OpNoop:
		return Result{}, nil
	}
	return fail(errs.ErrUnimplemented)
}

// do runs one tree operation. It validates everything before changing
// anything, so a failed op leaves the tree as it was.
func (x *txn) do(op *Op, inMulti bool) (OpResult, error) {
	switch op.Type {
	case OpCreate:
		return x.create(op)
	case OpDelete:
		return OpResult{}, x.delete(op)
	case OpSetData:
		return x.setData(op)
	case OpSetACL:
		return x.setACL(op)
	case OpCheck:
		if !inMulti {
			return OpResult{}, errs.ErrBadArguments
		}
		return OpResult{}, x.check(op)
	}
	// Nested multis, session and system ops are not allowed inside a multi.
	return OpResult{}, errs.ErrBadArguments
}

func (x *txn) multi() (Result, []Event) {
	ops := x.cmd.Ops
	if len(ops) > MaxMultiOps {
		return Result{Err: errs.ErrBadArguments, Op: OpResult{Type: OpMulti, Err: errs.ErrBadArguments}}, nil
	}
	x.logged = true
	results := make([]OpResult, len(ops))
	for i := range ops {
		r, err := x.do(&ops[i], true)
		if err != nil {
			x.rollback()
			for j := range results {
				results[j] = OpResult{Type: ops[j].Type}
				if j > i {
					results[j].Err = errs.ErrRuntimeInconsistency
				}
			}
			results[i].Err = err
			return Result{Err: err, Op: OpResult{Type: OpMulti, Err: err}, Multi: results}, nil
		}
		r.Type = ops[i].Type
		results[i] = r
	}
	return Result{Op: OpResult{Type: OpMulti}, Multi: results}, x.events
}

// rollback undoes the logged changes in reverse order.
func (x *txn) rollback() {
	t := x.t
	for i := len(x.undo) - 1; i >= 0; i-- {
		u := &x.undo[i]
		n := u.n
		switch u.kind {
		case undoStat:
			n.stat, n.key, n.null, n.acl = u.stat, u.key, u.null, u.acl
			n.setFamily(u.fam.pzxid, u.fam.cversion)
		case undoCreate:
			t.nodes.del(n.path())
			if p := t.nodes.get(parentOf(n.path())); p != nil {
				t.unlink(p, n)
				t.reindex(p)
			}
		case undoDelete:
			t.nodes.put(n)
			if p := t.nodes.get(parentOf(n.path())); p != nil {
				t.link(p, n)
				t.reindex(p)
			}
		}
		t.reindex(n)
	}
	x.undo = nil
	x.events = nil
}

func (x *txn) emit(typ EventType, path string) {
	if x.events == nil {
		// A create or delete emits two: one allocation, not two.
		x.events = make([]Event, 0, 2)
	}
	x.events = append(x.events, Event{Type: typ, Path: path, Zxid: x.zxid})
}

// saveStat records n's mutable fields before they change.
// It returns the node to change: n, or n's copy when a View shares n
// (Tree.own); the caller changes that one.
func (x *txn) saveStat(n *node) *node {
	n = x.t.own(n)
	if x.logged {
		x.undo = append(x.undo, undoEntry{kind: undoStat, n: n, stat: n.stat, fam: family{n.pzxid(), n.cversion()}, key: n.key, null: n.null, acl: n.acl})
	}
	return n
}

// insert adds n under parent and updates the parent's child stats.
func (x *txn) insert(parent, n *node) {
	t := x.t
	parent = x.saveStat(parent)
	t.nodes.put(n)
	t.link(parent, n)
	parent.setFamily(x.zxid, parent.cversion()+1)
	if x.logged {
		x.undo = append(x.undo, undoEntry{kind: undoCreate, n: n})
	}
	t.reindex(n)
	t.reindex(parent)
	x.emit(EventNodeCreated, n.path())
	x.emit(EventNodeChildrenChanged, parent.path())
}

// remove deletes the childless node n and updates its parent's child stats.
func (x *txn) remove(n *node) {
	t := x.t
	parent := x.saveStat(t.nodes.get(parentOf(n.path())))
	t.nodes.del(n.path())
	t.unlink(parent, n)
	parent.setFamily(x.zxid, parent.cversion()+1)
	if x.logged {
		x.undo = append(x.undo, undoEntry{kind: undoDelete, n: n})
	}
	t.reindex(n)
	t.reindex(parent)
	x.emit(EventNodeDeleted, n.path())
	x.emit(EventNodeChildrenChanged, parent.path())
}

// checkVersion is ZooKeeper's checkAndIncVersion test: -1 matches anything.
func checkVersion(expected, actual int32) error {
	if expected != -1 && expected != actual {
		return errs.ErrBadVersion
	}
	return nil
}

// create follows PrepRequestProcessor.pRequest2TxnCreate's order of checks.
func (x *txn) create(op *Op) (OpResult, error) {
	t, cmd := x.t, x.cmd
	mode := op.Mode
	switch {
	case len(op.Data) > MaxDataBytes:
		return OpResult{}, errs.ErrDataTooLarge
	case !mode.valid():
		return OpResult{}, errs.ErrBadArguments
	case mode.isTTL() && (op.TTLMs <= 0 || op.TTLMs > maxTTLMs):
		return OpResult{}, errs.ErrBadArguments
	case !mode.isTTL() && op.TTLMs != 0:
		return OpResult{}, errs.ErrBadArguments
	case mode.ephemeral() && t.sessions[cmd.Session] == nil:
		return OpResult{}, errs.ErrSessionExpired
	}
	if err := ValidatePath(op.Path, mode.sequential()); err != nil {
		return OpResult{}, err
	}
	acl, err := fixupACL(op.ACL, cmd.Auth)
	if err != nil {
		return OpResult{}, err
	}
	parent := t.nodes.get(parentOf(op.Path))
	if parent == nil {
		return OpResult{}, errs.ErrNoNode
	}
	if err := checkPerm(parent.acls(), PermCreate, cmd.Auth); err != nil {
		return OpResult{}, err
	}
	path := op.Path
	if mode.sequential() {
		// The parent's cversion before this create, as a Java %010d int.
		path += fmt.Sprintf("%010d", parent.cversion())
		if len(path) > MaxPathBytes {
			return OpResult{}, errs.ErrInvalidPath
		}
	}
	if protected(path) {
		return OpResult{}, errs.ErrBadArguments
	}
	if path == "/" || t.nodes.get(path) != nil {
		return OpResult{}, errs.ErrNodeExists
	}
	if parent.createMode().ephemeral() {
		return OpResult{}, errs.ErrNoChildrenForEphemerals
	}
	n := &node{
		acl:  acl,
		mode: uint8(mode),
		gen:  t.gen.Load(),
		stat: nodeStat{
			Czxid: x.zxid,
			Mzxid: x.zxid,
			Ctime: cmd.TimeMs,
			Mtime: cmd.TimeMs,
		},
	}
	n.setPathData(path, op.Data)
	if mode.ephemeral() {
		n.extend().owner = cmd.Session
	}
	if mode.isTTL() {
		n.extend().ttl.ms = op.TTLMs
	}
	x.insert(parent, n)
	return OpResult{Path: path, Stat: n.Stat()}, nil
}

func (x *txn) delete(op *Op) error {
	t := x.t
	if err := ValidatePath(op.Path, false); err != nil {
		return err
	}
	if op.Path == "/" || protected(op.Path) {
		return errs.ErrBadArguments
	}
	n := t.nodes.get(op.Path)
	if n == nil {
		return errs.ErrNoNode
	}
	if err := checkPerm(t.nodes.get(parentOf(op.Path)).acls(), PermDelete, x.cmd.Auth); err != nil {
		return err
	}
	if err := checkVersion(op.Version, n.stat.Version); err != nil {
		return err
	}
	if n.numKids() > 0 {
		return errs.ErrNotEmpty
	}
	x.remove(n)
	return nil
}

func (x *txn) setData(op *Op) (OpResult, error) {
	t := x.t
	if len(op.Data) > MaxDataBytes {
		return OpResult{}, errs.ErrDataTooLarge
	}
	if err := ValidatePath(op.Path, false); err != nil {
		return OpResult{}, err
	}
	if protected(op.Path) {
		return OpResult{}, errs.ErrBadArguments
	}
	n := t.nodes.get(op.Path)
	if n == nil {
		return OpResult{}, errs.ErrNoNode
	}
	if err := checkPerm(n.acls(), PermWrite, x.cmd.Auth); err != nil {
		return OpResult{}, err
	}
	if err := checkVersion(op.Version, n.stat.Version); err != nil {
		return OpResult{}, err
	}
	n = x.saveStat(n)
	n.setData(op.Data)
	n.stat.Version++
	n.stat.Mzxid = x.zxid
	n.stat.Mtime = x.cmd.TimeMs
	t.reindex(n) // a TTL node's deadline follows its mtime
	x.emit(EventNodeDataChanged, n.path())
	return OpResult{Stat: n.Stat()}, nil
}

func (x *txn) setACL(op *Op) (OpResult, error) {
	t := x.t
	if err := ValidatePath(op.Path, false); err != nil {
		return OpResult{}, err
	}
	if protected(op.Path) {
		return OpResult{}, errs.ErrBadArguments
	}
	acl, err := fixupACL(op.ACL, x.cmd.Auth)
	if err != nil {
		return OpResult{}, err
	}
	n := t.nodes.get(op.Path)
	if n == nil {
		return OpResult{}, errs.ErrNoNode
	}
	if err := checkPerm(n.acls(), PermAdmin, x.cmd.Auth); err != nil {
		return OpResult{}, err
	}
	if err := checkVersion(op.Version, n.stat.Aversion); err != nil {
		return OpResult{}, err
	}
	n = x.saveStat(n)
	n.acl = acl
	n.stat.Aversion++
	return OpResult{Stat: n.Stat()}, nil
}

func (x *txn) check(op *Op) error {
	if err := ValidatePath(op.Path, false); err != nil {
		return err
	}
	n := x.t.nodes.get(op.Path)
	if n == nil {
		return errs.ErrNoNode
	}
	if err := checkPerm(n.acls(), PermRead, x.cmd.Auth); err != nil {
		return err
	}
	return checkVersion(op.Version, n.stat.Version)
}

func (x *txn) createSession() (int64, error) {
	cmd := x.cmd
	id := x.zxid
	switch {
	case cmd.TimeoutMs < MinSessionMs || cmd.TimeoutMs > MaxSessionMs:
		return 0, errs.ErrBadArguments
	case len(cmd.Password) != 16:
		return 0, errs.ErrBadArguments
	case id <= 0 || x.t.sessions[id] != nil:
		// Only a replayed or corrupt zxid can get here.
		return 0, errs.ErrBadArguments
	}
	x.t.sessions[id] = &session{info: SessionInfo{ID: id, TimeoutMs: cmd.TimeoutMs, Password: cloneBytes(cmd.Password)}}
	return id, nil
}

// endSession deletes the session's ephemerals in path order, then the session.
func (x *txn) endSession(s *session) []string {
	paths := make([]string, 0, len(s.ephemerals))
	for p := range s.ephemerals {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if n := x.t.nodes.get(p); n != nil {
			x.remove(n)
		}
	}
	delete(x.t.sessions, s.info.ID)
	return paths
}
