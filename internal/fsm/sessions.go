package fsm

import (
	"encoding/binary"
	"errors"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
)

// Sessions in a keyspace's group.
//
// Sessions are global: they are created, kept alive and expired only in
// the root group. A regional keyspace's group (Options.Keyspace) never
// sees them created, yet a session acts in it: ephemeral creates, lock
// acquires, queue pops, barrier enters. So its session table is external:
//
//   - Admission. A command that needs a live session S (an ephemeral
//     create, alone or in a multi, fenced or not; an acquire, a pop, an
//     enter: the commands for which coord asks whether the session is
//     live) is accepted unless S is known to have ended here (below). S is
//     then adopted as a participant (tree.AdoptSession: ephemerals need a
//     session in the tree, and coord's liveness is the tree's), so its end
//     finds its state. When the command fails anyway, an adoption it made
//     is undone. OpCreateSession is refused (ErrBadArguments): sessions are
//     created in the root group.
//
//   - End. OpCloseSession (Session) and OpExpire (Sessions) end sessions
//     here as in the root: in one apply the tree deletes their ephemerals
//     (with events) and coord releases their locks, queue deliveries and
//     barrier entries, granting waiters (with the lock-delay of an expired
//     holder). Unlike the root, a session that never acted here is ended
//     too (no error): every ended session gets a tombstone, so that a
//     command proposed before its end but applied after it is refused
//     (ErrSessionExpired).
//
//   - Tombstones are bounded in time. The group's clock is the physical
//     part of its zxids (clock.go), now = ZxidPhysicalMs(zxid). A session's
//     end is stamped end = max(now, the end command's proposer clock). A
//     tombstone is kept while now <= end + 2*SessionHorizonMs; when it is
//     dropped, the group's floor rises to at least end + SessionHorizonMs.
//     A command for a session that is not a participant is refused
//     (ErrSessionExpired) when its proposer clock (the clock envelope's
//     milliseconds, else the command's TimeMs) is at or below the floor.
//     So a command for an ended session S is refused while S's tombstone
//     is kept, and afterwards unless its proposer stamped it more than
//     SessionHorizonMs after the group stamped S's end, which no member
//     does: a member proposes for S only while S is live in its root
//     state, and the server keeps that state's lag far below the horizon
//     (10 minutes, against a 10 s request timeout). A legitimate command
//     is never refused by the floor unless its proposer's clock is more
//     than SessionHorizonMs behind the group's (the floor stays that far
//     behind the clock when tombstones drop on time). A current
//     participant is never refused: its end has not been applied here yet,
//     and when it is, it cleans up whatever the command left.
//
//   - Limits. At most MaxParticipants adopted sessions
//     (ErrTooManySessions for a new one). At most MaxTombstones; an end
//     beyond drops the oldest tombstone early, raising the floor as above
//     (safe; new participants stamped below the floor are refused until
//     the clocks pass it).
//
// Everything is deterministic: time is the entry's zxid and proposer
// clock, and tombstones are pruned in end order while applying. Tombstones
// and the floor are in the snapshot (version 3, written only when there
// are any).

// SessionHorizonMs is how long, in the group's zxid time, a keyspace group
// remembers an ended session exactly (tombstones live twice that), and how
// far behind the group's clock the floor stays.
const SessionHorizonMs = 10 * 60 * 1000

// Limits of a keyspace group's session table.
const (
	MaxParticipants = 100_000   // adopted sessions; ErrTooManySessions
	MaxTombstones   = 1_000_000 // ended sessions remembered; the oldest is dropped early beyond
)

// Options are a state machine's settings, the same on every member of its
// group.
type Options struct {
	// Keyspace makes this the state machine of a regional keyspace's
	// group: its session table is external (see sessions.go). The root
	// group's state machine leaves it false.
	Keyspace bool
}

// tombstone is an ended session and its end time (ms).
type tombstone struct {
	session int64
	endMs   int64
}

// sessionTable is a keyspace group's memory of ended sessions; its
// participants are the tree's (adopted) sessions.
type sessionTable struct {
	ended   map[int64]int64 // session -> end ms
	order   []tombstone     // in end order (insertion order); order[head:] are live
	head    int
	floorMs int64
}

func newSessionTable() *sessionTable { return &sessionTable{ended: map[int64]int64{}} }

func (s *sessionTable) len() int { return len(s.order) - s.head }

func (s *sessionTable) empty() bool { return s.len() == 0 && s.floorMs == 0 }

