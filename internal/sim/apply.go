package sim

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/fsm"
	"github.com/meridian-coord/meridian/internal/tree"
)

// What is checked as every member applies every entry of every group.

// apply applies one committed entry of n's group on n's member and checks
// the invariants that concern it.
func (s *Sim) apply(n *node, e *pb.Entry) error {
	g := s.groups[n.group]
	idx := e.GetIndex()
	if idx <= n.applied {
		return s.violation("member %d group %d applied %d after %d", n.m.id, n.group, idx, n.applied)
	}
	h := sha256.Sum256(append(fmt.Appendf(nil, "%d/%d/", e.GetTerm(), e.GetType()), e.GetData()...))
	if prev, ok := g.committed[idx]; ok && prev != h {
		return s.violation("member %d committed a different entry at index %d of group %d", n.m.id, idx, n.group)
	}
	g.committed[idx] = h
	if e.GetType() == pb.EntryNormal && len(e.GetData()) > 0 {
		if err := s.applyData(n, idx, e.GetData()); err != nil {
			return err
		}
	}
	n.applied = idx
	s.Stats.Applied++
	if n.group == 0 {
		s.Stats.MaxIndex = max(s.Stats.MaxIndex, idx)
	} else {
		s.Stats.KeyspaceApplied++
	}
	g.maxIndex = max(g.maxIndex, idx)
	sh := stateHash(n.fsm)
	if prev, ok := g.states[idx]; ok && prev != sh {
		return s.violation("member %d's state of group %d after index %d differs from another member's", n.m.id, n.group, idx)
	}
	g.states[idx] = sh
	return nil
}

// applyData applies a normal entry's data to n's state machine, as a
// member's replica does, and checks the invariants of its result: its
// zxid, its answer, what it may touch, the locks and sessions after it.
func (s *Sim) applyData(n *node, idx uint64, data []byte) error {
	g := s.groups[n.group]
	r := n.fsm.Apply(idx, data)
	if r.Skipped != nil {
		return s.violation("group %d: undecodable entry %d: %v", n.group, idx, r.Skipped)
	}
	if r.Zxid <= n.lastZxid {
		return s.violation("member %d group %d gave index %d zxid %d after %d", n.m.id, n.group, idx, r.Zxid, n.lastZxid)
	}
	n.lastZxid = r.Zxid
	if z, ok := g.zxids[idx]; ok && z != r.Zxid {
		return s.violation("member %d gave index %d of group %d zxid %d, another member %d", n.m.id, idx, n.group, r.Zxid, z)
	}
	g.zxids[idx] = r.Zxid
	answer := fmt.Sprintf("%v|%v|%v|%d", r.TreeResult.Err, r.CoordResult.Err, r.KeyspaceResult.Err, len(r.Grants))
	if a, ok := g.results[idx]; ok && a != answer {
		return s.violation("member %d answered index %d of group %d %q, another member %q", n.m.id, idx, n.group, answer, a)
	}
	g.results[idx] = answer
	if err := s.checkOwnership(n, &r); err != nil {
		return err
	}
	if err := s.noteResult(n, &r); err != nil {
		return err
	}
	if err := s.checkGrants(n, r.Grants); err != nil {
		return err
	}
	return s.checkLocks(n)
}

// noteResult follows what an entry did: a keyspace created (its group
// opens on the member), sessions ended, a proposal answered (its client
// sees the zxid; a write-then-flag's write answered queues the flag; a
// flag's zxid is checked against its write's).
func (s *Sim) noteResult(n *node, r *fsm.Result) error {
	if n.group == 0 {
		if c := r.KeyspaceCommand; c != nil && c.Op == fsm.KeyspaceCreate && r.KeyspaceResult.Err == nil && n.m.node(r.KeyspaceResult.Keyspace.Group) == nil {
			s.openGroup(n.m, r.KeyspaceResult.Keyspace)
		}
		if r.Started.ID != 0 {
			s.rootStarted[r.Started.ID] = true
		}
		for _, e := range r.Ended {
			if !s.rootEnded[e.ID] {
				s.rootEnded[e.ID], s.closed[e.ID] = true, !e.Expired
			}
		}
	} else if err := s.checkSessionEnds(n, r); err != nil {
		return err
	}
	p := s.props[r.ID]
	if r.ID == 0 || p == nil {
		return nil
	}
	if p.flag {
		s.Stats.FlagsChecked++
		if r.Zxid <= p.dep {
			return s.violation("a flag at index %d of group %d got zxid %d, not after its write's %d", r.Index, n.group, r.Zxid, p.dep)
		}
	}
	if n.m.id == p.member && !p.acked {
		p.acked = true
		s.seen[p.session] = max(s.seen[p.session], r.Zxid)
		if p.write && r.TreeResult.Err == nil && n.m.up {
			s.flags = append(s.flags, pendingFlag{member: p.member, session: p.session, group: p.flagGroup, dep: r.Zxid})
		}
	}
	return nil
}

