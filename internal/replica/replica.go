package replica

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/latency"
)

// StateMachine is what the replica applies committed entries to.
type StateMachine interface {
	// Apply applies one committed normal entry with non-empty data, in log
	// order, from the raft loop goroutine only. An error means the entry
	// was not applied and cannot be (it is of a kind this binary does not
	// know): the replica stops applying and fails (Failed), as on a storage
	// failure, rather than go on without it.
	Apply(index, term uint64, data []byte) error
	// Snapshot serializes the state as of the last applied index; called from
	// the raft loop between Apply calls.
	Snapshot() ([]byte, error)
	// Restore replaces the state with a snapshot taken at index.
	Restore(index uint64, data []byte) error
}

// SnapshotViewer is a StateMachine that can take its snapshots off the
// raft loop: SnapshotView, called from the loop between Apply calls,
// returns a point-in-time view of the state as of the last applied index,
// which another goroutine writes (the bytes Snapshot would return) to a
// file while Apply goes on. A running replica takes its periodic
// snapshots this way (snapshots.go).
type SnapshotViewer interface {
	SnapshotView() (SnapshotView, error)
}

// SnapshotView is a state machine's state as of the last entry applied
// when it was taken; it must not change as Apply goes on, and is written
// once. WriteSnapshot streams the bytes Snapshot would have returned then,
// all but a head it returns once the rest is written: the snapshot is
// head followed by what was written to w (a length that comes first in
// the format is known only at the end).
type SnapshotView interface {
	WriteSnapshot(w io.Writer) (head []byte, err error)
}

// Peer is a member and its peer-transport address.
type Peer struct {
	ID   uint64
	Addr string
	// Meta is opaque to the replica and replicated with the membership (the
	// server keeps the member's region, zone and client addresses in it).
	Meta []byte `json:",omitempty"`
	// Learner: a non-voting replica (ZooKeeper's observer). It receives the
	// log, serves reads, forwards writes, never campaigns and never counts
	// toward a quorum. Voters bootstrap the group; the first leader adds the
	// learners with a configuration change.
	Learner bool `json:",omitempty"`
	// AutoPromote (a learner): the leader promotes it to voter once it has
	// caught up (ChangeMembers with PromoteWhenCaughtUp).
	AutoPromote bool `json:",omitempty"`
	// Identity: what this member's certificate asserts (PeerTLS); empty:
	// PeerTLS.IdentityPattern applied to its id.
	Identity string `json:",omitempty"`
}

// voters returns the ids of the voting peers.
func voters(peers []Peer) []uint64 {
	var out []uint64
	for _, p := range peers {
		if !p.Learner {
			out = append(out, p.ID)
		}
	}
	return out
}

// Config configures a replica.
type Config struct {
	ID uint64
	// Peers: the initial configuration, this member included. Once the group
	// runs, the configuration is what was replicated (ChangeMembers); a
	// restarted or joining member uses Peers to find the others, and an
	// address here wins over the replicated one for dialing that member.
	Peers []Peer
	// Join: with empty storage, wait to be added by the group (ChangeMembers
	// on an existing member) instead of bootstrapping a new group from
	// Peers. A new member must join: bootstrapping it would start a second
	// group with the same ids.
	Join bool
	// PeerTLS secures the peer port (mutual TLS, member identities); nil
	// means plaintext, where anyone who reaches the port speaks for any
	// member: only for deployments that said so (insecure).
	PeerTLS *PeerTLS
	// ClusterToken: the cluster id is derived from it (ClusterID) when this
	// member bootstraps the group, or when its data predates cluster ids,
	// and stored with the data; afterwards the stored id is used. A member
	// that joins adopts the group's id instead.
	ClusterToken     string
	ListenAddr       string // defaults to this member's Peers entry
	DataDir          string
	TickInterval     time.Duration // default 100ms
	ElectionTicks    int           // default 10
	HeartbeatTicks   int           // default 1
	SnapshotEntries  uint64        // snapshot every N applied entries (default 100,000, as ZooKeeper's snapCount)
	SnapshotBytes    uint64        // or once the entries applied since the last one hold this many bytes (default 32 MiB)
	CatchUpEntries   uint64        // entries kept behind a snapshot for slow followers (default SnapshotEntries/2, at most 10,000; and at most SnapshotBytes/2 bytes of them)
	MaxSizePerMsg    uint64        // default 1 MiB
	MaxInflightMsgs  int           // default 256
	MaxPendingReads  int           // default 10000; beyond: errs.ErrThrottled
	MaxProposalBytes int           // default 3 MiB; beyond: errs.ErrRequestTooLarge
	// LearnerSync is how long a learner may keep appended entries unsynced
	// (default 50ms; negative: sync every Ready, as a voter does). It holds
	// its acknowledgements of them until they are synced (learnersync.go).
	LearnerSync time.Duration
	// SnapshotStreams, if set, reports whether every member reads
	// snapshots streamed from file to file (snapstream.go; the server asks
	// the cluster version). Until it does, snapshots go as one frame of at
	// most 256 MiB. Called from transport goroutines.
	SnapshotStreams func() bool
	Logger          *slog.Logger
	// OnLeaderChange is called from the raft loop when the leader or term
	// changes (leader 0: none known). It must not block and must not call
	// back into the Replica's blocking methods (Status, Propose, ReadIndex,
	// TransferLeadership, Campaign): the loop is what answers them.
	OnLeaderChange func(leader, term uint64)
	// ObserveFsync, if set, is given the duration of every synced write
	// (called from the raft loop; must not block).
	ObserveFsync func(time.Duration)
	// ObserveStage, if set, is given how long each log entry spent in a
	// stage on this member (StageCommit, StageApply: stages.go); called
	// from the raft loop, it must not block.
	ObserveStage func(stage string, d time.Duration)
	// OnSideMessage receives side-channel payloads (from a transport
	// goroutine, or the caller of SendToLeader on the leader itself). It
	// should return quickly: raft messages from the same peer queue behind it.
	OnSideMessage func(from uint64, payload []byte)
	// OnConfigChange, if set, is called from the raft loop with the index of
	// the configuration whenever the address book changes (a membership
	// change applied, a snapshot restored, the bootstrap). It must not block.
	OnConfigChange func(index uint64)
	// ProbeInterval is how often a latency probe goes to every peer
	// (default 200ms; negative: never). LatencyWindow (default 1m) is the
	// sliding window of Latency's statistics.
	ProbeInterval time.Duration
	LatencyWindow time.Duration
	// MaxTickInterval > TickInterval turns on ticks from measurements: the
	// tick (one heartbeat; ElectionTicks of them make the election timeout)
	// follows the measured round trips (AdaptiveTick), between TickInterval
	// and MaxTickInterval.
	MaxTickInterval time.Duration
}

func (c *Config) defaults() {
	if c.TickInterval <= 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = 200 * time.Millisecond
	}
	if c.LatencyWindow <= 0 {
		c.LatencyWindow = time.Minute
	}
	if c.ElectionTicks <= 0 {
		c.ElectionTicks = 10
	}
	if c.HeartbeatTicks <= 0 {
		c.HeartbeatTicks = 1
	}
	if c.SnapshotEntries == 0 {
		c.SnapshotEntries = 100_000
	}
	if c.SnapshotBytes == 0 {
		c.SnapshotBytes = 32 << 20
	}
	if c.CatchUpEntries == 0 {
		c.CatchUpEntries = min(c.SnapshotEntries/2, 10_000)
	}
	if c.MaxSizePerMsg == 0 {
		c.MaxSizePerMsg = 1 << 20
	}
	if c.MaxInflightMsgs <= 0 {
		c.MaxInflightMsgs = 256
	}
	if c.MaxPendingReads <= 0 {
		c.MaxPendingReads = 10000
	}
	if c.MaxProposalBytes <= 0 {
		c.MaxProposalBytes = 3 << 20
	}
	if c.LearnerSync == 0 {
		c.LearnerSync = 50 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.OnLeaderChange == nil {
		c.OnLeaderChange = func(uint64, uint64) {}
	}
	if c.ObserveFsync == nil {
		c.ObserveFsync = func(time.Duration) {}
	}
	if c.ObserveStage == nil {
		c.ObserveStage = func(string, time.Duration) {}
	}
	if c.OnSideMessage == nil {
		c.OnSideMessage = func(uint64, []byte) {}
	}
}

