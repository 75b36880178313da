// Package fsm is Meridian's replicated state machine: the data tree
// (internal/tree) and the coordination state (internal/coord) behind one
// lock, and the one function that applies a committed log entry to them.
//
// Every member applies the same log through Apply and must end in the same
// state, so Apply decodes the entry, gives it a zxid (clock.go: the log
// index, or a hybrid logical clock when the proposer wrapped the entry in a
// clock envelope), applies it to the tree, to coord or to the keyspace
// table (keyspace.go: regional keyspaces, kept in the root group) and
// returns what happened: the proposer's result, the watch events, the grants
// and losses of locks, queue items and barriers, and the sessions it started
// and ended. Ending a session releases everything it held in coord in the
// same apply. What a member does about a result (answering the request that
// proposed it, waking the requests waiting for a grant, triggering watches,
// forgetting a session's connections) is not decided here.
//
// A regional keyspace's group runs a state machine made with
// Options{Keyspace: true}: sessions live in the root group, so its session
// table is external (sessions.go: adoption of the sessions that act in it,
// the command that ends them there, and tombstones bounded in zxid time).
//
// It never reads a clock (time arrives in commands), starts a goroutine or
// does I/O, and it never panics on the bytes of an entry: an entry that
// does not decode is skipped, the same way on every member.
//
// Snapshot and Restore frame the tree and coord snapshots and the last zxid
// in one envelope (snapshot.go); its bytes are part of the on-disk and peer
// format.
//
// Concurrency: Apply, Snapshot, View and Restore are called from one
// goroutine (the replica's raft loop); a View, the state as of the entry
// applied last, may be written on any goroutine while Apply goes on. Readers on other goroutines take RLock and
// read Tree, Coord, Keyspaces, Applied and LastZxid. Apply and Restore hold the write lock while
// they change the state and while they call the Hooks, so a reader that
// registers a watch under RLock sees either the state before a change (and
// the hook triggers its watch) or the state after it.
package fsm

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
)

// Hooks are a member's reactions that must happen inside the write lock,
// before any reader sees the change. Either may be nil. They must not call
// back into the FSM's lock.
type Hooks struct {
	// Applied is called after each entry is applied (skipped ones too).
	Applied func(r *Result)
	// Restored is called after a snapshot replaced the state.
	Restored func()
}

// FSM is the replicated state: the tree, coord, the keyspace table, the
// index of the last entry applied to them and the last zxid given.
type FSM struct {
	mu        sync.RWMutex
	tree      *tree.Tree
	coord     *coord.State
	keyspaces *KeyspaceTable
	applied   uint64
	lastZxid  int64
	hooks     Hooks
	// owner is the keyspace whose group this is (owner.go); nil for the
	// root group.
	owner *Keyspace
	// sessions is a keyspace group's table of ended sessions (sessions.go);
	// nil in the root group.
	sessions *sessionTable
	// stamp is the clock envelope of the entry being applied (zero: none).
	stamp clockStamp
	// deps are the group's dependencies on other groups (deps.go);
	// depsFrom the index of its dependency marker (0: none applied), from
	// which they are complete.
	deps     Deps
	depsFrom uint64
	// hasDeps is len(deps) > 0, readable without the lock (MayHaveDeps).
	hasDeps atomic.Bool
	// res is the result of the entry Apply is applying, cmd its tree
	// command (Apply only): a Result's TreeCommand is good until the next
	// Apply.
	res Result
	cmd tree.Command
}

// New returns an empty state machine at index 0: the root group's, or
// with Options{Keyspace: true} a keyspace group's (at most one Options).
func New(h Hooks, opts ...Options) *FSM {
	f := &FSM{tree: tree.New(), coord: coord.New(), keyspaces: newKeyspaceTable(), hooks: h}
	if len(opts) > 0 && opts[0].Keyspace {
		f.sessions = newSessionTable()
	}
	return f
}

// RLock locks the state for reading: Tree, Coord and Applied stay as they
// are until RUnlock.
func (f *FSM) RLock() { f.mu.RLock() }

// RUnlock undoes RLock.
func (f *FSM) RUnlock() { f.mu.RUnlock() }

// Tree is the data tree. Call it under RLock (or from the goroutine that
// applies); a Restore replaces it.
func (f *FSM) Tree() *tree.Tree { return f.tree }

// Coord is the coordination state. Call it under RLock (or from the
// goroutine that applies); a Restore replaces it.
func (f *FSM) Coord() *coord.State { return f.coord }

// Applied is the index of the last entry applied or restored. Call it
// under RLock (or from the goroutine that applies).
func (f *FSM) Applied() uint64 { return f.applied }