// checkSessionEnds checks the sessions a keyspace group ends: only those
// the root ended (or never started: the load's stand-in for a stale
// session), nothing of them left after the end, and none taken back
// while the group must refuse it (fsm/sessions.go): while its tombstone
// is kept (the group's clock, its zxids' milliseconds, within twice
// SessionHorizonMs of the end's stamp), or for a command stamped within
// SessionHorizonMs of it. A member whose clock runs further ahead than
// that may bring an ended session back, as documented; the leader's duty
// ends it again.
func (s *Sim) checkSessionEnds(n *node, r *fsm.Result) error {
	g := s.groups[n.group]
	nowMs := int64(fsm.ZxidPhysicalMs(r.Zxid))
	for _, e := range r.Ended {
		if s.rootStarted[e.ID] && !s.rootEnded[e.ID] {
			return s.violation("group %d ended session %d on member %d, which the root group has not ended", n.group, e.ID, n.m.id)
		}
		if _, ok := n.fsm.Tree().Session(e.ID); ok || len(n.fsm.Tree().Ephemerals(e.ID, "")) > 0 {
			return s.violation("group %d on member %d still has session %d after ending it (index %d)", n.group, n.m.id, e.ID, r.Index)
		}
		endMs := nowMs
		if p := s.props[r.ID]; p != nil {
			endMs = max(endMs, p.clockMs)
		}
		// The group stamps a session's first end; ending it again (a
		// duty proposed twice) changes nothing until it takes part again.
		if _, ok := g.ended[e.ID]; !ok {
			g.ended[e.ID] = sessionEnd{index: r.Index, endMs: endMs}
			s.Stats.SessionEnds++
		}
	}
	id := commandSession(r)
	e, ok := g.ended[id]
	if id <= 0 || !ok || e.index >= r.Index {
		return nil
	}
	if _, back := n.fsm.Tree().Session(id); !back {
		return nil
	}
	p := s.props[r.ID]
	switch {
	case nowMs <= e.endMs+2*fsm.SessionHorizonMs:
		return s.violation("group %d on member %d took session %d back at index %d while its tombstone is kept (ended at %d)", n.group, n.m.id, id, r.Index, e.index)
	case p != nil && p.clockMs <= e.endMs+fsm.SessionHorizonMs:
		return s.violation("group %d on member %d took session %d back at index %d for a command stamped %d ms after its end", n.group, n.m.id, id, r.Index, p.clockMs-e.endMs)
	}
	s.Stats.SessionsBack++
	delete(g.ended, id) // its next end is stamped anew
	return nil
}

// commandSession is the session an entry acts for (0: none).
func commandSession(r *fsm.Result) int64 {
	if r.TreeCommand != nil && r.TreeCommand.Session != 0 {
		return r.TreeCommand.Session
	}
	if r.CoordCommand != nil {
		return r.CoordCommand.Session
	}
	return 0
}

