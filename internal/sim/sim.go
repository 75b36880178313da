// Package sim is a deterministic simulation of a Meridian cluster: several
// members, each running the root raft group and, with Config.Keyspaces,
// the groups of regional keyspaces beside it (the replica package's own
// code, over simulated disks) and applying committed entries to the
// shipped state machines (internal/fsm: the root's, and each keyspace's
// from fsm.NewKeyspace), over a simulated network and clock, all driven
// by one seeded random source in one goroutine. Messages are delayed,
// dropped, duplicated and reordered; members crash (losing everything not
// yet synced to their disk) and restart; the network partitions,
// asymmetrically too; members' wall clocks are skewed and jump back.
// Invariants are checked continuously; a failing seed replays exactly.
//
// Each group on each member is the shipped member, a replica.Node: the
// replica package's Ready processing (what is persisted before what is
// sent, what is applied when, snapshots, membership entries), its step
// filters, held proposals and step-down handover run here as they do in a
// server; a keyspace's group is born as OpenGroup makes it
// (replica.NewGroupNode), when the member applies the keyspace's creation
// in the root group or finds it in a root snapshot. The simulation
// supplies what a Node leaves to its driver: a disk (Storage) shared by
// the member's groups that keeps across a crash only what was synced, a
// network (Network) and a clock. The replica's goroutine loop, TCP
// transport and quiescence are not simulated. The disk and the network
// check, at the boundary, that no message vouches for state the sender's
// disk does not hold (an append or vote acknowledged before it was
// synced), and the disk makes members crash in the middle of a Ready:
// after a leader's early sends, before its write.
//
// What a server does around the groups is simulated here, in its
// simplest form: routing a request to the group that owns its path or
// object name (by the member's own root state, fsm.KeyspaceFor), wrapping
// it in a clock envelope with the member's wall clock and the highest
// zxid its session has seen (fsm.WrapClock), and the keyspace leader's
// duty of ending there the sessions the root no longer knows.
//
// raft draws its election timeouts from crypto/rand, which no seed
// controls, so the simulation keeps raft's own timer out of play (a huge
// ElectionTick, CheckQuorum off) and campaigns on a node itself when the
// node has not heard from a leader within a seeded, randomized timeout.
package sim

import (
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-coord/meridian/internal/fsm"
	"github.com/meridian-coord/meridian/internal/replica"
)

// Config is one simulation run.
type Config struct {
	Seed    uint64
	Members int // 3 or 5
	// Keyspaces: regional keyspaces (/ks1, /ks2, ...) created in the root
	// group at the start, each with a group of its own on every member:
	// three voters (rotating over the members), the other members
	// learners. 0: the root group alone.
	Keyspaces int
	Steps     int // simulated milliseconds of faults and load
	// Network: each message is delayed uniformly in [MinDelay, MaxDelay] ms,
	// dropped with DropRate, duplicated with DupRate.
	MinDelay, MaxDelay int
	DropRate, DupRate  float64
	// Faults: every FaultEvery ms one fault or repair is chosen.
	FaultEvery int
	// ProposeEvery: mean ms between client proposals.
	ProposeEvery int
	// SkewMs: each member's wall clock starts up to this far from the
	// simulated time, either way; a clock fault moves it back by up to
	// 4×SkewMs (or forward by up to SkewMs).
	SkewMs int
}

// DefaultConfig is a short, busy run of one group.
func DefaultConfig(seed uint64) Config {
	return Config{Seed: seed, Members: 3, Steps: 4000, MinDelay: 1, MaxDelay: 20, DropRate: 0.02, DupRate: 0.02,
		FaultEvery: 300, ProposeEvery: 5, SkewMs: 250}
}

// KeyspacesConfig is DefaultConfig with a root group and two keyspaces'.
func KeyspacesConfig(seed uint64) Config {
	cfg := DefaultConfig(seed)
	cfg.Keyspaces = 2
	return cfg
}

