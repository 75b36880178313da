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

// disk is a node's durable storage. A synced write survives a crash, and
// so does every unsynced write before it (one log, as Pebble's WAL); an
// unsynced write after the last synced one is lost.
type disk struct {
	hs       *pb.HardState
	snap     *pb.Snapshot
	ents     []*pb.Entry // after snap, in order
	unsynced []write
}

type write struct {
	hs        *pb.HardState
	ents      []*pb.Entry
	snap      *pb.Snapshot
	compactTo uint64
}

func (d *disk) empty() bool {
	return d.hs == nil && d.snap == nil && len(d.ents) == 0 && len(d.unsynced) == 0
}

// sync makes the unsynced writes durable, in order.
func (d *disk) sync() {
	for _, w := range d.unsynced {
		if w.snap != nil {
			d.snap = w.snap
			if w.compactTo == 0 { // a received snapshot replaces the log
				d.ents = nil
			}
		}
		if w.compactTo > 0 {
			k := 0
			for k < len(d.ents) && d.ents[k].GetIndex() < w.compactTo {
				k++
			}
			d.ents = d.ents[k:]
		}
		if len(w.ents) > 0 {
			first := w.ents[0].GetIndex()
			kept := d.ents[:0:0]
			for _, e := range d.ents {
				if e.GetIndex() < first {
					kept = append(kept, e)
				}
			}
			d.ents = append(kept, w.ents...)
		}
		if w.hs != nil {
			d.hs = w.hs
		}
	}
	d.unsynced = nil
}

// last is the durable log's last index.
func (d *disk) last() uint64 {
	if n := len(d.ents); n > 0 {
		return d.ents[n-1].GetIndex()
	}
	return d.snap.GetMetadata().GetIndex()
}

// errCrashed: the node crashed in the middle of a write.
var errCrashed = errors.New("sim: crashed during the write")

// storage is node n's disk as a replica.Storage.
type storage struct {
	s *Sim
	n *node
}

func (st storage) Load() (*pb.HardState, *pb.Snapshot, []*pb.Entry, error) {
	d := &st.n.disk
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

// Save writes one Ready, or crashes the node before it does (during the
// faults): a leader's early sends are out by then, so its followers may
// hold entries its own disk never got.
func (st storage) Save(hs *pb.HardState, ents []*pb.Entry, snap *pb.Snapshot, sync bool) error {
	s, n := st.s, st.n
	if len(ents) > 0 && s.now < uint64(s.cfg.Steps) {
		leads := n.replica.BasicStatus().RaftState == raft.StateLeader
		if p := s.rng.Float64(); (leads && p < midWriteCrash) || (!leads && p < midWriteCrashF) {
			n.up = false
			s.Stats.Crashes++
			if leads {
				s.Stats.MidWriteCrashes++
			} else {
				s.Stats.FollowerWriteCrashes++
			}
			return errCrashed
		}
	}
	w := write{}
	if hs != nil {
		w.hs = proto.Clone(hs).(*pb.HardState)
	}
	if snap != nil {
		w.snap = proto.Clone(snap).(*pb.Snapshot)
	}
	for _, e := range ents {
		w.ents = append(w.ents, proto.Clone(e).(*pb.Entry))
	}
	n.disk.unsynced = append(n.disk.unsynced, w)
	if sync {
		n.disk.sync()
	}
	return nil
}

func (st storage) SaveSnapshot(snap *pb.Snapshot, compactTo uint64) error {
	d := &st.n.disk
	d.unsynced = append(d.unsynced, write{snap: proto.Clone(snap).(*pb.Snapshot), compactTo: max(compactTo, 1)})
	d.sync()
	return nil
}

// network is node n's outbound side of the simulated network. It checks
// that a message vouching for n's durable state (an acknowledged append, a
// granted vote) leaves only once n's disk holds that state.
type network struct {
	s *Sim
	n *node
}

func (nw network) Send(m *pb.Message) {
	if err := vouched(&nw.n.disk, m); err != nil && nw.s.err == nil {
		nw.s.err = fmt.Errorf("seed %d at %d ms: node %d %v", nw.s.cfg.Seed, nw.s.now, nw.n.id, err)
	}
	nw.s.send(m, nil)
}

func (nw network) SendStepDown(to, term, successor uint64) {
	m := &pb.Message{From: proto.Uint64(nw.n.id), To: proto.Uint64(to)}
	nw.s.send(m, &notice{term: term, successor: successor})
}

// vouched checks m against what the sender's disk holds durably.
func vouched(d *disk, m *pb.Message) error {
	switch {
	case m.GetType() == pb.MsgAppResp && !m.GetReject() && m.GetIndex() > d.last():
		return fmt.Errorf("acknowledged index %d (term %d) to %d with only %d on its disk", m.GetIndex(), m.GetTerm(), m.GetTo(), d.last())
	case m.GetType() == pb.MsgVoteResp && !m.GetReject() &&
		(d.hs.GetTerm() != m.GetTerm() || d.hs.GetVote() != m.GetTo()):
		return fmt.Errorf("granted its vote in term %d to %d with term %d, vote %d on its disk", m.GetTerm(), m.GetTo(), d.hs.GetTerm(), d.hs.GetVote())
	}
	return nil
}

// machine is node n's state machine as the replica applies to it.
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

// Restore replaces n's state with a snapshot taken at index, which must be
// the state every member had after applying index.
func (m machine) Restore(index uint64, data []byte) error {
	s, n := m.s, m.n
	f := fsm.New(fsm.Hooks{})
	if err := f.Restore(index, data); err != nil {
		return err
	}
	// The last entry with data at or before index: every one was applied
	// somewhere (the member that took the snapshot), with its state recorded.
	var at uint64
	for i := range s.states {
		if i <= index && i > at {
			at = i
		}
	}
	n.fsm, n.applied, n.tokens = f, at, map[string]uint64{}
	s.Stats.Restores++
	if at > 0 && s.states[at] != s.stateHash(n) && s.err == nil {
		s.err = fmt.Errorf("seed %d at %d ms: node %d restored a snapshot at %d that differs from the state after %d", s.cfg.Seed, s.now, n.id, index, at)
	}
	return nil
}
