// Package tree owns the ZooKeeper data tree: znodes, their stats, sequential
// names, ephemerals, containers, TTL nodes, ACLs, multi, and the session table.
//
// It is a pure, deterministic state machine: Apply takes a command from the
// raft log and its zxid (chosen by internal/fsm: the log index, or a hybrid
// logical clock above it) and returns a result and the watch events the
// change produced. It must never read a clock, start a
// goroutine, do I/O or use randomness: time arrives inside commands, stamped by
// the proposer. Every replica that applies the same log holds the same tree.
//
// A Tree is not safe for concurrent use; the server guards it with a lock.
// Read methods (Get, Children, NeedsReap, Snapshot, ...) never modify the
// tree, so they may run concurrently with each other under a shared lock.
// View (also under a shared lock) returns the state as of that moment for
// a snapshot, which may be written on another goroutine while the tree
// goes on changing: the tree copies a node before it first changes it
// after a view (copy-on-write), and the view keeps the original.
//
// Layout: nodes live in one map keyed by full path; each node keeps the set
// of its children's names. Reap candidates are indexed as they change (a
// min-heap of childless TTL nodes by deadline, a set of empty containers), so
// NeedsReap is O(1) and a reap costs what it deletes.
//
// Semantics follow ZooKeeper's PrepRequestProcessor and DataTree, including
// the order in which a failing request's errors are reported. Every op
// validates fully before it changes anything; a multi records an undo log and
// rolls back on the first failing op, so a failed command changes nothing and
// emits no events.
//
// Where Meridian differs from ZooKeeper on purpose:
//   - writes to "/zookeeper" and below fail with ErrBadArguments;
//   - ".." path components are refused (ZooKeeper's check for them is buggy);
//   - paths are limited to MaxPathBytes;
//   - a TTL node expires when mtime+TTL <= the reap time (ZooKeeper: >), and
//     its TTL is not encoded in ephemeralOwner;
//   - ACL perms outside 0..31 are refused.
//
// Encodings (commands for the log, snapshots) are versioned varint formats;
// decoding is strict and bounds-checked, and snapshots carry a CRC32C.
package tree