const (
	tickMs               = 10 // raft tick
	electionMinMs        = 150
	electionRangeMs      = 150
	quietMs              = 5000  // after the faults: healed, everyone up, must converge
	midWriteCrash        = 0.01  // of a leader's Readies with entries
	midWriteCrashF       = 0.001 // of a follower's
	snapshotEntries      = 200   // a member snapshots every so many applied entries
	catchUpEntries       = 50    // and keeps so many behind it: a member further behind gets the snapshot
	groupSnapshotEntries = 60    // snapshotEntries and catchUpEntries of a keyspace's group
	groupCatchUpEntries  = 15
	dutyEveryMs          = 100 // a keyspace leader's duties (ending sessions, ticks)
	dutyRetryMs          = 500 // a duty still unapplied is proposed again after this
	clockBaseMs          = 1_800_000_000_000
	misrouteRate         = 0.05 // of requests routed to a group that does not own them
	groupLossRate        = 0.3  // a lossy group's extra message loss
)

type message struct {
	at, seq uint64
	group   uint64
	m       *pb.Message
	notice  *notice // a step-down notice (m carries only From and To)
	// snapSent: not a message but the transport's report to a snapshot's
	// sender (m.To) that it left for m.From (true) or failed (false).
	snapSent *bool
}

// notice is a step-down notice between members (replica.Network).
type notice struct{ term, successor uint64 }

// member is one simulated server: its groups' nodes share its disk, its
// links and its wall clock, and crash together.
type member struct {
	id    uint64
	up    bool
	disk  disk    // survives crashes
	nodes []*node // the groups running here, root first, then by group id
	// clockMs is the member's wall clock minus the simulated time: its
	// skew, moved by clock faults (back, too).
	clockMs int64
}

// node is one group on one member.
type node struct {
	m       *member
	group   uint64       // 0: the root group
	ks      fsm.Keyspace // the keyspace of a group other than the root
	replica *replica.Node
	fsm     *fsm.FSM // the shipped state machine, as every member runs it
	applied uint64
	// lastZxid is the zxid of the last entry applied here (or restored).
	lastZxid int64
	heardAt  uint64            // last message from a leader (or own campaign)
	timeout  uint64            // this node's current election timeout
	tokens   map[string]uint64 // lock -> last grant token applied here (rebuilt on restart)
	// endsAt: when this node, as the keyspace's leader, last proposed the
	// end of each session; tickAt its last coordination tick.
	endsAt map[int64]uint64
	tickAt uint64
}

// groupLog is what the invariants remember of one group.
type groupLog struct {
	ks        fsm.Keyspace         // zero for the root group
	leaders   map[uint64]uint64    // term -> the one leader
	committed map[uint64][32]byte  // index -> entry hash, first seen applied
	states    map[uint64][32]byte  // index -> state hash after applying it
	zxids     map[uint64]int64     // index -> zxid
	results   map[uint64]string    // index -> what the entry's apply answered
	ended     map[int64]sessionEnd // keyspace group: sessions it ended
	maxIndex  uint64               // highest index applied
	lossy     bool                 // this group's messages are lost more (a fault)
	voters    map[uint64]bool      // members that vote in the group
}

// sessionEnd is where a keyspace group ended a session (the index) and the
// end's stamp in the group's clock (ms): the group's tombstone.
type sessionEnd struct {
	index uint64
	endMs int64
}

// proposal is a client request the simulation proposed, by its id.
type proposal struct {
	member  uint64 // where it was proposed (whose client sees its result)
	session int64
	clockMs int64 // the proposer's wall clock in the clock envelope (0: none)
	acked   bool
	// A write of a write-then-flag pair: flagGroup is where its flag goes
	// once the write's result reached the client.
	write     bool
	flagGroup uint64
	// A flag: after the write whose zxid is dep, carrying the session's
	// seen zxid; its own zxid must be above dep.
	flag bool
	dep  int64
}

// pendingFlag is a flag to propose once its write was answered.
type pendingFlag struct {
	member  uint64
	session int64
	group   uint64
	dep     int64
}