// LastZxid is the zxid of the last entry applied (or restored): what a
// read waits for when a client has seen a zxid, and never below Applied.
// Call it under RLock (or from the goroutine that applies).
func (f *FSM) LastZxid() int64 { return f.lastZxid }

// SessionStart is a session an entry created.
type SessionStart struct {
	ID        int64
	TimeoutMs int32
}

// SessionEnd is a session an entry ended: closed by its client or expired
// by the leader.
type SessionEnd struct {
	ID      int64
	Expired bool
}

// Result is what applying one entry did.
type Result struct {
	Index uint64
	// Zxid is the entry's zxid (see clock.go): the stats and events of its
	// tree change carry it, and a session it creates has it as its id. It
	// is given to skipped entries too, except when the group's zxids are
	// exhausted (then 0).
	Zxid int64
	// Skipped is why the entry was not applied (it does not decode); the
	// rest of the Result is then empty.
	Skipped error
	// Refused: the entry is of a later kind or format than this binary
	// applies (version.go); nothing changed, not even Applied, no hook
	// ran, and the caller must stop applying.
	Refused error
	// ID is the proposal id the proposer put in the command, so the member
	// that proposed it can answer the request waiting for it.
	ID uint64
	// TreeCommand is the tree command of the entry (for a fenced write, its
	// inner command, nil when that does not decode); nil for coordination
	// commands. It is the FSM's until the next Apply, which overwrites it
	// (a plain tree command: one less allocation per entry per member).
	TreeCommand *tree.Command
	// CoordCommand is the coordination command of the entry (a fenced write
	// too); nil for tree commands.
	CoordCommand *coord.Command
	// KeyspaceCommand is the keyspace command of the entry, KeyspaceResult
	// what it did (the mount znode's events are in Events).
	KeyspaceCommand *KeyspaceCommand
	KeyspaceResult  KeyspaceResult
	// TreeResult is the proposer's result of a tree command or a fenced
	// write; CoordResult that of any other coordination command.
	TreeResult  tree.Result
	CoordResult coord.Result
	// Events are the watch events of the tree change.
	Events []tree.Event
	// Grants and Losses are what the entry gave to waiting requests and
	// took away from holders (a session's end releases its locks).
	Grants []coord.Grant
	Losses []coord.Loss
	// Started is the session the entry created (ID 0: none).
	Started SessionStart
	// Ended are the sessions a close or an expire names, in its order. A
	// session the tree no longer knows is listed too, so that a member
	// forgets whatever it still keeps for it.
	Ended []SessionEnd
}

// Apply applies the committed entry data at log index index, with the write
// lock held, calls Hooks.Applied and returns the result; an entry of a
// later format is refused instead (Result.Refused, version.go).
func (f *FSM) Apply(index uint64, data []byte) Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	// The result is built in f.res rather than on the stack: the hook's
	// pointer would move it to the heap, one allocation of the whole
	// Result per entry on every member.
	f.res = Result{Index: index}
	r := &f.res
	defer func() { f.res = Result{} }() // keeps nothing of the entry alive
	// Every member decodes the same bytes the same way, so skipping is
	// deterministic; the proposer validated what it encoded. A skipped
	// entry still takes a zxid, so that without envelopes the zxid stays
	// the log index.
	inner, stamp, err := unwrapClock(data)
	if err == nil {
		if nerr := newerEntry(inner); nerr != nil {
			r.Refused = fmt.Errorf("log entry %d: %w", index, nerr)
			return *r
		}
	}
	zxid, ok := nextZxid(f.lastZxid, index, stamp)
	switch {
	case !ok:
		r.Skipped = fmt.Errorf("%w: zxids exhausted at %d", errs.ErrDataInconsistency, f.lastZxid)
	case err != nil:
		r.Zxid, f.lastZxid, r.Skipped = zxid, zxid, err
	default:
		r.Zxid, f.lastZxid = zxid, zxid
		if f.sessions != nil {
			f.sessions.prune(int64(ZxidPhysicalMs(zxid)))
		}
		f.stamp = stamp
		f.mergeDeps(stamp.deps)
		if len(inner) > 0 && inner[0] == DepsMarkerTag {
			f.applyMarker(r, inner)
		} else {
			f.applyEntry(r, inner)
		}
		f.stamp = clockStamp{}
	}
	f.applied = index
	if f.hooks.Applied != nil {
		f.hooks.Applied(r)
	}
	return *r
}