// Status is a snapshot of the replica's raft state.
type Status struct {
	ID, Leader, Term, Commit, Applied, SnapshotIndex, FirstIndex, LastIndex uint64
	Role                                                                    string
	Members                                                                 []Peer
	Tick                                                                    time.Duration     // the raft tick in use
	Quiesced                                                                bool              // a group that stopped ticking (quiesce.go)
	Progress                                                                map[uint64]uint64 // leader only: match index per peer
	ClusterID                                                               string            `json:",omitempty"` // hex; empty: a joiner not yet contacted
}

type proposal struct {
	data []byte
	errc chan error
}

type readReq struct {
	errc  chan error
	index uint64 // set before errc receives nil
}

type readBatch struct {
	reqs   []*readReq
	issued time.Time
}

type loopEvent struct {
	kind      int // evUnreachable, evSnapDone, evStepDown, evQuiesce, evWake
	id        uint64
	ok        bool
	term      uint64 // evStepDown, evQuiesce: the term the sender led
	successor uint64 // evStepDown: the member it names to campaign
	index     uint64 // evQuiesce: the leader's last and commit index
}

const (
	evUnreachable = iota
	evSnapDone
	evStepDown
	evQuiesce // a leader's quiesce notice (quiesce.go)
	evWake    // the root's membership changed, or a member asks: tick again
)

// Replica is one member of a consensus group.
type Replica struct {
	cfg  Config
	sm   StateMachine
	log  *slog.Logger
	lat  *latency.Tracker
	tick time.Duration // the raft tick in use (loop goroutine only)
	disk *disk         // the Pebble store behind store (Open); nil in a Node
	// store keeps the raft state durable and net carries messages to the
	// peers: the disk and the TCP transport in a running replica, whatever
	// the caller gives a Node (ready.go).
	store Storage
	net   Network
	clock func() time.Time // time.Now, or a Node's clock
	mem   *raft.MemoryStorage
	rn    *raft.RawNode // raft loop only
	// refused counts peer messages refuseStep dropped; refusedLogged
	// limits their log lines (raft loop only).
	refused       uint64
	refusedLogged time.Time
	held          heldProposals // forwarded proposals raft would drop now (raft loop only)
	props         proposalBatch // local proposals taken, not yet stepped (raft loop only)
	stamps        stamps        // when uncommitted entries entered the log here (raft loop only)
	unsynced      unsynced      // a learner's writes and acknowledgements waiting for a sync (raft loop only)
	stored        storedState   // the hard state the store holds (raft loop only; durableHardState)
	origins       origins       // proposals stepped while leading, by the member they came through
	tr            *transport    // nil in a Node and in a group other than the root

	// Groups (groups.go): root is the member's root group for another
	// group (nil for the root itself), group this group's id (0: root);
	// the root keeps the other groups it runs.
	root    *Replica
	group   uint64
	groupMu sync.Mutex
	groups  map[uint64]*Replica

	// Queues into the raft loop, all bounded. propc and readc block their
	// callers when full (until ctx is done); recvc and eventc are fed by
	// transport goroutines that must not block, so they drop when full
	// (raft retransmits messages; an unreachable report is only advice).
	propc     chan proposal
	recvc     chan *pb.Message
	readc     chan *readReq
	eventc    chan loopEvent
	transferc chan uint64
	campaignc chan chan error
	statusc   chan chan Status
	confc     chan confReq

	leader  atomic.Uint64
	term    atomic.Uint64
	applied appliedWait

	// raft loop state
	confState     *pb.ConfState
	book          book                     // the address book (members.go)
	conf          atomic.Pointer[confView] // the book for other goroutines
	confSeq       uint64
	confWaits     map[uint64]*confWait
	learnersAsked time.Time // last proposal adding configured learners
	promoteAsked  time.Time // last automatic promotion proposed
	snapIndex     uint64
	snaps         snapshots // taken off the loop, bytes applied (snapshots.go)
	handover      handover  // step-down notices, sent and received (handover.go)
	quiesce       quiescence
	quiet         atomic.Bool  // quiesce.quiet for other goroutines
	tickNow       atomic.Int64 // tick for other goroutines (SilentVoters)
	pendingReads  []*readReq
	inflight      map[string]*readBatch
	readSeq       uint64
	readRounds    atomic.Uint64 // ReadIndex rounds issued (tests check batching)
	propBatches   atomic.Uint64 // MsgProps of local proposals stepped (tests check batching)
	propMaxBytes  atomic.Int64  // the largest such MsgProp's data, of more than one proposal (tests check the bound)
	numReads      atomic.Int64  // reads waiting, for the limit

	stopc chan struct{}
	donec chan struct{}
	// failed closes when the replica stopped by itself (storage failure,
	// a panic in the loop); failErr says why.
	failed    chan struct{}
	failErr   error
	failOnce  sync.Once
	closeOnce sync.Once
	closeErr  error
}

// Open opens (or creates) the replica's storage, restores the state machine
// from the latest snapshot, and starts the transport and the raft loop.
// Committed entries after the snapshot are re-applied by the loop.
func Open(cfg Config, sm StateMachine) (*Replica, error) {
	cfg.defaults()
	cfg.Peers = slices.Clone(cfg.Peers)
	self, err := checkPeers(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.DataDir == "" {
		return nil, errors.New("replica: no data directory")
	}
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = self.Addr
	}
	d, err := openDisk(cfg.DataDir, nil, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("replica: open pebble: %w", err)
	}
	r, fresh, err := newReplica(cfg, sm, d, nil)
	if err != nil {
		d.close()
		return nil, err
	}
	r.disk = d
	r.propc, r.recvc = make(chan proposal, 1024), make(chan *pb.Message, 4096)
	r.readc, r.eventc = make(chan *readReq, 1024), make(chan loopEvent, 1024)
	r.transferc, r.campaignc, r.statusc = make(chan uint64, 1), make(chan chan error), make(chan chan Status)
	r.confc = make(chan confReq)
	// Peers are expected to share MaxSizePerMsg/MaxProposalBytes: a MsgApp
	// larger than this is refused (and the connection closed) by the receiver.
	maxMsgFrame := uint64(maxSnapFrame)
	if cfg.MaxSizePerMsg < maxSnapFrame {
		maxMsgFrame = min(cfg.MaxSizePerMsg+uint64(cfg.MaxProposalBytes)+msgFrameSlack, maxSnapFrame)
	}
	peers := slices.Clone(r.book.Peers)
	ids := make([]uint64, 0, len(peers))
	for _, p := range peers {
		ids = append(ids, p.ID)
	}
	// A probe round unanswered for an election timeout is lost: a commit
	// that slow would have looked like a dead leader anyway.
	r.lat = latency.New(cfg.ID, ids, voters(peers), cfg.LatencyWindow, max(cfg.TickInterval*time.Duration(cfg.ElectionTicks), time.Second), time.Now)
	if cfg.ProbeInterval > 0 {
		r.lat.SetStallGap(3 * cfg.ProbeInterval)
	}
	cid, err := d.clusterID()
	if err != nil {
		d.close()
		return nil, fmt.Errorf("replica: cluster id: %w", err)
	}
	if cid == 0 && !(fresh && cfg.Join) {
		// Bootstrapping, or data from before cluster ids: derive it.
		cid = ClusterID(cfg.ClusterToken)
		if err := d.setClusterID(cid); err != nil {
			d.close()
			return nil, fmt.Errorf("replica: store cluster id: %w", err)
		}
	}
	cfg.Logger.Info("peer port", "cluster_id", FormatClusterID(cid), "tls", cfg.PeerTLS != nil)
	sec := transportSecurity{tls: cfg.PeerTLS, cluster: cid, adopt: d.setClusterID}
	tr, err := newTransport(cfg.ID, cfg.ListenAddr, r.dialPeers(peers), int(maxMsgFrame), sec, (*events)(r), r.lat, cfg.ProbeInterval, cfg.Logger)
	if err != nil {
		d.close()
		return nil, err
	}
	tr.snap.fs, tr.snap.dir, tr.snap.streams = d.fs, d.snapDir(), cfg.SnapshotStreams
	r.tr = tr
	r.net = transportNetwork{t: tr}
	r.snaps.async = make(chan snapResult, 1)
	go r.loop()
	return r, nil
}