// Sim is one run. Not safe for concurrent use.
type Sim struct {
	cfg     Config
	rng     *rand.Rand
	now     uint64
	seq     uint64
	members []*member
	queue   []message
	// cut[a][b]: messages from a to b are lost (a partition, possibly one-way).
	cut map[[2]uint64]bool

	// What the invariants remember, per group (0: the root).
	groups map[uint64]*groupLog
	// props are the proposals by id; seen the highest zxid each session
	// saw; closed the sessions closed (not expired) in the root;
	// rootStarted and rootEnded the sessions the root group started and
	// ended.
	props       map[uint64]*proposal
	nextID      uint64
	seen        map[int64]int64
	closed      map[int64]bool
	rootStarted map[int64]bool
	rootEnded   map[int64]bool
	flags       []pendingFlag
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
	MaxIndex                                                    uint64 // of the root group
	// With keyspaces:
	KeyspaceApplied  uint64 // entries applied in keyspace groups
	WrongGroup       uint64 // applies refused: outside the group (misrouted)
	CrossKeyspace    uint64 // fenced writes refused: lock and path in different groups
	FlagsChecked     uint64 // applies of a flag checked against its write's zxid
	SessionEnds      uint64 // sessions ended in keyspace groups by the leader's duty
	ClockJumps       uint64 // member clocks moved (back, mostly)
	LossyGroups      uint64 // faults making one group's messages lossy
	GroupRestores    uint64 // snapshots restored in keyspace groups
	TombstoneFloors  uint64 // keyspace groups that ended with a raised floor (tombstones dropped)
	SessionsBack     uint64 // ended sessions a keyspace group took back past its horizon (a clock far ahead)
	KeyspacesCreated uint64
	LearnerSyncs     uint64 // deferred syncs of learners (replica's learnerSync)
	UnsyncedLost     uint64 // crashes that lost entries a learner had written unsynced
}

// New builds a simulation; Run executes it.
func New(cfg Config) *Sim {
	s := &Sim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), cut: map[[2]uint64]bool{},
		groups: map[uint64]*groupLog{}, props: map[uint64]*proposal{}, seen: map[int64]int64{},
		closed: map[int64]bool{}, rootStarted: map[int64]bool{}, rootEnded: map[int64]bool{}}
	s.groups[0] = newGroupLog(fsm.Keyspace{})
	for i := 1; i <= cfg.Members; i++ {
		s.members = append(s.members, &member{id: uint64(i)})
	}
	for _, m := range s.members {
		if cfg.SkewMs > 0 {
			m.clockMs = int64(s.rng.IntN(2*cfg.SkewMs+1) - cfg.SkewMs)
		}
		s.groups[0].voters[m.id] = true
	}
	for _, m := range s.members {
		s.start(m, true)
	}
	return s
}

func newGroupLog(ks fsm.Keyspace) *groupLog {
	g := &groupLog{ks: ks, leaders: map[uint64]uint64{}, committed: map[uint64][32]byte{}, states: map[uint64][32]byte{},
		zxids: map[uint64]int64{}, results: map[uint64]string{}, ended: map[int64]sessionEnd{}, voters: map[uint64]bool{}}
	for _, v := range ks.Voters {
		g.voters[v] = true
	}
	return g
}

// violation is an invariant violation at this point of the run.
func (s *Sim) violation(format string, args ...any) error {
	return fmt.Errorf("seed %d at %d ms: %s", s.cfg.Seed, s.now, fmt.Sprintf(format, args...))
}

// wallMs is member m's wall clock (ms since the Unix epoch): what it puts
// in commands and clock envelopes. It may go back.
func (s *Sim) wallMs(m *member) int64 { return clockBaseMs + int64(s.now) + m.clockMs }