// drop removes the oldest tombstone and raises the floor.
func (s *sessionTable) drop() {
	t := s.order[s.head]
	s.order[s.head] = tombstone{}
	s.head++
	delete(s.ended, t.session)
	s.floorMs = max(s.floorMs, satAdd(t.endMs, SessionHorizonMs))
	if s.head >= 1024 && s.head*2 >= len(s.order) {
		s.order = append([]tombstone(nil), s.order[s.head:]...)
		s.head = 0
	}
}

// prune drops the tombstones that expired by nowMs, oldest first.
func (s *sessionTable) prune(nowMs int64) {
	for s.len() > 0 && nowMs > satAdd(s.order[s.head].endMs, 2*SessionHorizonMs) {
		s.drop()
	}
}

// end records a tombstone (once: a session ended again keeps its first).
func (s *sessionTable) end(id, endMs int64) {
	if _, ok := s.ended[id]; ok {
		return
	}
	if s.len() >= MaxTombstones {
		s.drop()
	}
	s.ended[id] = endMs
	s.order = append(s.order, tombstone{id, endMs})
}

func satAdd(a, b int64) int64 {
	if a > MaxZxid-b {
		return MaxZxid
	}
	return a + b
}

// SessionTombstone is an ended session a keyspace group remembers.
type SessionTombstone struct {
	Session int64
	EndMs   int64
}

// Tombstones are the ended sessions a keyspace group remembers, in end
// order, and the floor: a non-participant's command stamped at or below it
// is refused. Empty for the root group. Call it under RLock.
func (f *FSM) Tombstones() ([]SessionTombstone, int64) {
	if f.sessions == nil {
		return nil, 0
	}
	out := make([]SessionTombstone, 0, f.sessions.len())
	for _, t := range f.sessions.order[f.sessions.head:] {
		out = append(out, SessionTombstone{Session: t.session, EndMs: t.endMs})
	}
	return out, f.sessions.floorMs
}

// Participants are the sessions that acted in a keyspace group and have
// not ended there, sorted. The group's leader may compare them with the
// root's live sessions and end those the root no longer knows. Empty for
// the root group. Call it under RLock.
func (f *FSM) Participants() []int64 {
	if f.sessions == nil {
		return nil
	}
	infos := f.tree.Sessions()
	out := make([]int64, len(infos))
	for i, s := range infos {
		out[i] = s.ID
	}
	return out
}

// IsKeyspace reports whether this is a keyspace group's state machine.
func (f *FSM) IsKeyspace() bool { return f.sessions != nil }

// errTooManyParticipants marks an admission refused by MaxParticipants.
var errTooManyParticipants = errs.ErrTooManySessions

// admit decides whether a command stamped at proposerMs may act for the
// session id in a keyspace group, adopting it when it is new. It returns
// whether it adopted it, and why not when it refuses.
func (f *FSM) admit(id, proposerMs int64) (adopted bool, err error) {
	if _, ok := f.tree.Session(id); ok {
		return false, nil // a participant
	}
	s := f.sessions
	switch _, ended := s.ended[id]; {
	case id <= 0 || ended || proposerMs <= s.floorMs:
		return false, errs.ErrSessionExpired
	case f.tree.SessionCount() >= MaxParticipants:
		return false, errTooManyParticipants
	}
	return f.tree.AdoptSession(id), nil
}

// proposerMs is the proposer's clock of the entry being applied: its
// clock envelope's, else the command's own TimeMs.
func (f *FSM) proposerMs(timeMs int64) int64 {
	if f.stamp.physicalMs != 0 {
		return int64(f.stamp.physicalMs)
	}
	return timeMs
}

// needsSession reports whether a tree command creates an ephemeral for
// its session.
func needsSession(cmd *tree.Command) bool {
	ephemeral := func(op *tree.Op) bool {
		return op.Type == tree.OpCreate && (op.Mode == tree.ModeEphemeral || op.Mode == tree.ModeEphemeralSequential)
	}
	if cmd.Op.Type == tree.OpMulti {
		for i := range cmd.Ops {
			if ephemeral(&cmd.Ops[i]) {
				return true
			}
		}
		return false
	}
	return ephemeral(&cmd.Op)
}

// applyKeyspaceTree applies a tree command in a keyspace group. It reports
// false when the command is not one it handles differently from the root
// (then applyTree goes on as in the root).
func (f *FSM) applyKeyspaceTree(r *Result, cmd *tree.Command) bool {
	switch cmd.Op.Type {
	case tree.OpCreateSession:
		r.TreeResult = tree.Result{Err: errs.ErrBadArguments, Op: tree.OpResult{Type: cmd.Op.Type, Err: errs.ErrBadArguments}}
		return true
	case tree.OpCloseSession, tree.OpExpire:
		f.endSessions(r, cmd)
		return true
	}
	if !needsSession(cmd) {
		return false
	}
	adopted, err := f.admit(cmd.Session, f.proposerMs(cmd.TimeMs))
	// Refused: the tree refuses the ephemeral create itself, the session
	// being unknown to it (ErrSessionExpired, in a multi at that op).
	r.TreeResult, r.Events = f.tree.Apply(r.Zxid, cmd)
	if errors.Is(err, errTooManyParticipants) {
		replaceErr(&r.TreeResult, errs.ErrSessionExpired, err)
	}
	if adopted && r.TreeResult.Err != nil {
		f.tree.ForgetSession(cmd.Session)
	}
	return true
}

