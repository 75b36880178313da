package sim

import (
	"errors"
	"fmt"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-coord/meridian/internal/fsm"
)

// What a replica.Node leaves to its driver: a disk, a network and a state
// machine, here simulated, each checking the promises made across it.

// disk is a member's durable storage, shared by its groups as the Pebble
// store is (each group under its own prefix). A synced write survives a
// crash, and so does every unsynced write before it, of any group (one
// log, as Pebble's WAL); an unsynced write after the last synced one is
// lost.
type disk struct {
	groups   map[uint64]*groupDisk // what is durable, per group
	unsynced []write
}

// groupDisk is one group's durable raft state on a member.
type groupDisk struct {
	hs   *pb.HardState
	snap *pb.Snapshot
	ents []*pb.Entry // after snap, in order
}

type write struct {
	group     uint64
	hs        *pb.HardState
	ents      []*pb.Entry
	snap      *pb.Snapshot
	compactTo uint64
}

// group is group g's durable state (empty if none yet).
func (d *disk) group(g uint64) *groupDisk {
	if d.groups == nil {
		d.groups = map[uint64]*groupDisk{}
	}
	gd := d.groups[g]
	if gd == nil {
		gd = &groupDisk{}
		d.groups[g] = gd
	}
	return gd
}

func (d *disk) empty() bool {
	for _, gd := range d.groups {
		if gd.hs != nil || gd.snap != nil || len(gd.ents) > 0 {
			return false
		}
	}
	return len(d.unsynced) == 0
}

// sync makes the unsynced writes durable, in order.
func (d *disk) sync() {
	for _, w := range d.unsynced {
		gd := d.group(w.group)
		if w.snap != nil {
			gd.snap = w.snap
			if w.compactTo == 0 { // a received snapshot replaces the log
				gd.ents = nil
			}
		}
		if w.compactTo > 0 {
			k := 0
			for k < len(gd.ents) && gd.ents[k].GetIndex() < w.compactTo {
				k++
			}
			gd.ents = gd.ents[k:]
		}
		if len(w.ents) > 0 {
			first := w.ents[0].GetIndex()
			kept := gd.ents[:0:0]
			for _, e := range gd.ents {
				if e.GetIndex() < first {
					kept = append(kept, e)
				}
			}
			gd.ents = append(kept, w.ents...)
		}
		if w.hs != nil {
			gd.hs = w.hs
		}
	}
	d.unsynced = nil
}

// last is the durable log's last index.
func (gd *groupDisk) last() uint64 {
	if n := len(gd.ents); n > 0 {
		return gd.ents[n-1].GetIndex()
	}
	return gd.snap.GetMetadata().GetIndex()
}

// errCrashed: the member crashed in the middle of a write.
var errCrashed = errors.New("sim: crashed during the write")

// storage is one group's part of its member's disk as a replica.Storage.
type storage struct {
	s *Sim
	n *node
}

func (st storage) Load() (*pb.HardState, *pb.Snapshot, []*pb.Entry, error) {
	d := st.n.m.disk.group(st.n.group)
	hs, snap := &pb.HardState{}, &pb.Snapshot{}
	if d.hs != nil {
		hs = proto.Clone(d.hs).(*pb.HardState)
	}
	if d.snap != nil {
		snap = proto.Clone(d.snap).(*pb.Snapshot)
	}
	var ents []*pb.Entry
	for _, e := range d.ents {
		if e.GetIndex() > snap.GetMetadata().GetIndex() {
			ents = append(ents, proto.Clone(e).(*pb.Entry))
		}
	}
	return hs, snap, ents, nil
}

// Save writes one Ready, or crashes the member before it does (during the
// faults): a leader's early sends are out by then, so its followers may
// hold entries its own disk never got. The crash takes down every group
// of the member.
func (st storage) Save(hs *pb.HardState, ents []*pb.Entry, snap *pb.Snapshot, sync bool) error {
	s, n := st.s, st.n
	if len(ents) > 0 && s.now < uint64(s.cfg.Steps) && n.replica != nil {
		leads := n.replica.BasicStatus().RaftState == raft.StateLeader
		if p := s.rng.Float64(); (leads && p < midWriteCrash) || (!leads && p < midWriteCrashF) {
			n.m.up = false
			s.Stats.Crashes++
			if leads {
				s.Stats.MidWriteCrashes++
			} else {
				s.Stats.FollowerWriteCrashes++
			}
			return errCrashed
		}
	}
	w := write{group: n.group}
	if hs != nil {
		w.hs = proto.Clone(hs).(*pb.HardState)
	}
	if snap != nil {
		w.snap = proto.Clone(snap).(*pb.Snapshot)
	}
	for _, e := range ents {
		w.ents = append(w.ents, proto.Clone(e).(*pb.Entry))
	}
	d := &n.m.disk
	d.unsynced = append(d.unsynced, w)
	if sync {
		d.sync()
	}
	return nil
}