// checkOwnership checks that an entry touching what its group does not own
// was refused, with the error that says so, the same on every member: a
// keyspace group owns its prefix and the object names below it, the root
// everything else once the keyspace's creation is applied (at the index
// that is the keyspace's group id). The simulation's own rule, by prefix,
// not fsm's.
func (s *Sim) checkOwnership(n *node, r *fsm.Result) error {
	outside := false
	fenced := r.CoordCommand != nil && r.CoordCommand.Op == coord.OpFenced
	if c := r.CoordCommand; c != nil && c.Op != coord.OpTick && c.Op != coord.OpSetting && !s.ownsName(n.group, r.Index, c.Name) {
		outside = true
	}
	if cmd := r.TreeCommand; cmd != nil {
		ops := cmd.Ops
		if cmd.Op.Type != tree.OpMulti {
			ops = []tree.Op{cmd.Op}
		}
		for _, op := range ops {
			if op.Path != "" && !s.ownsPath(n.group, r.Index, op.Path) {
				outside = true
			}
		}
	}
	if !outside {
		return nil
	}
	var err error
	switch {
	case fenced || r.TreeCommand != nil:
		err = r.TreeResult.Err
	default:
		err = r.CoordResult.Err
	}
	switch {
	case err == nil:
		return s.violation("group %d on member %d applied index %d outside what it owns: %+v %+v", n.group, n.m.id, r.Index, r.TreeCommand, r.CoordCommand)
	case errors.Is(err, errs.ErrWrongGroup):
		s.Stats.WrongGroup++
	case fenced && errors.Is(err, errs.ErrCrossKeyspace):
		s.Stats.CrossKeyspace++
	case fenced && errors.Is(err, errs.ErrStaleToken):
	default:
		return s.violation("group %d on member %d refused index %d outside what it owns with %v", n.group, n.m.id, r.Index, err)
	}
	return nil
}

// ownsPath is the simulation's rule: whether group owns path at index
// (for the root: keyspaces created before index own their prefixes).
func (s *Sim) ownsPath(group, index uint64, path string) bool {
	if group != 0 {
		return under(path, s.groups[group].ks.Prefix)
	}
	for id, g := range s.groups {
		if id != 0 && id < index && under(path, g.ks.Prefix) {
			return false
		}
	}
	return true
}

// ownsName: as ownsPath, for a coordination object's name ("ks1/lock").
func (s *Sim) ownsName(group, index uint64, name string) bool {
	if name == "" {
		return group == 0
	}
	return s.ownsPath(group, index, "/"+name)
}

func under(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// inGroup reports whether a znode at path belongs in group's tree at the
// end of a run (the system znodes are in every tree).
func (s *Sim) inGroup(group uint64, path string) bool {
	if under(path, "/zookeeper") {
		return true
	}
	return s.ownsPath(group, ^uint64(0), path)
}

// isPrefix reports whether path is a keyspace's prefix (its mount znode
// in the root).
func (s *Sim) isPrefix(path string) bool {
	for id, g := range s.groups {
		if id != 0 && g.ks.Prefix == path {
			return true
		}
	}
	return false
}

// checkGrants checks that every lock grant of an entry (immediate, handed
// off at a release, or at a session's end) carries a token above every
// token granted for that lock before on this member.
func (s *Sim) checkGrants(n *node, grants []coord.Grant) error {
	for _, g := range grants {
		if g.Kind != coord.GrantLock {
			continue
		}
		if g.Token <= n.tokens[g.Lock] {
			return s.violation("member %d group %d granted %s token %d after %d", n.m.id, n.group, g.Lock, g.Token, n.tokens[g.Lock])
		}
		n.tokens[g.Lock] = g.Token
	}
	return nil
}

// checkLocks checks every lock of n's group after an apply: at most one
// exclusive holder and never one beside shared holders, and no holder or
// waiter whose session has ended there (the apply that ends a session
// releases its locks; in a keyspace group, a session takes part from its
// first command there to its end there).
func (s *Sim) checkLocks(n *node) error {
	t := n.fsm.Tree()
	for _, info := range n.fsm.Coord().List("", 1000) {
		excl := 0
		for _, hd := range info.Holders {
			if hd.Mode == coord.Exclusive {
				excl++
			}
			if _, live := t.Session(hd.Session); !live {
				return s.violation("lock %s is held by ended session %d on member %d group %d (applied %d)", info.Name, hd.Session, n.m.id, n.group, n.applied)
			}
		}
		for _, w := range info.Waiters {
			if _, live := t.Session(w.Session); !live {
				return s.violation("ended session %d waits for lock %s on member %d group %d", w.Session, info.Name, n.m.id, n.group)
			}
		}
		if info.Permits <= 1 && (excl > 1 || (excl == 1 && len(info.Holders) > 1)) {
			return s.violation("lock %s has holders %v on member %d group %d", info.Name, info.Holders, n.m.id, n.group)
		}
	}
	return nil
}
