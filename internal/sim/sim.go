// Package sim is a deterministic simulation of a Meridian consensus group:
// several members (the replica package's own code, over simulated disks)
// applying committed entries to the shipped state machine (internal/fsm:
// tree and coord), over a simulated network and clock, all driven by one
// seeded random source in one goroutine. Messages are delayed, dropped,
// duplicated and reordered; nodes crash (losing everything not yet synced
// to their disk) and restart; the network partitions, asymmetrically too.
// Invariants are checked continuously; a failing seed replays exactly.
//
// Each node is the shipped member, a replica.Node: the replica package's
// Ready processing (what is persisted before what is sent, what is applied
// when, snapshots, membership entries), its step filters, held proposals
// and step-down handover run here as they do in a server. The simulation
// supplies what a Node leaves to its driver: a disk (Storage) that keeps
// across a crash only what was synced, a network (Network) and a clock.
// The replica's goroutine loop and TCP transport are not simulated. The
// disk and the network check, at the boundary, that no message vouches for
// state the sender's disk does not hold (an append or vote acknowledged
// before it was synced), and the disk makes members crash in the middle of
// a Ready: after a leader's early sends, before its write.
//
// raft draws its election timeouts from crypto/rand, which no seed
// controls, so the simulation keeps raft's own timer out of play (a huge
// ElectionTick, CheckQuorum off) and campaigns on a node itself when the
// node has not heard from a leader within a seeded, randomized timeout.
package sim

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/fsm"
	"github.com/meridian-coord/meridian/internal/replica"
	"github.com/meridian-coord/meridian/internal/tree"
)

// Config is one simulation run.
type Config struct {
	Seed  uint64
	Nodes int // voters (3 or 5)
	Steps int // simulated milliseconds of faults and load
	// Network: each message is delayed uniformly in [MinDelay, MaxDelay] ms,
	// dropped with DropRate, duplicated with DupRate.
	MinDelay, MaxDelay int
	DropRate, DupRate  float64
	// Faults: every FaultEvery ms one fault or repair is chosen.
	FaultEvery int
	// ProposeEvery: mean ms between client proposals.
	ProposeEvery int
}

// DefaultConfig is a short, busy run.
func DefaultConfig(seed uint64) Config {
	return Config{Seed: seed, Nodes: 3, Steps: 4000, MinDelay: 1, MaxDelay: 20, DropRate: 0.02, DupRate: 0.02,
		FaultEvery: 300, ProposeEvery: 5}
}

const (
	tickMs          = 10 // raft tick
	electionMinMs   = 150
	electionRangeMs = 150
	quietMs         = 5000  // after the faults: healed, everyone up, must converge
	midWriteCrash   = 0.01  // of a leader's Readies with entries
	midWriteCrashF  = 0.001 // of a follower's
	snapshotEntries = 200   // a member snapshots every so many applied entries
	catchUpEntries  = 50    // and keeps so many behind it: a member further behind gets the snapshot
)

type message struct {
	at, seq uint64
	m       *pb.Message
	notice  *notice // a step-down notice (m carries only From and To)
	// snapSent: not a message but the transport's report to a snapshot's
	// sender (m.To) that it left for m.From (true) or failed (false).
	snapSent *bool
}

// notice is a step-down notice between members (replica.Network).
type notice struct{ term, successor uint64 }

type node struct {
	id      uint64
	up      bool
	replica *replica.Node
	disk    disk     // survives crashes
	fsm     *fsm.FSM // the shipped state machine, as every member runs it
	applied uint64
	heardAt uint64            // last message from a leader (or own campaign)
	timeout uint64            // this node's current election timeout
	tokens  map[string]uint64 // lock -> last grant token applied here (rebuilt on restart)
}

// Sim is one run. Not safe for concurrent use.
type Sim struct {
	cfg   Config
	rng   *rand.Rand
	now   uint64
	seq   uint64
	nodes []*node
	queue []message
	// cut[a][b]: messages from a to b are lost (a partition, possibly one-way).
	cut map[[2]uint64]bool

	// What the invariants remember.
	leaders   map[uint64]uint64   // term -> the one leader
	committed map[uint64][32]byte // index -> entry hash, first seen applied
	states    map[uint64][32]byte // index -> state hash after applying it
	// err is the first violation found inside a node's Ready processing
	// (its state machine, disk or network), returned after that Ready.
	err   error
	Stats Stats
}