// applyEntry applies an unwrapped entry: a coordination command, a
// keyspace command or a tree command.
func (f *FSM) applyEntry(r *Result, data []byte) {
	if len(data) > 0 && data[0] == coord.Tag {
		f.applyCoord(r, data)
	} else if len(data) > 0 && data[0] == KeyspaceTag {
		f.applyKeyspace(r, data)
	} else if err := tree.DecodeCommandInto(&f.cmd, data); err != nil {
		r.Skipped = fmt.Errorf("tree entry: %w", err)
	} else {
		cmd := &f.cmd
		r.ID, r.TreeCommand = cmd.ID, cmd
		if err := f.treeOwned(cmd); err != nil {
			r.TreeResult = tree.Result{Err: err}
			return
		}
		f.applyTree(r, cmd)
	}
}

// applyTree applies a tree command and, when it ends sessions, releases
// their locks in coord in the same apply.
func (f *FSM) applyTree(r *Result, cmd *tree.Command) {
	if f.sessions != nil && f.applyKeyspaceTree(r, cmd) {
		return
	}
	r.TreeResult, r.Events = f.tree.Apply(r.Zxid, cmd)
	switch cmd.Op.Type {
	case tree.OpCreateSession:
		if r.TreeResult.Err == nil {
			r.Started = SessionStart{ID: r.TreeResult.SessionID, TimeoutMs: cmd.TimeoutMs}
		}
	case tree.OpCloseSession:
		if r.TreeResult.Err == nil {
			r.Grants, r.Losses = f.coord.SessionEnded(r.Index, cmd.TimeMs, cmd.Session, false)
		}
		r.Ended = []SessionEnd{{ID: cmd.Session}}
	case tree.OpExpire:
		// All at once: see coord.SessionsEnded. Also when the tree refused
		// the batch (too large, which no proposer sends): members that ran
		// earlier versions released them, and every member must agree.
		r.Grants, r.Losses = f.coord.SessionsEnded(r.Index, cmd.TimeMs, cmd.Sessions, true)
		r.Ended = make([]SessionEnd, len(cmd.Sessions))
		for i, id := range cmd.Sessions {
			r.Ended[i] = SessionEnd{ID: id, Expired: true}
		}
	}
}

// applyCoord applies a coordination command.
func (f *FSM) applyCoord(r *Result, data []byte) {
	c, err := coord.Decode(data)
	if err != nil {
		r.Skipped = fmt.Errorf("coordination entry: %w", err)
		return
	}
	r.ID, r.CoordCommand = c.ID, c
	if err := f.coordOwned(c); err != nil {
		if c.Op == coord.OpFenced {
			r.TreeResult = tree.Result{Err: err}
		} else {
			r.CoordResult = coord.Result{Err: err}
		}
		return
	}
	if c.Op == coord.OpFenced {
		f.applyFenced(r, c)
		return
	}
	if f.sessions != nil {
		var adopted, limit bool
		r.CoordResult, r.Grants, r.Losses = f.coord.Apply(r.Index, c, f.keyspaceLive(c, &adopted, &limit))
		if adopted && r.CoordResult.Err != nil {
			f.tree.ForgetSession(c.Session)
		}
		if limit && r.CoordResult.Err == errs.ErrSessionExpired {
			r.CoordResult.Err = errs.ErrTooManySessions
		}
		return
	}
	live := func(id int64) bool { _, ok := f.tree.Session(id); return ok }
	r.CoordResult, r.Grants, r.Losses = f.coord.Apply(r.Index, c, live)
}

// applyFenced applies the tree command inside a fenced write only if its
// token is the lock's current token; the check and the write are one apply.
func (f *FSM) applyFenced(r *Result, c *coord.Command) {
	inner, err := tree.DecodeCommand(c.Inner)
	switch {
	case err != nil:
		r.TreeResult = tree.Result{Err: errs.ErrMarshalling}
	case f.coord.CheckToken(c.Name, c.Token) != nil:
		r.TreeCommand = inner
		r.TreeResult = tree.Result{Err: errs.ErrStaleToken}
	case inner.Op.Type == tree.OpCloseSession || inner.Op.Type == tree.OpExpire || inner.Op.Type == tree.OpCreateSession:
		r.TreeCommand = inner
		r.TreeResult = tree.Result{Err: errs.ErrBadArguments} // only data writes can be fenced
	default:
		r.TreeCommand = inner
		if err := f.treeOwned(inner); err != nil {
			// The lock's group is not the write's: a fenced write must be
			// in its lock's keyspace.
			r.TreeResult = tree.Result{Err: errs.ErrCrossKeyspace}
			return
		}
		f.applyTree(r, inner)
	}
}