// checkPeers checks the member ids and returns this member's entry.
func checkPeers(cfg Config) (*Peer, error) {
	var self *Peer
	seen := map[uint64]bool{}
	for i, p := range cfg.Peers {
		if p.ID == 0 || seen[p.ID] {
			return nil, fmt.Errorf("replica: peer ids must be non-zero and distinct (%d)", p.ID)
		}
		seen[p.ID] = true
		if p.ID == cfg.ID {
			self = &cfg.Peers[i]
		}
	}
	if cfg.ID == 0 || self == nil {
		return nil, fmt.Errorf("replica: id %d must be > 0 and among peers", cfg.ID)
	}
	return self, nil
}

// newReplica builds the raft member over store, without its loop and
// transport (Open adds those; NewNode leaves them to its caller): restores
// the state machine and raft's memory from store, and bootstraps the group
// when store is empty and cfg does not join. tune, if set, adjusts raft's
// configuration last. It reports whether store was empty.
func newReplica(cfg Config, sm StateMachine, store Storage, tune func(*raft.Config)) (*Replica, bool, error) {
	r := &Replica{
		cfg: cfg, sm: sm, log: cfg.Logger, store: store, mem: raft.NewMemoryStorage(), clock: time.Now, tick: cfg.TickInterval,
		confWaits: map[uint64]*confWait{}, inflight: map[string]*readBatch{},
		stopc: make(chan struct{}), donec: make(chan struct{}), failed: make(chan struct{}),
		book: book{Peers: slices.Clone(cfg.Peers)},
	}
	slices.SortFunc(r.book.Peers, func(x, y Peer) int { return cmpU64(x.ID, y.ID) })
	r.applied.ch = make(chan struct{})
	r.snaps.disk, _ = store.(*disk)
	r.snaps.markBytes = max(cfg.SnapshotBytes/256, 1)
	if r.snaps.disk != nil {
		if err := r.snaps.disk.removeSnapTemps(); err != nil {
			return nil, false, err
		}
	}
	// Read request contexts: a random start makes them unique across members
	// (the leader keys pending reads by context) and across restarts.
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, false, err
	}
	r.readSeq = binary.BigEndian.Uint64(seed[:])
	fresh, err := r.restore()
	if err != nil {
		return nil, false, err
	}
	rc := &raft.Config{
		ID:                        cfg.ID,
		ElectionTick:              cfg.ElectionTicks,
		HeartbeatTick:             cfg.HeartbeatTicks,
		Storage:                   raftStorage{MemoryStorage: r.mem, disk: r.snaps.disk, snaps: &r.snaps},
		Applied:                   r.snapIndex,
		MaxSizePerMsg:             cfg.MaxSizePerMsg,
		MaxCommittedSizePerReady:  64 << 20,
		MaxUncommittedEntriesSize: 64 << 20,
		MaxInflightMsgs:           cfg.MaxInflightMsgs,
		CheckQuorum:               true,
		PreVote:                   true,
		StepDownOnRemoval:         true,
		ReadOnlyOption:            raft.ReadOnlySafe,
		Logger:                    raftLogger{cfg.Logger},
	}
	if tune != nil {
		tune(rc)
	}
	rn, err := newRawNode(rc)
	if err != nil {
		return nil, false, fmt.Errorf("replica: %w", err)
	}
	r.rn = rn
	if fresh && !cfg.Join {
		var peers []raft.Peer
		for _, p := range cfg.Peers {
			if !p.Learner {
				peers = append(peers, raft.Peer{ID: p.ID, Context: encodeContext(ccContext{Peers: []Peer{p}})})
			}
		}
		if err := rn.Bootstrap(peers); err != nil {
			return nil, false, fmt.Errorf("replica: bootstrap: %w", err)
		}
	}
	r.conf.Store(&confView{peers: slices.Clone(r.book.Peers), index: r.book.Index})
	return r, fresh, nil
}

// newRawNode turns raft's panics on inconsistent stored state into an error.
func newRawNode(rc *raft.Config) (rn *raft.RawNode, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: raft rejected the stored state: %v", ErrCorrupt, p)
		}
	}()
	return raft.NewRawNode(rc)
}

// restore loads the durable state into raft's memory storage and the state
// machine. It reports whether the storage was empty (a new member).
func (r *Replica) restore() (bool, error) {
	hs, snap, ents, err := r.store.Load()
	if err != nil {
		return false, fmt.Errorf("replica: load %s: %w", r.cfg.DataDir, err)
	}
	if raft.IsEmptyHardState(hs) && raft.IsEmptySnap(snap) && len(ents) == 0 {
		return true, nil
	}
	if !raft.IsEmptySnap(snap) {
		if err := r.mem.ApplySnapshot(r.snaps.inMemory(snap)); err != nil {
			return false, err
		}
		bk, data, err := unwrapSnapshot(snap.GetData())
		if err != nil {
			return false, err
		}
		if bk != nil {
			r.book = *bk
		}
		if err := r.sm.Restore(snap.GetMetadata().GetIndex(), data); err != nil {
			return false, fmt.Errorf("replica: restore snapshot at %d: %w", snap.GetMetadata().GetIndex(), err)
		}
		r.snapIndex = snap.GetMetadata().GetIndex()
		r.confState = snap.GetMetadata().GetConfState()
		r.applied.set(r.snapIndex)
	}
	r.term.Store(hs.GetTerm())
	r.stored = storedOf(hs)
	if err := r.mem.SetHardState(hs); err != nil {
		return false, err
	}
	if err := r.mem.Append(ents); err != nil {
		return false, err
	}
	r.log.Info("restored", "snapshot", r.snapIndex, "entries", len(ents), "commit", hs.GetCommit(), "term", hs.GetTerm())
	return false, nil
}

// ErrApply: the state machine refused a committed entry (StateMachine.Apply
// returned an error); the replica failed.
var ErrApply = errors.New("replica: the state machine cannot apply a committed entry")

// fail stops the replica because it can no longer keep its promises.
func (r *Replica) fail(err error) {
	r.failOnce.Do(func() {
		r.failErr = err
		close(r.failed)
	})
	go r.Close()
}

// Failed is closed when the replica stopped by itself, not by Close: its
// storage failed (a full or broken disk) or its loop panicked. The member
// is of no use to the cluster any more; the process should exit so that it
// is restarted (like etcd on a WAL write error). FailErr says why.
func (r *Replica) Failed() <-chan struct{} { return r.failed }

// FailErr is why the replica failed (nil before Failed is closed).
func (r *Replica) FailErr() error {
	select {
	case <-r.failed:
		return r.failErr
	default:
		return nil
	}
}

// Close stops the loop and the transport and closes storage. Pending
// callers get errs.ErrStopped.
func (r *Replica) Close() error {
	r.closeOnce.Do(func() {
		if r.root != nil {
			r.closeGroup()
			return
		}
		r.closeGroups()
		close(r.stopc)
		<-r.donec
		r.tr.close()
		r.closeErr = r.disk.close()
	})
	return r.closeErr
}

// Propose hands data to raft. It returns once raft accepted it (not once it
// is committed); errs.ErrNotLeader when raft refused it (no leader known, or
// a leadership transfer in progress), which means it will not be applied.
//
// raft keeps data: the caller must not modify it afterwards.
func (r *Replica) Propose(ctx context.Context, data []byte) error {
	if len(data) > r.cfg.MaxProposalBytes {
		return errs.ErrRequestTooLarge
	}
	if r.stopped() {
		return errs.ErrStopped
	}
	p := proposal{data: data, errc: make(chan error, 1)}
	select {
	case r.propc <- p: // room in the queue: ctx.Done not asked for (it may make a channel and a timer)
	default:
		select {
		case r.propc <- p:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.stopc:
			return errs.ErrStopped
		}
	}
	select {
	case err := <-p.errc:
		return err
	case <-r.stopc:
		// The loop may have handed it to raft before stopping: unknown.
		return errs.ErrOutcomeUnknown
	}
}

// ReadIndex is a linearizable read barrier: it returns a commit index at
// least as high as any write acknowledged before the call, once this
// replica has applied it. Concurrent callers share raft rounds.
//
// At most MaxPendingReads calls wait at once; beyond that ReadIndex fails
// fast with errs.ErrThrottled.
func (r *Replica) ReadIndex(ctx context.Context) (uint64, error) {
	if r.stopped() {
		return 0, errs.ErrStopped
	}
	if r.numReads.Add(1) > int64(r.cfg.MaxPendingReads) {
		r.numReads.Add(-1)
		return 0, errs.ErrThrottled
	}
	defer r.numReads.Add(-1)
	req := &readReq{errc: make(chan error, 1)}
	select {
	case r.readc <- req:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-r.stopc:
		return 0, errs.ErrStopped
	}
	select {
	case err := <-req.errc:
		if err != nil {
			return 0, err
		}
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-r.stopc:
		return 0, errs.ErrStopped
	}
	if err := r.WaitApplied(ctx, req.index); err != nil {
		return 0, err
	}
	return req.index, nil
}

