// Package replica owns a member's consensus groups. For each group it
// drives go.etcd.io/raft's RawNode from a single goroutine (the raft
// loop), keeps the raft log, hard
// state and snapshots durable in Pebble (one batch, one fsync per Ready),
// moves messages between peers over TCP (mutual TLS with member identities
// when Config.PeerTLS is set; every connection opens with a hello carrying
// the member id and the cluster id, see peerauth.go), takes snapshots and compacts the
// log, batches linearizable reads into ReadIndex rounds, transfers
// leadership on request, and carries small opaque side messages to the
// leader.
//
// A member runs its root group (Open) and may run others beside it
// (OpenGroup, groups.go): they share the root's Pebble store under their
// own key prefixes, its peer connections (group frames) and its latency
// probes; each has its own loop, log, leader and snapshots, and an idle
// group stops ticking (quiesce.go) until something happens to it.
//
// It knows nothing about what entries mean: it drives a StateMachine, whose
// Apply/Snapshot/Restore are only ever called from the raft loop.
//
// What the member does with each raft Ready (handleReady: what is
// persisted before what is sent, what is applied when, snapshots,
// membership changes, read rounds, the step-down handover) reaches the
// world only through Storage, Network and StateMachine (ready.go). A Node
// is that same code without the loop, the clock and the TCP transport: the
// simulation (internal/sim) and the scripted tests (testdata/*.txt, run by
// interaction_test.go over the Pebble disk on a file system that can
// crash) drive Nodes, so what they check is the shipped code, not a copy.
//
// It must never touch the RawNode outside the raft loop, never block the
// loop on the network (outbound queues are bounded and drop, raft
// retransmits), and never panic on bytes from the network or the disk:
// malformed frames close the connection, corrupt storage fails Open.
package replica