// Stats summarises a run.
type Stats struct {
	Proposals, Applied, Elections, Crashes, Partitions, Dropped uint64
	MidWriteCrashes                                             uint64 // leaders crashed after sending, before writing
	FollowerWriteCrashes                                        uint64 // followers crashed before writing a Ready
	Restores                                                    uint64 // snapshots restored (received, or at a restart)
	MaxIndex                                                    uint64
}

// New builds a simulation; Run executes it.
func New(cfg Config) *Sim {
	s := &Sim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), cut: map[[2]uint64]bool{},
		leaders: map[uint64]uint64{}, committed: map[uint64][32]byte{}, states: map[uint64][32]byte{}}
	for i := 1; i <= cfg.Nodes; i++ {
		s.nodes = append(s.nodes, &node{id: uint64(i)})
	}
	for _, n := range s.nodes {
		s.start(n, true)
	}
	return s
}

// start (re)starts n from its disk: a replica.Node restored from what was
// synced, nothing more (a fresh node has an empty disk and bootstraps the
// group); the state machines are rebuilt by re-applying the committed log.
func (s *Sim) start(n *node, fresh bool) {
	if fresh && !n.disk.empty() {
		panic(fmt.Sprintf("seed %d: node %d started fresh on a used disk", s.cfg.Seed, n.id))
	}
	n.disk.unsynced = nil // lost in the crash
	var peers []replica.Peer
	for _, o := range s.nodes {
		peers = append(peers, replica.Peer{ID: o.id, Addr: fmt.Sprintf("sim-%d", o.id)})
	}
	cfg := replica.Config{ID: n.id, Peers: peers, TickInterval: tickMs * time.Millisecond,
		ElectionTicks: electionMinMs / tickMs, HeartbeatTicks: 1, SnapshotEntries: snapshotEntries, CatchUpEntries: catchUpEntries,
		Logger: slog.New(slog.DiscardHandler)}
	opts := replica.NodeOptions{
		Clock: func() time.Time { return time.UnixMilli(int64(s.now)) },
		Raft: func(c *raft.Config) {
			c.ElectionTick, c.CheckQuorum, c.Logger = 1<<20, false, quiet{}
		},
	}
	n.fsm, n.applied, n.tokens = fsm.New(fsm.Hooks{}), 0, map[string]uint64{}
	rn, err := replica.NewNode(cfg, machine{s, n}, storage{s, n}, network{s, n}, opts)
	if err != nil {
		panic(fmt.Sprintf("seed %d: restart node %d: %v", s.cfg.Seed, n.id, err))
	}
	n.replica, n.up = rn, true
	n.heardAt, n.timeout = s.now, s.electionTimeout()
}

func (s *Sim) electionTimeout() uint64 {
	return uint64(electionMinMs + s.rng.IntN(electionRangeMs))
}

// Run executes the faults-and-load phase, then heals everything and checks
// that the group converges. It returns the first invariant violation.
func (s *Sim) Run() (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("seed %d at %d ms: panic: %v", s.cfg.Seed, s.now, p)
		}
	}()
	for s.now < uint64(s.cfg.Steps) {
		if s.cfg.FaultEvery > 0 && s.now%uint64(s.cfg.FaultEvery) == 0 && s.now > 0 {
			s.fault()
		}
		if s.rng.IntN(s.cfg.ProposeEvery) == 0 {
			s.propose()
		}
		if err := s.step(); err != nil {
			return err
		}
	}
	// Quiet: heal, restart everyone, no drops, and wait for convergence.
	s.cut = map[[2]uint64]bool{}
	for _, n := range s.nodes {
		if !n.up {
			s.start(n, false)
		}
	}
	drop, dup := s.cfg.DropRate, s.cfg.DupRate
	s.cfg.DropRate, s.cfg.DupRate = 0, 0
	defer func() { s.cfg.DropRate, s.cfg.DupRate = drop, dup }()
	before := s.Stats.MaxIndex
	for end := s.now + quietMs; s.now < end; {
		if s.now%50 == 0 && end-s.now > quietMs/2 {
			s.propose() // the healed group must commit new work, then settle
		}
		if err := s.step(); err != nil {
			return err
		}
	}
	if s.Stats.MaxIndex <= before {
		return fmt.Errorf("seed %d: nothing committed in %d ms after healing (index %d)", s.cfg.Seed, quietMs, before)
	}
	return s.converged()
}