// WaitApplied waits until this replica has applied index.
func (r *Replica) WaitApplied(ctx context.Context, index uint64) error {
	for {
		ch, ok := r.applied.reached(index)
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.stopc:
			return errs.ErrStopped
		}
	}
}

// AppliedIndex returns the last applied index.
func (r *Replica) AppliedIndex() uint64 {
	_, idx := r.applied.get()
	return idx
}

// Leader returns the known leader (0: none).
func (r *Replica) Leader() uint64 { return r.leader.Load() }

// Term returns the current term as last seen by the raft loop.
func (r *Replica) Term() uint64 { return r.term.Load() }

// IsLeader reports whether this replica leads.
func (r *Replica) IsLeader() bool { return r.leader.Load() == r.cfg.ID }

func (r *Replica) stopped() bool {
	select {
	case <-r.stopc:
		return true
	default:
		return false
	}
}

func (r *Replica) isVoter(id uint64) bool {
	return slices.ContainsFunc(r.conf.Load().peers, func(p Peer) bool { return p.ID == id && !p.Learner })
}

// Status asks the raft loop for its state. After Close (or a storage
// failure) it reports Role "stopped".
func (r *Replica) Status() Status {
	ch := make(chan Status, 1)
	select {
	case r.statusc <- ch:
		select {
		case st := <-ch:
			return st
		case <-r.donec:
		}
	case <-r.donec:
	}
	return Status{ID: r.cfg.ID, Role: "stopped", Members: r.Members(), Applied: r.AppliedIndex()}
}

// Latency returns the round trips measured to every peer and the quorum
// latency per probe round.
func (r *Replica) Latency() latency.Snapshot { return r.lat.Snapshot() }

// Campaign makes this replica start an election (tests, tools).
func (r *Replica) Campaign() error {
	ch := make(chan error, 1)
	select {
	case r.campaignc <- ch:
	case <-r.donec:
		return errs.ErrStopped
	}
	select {
	case err := <-ch:
		return err
	case <-r.donec:
		return errs.ErrStopped
	}
}

// TransferLeadership moves leadership to target and waits until it leads.
// The request is re-sent every election timeout until it takes (raft drops
// it while another transfer is in progress or no leader is known); it may be
// made on any member. A target that is not a member is errs.ErrBadArguments.
func (r *Replica) TransferLeadership(ctx context.Context, target uint64) error {
	if !r.isVoter(target) { // a learner cannot lead
		return errs.ErrBadArguments
	}
	t := time.NewTicker(r.cfg.TickInterval)
	defer t.Stop()
	var asked time.Time
	for r.Leader() != target {
		if time.Since(asked) > r.cfg.TickInterval*time.Duration(r.cfg.ElectionTicks) {
			asked = time.Now()
			select {
			case r.transferc <- target:
			default:
			}
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.stopc:
			return errs.ErrStopped
		}
	}
	return nil
}

// SendToLeader sends an opaque payload (at most 1 MiB) to the current
// leader, best effort: nil means queued, not delivered. errs.ErrNotLeader
// when no leader is known, errs.ErrThrottled when the leader's queue is full.
func (r *Replica) SendToLeader(payload []byte) error {
	if len(payload) > maxSidePayload {
		return errs.ErrRequestTooLarge
	}
	if r.stopped() {
		return errs.ErrStopped
	}
	lead := r.Leader()
	switch {
	case r.tr == nil: // a group other than the root has no side channel
		return errs.ErrUnimplemented
	case lead == 0:
		return errs.ErrNotLeader
	case lead == r.cfg.ID:
		r.cfg.OnSideMessage(r.cfg.ID, payload)
		return nil
	}
	return r.tr.sendSide(lead, payload)
}

// ---- transport callbacks (transport goroutines) ----

type events Replica

// deliver hands an inbound raft message to the loop. When the bounded inbound
// queue is full the message is dropped: raft retransmits what matters.
func (e *events) deliver(m *pb.Message) {
	select {
	case e.recvc <- m:
	default:
	}
}
func (e *events) side(from uint64, payload []byte) { e.cfg.OnSideMessage(from, payload) }
func (e *events) unreachable(id uint64) {
	select {
	case e.eventc <- loopEvent{kind: evUnreachable, id: id}:
	default:
	}
}
func (e *events) steppedDown(from, term, successor uint64) {
	select {
	case e.eventc <- loopEvent{kind: evStepDown, id: from, term: term, successor: successor}:
	default:
	}
}
func (e *events) quiesceNotice(from, term, index uint64) {
	select {
	case e.eventc <- loopEvent{kind: evQuiesce, id: from, term: term, index: index}:
	default:
	}
}
func (e *events) wakeRequest(from uint64) {
	select {
	case e.eventc <- loopEvent{kind: evWake, id: from}:
	default:
	}
}
func (e *events) snapshotDone(id uint64, ok bool) {
	select {
	case e.eventc <- loopEvent{kind: evSnapDone, id: id, ok: ok}:
	case <-e.stopc:
	}
}

// ---- the raft loop ----

