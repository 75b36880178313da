// Package session owns session liveness bookkeeping, which is not
// replicated: the leader's deadlines (Tracker), a follower's keepalives
// batched for the leader (Batcher and the touches codec), and ZooKeeper's
// timeout negotiation (Negotiate).
//
// Sessions themselves (id, timeout, password) live in the replicated tree.
// Expiry is decided here, on the leader, by its monotonic clock, and carried
// out by proposing a replicated expire command. This package must never
// change the tree, read the wall clock directly (everything goes through the
// injected Clock), or expire anything itself: it only says which sessions are
// overdue.
package session