// step advances the clock by 1 ms.
func (s *Sim) step() error {
	s.now++
	// Deliver what is due, in (time, send order).
	sort.Slice(s.queue, func(i, j int) bool {
		if s.queue[i].at != s.queue[j].at {
			return s.queue[i].at < s.queue[j].at
		}
		return s.queue[i].seq < s.queue[j].seq
	})
	k := 0
	for k < len(s.queue) && s.queue[k].at <= s.now {
		k++
	}
	due := s.queue[:k]
	s.queue = append([]message(nil), s.queue[k:]...)
	for _, msg := range due {
		to := s.nodes[msg.m.GetTo()-1]
		if msg.snapSent != nil {
			if to.up {
				to.replica.ReportSnapshot(msg.m.GetFrom(), *msg.snapSent)
			}
			continue
		}
		if !to.up || s.cut[[2]uint64{msg.m.GetFrom(), msg.m.GetTo()}] {
			s.Stats.Dropped++
			continue
		}
		switch msg.m.GetType() {
		case pb.MsgApp, pb.MsgHeartbeat, pb.MsgSnap:
			to.heardAt = s.now
		}
		if msg.notice != nil {
			to.replica.SteppedDown(msg.m.GetFrom(), msg.notice.term, msg.notice.successor)
			continue
		}
		to.replica.Step(msg.m) // stale or unexpected messages are refused by raft
	}
	for _, n := range s.nodes {
		if !n.up {
			continue
		}
		if s.now%tickMs == 0 {
			n.replica.Tick()
		}
		st := n.replica.BasicStatus()
		if st.RaftState != raft.StateLeader && s.now-n.heardAt > n.timeout {
			n.heardAt, n.timeout = s.now, s.electionTimeout()
			s.Stats.Elections++
			_ = n.replica.Campaign()
		}
		if err := s.ready(n); err != nil {
			return err
		}
	}
	return nil
}

// ready runs the shipped Ready processing (replica.Node.HandleReady) until
// n has nothing more to do, then checks that a leader is the only one of
// its term.
func (s *Sim) ready(n *node) error {
	for n.up {
		had, err := n.replica.HandleReady()
		if s.err != nil {
			return s.err
		}
		if errors.Is(err, errCrashed) {
			return nil // n went down in the middle of the Ready
		}
		if err != nil {
			return fmt.Errorf("seed %d at %d ms: node %d: %v", s.cfg.Seed, s.now, n.id, err)
		}
		if st := n.replica.BasicStatus(); st.RaftState == raft.StateLeader {
			if l, ok := s.leaders[st.GetTerm()]; ok && l != n.id {
				return fmt.Errorf("seed %d at %d ms: two leaders in term %d: %d and %d", s.cfg.Seed, s.now, st.GetTerm(), l, n.id)
			}
			s.leaders[st.GetTerm()] = n.id
		}
		if !had {
			return nil
		}
	}
	return nil
}

func (s *Sim) send(m *pb.Message, nt *notice) {
	dropped := s.rng.Float64() < s.cfg.DropRate
	if m.GetType() == pb.MsgSnap {
		// The transport tells the sender whether a snapshot left (it does
		// not know whether it arrived), on its next turn of the loop.
		ok := !dropped
		s.seq++
		s.queue = append(s.queue, message{at: s.now + 1, seq: s.seq,
			m: &pb.Message{From: proto.Uint64(m.GetTo()), To: proto.Uint64(m.GetFrom())}, snapSent: &ok})
	}
	if dropped {
		s.Stats.Dropped++
		return
	}
	copies := 1
	if s.rng.Float64() < s.cfg.DupRate {
		copies = 2
	}
	for i := 0; i < copies; i++ {
		s.seq++
		delay := uint64(s.cfg.MinDelay + s.rng.IntN(s.cfg.MaxDelay-s.cfg.MinDelay+1))
		s.queue = append(s.queue, message{at: s.now + delay, seq: s.seq, m: proto.Clone(m).(*pb.Message), notice: nt})
	}
}

// apply applies one committed entry and checks the invariants that concern it.
func (s *Sim) apply(n *node, e *pb.Entry) error {
	idx := e.GetIndex()
	if idx <= n.applied {
		return fmt.Errorf("seed %d: node %d applied %d after %d", s.cfg.Seed, n.id, idx, n.applied)
	}
	h := sha256.Sum256(append(fmt.Appendf(nil, "%d/%d/", e.GetTerm(), e.GetType()), e.GetData()...))
	if prev, ok := s.committed[idx]; ok && prev != h {
		return fmt.Errorf("seed %d at %d ms: node %d committed a different entry at index %d", s.cfg.Seed, s.now, n.id, idx)
	}
	s.committed[idx] = h
	switch e.GetType() {
	case pb.EntryNormal:
		if d := e.GetData(); len(d) > 0 {
			if err := s.applyData(n, idx, d); err != nil {
				return err
			}
		}
	}
	n.applied = idx
	s.Stats.Applied++
	s.Stats.MaxIndex = max(s.Stats.MaxIndex, idx)
	sh := s.stateHash(n)
	if prev, ok := s.states[idx]; ok && prev != sh {
		return fmt.Errorf("seed %d at %d ms: node %d's state after index %d differs from another node's", s.cfg.Seed, s.now, n.id, idx)
	}
	s.states[idx] = sh
	return nil
}