func (r *Replica) loop() {
	defer close(r.donec)
	defer r.failReads(errs.ErrStopped)
	defer func() {
		// raft panics on messages that contradict its log (only a buggy or
		// hostile peer sends those) and so would a broken state machine. Stop
		// this replica, not the process; nothing half-done was persisted.
		if p := recover(); p != nil {
			r.log.Error("raft loop panicked; replica stopping", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			r.fail(fmt.Errorf("raft loop panicked: %v", p))
		}
	}()
	r.tick = r.cfg.TickInterval
	r.tickNow.Store(int64(r.tick))
	period := r.tick
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	var adapt <-chan time.Time
	// syncT wakes the loop when a learner's deferred sync is due (syncAt).
	var syncT *time.Timer
	var syncC <-chan time.Time
	var syncAt time.Time
	defer func() {
		if syncT != nil {
			syncT.Stop()
		}
	}()
	if r.cfg.MaxTickInterval > r.cfg.TickInterval {
		t := time.NewTicker(adaptEvery)
		defer t.Stop()
		adapt = t.C
	}
	for {
		select {
		case <-r.stopc:
			// Stopped on purpose: restart with everything known committed
			// applied (after a crash the leader tells the rest again).
			if err := r.storeCommit(0, true); err != nil {
				r.log.Warn("storing the commit index at stop", "err", err)
			}
			return
		case <-adapt:
			r.adaptTick()
		case <-syncC: // afterEvent syncs
			syncC, syncAt = nil, time.Time{}
		case <-ticker.C:
			r.onTick()
		case p := <-r.propc:
			r.propose(p)
			r.drain()
		case m := <-r.recvc:
			r.step(m)
			r.drain()
		case req := <-r.readc:
			r.queueRead(req)
			r.drain()
		case ev := <-r.eventc:
			r.onEvent(ev)
		case target := <-r.transferc:
			r.unquiesce()
			r.rn.TransferLeader(target)
		case ch := <-r.campaignc:
			r.unquiesce()
			ch <- r.rn.Campaign()
		case ch := <-r.statusc:
			ch <- r.status()
		case req := <-r.confc:
			r.unquiesce()
			r.proposeMembers(req)
		case res := <-r.snaps.async:
			if err := r.finishSnapshot(res); err != nil {
				r.log.Error("snapshot failed; replica stopping", "err", err)
				r.fail(fmt.Errorf("snapshot: %w", err))
				return
			}
		}
		if p := r.tickPeriod(); p != period { // a new tick, or quiesced
			period = p
			ticker.Reset(p)
		}
		if _, err := r.afterEvent(); err != nil {
			if errors.Is(err, ErrApply) {
				// A committed entry this binary cannot apply: going on
				// without it would make this member's state diverge.
				r.log.Error("committed entry cannot be applied by this binary; replica stopping", "err", err)
				r.fail(err)
				return
			}
			// Storage failed: we cannot promise durability any more.
			r.log.Error("raft storage failure; replica stopping", "err", err)
			r.fail(fmt.Errorf("raft storage: %w", err))
			return
		}
		if at := r.unsynced.deadline(); !at.IsZero() && !at.Equal(syncAt) {
			if syncT == nil {
				syncT = time.NewTimer(time.Until(at))
			} else {
				syncT.Reset(time.Until(at))
			}
			syncC, syncAt = syncT.C, at
		}
	}
}

// onEvent handles a transport's report (raft loop).
func (r *Replica) onEvent(ev loopEvent) {
	switch ev.kind {
	case evUnreachable:
		r.rn.ReportUnreachable(ev.id)
	case evSnapDone:
		r.unquiesce()
		st := raft.SnapshotFinish
		if !ev.ok {
			st = raft.SnapshotFailure
		}
		r.rn.ReportSnapshot(ev.id, st)
	case evStepDown:
		r.unquiesce()
		r.leaderSteppedDown(ev.id, ev.term, ev.successor, time.Now())
	case evQuiesce:
		r.quiesceNotice(ev.id, ev.term, ev.index, time.Now())
	case evWake:
		r.unquiesce()
	}
}

// queueRead queues a linearizable read for the next round (raft loop).
func (r *Replica) queueRead(req *readReq) {
	r.unquiesce()
	r.pendingReads = append(r.pendingReads, req)
}

// onTick is the raft loop's work on every tick.
func (r *Replica) onTick() {
	if r.quiesceTick(r.clock()) {
		return
	}
	r.noteProgress()
	r.rn.Tick()
	r.campaignIfNamed(r.clock())
	r.retryReads()
	r.addLearners()
	r.expireConfWaits()
	r.autoPromote()
}

// afterEvent is the raft loop's work after every event: place held
// proposals, start a read round, and handle the Ready if raft has one. It
// reports whether there was a Ready; an error means storage failed.
func (r *Replica) afterEvent() (bool, error) {
	now := r.clock()
	if r.unsynced.due(now) {
		if err := r.syncUnsynced(); err != nil {
			return false, err
		}
	}
	r.releaseHeld(now)
	r.issueReads()
	if !r.rn.HasReady() {
		return false, nil
	}
	return true, r.handleReady()
}

// Ticks from measurements: the failure detector follows the network.
const (
	adaptEvery      = 5 * time.Second
	adaptMinSamples = 50   // network samples per voter in the window (10 s of probes) before the measurement counts
	adaptFactor     = 2    // tick = this × the median network round trip to the slowest voter
	adaptGrow       = 0.10 // a longer tick is taken when it exceeds the current by this fraction
	adaptShrink     = 0.25 // a shorter one when it is below the current by this fraction
	adaptMaxGrowth  = 2    // a tick at most doubles per step (adaptEvery)
)

// AdaptiveTick is the rule for ticks from measurements: one tick (the
// heartbeat interval) is adaptFactor times the median network round trip
// to the slowest voter peer, so the election timeout (ElectionTicks ticks,
// 10 by default) is 20 of those round trips, twice what etcd's tuning guide
// asks for; never below floor (the configured tick, what a LAN gets) nor
// above ceiling, and at most adaptMaxGrowth times the current tick.
//
// The round trips are the latency tracker's network samples (PeerSeries.Net):
// probes sent while the peer was answering steadily, so a paused,
// restarting or cut-off peer, or a stall of this server, does not count as
// network latency; the probes jump the raft queue and are stamped when
// written, so load does not either. The median, over a window of 30 to 60
// s, because wide-area round trips have spikes and several modes ("Cloudy
// Forecast"): a slowdown of a few seconds is a fault to detect, not a new
// normal, and moves the median only once it lasts half the window; a late
// heartbeat is followed by nine more before anyone campaigns, so the
// timeout must cover the usual round trip with margin, not its rarest
// spike.
func AdaptiveTick(floor, ceiling, current, slowestP50 time.Duration) time.Duration {
	want := max(floor, adaptFactor*slowestP50)
	if current > 0 {
		want = min(want, adaptMaxGrowth*current)
	}
	return min(want, ceiling)
}

// adaptTick recomputes the tick from the latency window and takes it
// (the loop resets its ticker) when it moved by more than the hysteresis
// (smaller for growing than for shrinking: when in doubt, the longer
// timeout).
func (r *Replica) adaptTick() {
	snap := r.lat.Snapshot()
	var slowest time.Duration
	for _, p := range snap.Peers {
		if !r.isVoter(p.Peer) {
			continue
		}
		if p.Net.Count < adaptMinSamples {
			return // not measured yet: keep what we have
		}
		slowest = max(slowest, p.Net.P50)
	}
	want := AdaptiveTick(r.cfg.TickInterval, r.cfg.MaxTickInterval, r.tick, slowest)
	if diff := float64(want - r.tick); diff <= adaptGrow*float64(r.tick) && -diff <= adaptShrink*float64(r.tick) {
		return
	}
	r.log.Info("raft tick from measured network round trips", "tick", want, "was", r.tick, "slowest_voter_median", slowest,
		"election_timeout", want*time.Duration(r.cfg.ElectionTicks))
	r.tick = want
	r.tickNow.Store(int64(want))
}

// maxDrain bounds how many queued proposals, messages and reads one Ready
// collects, so ticks are not starved.
const maxDrain = 4096

// drain takes every proposal, peer message and read already queued into raft
// before the next Ready, so all of them share one fsync (group commit), one
// round of messages and one ReadIndex round.
func (r *Replica) drain() {
	defer r.flushProposals()
	for i := 0; i < maxDrain; i++ {
		select {
		case p := <-r.propc:
			r.propose(p)
		case m := <-r.recvc:
			r.step(m)
		case req := <-r.readc:
			r.queueRead(req)
		default:
			return
		}
	}
}

func (r *Replica) step(m *pb.Message) {
	if wakesOn(m) {
		r.unquiesce()
	}
	last, _ := r.mem.LastIndex()
	leads := false
	if m.GetType() == pb.MsgTransferLeader { // the only check that needs it
		leads = r.rn.BasicStatus().RaftState == raft.StateLeader
	}
	if err := refuseStep(m, last, leads); err != nil {
		r.refused++
		if now := time.Now(); now.Sub(r.refusedLogged) > 10*time.Second {
			r.log.Error("refusing a peer message raft would crash on", "from", m.GetFrom(), "type", m.GetType().String(), "err", err, "refused", r.refused)
			r.refusedLogged = now
		}
		return
	}
	if r.handover.staleLeaderMessage(m) {
		return
	}
	r.checkForwarded(m)
	if m.GetType() == pb.MsgProp && !r.canPlace() && r.held.add(m, r.clock()) {
		return
	}
	if err := r.rn.Step(m); err != nil {
		r.log.Debug("step", "err", err)
		return
	}
	if m.GetType() == pb.MsgProp && m.GetFrom() != r.cfg.ID && r.leader.Load() == r.cfg.ID {
		r.origins.add(m.GetFrom(), len(m.GetEntries()))
	}
}

// Forwarded proposals that reach this member while it cannot place them,
// as leader handing leadership over or without a known leader, are held
// and stepped again, in arrival order, once it can: appended if it still
// leads, passed on to the new leader otherwise. raft drops them and the
// member that forwarded them is not told, so its client's write was lost
// on every planned leader move (a held proposal is one delivered late,
// which raft allows). Bounded: heldMax messages, heldMaxBytes, and an
// election timeout's wait; beyond, they are dropped as raft would.
const (
	heldMax      = 1024
	heldMaxBytes = 16 << 20
)

type heldProposals struct {
	msgs  []*pb.Message
	bytes int
	since time.Time
}

func (h *heldProposals) add(m *pb.Message, now time.Time) bool {
	n := 0
	for _, e := range m.GetEntries() {
		n += len(e.GetData())
	}
	if len(h.msgs) >= heldMax || h.bytes+n > heldMaxBytes {
		return false
	}
	if len(h.msgs) == 0 {
		h.since = now
	}
	h.msgs = append(h.msgs, m)
	h.bytes += n
	return true
}

// canPlace reports whether raft would take a forwarded proposal now: it
// leads and is not handing over, or it follows a known leader.
func (r *Replica) canPlace() bool {
	st := r.rn.BasicStatus()
	if st.RaftState == raft.StateLeader {
		return st.LeadTransferee == raft.None
	}
	return st.Lead != raft.None
}

// releaseHeld steps the held proposals once they can be placed, or drops
// them after an election timeout without a place (raft loop).
func (r *Replica) releaseHeld(now time.Time) {
	if len(r.held.msgs) == 0 {
		return
	}
	if !r.canPlace() {
		if now.Sub(r.held.since) < r.tick*time.Duration(r.cfg.ElectionTicks) {
			return
		}
		r.log.Warn("dropping forwarded proposals held without a leader", "count", len(r.held.msgs))
		r.held = heldProposals{}
		return
	}
	msgs := r.held.msgs
	r.held = heldProposals{}
	for _, m := range msgs {
		r.checkForwarded(m) // a member that leads now checks what it holds
		if err := r.rn.Step(m); err != nil {
			r.log.Debug("step held proposal", "err", err)
		}
	}
}

// refuseStep rejects a peer's message that raft would panic on given this
// member's log (raft trusts its peers; validate in the transport checks what
// needs no log state). A heartbeat from a correct leader never carries a
// commit index beyond what this member acknowledged; one that does comes
// from a confused peer or means this member lost its log, and raft's answer
// to both, a panic, would take the server down on a network message.
//
// An acknowledgement (MsgAppResp, not a rejection) of an index beyond this
// member's last entry is a lie: a member acknowledges only entries the leader
// of its term sent it, and a leader never loses entries in its term (a stale
// one from an older term, after this member's log was cut back, raft drops
// on its term anyway). The leader sends entries before writing them, but the
// loop steps the answer only after the Ready that sent them is in storage,
// so last covers them. raft would record the peer as holding entries it
// never had, count them toward commits, and ask storage for a snapshot
// because it cannot build the next append from its own log (raftStorage
// answers that without panicking; this keeps the bookkeeping honest).
//
// What is not refused here, because raft gives no way to tell it from the
// truth: a message of a higher term. raft (with PreVote and CheckQuorum)
// ignores a higher-term vote request while it hears from a leader (the
// lease), but a heartbeat, append or snapshot of a higher term makes it a
// follower of the sender at that term, and any other message of a higher
// term makes it a leaderless follower; that is how a legitimately elected
// leader takes over. A forged one deposes the real leader until the next
// election; keeping forgers off the peer port (authentication) is the
// answer, not a clock-based filter here.
//
// A leadership transfer request with a term reaching a member that does not
// lead is refused too: raft would forward it to the leader and panic sending
// a forwarded message with a term. A follower forwards a request only to the
// leader of its term, which handles it, so no honest peer sends one here.
func refuseStep(m *pb.Message, last uint64, leads bool) error {
	switch {
	case m.GetType() == pb.MsgTransferLeader && m.GetTerm() != 0 && !leads:
		return fmt.Errorf("leadership transfer request of term %d to a member that does not lead", m.GetTerm())
	case m.GetType() == pb.MsgHeartbeat && m.GetCommit() > last:
		return fmt.Errorf("heartbeat commits %d beyond the last index %d (log lost, or a confused peer)", m.GetCommit(), last)
	case m.GetType() == pb.MsgAppResp && !m.GetReject() && m.GetIndex() > last:
		return fmt.Errorf("append acknowledged at %d beyond the last index %d (a confused or lying peer)", m.GetIndex(), last)
	}
	return nil
}

// propose queues a local proposal for the next flushProposals (raft loop).
// Proposals taken in one drain are stepped as one MsgProp: raft appends
// them together and sends each follower one append for all of them (a
// follower forwards them to the leader as one message) instead of one
// append, one acknowledgement and one encoding per proposal. The batch is
// bounded by MaxSizePerMsg bytes (a single larger proposal goes alone), so
// a forwarded batch stays within what peers accept in a frame.
func (r *Replica) propose(p proposal) {
	if n := len(r.props.batch); n > 0 && r.props.bytes+len(p.data) > int(r.cfg.MaxSizePerMsg) {
		r.flushProposals()
	}
	r.props.batch = append(r.props.batch, p)
	r.props.bytes += len(p.data)
}

// proposalBatch is the raft loop's queued local proposals (propose).
type proposalBatch struct {
	batch []proposal
	bytes int
}

// flushProposals steps the queued proposals into raft, in order, and
// answers each (raft loop). raft takes or drops a MsgProp whole, so every
// proposal of a batch gets the same answer.
func (r *Replica) flushProposals() {
	b := &r.props
	if len(b.batch) == 0 {
		return
	}
	r.unquiesce()
	// A fresh slice each time: raft may keep it (a follower's MsgProp is
	// forwarded as is; an unstable log may take the slice over).
	ents := make([]*pb.Entry, 0, len(b.batch))
	for _, p := range b.batch {
		ents = append(ents, &pb.Entry{Data: p.data})
	}
	r.propBatches.Add(1)
	if len(b.batch) > 1 && int64(b.bytes) > r.propMaxBytes.Load() {
		r.propMaxBytes.Store(int64(b.bytes))
	}
	err := r.rn.Step(&pb.Message{Type: pb.MsgProp.Enum(), From: new(r.cfg.ID), Entries: ents})
	if errors.Is(err, raft.ErrProposalDropped) {
		err = errs.ErrNotLeader
	}
	if err == nil && r.leader.Load() == r.cfg.ID {
		r.origins.add(r.cfg.ID, len(b.batch))
	}
	for i, p := range b.batch {
		p.errc <- err
		b.batch[i] = proposal{}
	}
	b.batch, b.bytes = b.batch[:0], 0
}

// origins counts the entries this member proposed while leading, by the
// member whose client asked: itself, or the follower that forwarded them
// (MsgProp). The server's leader placement for keyspaces reads them
// (TakeProposalOrigins).
type origins struct {
	mu sync.Mutex
	m  map[uint64]uint64
}

func (o *origins) add(id uint64, n int) {
	o.mu.Lock()
	if o.m == nil {
		o.m = map[uint64]uint64{}
	}
	o.m[id] += uint64(n)
	o.mu.Unlock()
}

// TakeProposalOrigins returns how many entries were proposed through each
// member (this one included) while this member led, since the last call,
// and starts counting afresh.
func (r *Replica) TakeProposalOrigins() map[uint64]uint64 {
	r.origins.mu.Lock()
	defer r.origins.mu.Unlock()
	m := r.origins.m
	r.origins.m = nil
	return m
}

func (r *Replica) handleReady() error {
	rd := r.rn.Ready()
	readyAt := r.clock()
	if !raft.IsEmptySnap(rd.Snapshot) {
		r.stamps.reset()
	}
	r.stamps.appended(rd.Entries, readyAt)
	if n := len(rd.CommittedEntries); n > 0 {
		r.stamps.committed(rd.CommittedEntries[n-1].GetIndex(), readyAt, r.cfg.ObserveStage)
	}
	if len(rd.Messages) > 0 { // raft has something to say: tick to see it through
		r.unquiesce()
	}
	abdicated := r.abdicated(rd.SoftState, rd.HardState)
	r.noteLeader(rd.SoftState, rd.HardState)
	// The leader sends before it writes (raft thesis 10.2.1, as etcd does):
	// its own disk write then overlaps the followers' round trip and writes
	// instead of preceding them, taking one fsync off every commit's path.
	// Safe: raft counts the leader's own copy of an entry only when Advance
	// steps its self-acknowledgement, i.e. after this Ready is on disk; the
	// leader's term and vote were synced before it campaigned; and messages
	// that vouch for this member's durable state (append and vote
	// responses) never leave early. Appends that follow each other to one
	// member go as one message, and so do their acknowledgements (coalesce).
	msgs := coalesce(rd.Messages, r.cfg.MaxSizePerMsg)
	if r.leader.Load() == r.cfg.ID {
		all := msgs
		msgs = msgs[:0:0]
		for _, m := range all {
			if vouchesDurable(m.GetType()) {
				msgs = append(msgs, m)
			} else {
				r.net.Send(m)
			}
		}
	}
	var snap *pb.Snapshot
	if !raft.IsEmptySnap(rd.Snapshot) {
		snap = rd.Snapshot
	}
	// Committed entries already on this member's disk (written by an
	// earlier Ready) are applied before this Ready's write, not after it:
	// a write through a busy group was otherwise answered only after the
	// disk write of the entries proposed behind it. Safe: they are
	// committed (on a quorum's disks) and on this one; what this Ready
	// writes is newer. Membership changes and anything after one keep
	// the order (their apply may snapshot the store).
	ents := rd.CommittedEntries
	if snap == nil {
		last, _ := r.mem.LastIndex() // what earlier Readies wrote
		early := 0
		for early < len(ents) && ents[early].GetIndex() <= last && ents[early].GetType() == pb.EntryNormal {
			early++
		}
		if err := r.apply(ents[:early]); err != nil {
			return err
		}
		r.observeApplied(early, readyAt)
		ents = ents[early:]
	}
	defer_ := false // a learner's write whose sync waits (learnersync.go)
	if hs := r.durableHardState(rd.HardState, snap); hs != nil || len(rd.Entries) > 0 || snap != nil {
		start := time.Now()
		sync := rd.MustSync || snap != nil
		if sync && snap == nil && r.mayDeferSync(rd.HardState) {
			sync, defer_ = false, true
		}
		if err := r.store.Save(hs, rd.Entries, snap, sync); err != nil {
			return err
		}
		if hs != nil {
			r.stored = storedOf(hs)
		}
		if sync { // a learner's deferred sync is not an fsync yet
			r.cfg.ObserveFsync(time.Since(start))
			r.unsynced.synced(r.net) // it synced every earlier write too
		}
	}
	if snap != nil {
		if err := r.mem.ApplySnapshot(r.snaps.inMemory(snap)); err != nil {
			return err
		}
		idx := snap.GetMetadata().GetIndex()
		whole := snap.GetData()
		if r.snaps.disk != nil { // streamed into a file: read it once
			var err error
			if whole, err = r.snaps.disk.resolveSnap(whole); err != nil {
				return err
			}
		}
		bk, data, err := unwrapSnapshot(whole)
		if err != nil {
			return err
		}
		if err := r.sm.Restore(idx, data); err != nil {
			return fmt.Errorf("restore snapshot %d: %w", idx, err)
		}
		r.snapIndex = idx
		r.confState = snap.GetMetadata().GetConfState()
		if bk != nil {
			r.setBook(*bk)
		}
		r.applied.set(idx)
		r.log.Info("restored from leader snapshot", "index", idx)
	}
	if rd.HardState != nil {
		if err := r.mem.SetHardState(rd.HardState); err != nil {
			return err
		}
	}
	if err := r.mem.Append(rd.Entries); err != nil {
		return err
	}
	r.noteAppended(rd.Entries)
	for _, m := range msgs {
		if vouchesDurable(m.GetType()) && (defer_ || r.unsynced.pending()) {
			r.unsynced.hold(m) // after the sync, in order
			continue
		}
		r.net.Send(m)
	}
	if defer_ {
		r.unsynced.wrote(readyAt, r.cfg.LearnerSync)
	}
	if abdicated != 0 {
		r.announceStepDown(abdicated)
	}
	if err := r.apply(ents); err != nil {
		return err
	}
	r.observeApplied(len(ents), readyAt)
	for _, rs := range rd.ReadStates {
		if b := r.inflight[string(rs.RequestCtx)]; b != nil {
			delete(r.inflight, string(rs.RequestCtx))
			for _, req := range b.reqs {
				req.index = rs.Index
				req.errc <- nil
			}
		}
	}
	r.rn.Advance(rd)
	return r.maybeSnapshot()
}

// vouchesDurable: messages that tell their receiver this member has
// persisted something (an append, a vote), so they go out only after the
// Ready is on disk.
func vouchesDurable(t pb.MessageType) bool {
	return t == pb.MsgAppResp || t == pb.MsgVoteResp || t == pb.MsgPreVoteResp
}

// noteLeader publishes leader and term changes: once per Ready, with both
// values current, so the callback never sees a new leader with an old term.
func (r *Replica) noteLeader(ss *raft.SoftState, hs *pb.HardState) {
	lead, term := r.leader.Load(), r.term.Load()
	newLead, newTerm := lead, term
	if ss != nil {
		newLead = ss.Lead
	}
	if hs != nil {
		newTerm = hs.GetTerm()
	}
	if newLead == lead && newTerm == term {
		return
	}
	r.leader.Store(newLead)
	r.term.Store(newTerm)
	if newLead != lead && len(r.inflight) > 0 {
		// A round sent to the old leader will likely never be answered:
		// re-issue it now under a fresh context rather than after a timeout.
		for k, b := range r.inflight {
			delete(r.inflight, k)
			r.pendingReads = append(r.pendingReads, b.reqs...)
		}
	}
	r.cfg.OnLeaderChange(newLead, newTerm)
}

func (r *Replica) apply(ents []*pb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	for i, e := range ents {
		switch e.GetType() {
		case pb.EntryNormal:
			r.snaps.appliedBytes += uint64(len(e.GetData()))
			if len(e.GetData()) > 0 {
				if err := r.sm.Apply(e.GetIndex(), e.GetTerm(), e.GetData()); err != nil {
					if i > 0 {
						r.applied.set(ents[i-1].GetIndex())
					}
					return fmt.Errorf("%w: entry %d: %w", ErrApply, e.GetIndex(), err)
				}
			}
		case pb.EntryConfChange, pb.EntryConfChangeV2:
			cc, err := decodeConfChange(e)
			if err == nil {
				cs := r.confState
				if cs == nil { // the bootstrap's first change
					cs = &pb.ConfState{}
				}
				last, _ := r.mem.LastIndex()
				_, err = checkConfChange(cs, last, cc)
			}
			if err != nil {
				// This leader's proposals and the changes it accepts from
				// followers are checked before they enter the log, so such
				// an entry came from a peer that lied (or a bug). raft
				// panics applying it; its documented alternative is not to
				// apply it: the entry becomes a no-op. Every member holds
				// the same entry and configuration, so all skip it alike.
				r.log.Error("skipping a committed membership change that cannot be applied", "index", e.GetIndex(), "err", err)
				continue
			}
			if r.applyConfChange(e.GetIndex(), cc) {
				if err := r.snapshotForMember(e.GetIndex()); err != nil {
					return err
				}
			}
		}
	}
	r.applied.set(ents[len(ents)-1].GetIndex())
	r.snaps.mark(ents[len(ents)-1].GetIndex())
	return nil
}

// decodeConfChange decodes a configuration change entry of either version.
func decodeConfChange(e *pb.Entry) (*pb.ConfChangeV2, error) {
	if e.GetType() == pb.EntryConfChange {
		var cc pb.ConfChange
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return nil, fmt.Errorf("conf change at %d: %w", e.GetIndex(), err)
		}
		return cc.AsV2(), nil
	}
	var cc pb.ConfChangeV2
	if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
		return nil, fmt.Errorf("conf change at %d: %w", e.GetIndex(), err)
	}
	return &cc, nil
}

