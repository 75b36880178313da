// Package chaos is Meridian's fault-injection harness for real processes.
//
// A Cluster runs real `meridian server` processes on loopback, with every
// server-to-server (raft) link routed through its own proxy so links can be
// cut one direction at a time. A scenario starts a cluster, runs concurrent
// workloads with the Go client (a versioned key-value register, locks with
// fenced writes, durable creates, sequential reads), injects faults drawn
// from a seed (SIGKILL and restart, SIGSTOP/SIGCONT, whole-cluster kill,
// leader transfer, partitions, a paused lock-holder process), records every
// operation with its invocation and completion time, and checks the history:
// linearizability with porcupine, lock safety (fencing), durability across a
// whole-cluster kill, and session monotonicity of sequential reads.
//
// The seed fixes the fault schedule and every workload choice; process and
// network timing are not deterministic, so a seed reproduces a schedule, not
// an interleaving.
package chaos