// replicaConfig is the root group's configuration on member m; a
// keyspace's group gets the same, its members from its keyspace.
func (s *Sim) replicaConfig(m *member) (replica.Config, replica.NodeOptions) {
	var peers []replica.Peer
	for _, o := range s.members {
		peers = append(peers, replica.Peer{ID: o.id, Addr: fmt.Sprintf("sim-%d", o.id)})
	}
	cfg := replica.Config{ID: m.id, Peers: peers, TickInterval: tickMs * time.Millisecond,
		ElectionTicks: electionMinMs / tickMs, HeartbeatTicks: 1, SnapshotEntries: snapshotEntries, CatchUpEntries: catchUpEntries,
		Logger: slog.New(slog.DiscardHandler)}
	// The replica's clock is the simulated time, monotonic as Go's is;
	// the skewed wall clock goes only into what members propose.
	opts := replica.NodeOptions{
		Clock: func() time.Time { return time.UnixMilli(int64(s.now)) },
		Raft: func(c *raft.Config) {
			c.ElectionTick, c.CheckQuorum, c.Logger = 1<<20, false, quiet{}
		},
	}
	return cfg, opts
}

// start (re)starts member m from its disk: its root group's replica.Node
// restored from what was synced, nothing more (a fresh member has an
// empty disk and bootstraps the group), then a node for every keyspace
// in the restored root state; the state machines are rebuilt by
// re-applying the committed log.
func (s *Sim) start(m *member, fresh bool) {
	if fresh && !m.disk.empty() {
		panic(fmt.Sprintf("seed %d: member %d started fresh on a used disk", s.cfg.Seed, m.id))
	}
	for _, w := range m.disk.unsynced {
		if len(w.ents) > 0 { // only a learner writes entries unsynced
			s.Stats.UnsyncedLost++
			break
		}
	}
	m.disk.unsynced = nil // lost in the crash
	m.up = true
	root := &node{m: m}
	m.nodes = []*node{root}
	root.fsm, root.tokens = s.newFSM(root), map[string]uint64{}
	cfg, opts := s.replicaConfig(m)
	rn, err := replica.NewNode(cfg, machine{s, root}, storage{s, root}, network{s, root}, opts)
	if err != nil {
		panic(fmt.Sprintf("seed %d: restart member %d: %v", s.cfg.Seed, m.id, err))
	}
	root.replica = rn
	root.heardAt, root.timeout = s.now, s.electionTimeout()
	s.openKeyspaces(m)
}

// openKeyspaces opens a node on m for every keyspace in m's root state
// that has none yet, as a server does when it applies a keyspace's
// creation or installs a root snapshot.
func (s *Sim) openKeyspaces(m *member) {
	for _, ks := range m.nodes[0].fsm.Keyspaces().List() {
		if m.node(ks.Group) == nil {
			s.openGroup(m, ks)
		}
	}
}

// openGroup starts keyspace ks's group on m, from m's disk (bootstrapped
// from ks's placement when it has nothing of the group yet).
func (s *Sim) openGroup(m *member, ks fsm.Keyspace) {
	if s.groups[ks.Group] == nil {
		s.groups[ks.Group] = newGroupLog(ks)
		s.Stats.KeyspacesCreated++
	}
	n := &node{m: m, group: ks.Group, ks: ks, tokens: map[string]uint64{}, endsAt: map[int64]uint64{}}
	n.fsm = s.newFSM(n)
	m.nodes = append(m.nodes, n)
	slices.SortFunc(m.nodes, func(a, b *node) int { return cmp.Compare(a.group, b.group) })
	cfg, opts := s.replicaConfig(m)
	// Keyspace groups commit less than the root: they snapshot sooner, so
	// that their members restore snapshots too.
	cfg.SnapshotEntries, cfg.CatchUpEntries = groupSnapshotEntries, groupCatchUpEntries
	gc := replica.GroupConfig{Group: ks.Group, Voters: ks.Voters, Learners: ks.Learners}
	rn, err := replica.NewGroupNode(cfg, gc, machine{s, n}, storage{s, n}, network{s, n}, opts)
	if err != nil {
		panic(fmt.Sprintf("seed %d: member %d: open group %d: %v", s.cfg.Seed, m.id, ks.Group, err))
	}
	n.replica = rn
	n.heardAt, n.timeout = s.now, s.electionTimeout()
}