// applyData applies a normal entry's data to n's state machine, as a
// member's replica does, and checks the invariants of its result.
func (s *Sim) applyData(n *node, idx uint64, data []byte) error {
	r := n.fsm.Apply(idx, data)
	if r.Skipped != nil {
		return fmt.Errorf("seed %d: undecodable entry %d: %v", s.cfg.Seed, idx, r.Skipped)
	}
	if err := s.checkGrants(n, r.Grants); err != nil {
		return err
	}
	return s.checkLocks(n)
}

// checkGrants checks that every lock grant of an entry (immediate, handed
// off at a release, or at a session's end) carries a token above every
// token granted for that lock before on this node.
func (s *Sim) checkGrants(n *node, grants []coord.Grant) error {
	for _, g := range grants {
		if g.Kind != coord.GrantLock {
			continue
		}
		if g.Token <= n.tokens[g.Lock] {
			return fmt.Errorf("seed %d at %d ms: node %d granted %s token %d after %d", s.cfg.Seed, s.now, n.id, g.Lock, g.Token, n.tokens[g.Lock])
		}
		n.tokens[g.Lock] = g.Token
	}
	return nil
}

// checkLocks checks every lock on n after an apply: at most one exclusive
// holder and never one beside shared holders, and no holder or waiter
// whose session has ended (the apply that ends a session releases its
// locks).
func (s *Sim) checkLocks(n *node) error {
	t := n.fsm.Tree()
	for _, info := range n.fsm.Coord().List("", 1000) {
		excl := 0
		for _, hd := range info.Holders {
			if hd.Mode == coord.Exclusive {
				excl++
			}
			if _, live := t.Session(hd.Session); !live {
				return fmt.Errorf("seed %d at %d ms: lock %s is held by ended session %d on node %d (applied %d)", s.cfg.Seed, s.now, info.Name, hd.Session, n.id, n.applied)
			}
		}
		for _, w := range info.Waiters {
			if _, live := t.Session(w.Session); !live {
				return fmt.Errorf("seed %d at %d ms: ended session %d waits for lock %s on node %d", s.cfg.Seed, s.now, w.Session, info.Name, n.id)
			}
		}
		if info.Permits <= 1 && (excl > 1 || (excl == 1 && len(info.Holders) > 1)) {
			return fmt.Errorf("seed %d at %d ms: lock %s has holders %v on node %d", s.cfg.Seed, s.now, info.Name, info.Holders, n.id)
		}
	}
	return nil
}

// stateHash hashes the node's state as the shipped snapshot frames it.
func (s *Sim) stateHash(n *node) [32]byte {
	b, err := n.fsm.Snapshot()
	if err != nil {
		panic(err)
	}
	return sha256.Sum256(b)
}

