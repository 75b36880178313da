// Package server wires one Meridian member together: the replicated state
// (internal/fsm: tree and coord, applied from the replica's raft loop),
// sessions, watches, and the client ports (the ZooKeeper protocol, the
// native gRPC API, HTTP for metrics and health). It decides nothing that
// must be the same on every replica (that happens in fsm.Apply); what it
// decides, on the leader only, is when to propose time-driven commands,
// stamping its wall clock into them.
//
// Data flows one way: request → proposal → raft → apply → result and watch
// events → connections. Each file has one job:
//
//   - server.go: Server, New/Serve/Close; the adapter the replica drives
//     (stateMachine.Apply, Snapshot, Restore, handing entries to the fsm),
//     s.mu (stateView: the fsm's lock and state, for reads) and the
//     per-member reactions to an apply (appliedLocked and restoredLocked
//     under the fsm's lock; afterApply, endSession after it); and the
//     leader's duties (duties: session expiry, TTL and container reaping,
//     the coord tick for lock-delays and queue leases, keepalive forwarding
//     from followers).
//   - propose.go: the proposer. Submit hands a tree command, a
//     coordination command or a fenced write to raft and returns its
//     Future (Wait, Done); waiters hands each applied result to its
//     Future, and sweeps those whose outcome a leader change made
//     unknowable. The leader's duties submit without a waiter.
//   - request.go: the request core both ports call: write (validate, the
//     caller's identities, the one tree.Command, Submit, the result), read
//     (validate, consistency barrier, authorizeRead, the read, the watch),
//     and a session's life (createSession with admitSession's limit,
//     resumeSession, closeSession); readBarrier is the consistency
//     barrier of reads, Sync and a session's resumption.
//   - core.go: who is calling (identify, digestIdentity, grpcIdentity),
//     what a read may see (authorizeRead, redactACL), and the native port's
//     per-method rules (grpcRules, the unaryAuth and streamAuth
//     interceptors).
//   - The ZooKeeper listener, one file per job. zkconn.go: accept and the
//     connection caps, the connection's read loop, outbound queue and write
//     loop with their backpressure, the handshake (session create or
//     resume, read-only sessions), close and the linger after a connection
//     loss. zkops.go: the opcode dispatch (serve), write pipelining
//     (pipeline), multi and multiRead, and reply; it translates ZooKeeper
//     records to and from the request core (zkWriteOp, multiOps,
//     zkWriteResponse). zkauth.go: a connection's identities, addauth
//     (digest) and the SASL opcode; sasl.go is the DIGEST-MD5 exchange. zkfourletter.go: the four-letter
//     words and the counters they report. zkviews.go: the synthetic
//     /meridian and /zookeeper/config nodes. zkreconfig.go: the reconfig
//     opcode.
//   - api.go: the native gRPC service, translating its messages to and
//     from the request core: tree reads and writes, sessions, watch
//     streams, status, leader transfer. locks.go, queues.go and
//     election.go hold the lock, queue, barrier, election and counter
//     methods, which Submit coordination commands; locks.go also answers
//     waiting acquires and pops from apply (deliverGrants, and regrant
//     after a snapshot install).
//   - keyspaces.go: regional keyspaces on this member: each keyspace's
//     raft group (opened and closed as the root applies the table),
//     routing a request to the group that owns its path or name
//     (groupFor, groupForName; proposals route themselves in propose.go),
//     reads across groups (wholeTree), a group's leader duties (ending the
//     root's ended sessions there, its tick and reaping), the keyspace
//     methods of the native API.
//   - hub.go: a session's watch sink for its gRPC Watch stream.
//   - members.go: run-time membership over the replica's address book;
//     placement.go: write-load reports to the leader and its leadership
//     moves; latency.go: measured round trips for the API and Prometheus.
//   - http.go: /metrics, /livez, /readyz, /status (api.status, in the
//     CLI's JSON form: internal/jsonform) and pprof; metrics.go: every
//     Prometheus metric, request latency observed once per port (the
//     gRPC interceptor in core.go, zkConn.finish in zkops.go).
//   - dashboard.go: the read-only dashboard on the HTTP port (/, its
//     embedded page in web/, /dashboard/state from api.status, the
//     placement reports' round trips and every group's coordination
//     state), who may see it, and each group's leader history.
//   - config.go: the YAML configuration and its defaults; zoocfg.go and
//     jks.go: starting from a ZooKeeper zoo.cfg and its Java keystores;
//     limits.go: connection caps per client address, the file-descriptor
//     budget, idle timeouts, the four-letter-word allow list.
//
// A ZooKeeper request: zkListener.accept (connection caps) → zkConn.readLoop
// (a four-letter word is answered and the connection closed) → handshake
// (createSession proposes a new session; resumeSession waits for a
// linearizable barrier and the client's last zxid; identities from core.go)
// → per frame, a write goes to pipeline (submitWrite hands it to raft in
// request order, its reply queued after its predecessor's) and anything
// else waits for the pipelined writes, then serve: a read is Server.read
// with the connection as the watcher, its reply queued under the tree's
// read lock; a write is Server.write (zkWriteOp is the one translation of
// a ZooKeeper write, for pipeline, serve and multi) → reply counts the
// request in meridian_requests_total as zk:<opname> → the connection's
// writeLoop sends the reply.
//
// A native request: the gRPC interceptors in core.go (identities, the
// method's rule, meridian_requests_total) → the api method, which fills
// the same readRequest or writeRequest → Server.read (validate,
// readBarrier at the request's consistency, authorizeRead, read, watch
// into the session's hub) or Server.write (fenced when the request
// carries a fence) → Submit → the Future's Wait receives the result when
// this member applies the entry.
//
// Apply: the replica's raft loop calls stateMachine.Apply with each
// committed entry in log order, which hands it to fsm.Apply. Under the fsm's
// lock (the one s.mu.RLock takes) the entry is applied to the tree or coord
// (ending a session also releases its locks) and the appliedLocked hook
// triggers its watch events; then afterApply does this member's bookkeeping
// with the returned fsm.Result (sessions, observers, deliverGrants) and
// waiters.deliver completes the Future of the request that proposed it,
// if it was here.
package server
