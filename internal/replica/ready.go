package replica

import (
	"errors"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/meridian-coord/meridian/internal/errs"
)

// The Ready processing behind small interfaces.
//
// What a member does with each raft Ready is where its promises are kept or
// broken: what is on disk before a message vouches for it, what is applied
// and when. handleReady (replica.go) is that code, and it reaches the world
// through three seams: Storage (the durable log), Network (messages to the
// other members) and StateMachine (what committed entries mean). A running
// Replica plugs in Pebble, the TCP transport and the server's state machine
// and drives them from its raft loop. A Node is the same member without the
// loop, the clock and the transport: its caller delivers messages, ticks
// and crashes it. The simulation (internal/sim) and the scripted tests
// (testdata/*.txt) drive Nodes, so they exercise the shipped ordering
// rules, not a copy of them.

// Storage keeps a member's raft state durable.
type Storage interface {
	// Load returns what is stored: hard state, latest snapshot (possibly
	// empty) and the entries after it, in order.
	Load() (*pb.HardState, *pb.Snapshot, []*pb.Entry, error)
	// Save stores one Ready in one atomic write: the snapshot (it replaces
	// every stored entry), the entries (replacing any conflicting suffix)
	// and the hard state (nil: unchanged; it is given with a snapshot and
	// when its term or vote changes, not for its commit index alone). sync
	// false: it need not be durable yet (a learner's deferred sync, the
	// commit index stored ahead of a snapshot); a crash may lose it.
	Save(hs *pb.HardState, ents []*pb.Entry, snap *pb.Snapshot, sync bool) error
	// SaveSnapshot stores a snapshot this member took, durably, and drops
	// the entries before compactTo.
	SaveSnapshot(snap *pb.Snapshot, compactTo uint64) error
	// Sync makes every earlier Save durable (a learner's deferred sync,
	// learnersync.go).
	Sync() error
}

// Network carries a member's outbound messages. Sends never block and may
// lose messages (raft retransmits).
type Network interface {
	// Send sends a raft message to m.To.
	Send(m *pb.Message)
	// SendStepDown tells member to that this member stepped down as leader
	// of term and names successor to campaign (handover.go); the receiver
	// hands it to its own replica (Node.SteppedDown).
	SendStepDown(to, term, successor uint64)
}

// transportNetwork is the TCP transport as one group's Network.
type transportNetwork struct {
	t     *transport
	group uint64 // 0: the root group
}

func (n transportNetwork) Send(m *pb.Message) { n.t.send(n.group, m) }
func (n transportNetwork) SendStepDown(to, term, successor uint64) {
	n.t.sendStepDown(n.group, to, term, successor)
}

// Node is one member's raft processing without the replica's goroutine,
// clock and transport: the same step filters, held proposals, read
// batching, step-down handover and Ready processing as a Replica, driven
// one call at a time by a single caller. A Replica's loop makes the same
// calls (onTick, step, afterEvent). Not safe for concurrent use.
type Node struct{ r *Replica }

// NodeOptions are what a Node's driver controls beyond Config.
type NodeOptions struct {
	// Clock is the time the node sees (held proposals, read retries,
	// handover); default time.Now. Config.TickInterval says how much of it
	// one Tick stands for.
	Clock func() time.Time
	// Raft, if set, adjusts raft's configuration last (a simulation that
	// runs its own election timer turns raft's off).
	Raft func(*raft.Config)
}

// NewNode restores a member from store (bootstrapping the group from
// cfg.Peers when store is empty, unless cfg.Join). Config's storage,
// transport and callback fields other than Logger, OnLeaderChange and
// OnConfigChange are not used.
func NewNode(cfg Config, sm StateMachine, store Storage, net Network, opts NodeOptions) (*Node, error) {
	cfg.defaults()
	if _, err := checkPeers(cfg); err != nil {
		return nil, err
	}
	r, _, err := newReplica(cfg, sm, store, opts.Raft)
	if err != nil {
		return nil, err
	}
	r.net = net
	if opts.Clock != nil {
		r.clock = opts.Clock
	}
	return &Node{r: r}, nil
}

// Tick advances the node by one raft tick.
func (n *Node) Tick() { n.r.onTick() }

// Step hands the node a message from a peer.
func (n *Node) Step(m *pb.Message) { n.r.step(m) }

// SteppedDown hands the node a step-down notice from member from.
func (n *Node) SteppedDown(from, term, successor uint64) {
	n.r.leaderSteppedDown(from, term, successor, n.r.clock())
}

// ReportSnapshot tells the node whether a snapshot it sent to member to
// left (ok) or failed, as the transport reports it to the raft loop; until
// it hears, raft sends that member nothing but heartbeats.
func (n *Node) ReportSnapshot(to uint64, ok bool) {
	st := raft.SnapshotFinish
	if !ok {
		st = raft.SnapshotFailure
	}
	n.r.rn.ReportSnapshot(to, st)
}

// Propose proposes data; errs.ErrNotLeader when raft dropped it.
func (n *Node) Propose(data []byte) error {
	err := n.r.rn.Propose(data)
	if errors.Is(err, raft.ErrProposalDropped) {
		err = errs.ErrNotLeader
	}
	return err
}

// Campaign starts an election.
func (n *Node) Campaign() error { return n.r.rn.Campaign() }

// TransferLeader asks raft to move leadership to target.
func (n *Node) TransferLeader(target uint64) { n.r.rn.TransferLeader(target) }

// ReadIndex queues a linearizable read; it joins the next read round.
func (n *Node) ReadIndex() *PendingRead {
	req := &readReq{errc: make(chan error, 1)}
	n.r.pendingReads = append(n.r.pendingReads, req)
	return &PendingRead{req: req}
}

// HandleReady does what the replica's loop does after every event: places
// held proposals, starts a read round, and handles one Ready if raft has
// one (persist, send, apply, in the replica's order). It reports whether
// there was a Ready. After an error the node must be discarded: a
// running replica stops (its storage failed).
func (n *Node) HandleReady() (bool, error) { return n.r.afterEvent() }

// BasicStatus is raft's view of the node.
func (n *Node) BasicStatus() raft.BasicStatus { return n.r.rn.BasicStatus() }

// Status is the node's state as a Replica reports it.
func (n *Node) Status() Status { return n.r.status() }

// PendingRead is a read queued on a Node.
type PendingRead struct {
	req   *readReq
	done  bool
	err   error
	index uint64
}

// Result reports the read's index once its round completed (done), or
// the error that ended it.
func (p *PendingRead) Result() (index uint64, done bool, err error) {
	if !p.done {
		select {
		case p.err = <-p.req.errc:
			p.done, p.index = true, p.req.index
		default:
		}
	}
	return p.index, p.done, p.err
}