// propose sends one random client command to a random live node (raft
// forwards it to the leader, through the simulated network). Commands run
// on behalf of sessions the node knows as live, as a client's would: they
// create nodes (ephemeral ones too), take and release locks (with a
// lock-delay at times), and sessions are created, closed and expired, so
// applies end sessions that hold and wait for locks.
func (s *Sim) propose() {
	var up []*node
	for _, n := range s.nodes {
		if n.up {
			up = append(up, n)
		}
	}
	if len(up) == 0 {
		return
	}
	n := up[s.rng.IntN(len(up))]
	var data []byte
	var err error
	lock := fmt.Sprintf("lock-%d", s.rng.IntN(3))
	sessions := n.fsm.Tree().Sessions()
	session := int64(1) // none known: the command fails as a stale session's would
	if len(sessions) > 0 {
		session = sessions[s.rng.IntN(len(sessions))].ID
	}
	now := int64(s.now)
	switch s.rng.IntN(8) {
	case 0:
		mode, owner := tree.ModePersistent, int64(0)
		if s.rng.IntN(2) == 0 {
			mode, owner = tree.ModeEphemeral, session
		}
		data, err = tree.EncodeCommand(&tree.Command{TimeMs: now, Session: owner, Op: tree.Op{Type: tree.OpCreate,
			Path: fmt.Sprintf("/n%d", s.rng.IntN(50)), Data: []byte("x"), ACL: tree.OpenACL, Mode: mode}})
	case 1:
		data, err = tree.EncodeCommand(&tree.Command{TimeMs: now, Op: tree.Op{Type: tree.OpSetData,
			Path: fmt.Sprintf("/n%d", s.rng.IntN(50)), Data: fmt.Appendf(nil, "v%d", s.now), Version: -1}})
	case 2, 3:
		delay := int64(0)
		if s.rng.IntN(4) == 0 {
			delay = 30
		}
		data, err = coord.Encode(&coord.Command{Op: coord.OpAcquire, Name: lock, Session: session, Wait: true,
			DelayMs: delay, TimeMs: now})
	case 4:
		data, err = coord.Encode(&coord.Command{Op: coord.OpRelease, Name: lock, Session: session, TimeMs: now})
	case 5:
		data, err = tree.EncodeCommand(&tree.Command{TimeMs: now, Op: tree.Op{Type: tree.OpCreateSession},
			TimeoutMs: 10000, Password: []byte("0123456789abcdef")})
	case 6:
		if s.rng.IntN(2) == 0 {
			data, err = tree.EncodeCommand(&tree.Command{TimeMs: now, Session: session, Op: tree.Op{Type: tree.OpCloseSession}})
			break
		}
		ids := []int64{session}
		if len(sessions) > 1 && s.rng.IntN(2) == 0 {
			ids = append(ids, sessions[s.rng.IntN(len(sessions))].ID)
		}
		data, err = tree.EncodeCommand(&tree.Command{TimeMs: now, Op: tree.Op{Type: tree.OpExpire}, Sessions: ids})
	default:
		data, err = coord.Encode(&coord.Command{Op: coord.OpTick, TimeMs: now}) // lets delayed locks be granted
	}
	if err != nil {
		panic(err)
	}
	s.Stats.Proposals++
	_ = n.replica.Propose(data) // dropped when no leader is known: the client would retry
}

// fault picks one fault or repair.
func (s *Sim) fault() {
	n := s.nodes[s.rng.IntN(len(s.nodes))]
	switch s.rng.IntN(6) {
	case 0: // crash: memory is lost, the disk survives
		if n.up {
			n.up = false
			s.Stats.Crashes++
		}
	case 1: // restart
		if !n.up {
			s.start(n, false)
		}
	case 2: // isolate n both ways
		for _, o := range s.nodes {
			if o != n {
				s.cut[[2]uint64{n.id, o.id}], s.cut[[2]uint64{o.id, n.id}] = true, true
			}
		}
		s.Stats.Partitions++
	case 3: // one-way: n hears nobody but is heard
		for _, o := range s.nodes {
			if o != n {
				s.cut[[2]uint64{o.id, n.id}] = true
			}
		}
		s.Stats.Partitions++
	default: // heal
		s.cut = map[[2]uint64]bool{}
	}
}

// converged checks the end state: one leader, every node at the same
// applied index with the same state, and the final proposal committed.
func (s *Sim) converged() error {
	var idx uint64
	leaders := 0
	for _, n := range s.nodes {
		if n.replica.BasicStatus().RaftState == raft.StateLeader {
			leaders++
		}
		if idx == 0 {
			idx = n.applied
		} else if n.applied != idx {
			return fmt.Errorf("seed %d: after %d quiet ms node %d applied %d, node 1 %d", s.cfg.Seed, quietMs, n.id, n.applied, idx)
		}
	}
	if leaders != 1 {
		return fmt.Errorf("seed %d: %d leaders after %d quiet ms", s.cfg.Seed, leaders, quietMs)
	}
	return nil
}

type quiet struct{}

func (quiet) Debug(...any)            {}
func (quiet) Debugf(string, ...any)   {}
func (quiet) Error(...any)            {}
func (quiet) Errorf(string, ...any)   {}
func (quiet) Info(...any)             {}
func (quiet) Infof(string, ...any)    {}
func (quiet) Warning(...any)          {}
func (quiet) Warningf(string, ...any) {}
func (quiet) Fatal(v ...any)          { panic(fmt.Sprint(v...)) }
func (quiet) Fatalf(f string, v ...any) {
	panic(fmt.Sprintf(f, v...))
}
func (quiet) Panic(v ...any)            { panic(fmt.Sprint(v...)) }
func (quiet) Panicf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