// node is m's node of group g, nil when g does not run on m (yet).
func (m *member) node(g uint64) *node {
	for _, n := range m.nodes {
		if n.group == g {
			return n
		}
	}
	return nil
}

func (s *Sim) electionTimeout() uint64 {
	return uint64(electionMinMs + s.rng.IntN(electionRangeMs))
}

// Run executes the faults-and-load phase, then heals everything and checks
// that every group converges. It returns the first invariant violation.
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
		s.load()
		if err := s.step(); err != nil {
			return err
		}
	}
	// Quiet: heal, restart everyone, no drops, and wait for convergence.
	s.cut = map[[2]uint64]bool{}
	for _, g := range s.groups {
		g.lossy = false
	}
	for _, m := range s.members {
		if !m.up {
			s.start(m, false)
		}
	}
	drop, dup := s.cfg.DropRate, s.cfg.DupRate
	s.cfg.DropRate, s.cfg.DupRate = 0, 0
	defer func() { s.cfg.DropRate, s.cfg.DupRate = drop, dup }()
	before := map[uint64]uint64{}
	for id, g := range s.groups {
		before[id] = g.maxIndex
	}
	for end := s.now + quietMs; s.now < end; {
		if end-s.now > quietMs/2 {
			s.createKeyspaces()
			if s.now%50 == 0 {
				s.propose() // the healed groups must commit new work, then settle
			}
		}
		s.duties()
		if err := s.step(); err != nil {
			return err
		}
	}
	if len(s.groups) != 1+s.cfg.Keyspaces {
		return fmt.Errorf("seed %d: %d of %d keyspaces created", s.cfg.Seed, len(s.groups)-1, s.cfg.Keyspaces)
	}
	for _, id := range s.groupIDs() {
		if g := s.groups[id]; g.maxIndex <= before[id] && (id == 0 || before[id] > 0) {
			return fmt.Errorf("seed %d: group %d committed nothing in %d ms after healing (index %d)", s.cfg.Seed, id, quietMs, before[id])
		}
	}
	return s.converged()
}

// load is one millisecond's client load and leader duties.
func (s *Sim) load() {
	s.createKeyspaces()
	if s.rng.IntN(s.cfg.ProposeEvery) == 0 {
		s.propose()
	}
	s.duties()
}

// groupIDs are the groups known so far, root first.
func (s *Sim) groupIDs() []uint64 {
	ids := make([]uint64, 0, len(s.groups))
	for id := range s.groups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
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
		s.deliver(msg)
	}
	for _, m := range s.members {
		// A group opened during this loop (a creation applied) waits for
		// the next millisecond.
		for _, n := range slices.Clone(m.nodes) {
			if !m.up {
				break
			}
			if err := s.turn(n); err != nil {
				return err
			}
		}
	}
	if err := s.proposeFlags(); err != nil {
		return err
	}
	return nil
}

// deliver hands a due message to its group's node on its member; it is
// lost when the member is down or cut off, or does not run the group (yet).
func (s *Sim) deliver(msg message) {
	to := s.members[msg.m.GetTo()-1]
	if !to.up {
		s.Stats.Dropped++
		return
	}
	n := to.node(msg.group)
	if msg.snapSent != nil {
		if n != nil {
			n.replica.ReportSnapshot(msg.m.GetFrom(), *msg.snapSent)
		}
		return
	}
	if n == nil || s.cut[[2]uint64{msg.m.GetFrom(), msg.m.GetTo()}] {
		s.Stats.Dropped++
		return
	}
	switch msg.m.GetType() {
	case pb.MsgApp, pb.MsgHeartbeat, pb.MsgSnap:
		n.heardAt = s.now
	}
	if msg.notice != nil {
		n.replica.SteppedDown(msg.m.GetFrom(), msg.notice.term, msg.notice.successor)
		return
	}
	n.replica.Step(msg.m) // stale or unexpected messages are refused by raft
}