// Sync makes every earlier write of the member durable (one log).
func (st storage) Sync() error {
	st.s.Stats.LearnerSyncs++
	st.n.m.disk.sync()
	return nil
}

func (st storage) SaveSnapshot(snap *pb.Snapshot, compactTo uint64) error {
	d := &st.n.m.disk
	d.unsynced = append(d.unsynced, write{group: st.n.group, snap: proto.Clone(snap).(*pb.Snapshot), compactTo: max(compactTo, 1)})
	d.sync()
	return nil
}

// network is one group's outbound side of the simulated network on a
// member (the groups of a member share its links, as they share the
// transport's connections). It checks that a message vouching for the
// group's durable state on the member (an acknowledged append, a granted
// vote) leaves only once the member's disk holds that state.
type network struct {
	s *Sim
	n *node
}

func (nw network) Send(m *pb.Message) {
	if err := vouched(nw.n.m.disk.group(nw.n.group), m); err != nil && nw.s.err == nil {
		nw.s.err = nw.s.violation("member %d group %d %v", nw.n.m.id, nw.n.group, err)
	}
	nw.s.send(nw.n.group, m, nil)
}

func (nw network) SendStepDown(to, term, successor uint64) {
	m := &pb.Message{From: proto.Uint64(nw.n.m.id), To: proto.Uint64(to)}
	nw.s.send(nw.n.group, m, &notice{term: term, successor: successor})
}

// vouched checks m against what the sender's disk holds durably. A vote
// is durable when the disk holds it, or a later term: a member that
// granted a vote and then, before its write, moved to a later term (two
// vote requests stepped before one Ready) persists only the later term,
// and never votes in the earlier one again.
func vouched(d *groupDisk, m *pb.Message) error {
	switch {
	case m.GetType() == pb.MsgAppResp && !m.GetReject() && m.GetIndex() > d.last():
		return fmt.Errorf("acknowledged index %d (term %d) to %d with only %d on its disk", m.GetIndex(), m.GetTerm(), m.GetTo(), d.last())
	case m.GetType() == pb.MsgVoteResp && !m.GetReject() && d.hs.GetTerm() <= m.GetTerm() &&
		(d.hs.GetTerm() != m.GetTerm() || d.hs.GetVote() != m.GetTo()):
		return fmt.Errorf("granted its vote in term %d to %d with term %d, vote %d on its disk", m.GetTerm(), m.GetTo(), d.hs.GetTerm(), d.hs.GetVote())
	}
	return nil
}

// machine is one group's state machine on a member, as the replica
// applies to it.
type machine struct {
	s *Sim
	n *node
}

func (m machine) Apply(index, term uint64, data []byte) error {
	if m.s.err != nil {
		return nil
	}
	e := &pb.Entry{Index: proto.Uint64(index), Term: proto.Uint64(term), Type: pb.EntryNormal.Enum(), Data: data}
	m.s.err = m.s.apply(m.n, e)
	return nil
}

// Snapshot is the shipped state machine's snapshot (the replica snapshots
// every snapshotEntries applied entries and sends snapshots to members
// that fell behind).
func (m machine) Snapshot() ([]byte, error) { return m.n.fsm.Snapshot() }

// Restore replaces the group's state on the member with a snapshot taken
// at index, which must be the state every member had after applying
// index, with the same last zxid. A root snapshot may bring keyspaces the
// member had not applied yet: their groups open, as a server's do.
func (m machine) Restore(index uint64, data []byte) error {
	s, n := m.s, m.n
	f := s.newFSM(n)
	if err := f.Restore(index, data); err != nil {
		return err
	}
	g := s.groups[n.group]
	// The last entry with data at or before index: every one was applied
	// somewhere (the member that took the snapshot), with its state recorded.
	var at uint64
	for i := range g.states {
		if i <= index && i > at {
			at = i
		}
	}
	n.fsm, n.applied, n.tokens, n.lastZxid = f, at, map[string]uint64{}, f.LastZxid()
	s.Stats.Restores++
	if n.group != 0 && index > 1 { // not the group's first snapshot
		s.Stats.GroupRestores++
	}
	if at > 0 && s.err == nil {
		if g.states[at] != stateHash(f) {
			s.err = s.violation("member %d group %d restored a snapshot at %d that differs from the state after %d", n.m.id, n.group, index, at)
		} else if z := g.zxids[at]; f.LastZxid() != max(z, int64(index)) {
			s.err = s.violation("member %d group %d restored a snapshot at %d with last zxid %d, not %d", n.m.id, n.group, index, f.LastZxid(), z)
		}
	}
	if n.group == 0 {
		s.openKeyspaces(n.m)
	}
	return nil
}

// newFSM is the state machine a member starts group n with: the root's,
// or n's keyspace's.
func (s *Sim) newFSM(n *node) *fsm.FSM {
	if n.group == 0 {
		return fsm.New(fsm.Hooks{})
	}
	return fsm.NewKeyspace(fsm.Hooks{}, n.ks)
}
