// Package tree owns the ZooKeeper data tree: znodes, their stats, sequential
// names, ephemerals, containers, TTL nodes, ACLs, multi, and the session table.
//
// It is a pure, deterministic state machine: Apply takes a command from the
// raft log and the log index (which becomes the zxid) and returns a result and
// the watch events the change produced. It must never read a clock, start a
// goroutine, do I/O or use randomness: time arrives inside commands, stamped by
// the proposer. Every replica that applies the same log holds the same tree.
//
// A Tree is not safe for concurrent use; the server guards it with a lock.
package tree