// storedState is the hard state a store holds.
type storedState struct{ term, vote, commit uint64 }

func storedOf(hs *pb.HardState) storedState {
	return storedState{hs.GetTerm(), hs.GetVote(), hs.GetCommit()}
}

// durableHardState is what of hs (raft's hard state in a Ready, nil when
// unchanged) the store is given: all of it with a snapshot, or when its term
// or vote changed, which raft needs durable before it sends a message; nil
// when only its commit index moved. Raft's commit index is volatile state
// (In Search of an Understandable Consensus Algorithm, figure 2): a
// restarted member applies what its stored one covers and learns the rest
// from the leader. Writing it with every Ready put a key that sorts after
// the log's into every batch, so every table Pebble flushed overlapped the
// last and each byte of the log was compacted before its truncation
// deleted it; without it the flushed tables hold consecutive entries only
// and move down the levels untouched. The commit index is stored with each
// snapshot, so it never lies behind the snapshot's index, and when the
// replica is stopped (storeCommit).
func (r *Replica) durableHardState(hs *pb.HardState, snap *pb.Snapshot) *pb.HardState {
	if hs == nil || snap != nil || hs.GetTerm() != r.stored.term || hs.GetVote() != r.stored.vote {
		return hs
	}
	return nil
}

// storeCommit stores the hard state with the commit index raft knows (at
// least atLeast, an applied index) unless the store's is that far already.
func (r *Replica) storeCommit(atLeast uint64, sync bool) error {
	hs, _, err := r.mem.InitialState()
	if err != nil {
		return err
	}
	commit := max(hs.GetCommit(), atLeast)
	if commit <= r.stored.commit {
		return nil
	}
	hs = &pb.HardState{Term: hs.Term, Vote: hs.Vote, Commit: new(commit)}
	if err := r.store.Save(hs, nil, nil, sync); err != nil {
		return err
	}
	r.stored = storedOf(hs)
	return nil
}