// turn is one millisecond of node n: its tick, its campaign when it has
// not heard from a leader, its Readies.
func (s *Sim) turn(n *node) error {
	if s.now%tickMs == 0 {
		n.replica.Tick()
	}
	st := n.replica.BasicStatus()
	if st.RaftState != raft.StateLeader && s.now-n.heardAt > n.timeout {
		n.heardAt, n.timeout = s.now, s.electionTimeout()
		if s.groups[n.group].voters[n.m.id] { // a learner never campaigns
			s.Stats.Elections++
			_ = n.replica.Campaign()
		}
	}
	return s.ready(n)
}

// ready runs the shipped Ready processing (replica.Node.HandleReady) until
// n has nothing more to do, then checks that a leader is the only one of
// its term in its group.
func (s *Sim) ready(n *node) error {
	g := s.groups[n.group]
	for n.m.up {
		had, err := n.replica.HandleReady()
		if s.err != nil {
			return s.err
		}
		if errors.Is(err, errCrashed) {
			return nil // the member went down in the middle of the Ready
		}
		if err != nil {
			return s.violation("member %d group %d: %v", n.m.id, n.group, err)
		}
		if st := n.replica.BasicStatus(); st.RaftState == raft.StateLeader {
			if l, ok := g.leaders[st.GetTerm()]; ok && l != n.m.id {
				return s.violation("two leaders of group %d in term %d: %d and %d", n.group, st.GetTerm(), l, n.m.id)
			}
			g.leaders[st.GetTerm()] = n.m.id
		}
		if !had {
			return nil
		}
	}
	return nil
}