// replaceErr rewrites a tree result's error old as new (in a multi's op
// results too).
func replaceErr(res *tree.Result, old, new error) {
	if res.Err == old {
		res.Err = new
	}
	if res.Op.Err == old {
		res.Op.Err = new
	}
	for i := range res.Multi {
		if res.Multi[i].Err == old {
			res.Multi[i].Err = new
		}
	}
}

// endSessions ends the sessions an OpCloseSession or OpExpire names in a
// keyspace group: their ephemerals, their coord state, then tombstones.
func (f *FSM) endSessions(r *Result, cmd *tree.Command) {
	ids, expired := cmd.Sessions, true
	if cmd.Op.Type == tree.OpCloseSession {
		ids, expired = []int64{cmd.Session}, false
	}
	if len(ids) > tree.MaxExpireBatch {
		r.TreeResult = tree.Result{Err: errs.ErrBadArguments, Op: tree.OpResult{Type: cmd.Op.Type, Err: errs.ErrBadArguments}}
		return
	}
	r.TreeResult, r.Events = f.tree.Apply(r.Zxid, &tree.Command{ID: cmd.ID, TimeMs: cmd.TimeMs,
		Op: tree.Op{Type: tree.OpExpire}, Sessions: ids})
	r.TreeResult.Op.Type = cmd.Op.Type
	r.Grants, r.Losses = f.coord.SessionsEnded(r.Index, cmd.TimeMs, ids, expired)
	endMs := max(int64(ZxidPhysicalMs(r.Zxid)), f.proposerMs(cmd.TimeMs))
	r.Ended = make([]SessionEnd, len(ids))
	for i, id := range ids {
		r.Ended[i] = SessionEnd{ID: id, Expired: expired}
		if id > 0 {
			f.sessions.end(id, endMs)
		}
	}
}

// keyspaceLive is coord's liveness question in a keyspace group: admission.
// It remembers an adoption (to undo if the command fails) and a refusal by
// the participant limit.
func (f *FSM) keyspaceLive(c *coord.Command, adopted *bool, limit *bool) coord.LiveFunc {
	return func(id int64) bool {
		a, err := f.admit(id, f.proposerMs(c.TimeMs))
		*adopted = *adopted || a
		*limit = *limit || errors.Is(err, errTooManyParticipants)
		return err == nil
	}
}

// Sessions section of the version 3 snapshot envelope, written only for a
// keyspace group with tombstones or a floor:
//
//	byte version=1, varint floorMs, uvarint count,
//	then each tombstone in end order: varint session, varint endMs
const sessionsVersion byte = 1

func (s *sessionTable) snapshot() []byte {
	if s == nil || s.empty() {
		return nil
	}
	b := []byte{sessionsVersion}
	b = binary.AppendVarint(b, s.floorMs)
	b = binary.AppendUvarint(b, uint64(s.len()))
	for _, t := range s.order[s.head:] {
		b = binary.AppendVarint(b, t.session)
		b = binary.AppendVarint(b, t.endMs)
	}
	return b
}

// restoreSessionTable parses a sessions section (empty: none).
func restoreSessionTable(b []byte) (*sessionTable, bool) {
	s := newSessionTable()
	if len(b) == 0 {
		return s, true
	}
	if b[0] != sessionsVersion {
		return nil, false
	}
	d := decoder{b: b[1:]}
	s.floorMs = d.varint()
	n := d.uvarint()
	// Every tombstone takes at least two bytes.
	if d.bad || s.floorMs < 0 || n > MaxTombstones || n > uint64(len(d.b))/2 || s.floorMs == 0 && n == 0 {
		return nil, false
	}
	s.order = make([]tombstone, 0, n)
	for range n {
		t := tombstone{session: d.varint(), endMs: d.varint()}
		if _, dup := s.ended[t.session]; d.bad || dup || t.session <= 0 || t.endMs < 0 {
			return nil, false
		}
		s.ended[t.session] = t.endMs
		s.order = append(s.order, t)
	}
	return s, len(d.b) == 0
}