// maybeSnapshot snapshots the state machine every SnapshotEntries applied
// entries, or SnapshotBytes of them, and compacts the log, keeping a tail
// for slow followers (compactIndex). A running replica whose state machine
// hands out views (SnapshotViewer) writes the snapshot on another goroutine
// and saves it when it is done (finishSnapshot); one at a time.
func (r *Replica) maybeSnapshot() error {
	_, applied := r.applied.get()
	if r.snaps.running || applied-r.snapIndex < r.cfg.SnapshotEntries && r.snaps.appliedBytes-r.snaps.bytesAtSnap < r.cfg.SnapshotBytes {
		return nil
	}
	if v, ok := r.sm.(SnapshotViewer); ok && r.snaps.async != nil && r.snaps.disk != nil {
		return r.startSnapshot(v, applied)
	}
	return r.snapshotAt(applied)
}

// snapshotAt snapshots the state machine, which has applied everything up
// to applied and nothing after, and compacts the log.
func (r *Replica) snapshotAt(applied uint64) error {
	start := time.Now()
	data, err := r.sm.Snapshot()
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return r.saveSnapshot(snapResult{index: applied, conf: r.confState, data: wrapSnapshot(r.book, data),
		appliedBytes: r.snaps.appliedBytes, start: start})
}

// saveSnapshot stores a snapshot taken at res.index and compacts the log.
// With a disk, raft's memory keeps the snapshot's metadata only: the bytes
// stay on disk, and raft reads them back for a follower that needs them
// (raftStorage.Snapshot).
func (r *Replica) saveSnapshot(res snapResult) error {
	kept := res.data
	if r.snaps.disk != nil {
		kept = nil
	}
	snap, err := r.mem.CreateSnapshot(res.index, res.conf, kept)
	if err != nil {
		return err
	}
	compact := r.compactIndex(res.index, res.appliedBytes)
	// raft refuses to restart from a snapshot beyond its commit index, and
	// the stored one may lie behind (durableHardState): store it first, in
	// the same ordered write-ahead log, made durable by the snapshot's sync.
	if err := r.storeCommit(res.index, false); err != nil {
		return err
	}
	if err := r.store.SaveSnapshot(&pb.Snapshot{Metadata: snap.Metadata, Data: res.data}, compact); err != nil {
		return err
	}
	if compact > 0 {
		if err := r.mem.Compact(compact); err != nil && !errors.Is(err, raft.ErrCompacted) {
			return err
		}
	}
	r.snapIndex, r.snaps.bytesAtSnap = res.index, res.appliedBytes
	r.snaps.forget(compact)
	size := res.size
	if size == 0 {
		size = uint64(len(res.data))
	}
	r.log.Info("snapshot taken", "index", res.index, "bytes", size, "compacted_to", compact,
		"took", time.Since(res.start).Round(time.Millisecond), "paused_apply", res.paused.Round(time.Microsecond))
	return nil
}