func (s *Sim) send(group uint64, m *pb.Message, nt *notice) {
	drop := s.cfg.DropRate
	if g := s.groups[group]; g != nil && g.lossy {
		drop += groupLossRate
	}
	dropped := s.rng.Float64() < drop
	if m.GetType() == pb.MsgSnap {
		// The transport tells the sender whether a snapshot left (it does
		// not know whether it arrived), on its next turn of the loop.
		ok := !dropped
		s.seq++
		s.queue = append(s.queue, message{at: s.now + 1, seq: s.seq, group: group,
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
		s.queue = append(s.queue, message{at: s.now + delay, seq: s.seq, group: group, m: proto.Clone(m).(*pb.Message), notice: nt})
	}
}

// fault picks one fault or repair. Crashes and partitions are a member's
// and so hit all its groups; a lossy group loses more of its own
// messages only; a clock fault moves one member's wall clock.
func (s *Sim) fault() {
	m := s.members[s.rng.IntN(len(s.members))]
	kinds := 6
	if s.cfg.Keyspaces > 0 {
		kinds = 8
	}
	switch s.rng.IntN(kinds) {
	case 0: // crash: memory is lost, the disk survives
		if m.up {
			m.up = false
			s.Stats.Crashes++
		}
	case 1: // restart
		if !m.up {
			s.start(m, false)
		}
	case 2: // isolate m both ways
		for _, o := range s.members {
			if o != m {
				s.cut[[2]uint64{m.id, o.id}], s.cut[[2]uint64{o.id, m.id}] = true, true
			}
		}
		s.Stats.Partitions++
	case 3: // one-way: m hears nobody but is heard
		for _, o := range s.members {
			if o != m {
				s.cut[[2]uint64{o.id, m.id}] = true
			}
		}
		s.Stats.Partitions++
	case 6: // one group loses more messages, on every link
		ids := s.groupIDs()
		s.groups[ids[s.rng.IntN(len(ids))]].lossy = true
		s.Stats.LossyGroups++
	case 7: // a wall clock jumps, mostly back
		if s.cfg.SkewMs > 0 {
			if s.rng.IntN(20) == 0 {
				// Far ahead: past a keyspace group's tombstone horizon, so
				// that the groups this member proposes to drop tombstones
				// and raise their floor.
				m.clockMs += 2*fsm.SessionHorizonMs + int64(s.rng.IntN(fsm.SessionHorizonMs))
			} else if s.rng.IntN(4) == 0 {
				m.clockMs += int64(1 + s.rng.IntN(s.cfg.SkewMs))
			} else {
				m.clockMs -= int64(1 + s.rng.IntN(4*s.cfg.SkewMs))
			}
			s.Stats.ClockJumps++
		}
	default: // heal
		s.cut = map[[2]uint64]bool{}
		for _, g := range s.groups {
			g.lossy = false
		}
	}
}

// converged checks the end state of every group: one leader, every
// member at the same applied index (with the same state, as recorded),
// and, in a keyspace group, no participant the root group no longer
// knows: the leader's duty ended every session the root ended.
func (s *Sim) converged() error {
	for _, id := range s.groupIDs() {
		var idx uint64
		var first *member
		leaders := 0
		for _, m := range s.members {
			n := m.node(id)
			if n == nil {
				return fmt.Errorf("seed %d: after %d quiet ms member %d does not run group %d", s.cfg.Seed, quietMs, m.id, id)
			}
			if n.replica.BasicStatus().RaftState == raft.StateLeader {
				leaders++
			}
			if first == nil {
				idx, first = n.applied, m
			} else if n.applied != idx {
				return fmt.Errorf("seed %d: after %d quiet ms member %d applied %d of group %d, member %d %d", s.cfg.Seed, quietMs, m.id, n.applied, id, first.id, idx)
			}
			if h, ok := s.groups[id].states[n.applied]; ok && h != stateHash(n.fsm) {
				return fmt.Errorf("seed %d: member %d's state of group %d at %d differs from the recorded one", s.cfg.Seed, m.id, id, n.applied)
			}
			if err := s.checkEnded(n); err != nil {
				return err
			}
			if err := s.checkOwned(n); err != nil {
				return err
			}
		}
		if leaders != 1 {
			return fmt.Errorf("seed %d: group %d has %d leaders after %d quiet ms", s.cfg.Seed, id, leaders, quietMs)
		}
		if _, floor := first.node(id).fsm.Tombstones(); floor > 0 {
			s.Stats.TombstoneFloors++
		}
	}
	return nil
}

// checkEnded checks that no session the root group ended still takes
// part in keyspace group n on its member (its ephemerals and locks would
// outlive it).
func (s *Sim) checkEnded(n *node) error {
	if n.group == 0 {
		return nil
	}
	root := n.m.nodes[0].fsm.Tree()
	for _, id := range n.fsm.Participants() {
		if _, live := root.Session(id); !live {
			return fmt.Errorf("seed %d: after %d quiet ms session %d, not live in the root, still takes part in group %d on member %d (ephemerals %v)",
				s.cfg.Seed, quietMs, id, n.group, n.m.id, n.fsm.Tree().Ephemerals(id, ""))
		}
	}
	return nil
}

// checkOwned walks n's tree: a keyspace group holds nothing outside its
// prefix, the root nothing below a keyspace's prefix.
func (s *Sim) checkOwned(n *node) error {
	t := n.fsm.Tree()
	var walk func(path string) error
	walk = func(path string) error {
		children, _, err := t.Children(path)
		if err != nil {
			return err
		}
		for _, c := range children {
			p := path + "/" + c
			if path == "/" {
				p = "/" + c
			}
			if !s.inGroup(n.group, p) && !(n.group == 0 && s.isPrefix(p)) {
				return fmt.Errorf("seed %d: group %d on member %d holds %s", s.cfg.Seed, n.group, n.m.id, p)
			}
			if err := walk(p); err != nil {
				return err
			}
		}
		return nil
	}
	return walk("/")
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

// stateHash hashes a state machine as the shipped snapshot frames it.
func stateHash(f *fsm.FSM) [32]byte {
	b, err := f.Snapshot()
	if err != nil {
		panic(err)
	}
	return sha256.Sum256(b)
}