// issueReads starts one ReadIndex round for every read that arrived since the
// last round: all of them share it.
//
// One round is in flight at a time: reads arriving meanwhile wait for the
// next one, which batches them under load at the cost of at most one extra
// round of latency.
func (r *Replica) issueReads() {
	if len(r.pendingReads) == 0 || len(r.inflight) > 0 {
		return
	}
	r.readSeq++
	ctx := make([]byte, 8)
	binary.BigEndian.PutUint64(ctx, r.readSeq)
	r.inflight[string(ctx)] = &readBatch{reqs: r.pendingReads, issued: r.clock()}
	r.pendingReads = nil
	r.readRounds.Add(1)
	r.rn.ReadIndex(ctx)
}

// retryReads re-issues, under a fresh request id, rounds that got no answer
// within an election timeout (raft drops them when there is no leader or
// leadership changed).
func (r *Replica) retryReads() {
	timeout := r.cfg.TickInterval * time.Duration(r.cfg.ElectionTicks)
	for k, b := range r.inflight {
		if r.clock().Sub(b.issued) > timeout {
			delete(r.inflight, k)
			r.pendingReads = append(r.pendingReads, b.reqs...)
		}
	}
}

func (r *Replica) failReads(err error) {
	for _, req := range r.pendingReads {
		req.errc <- err
	}
	for _, b := range r.inflight {
		for _, req := range b.reqs {
			req.errc <- err
		}
	}
	r.pendingReads, r.inflight = nil, map[string]*readBatch{}
}

// addLearners, on the leader, proposes adding the configured learners that
// the configuration lacks; retried every election timeout until applied
// (raft takes one configuration change at a time and drops others).
func (r *Replica) addLearners() {
	if r.leader.Load() != r.cfg.ID || r.confState == nil || r.book.Changed {
		return
	}
	if r.clock().Sub(r.learnersAsked) < r.cfg.TickInterval*time.Duration(r.cfg.ElectionTicks) {
		return
	}
	var cc pb.ConfChangeV2
	var recs []Peer
	for _, p := range r.cfg.Peers {
		if p.Learner && !inConf(r.confState, p.ID) {
			cc.Changes = append(cc.Changes, &pb.ConfChangeSingle{Type: pb.ConfChangeAddLearnerNode.Enum(), NodeId: proto.Uint64(p.ID)})
			recs = append(recs, p)
		}
	}
	if len(cc.Changes) == 0 || len(r.confState.GetVotersOutgoing()) > 0 {
		return
	}
	cc.Context = encodeContext(ccContext{Peers: recs})
	r.learnersAsked = r.clock()
	if err := r.rn.ProposeConfChange(&cc); err != nil {
		r.log.Debug("propose learners", "err", err)
	}
}

func (r *Replica) status() Status {
	st := r.rn.Status()
	first, _ := r.mem.FirstIndex()
	last, _ := r.mem.LastIndex()
	_, applied := r.applied.get()
	out := Status{
		ID: r.cfg.ID, Leader: st.Lead, Term: st.HardState.GetTerm(), Commit: st.HardState.GetCommit(), Applied: applied,
		SnapshotIndex: r.snapIndex, FirstIndex: first, LastIndex: last,
		Role: map[raft.StateType]string{raft.StateLeader: "leader", raft.StateFollower: "follower",
			raft.StateCandidate: "candidate", raft.StatePreCandidate: "pre-candidate"}[st.RaftState],
		Members: slices.Clone(r.book.Peers), Tick: r.tick, Quiesced: r.quiesce.quiet,
	}
	if r.tr != nil {
		out.ClusterID = FormatClusterID(r.tr.cluster.Load())
	}
	if st.RaftState == raft.StateFollower && slices.Contains(r.confState.GetLearners(), r.cfg.ID) {
		out.Role = "learner"
	}
	if st.RaftState == raft.StateLeader {
		out.Progress = map[uint64]uint64{}
		for id, pr := range st.Progress {
			out.Progress[id] = pr.Match
		}
	}
	return out
}

// appliedWait lets goroutines wait for the applied index to reach a value.
type appliedWait struct {
	mu  sync.Mutex
	idx uint64
	ch  chan struct{} // closed and replaced whenever idx advances
}

func (w *appliedWait) set(idx uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if idx <= w.idx && w.idx != 0 {
		return
	}
	w.idx = idx
	close(w.ch)
	w.ch = make(chan struct{})
}

func (w *appliedWait) get() (chan struct{}, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch, w.idx
}

func (w *appliedWait) reached(idx uint64) (chan struct{}, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch, w.idx >= idx
}

// raftLogger adapts slog to raft's Logger.
type raftLogger struct{ l *slog.Logger }

func (l raftLogger) Debug(v ...any)              { l.l.Debug(fmt.Sprint(v...)) }
func (l raftLogger) Debugf(f string, v ...any)   { l.l.Debug(fmt.Sprintf(f, v...)) }
func (l raftLogger) Info(v ...any)               { l.l.Debug(fmt.Sprint(v...)) }
func (l raftLogger) Infof(f string, v ...any)    { l.l.Debug(fmt.Sprintf(f, v...)) }
func (l raftLogger) Warning(v ...any)            { l.l.Warn(fmt.Sprint(v...)) }
func (l raftLogger) Warningf(f string, v ...any) { l.l.Warn(fmt.Sprintf(f, v...)) }
func (l raftLogger) Error(v ...any)              { l.l.Error(fmt.Sprint(v...)) }
func (l raftLogger) Errorf(f string, v ...any)   { l.l.Error(fmt.Sprintf(f, v...)) }
func (l raftLogger) Fatal(v ...any)              { l.l.Error(fmt.Sprint(v...)); panic(fmt.Sprint(v...)) }
func (l raftLogger) Fatalf(f string, v ...any) {
	l.l.Error(fmt.Sprintf(f, v...))
	panic(fmt.Sprintf(f, v...))
}
func (l raftLogger) Panic(v ...any)            { panic(fmt.Sprint(v...)) }
func (l raftLogger) Panicf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
