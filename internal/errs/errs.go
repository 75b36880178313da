// Package errs declares every error Meridian returns to a client, once, and
// maps each one once to a ZooKeeper error code and a gRPC status code.
//
// Errors are values compared with errors.Is. Every package returns these
// values (possibly wrapped with fmt.Errorf("...: %w", err)); only the API edges
// (gRPC, ZooKeeper protocol) translate them, through ZKCode/GRPCStatus here and
// nowhere else.
package errs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error is a Meridian error with a stable ZooKeeper code and message.
type Error struct {
	// ZK is the ZooKeeper error code (org.apache.zookeeper.KeeperException.Code).
	ZK int32
	// GRPC is the gRPC status code used by the native API.
	GRPC codes.Code
	// Msg is the stable, unique message; the Go client maps it back to the value.
	Msg string
}

func (e *Error) Error() string { return "meridian: " + e.Msg }

// ZooKeeper error codes used below.
const (
	zkOK                    = 0
	zkSystemError           = -1
	zkRuntimeInconsistency  = -2
	zkDataInconsistency     = -3
	zkConnectionLoss        = -4
	zkMarshallingError      = -5
	zkUnimplemented         = -6
	zkOperationTimeout      = -7
	zkBadArguments          = -8
	zkNewConfigNoQuorum     = -13
	zkReconfigInProgress    = -14
	zkUnknownSession        = -12
	zkNoNode                = -101
	zkNoAuth                = -102
	zkBadVersion            = -103
	zkNoChildrenForEphemera = -108
	zkNodeExists            = -110
	zkNotEmpty              = -111
	zkSessionExpired        = -112
	zkInvalidACL            = -114
	zkAuthFailed            = -115
	zkSessionMoved          = -118
	zkNotReadOnly           = -119
	zkNoWatcher             = -121
	zkRequestTimeout        = -122
	zkReconfigDisabled      = -123
	zkQuotaExceeded         = -125
	zkThrottled             = -127
)

var (
	// Data tree errors (ZooKeeper semantics).
	ErrNoNode                  = &Error{zkNoNode, codes.NotFound, "node does not exist"}
	ErrNodeExists              = &Error{zkNodeExists, codes.AlreadyExists, "node already exists"}
	ErrBadVersion              = &Error{zkBadVersion, codes.FailedPrecondition, "version does not match"}
	ErrNotEmpty                = &Error{zkNotEmpty, codes.FailedPrecondition, "node has children"}
	ErrNoChildrenForEphemerals = &Error{zkNoChildrenForEphemera, codes.FailedPrecondition, "ephemeral nodes may not have children"}
	ErrBadArguments            = &Error{zkBadArguments, codes.InvalidArgument, "bad arguments"}
	ErrInvalidPath             = &Error{zkBadArguments, codes.InvalidArgument, "invalid path"}
	ErrDataTooLarge            = &Error{zkBadArguments, codes.InvalidArgument, "data exceeds 1048575 bytes"}
	ErrInvalidACL              = &Error{zkInvalidACL, codes.InvalidArgument, "invalid ACL"}
	ErrNoAuth                  = &Error{zkNoAuth, codes.PermissionDenied, "not authorized"}
	ErrAuthFailed              = &Error{zkAuthFailed, codes.Unauthenticated, "authentication failed"}
	ErrRuntimeInconsistency    = &Error{zkRuntimeInconsistency, codes.Aborted, "operation not attempted: an earlier operation in the multi failed"}
	ErrUnimplemented           = &Error{zkUnimplemented, codes.Unimplemented, "operation not implemented"}
	ErrNoWatcher               = &Error{zkNoWatcher, codes.NotFound, "no such watcher"}
	ErrQuotaExceeded           = &Error{zkQuotaExceeded, codes.ResourceExhausted, "quota exceeded"}
	ErrReconfigDisabled        = &Error{zkReconfigDisabled, codes.Unimplemented, "dynamic reconfiguration is not supported"}

	// Membership changes.
	ErrReconfigInProgress = &Error{zkReconfigInProgress, codes.FailedPrecondition, "another membership change is in progress; retry when it is applied"}
	ErrNewConfigNoQuorum  = &Error{zkNewConfigNoQuorum, codes.FailedPrecondition, "the new configuration would have no voters"}
	ErrBadMembership      = &Error{zkBadArguments, codes.InvalidArgument, "membership change is not valid for the current configuration"}

	// Coordination errors (no ZooKeeper equivalent; mapped to the nearest code).
	ErrLockHeld       = &Error{zkNodeExists, codes.FailedPrecondition, "lock is held by another session"}
	ErrLockNotHeld    = &Error{zkNoNode, codes.FailedPrecondition, "lock is not held by this session"}
	ErrStaleToken     = &Error{zkBadVersion, codes.FailedPrecondition, "fencing token is not the lock's current token"}
	ErrTooManyWaiters = &Error{zkThrottled, codes.ResourceExhausted, "too many waiters for this lock"}
	ErrTooManyLocks   = &Error{zkQuotaExceeded, codes.ResourceExhausted, "too many locks for this session or cluster"}
	// ErrLockWaitTimeout: the wait ended and the caller was taken out of the
	// queue; it does not hold the lock.
	ErrLockWaitTimeout = &Error{zkOperationTimeout, codes.DeadlineExceeded, "timed out waiting for the lock; not acquired"}

	// Queue errors.
	ErrQueueEmpty       = &Error{zkNoNode, codes.FailedPrecondition, "queue is empty"}
	ErrQueueFull        = &Error{zkQuotaExceeded, codes.ResourceExhausted, "queue is full (items or bytes)"}
	ErrItemTooLarge     = &Error{zkBadArguments, codes.InvalidArgument, "queue item exceeds 65536 bytes"}
	ErrTooManyQueues    = &Error{zkQuotaExceeded, codes.ResourceExhausted, "too many queues or queued bytes in the cluster"}
	ErrTooManyConsumers = &Error{zkThrottled, codes.ResourceExhausted, "too many consumers waiting on this queue"}
	ErrTooManyInFlight  = &Error{zkQuotaExceeded, codes.ResourceExhausted, "too many unacknowledged items or waiting pops for this session"}
	// ErrNotInFlight: the delivery was acked, its lease expired, it was
	// redelivered (another attempt), or it belongs to another session.
	ErrNotInFlight = &Error{zkNoNode, codes.FailedPrecondition, "item is not in flight for this session and attempt"}
	// ErrPopWaitTimeout: the wait ended and the pop was withdrawn; nothing
	// was delivered to the caller.
	ErrPopWaitTimeout = &Error{zkOperationTimeout, codes.DeadlineExceeded, "timed out waiting for a queue item; nothing delivered"}

	// Barrier errors.
	ErrBarrierOpen     = &Error{zkNodeExists, codes.FailedPrecondition, "double barrier is open; enter again after every participant has left"}
	ErrNotParticipant  = &Error{zkNoNode, codes.FailedPrecondition, "session is not a participant of this barrier"}
	ErrTooManyBarriers = &Error{zkQuotaExceeded, codes.ResourceExhausted, "too many barriers for this session or cluster"}
	// ErrBarrierWaitTimeout: an enter that times out is withdrawn (not
	// entered); a leave that times out stands (left, others still inside).
	ErrBarrierWaitTimeout = &Error{zkOperationTimeout, codes.DeadlineExceeded, "timed out waiting at the barrier"}

	// Keyspace errors (regional keyspaces: the table in the root group).
	ErrInvalidKeyspacePrefix = &Error{zkBadArguments, codes.InvalidArgument, "keyspace prefix must be one path component below the root, other than /zookeeper and /meridian"}
	ErrInvalidKeyspace       = &Error{zkBadArguments, codes.InvalidArgument, "invalid keyspace: region, survival goal or group members"}
	ErrKeyspaceExists        = &Error{zkNodeExists, codes.AlreadyExists, "keyspace already exists"}
	ErrKeyspaceOverlap       = &Error{zkNodeExists, codes.FailedPrecondition, "keyspace prefix overlaps an existing keyspace"}
	// ErrKeyspaceHasData: a znode exists at the prefix in the root group;
	// creating the keyspace would hide it (data is never moved).
	ErrKeyspaceHasData = &Error{zkNodeExists, codes.FailedPrecondition, "a znode exists at the keyspace prefix; delete it first"}
	// ErrKeyspaceNotEmpty: a keyspace is removed only when it holds no
	// znodes but its mount node.
	ErrKeyspaceNotEmpty = &Error{zkNotEmpty, codes.FailedPrecondition, "keyspace is not empty"}
	ErrNoKeyspace       = &Error{zkNoNode, codes.NotFound, "keyspace does not exist"}
	ErrTooManyKeyspaces = &Error{zkQuotaExceeded, codes.ResourceExhausted, "too many keyspaces"}
	// ErrWrongGroup: a request reached a raft group that does not own its
	// path or name (the member routed it before it knew of a keyspace
	// created meanwhile). Nothing was applied; the member retries it once
	// routed again.
	ErrWrongGroup = &Error{zkConnectionLoss, codes.Unavailable, "request reached a group that does not own its path; not applied, retry"}
	// ErrCrossKeyspace: a multi or a fenced write whose operations (or
	// lock) are in different keyspaces; their atomicity would need a
	// transaction across raft groups.
	ErrCrossKeyspace = &Error{zkBadArguments, codes.InvalidArgument, "a multi or fenced write may not span keyspaces"}
	// ErrKeyspaceRoot: the root znode of a keyspace is deleted with the
	// keyspace (keyspace rm), not by a delete.
	ErrKeyspaceRoot = &Error{zkBadArguments, codes.InvalidArgument, "a keyspace's root znode is removed with the keyspace"}
	// ErrNoQuorum: a majority of a keyspace's voters (all three of a
	// zone-survival keyspace's are in its home region) have answered no
	// latency probe for an election timeout, so the member refused the
	// write before proposing it: not applied. The data stays readable;
	// ZooKeeper clients get ZooKeeper's answer to a write on a server that
	// is cut off from its quorum and serves reads only (NOTREADONLY).
	ErrNoQuorum = &Error{zkNotReadOnly, codes.Unavailable, "keyspace has no quorum (a majority of its voters unreachable); write not applied"}
	// ErrNoQuorumInFlight: the keyspace lost its quorum while the write
	// waited for its commit; it may still apply once the voters are back.
	ErrNoQuorumInFlight = &Error{zkConnectionLoss, codes.Unavailable, "keyspace lost its quorum while the write was in flight; outcome unknown"}
	// ErrNoQuorumRead: a read that needs the keyspace's leader (a
	// linearizable read, or one for a session that has seen a zxid above
	// this member's copy of the keyspace) while its quorum is unreachable.
	// ZooKeeper clients see the connection closed, as from a server
	// outside its quorum.
	ErrNoQuorumRead = &Error{zkConnectionLoss, codes.Unavailable, "keyspace has no quorum and this member's copy is older than the session has seen; read not served"}

	// Session errors.
	ErrSessionExpired = &Error{zkSessionExpired, codes.FailedPrecondition, "session expired"}
	ErrUnknownSession = &Error{zkUnknownSession, codes.NotFound, "unknown session"}
	ErrSessionMoved   = &Error{zkSessionMoved, codes.FailedPrecondition, "session moved to another server"}
	// ErrTooManySessions: the cluster holds max_sessions live sessions; a
	// new one is refused until some end (ZooKeeper clients see the
	// connection closed and try again).
	ErrTooManySessions = &Error{zkThrottled, codes.ResourceExhausted, "too many live sessions; retry later"}

	// Cluster and transport errors. The outcome of a write that fails with
	// ErrNotLeader or ErrUnavailable is known: it was not applied. The outcome
	// of one that fails with ErrTimeout or ErrOutcomeUnknown is not.
	ErrNotLeader         = &Error{zkConnectionLoss, codes.Unavailable, "no leader; proposal not accepted"}
	ErrUnavailable       = &Error{zkConnectionLoss, codes.Unavailable, "server unavailable"}
	ErrTimeout           = &Error{zkOperationTimeout, codes.DeadlineExceeded, "operation timed out; outcome unknown"}
	ErrOutcomeUnknown    = &Error{zkConnectionLoss, codes.Unavailable, "leader changed; outcome unknown"}
	ErrStopped           = &Error{zkConnectionLoss, codes.Unavailable, "server stopped"}
	ErrConnectionLoss    = &Error{zkConnectionLoss, codes.Unavailable, "connection lost; outcome unknown"}
	ErrRequestTooLarge   = &Error{zkMarshallingError, codes.ResourceExhausted, "request exceeds the size limit"}
	ErrThrottled         = &Error{zkThrottled, codes.ResourceExhausted, "too many requests; back off and retry"}
	ErrTooManyWatches    = &Error{zkThrottled, codes.ResourceExhausted, "too many watches for this session"}
	ErrNotReadOnly       = &Error{zkNotReadOnly, codes.FailedPrecondition, "server is read-only"}
	ErrSystem            = &Error{zkSystemError, codes.Internal, "internal error"}
	ErrMarshalling       = &Error{zkMarshallingError, codes.InvalidArgument, "malformed request"}
	ErrDataInconsistency = &Error{zkDataInconsistency, codes.DataLoss, "data inconsistency"}
	ErrRequestTimeout    = &Error{zkRequestTimeout, codes.DeadlineExceeded, "request timed out"}
	// ErrTooManyGroups: a member runs as many raft groups as it may
	// (replica.MaxGroups besides the root group).
	ErrTooManyGroups = &Error{zkQuotaExceeded, codes.ResourceExhausted, "too many raft groups on this member"}
	// ErrClusterVersion: the write needs an entry format that some
	// member's binary cannot apply (the cluster version is below it: a
	// rolling upgrade is under way), so it was not proposed. Not applied;
	// retry once every member runs the newer binary. ZooKeeper clients get
	// the answer of a server that serves reads only (NOTREADONLY), as for
	// ErrNoQuorum: the write was refused, reads go on.
	ErrClusterVersion = &Error{zkNotReadOnly, codes.Unavailable, "a member runs an older binary that cannot apply this write's entry format; not applied, retry after the upgrade"}
)

// all lists every declared error, for the reverse mappings.
var all = []*Error{
	ErrNoNode, ErrNodeExists, ErrBadVersion, ErrNotEmpty, ErrNoChildrenForEphemerals,
	ErrBadArguments, ErrInvalidPath, ErrDataTooLarge, ErrInvalidACL, ErrNoAuth, ErrAuthFailed,
	ErrRuntimeInconsistency, ErrUnimplemented, ErrNoWatcher, ErrQuotaExceeded, ErrReconfigDisabled,
	ErrReconfigInProgress, ErrNewConfigNoQuorum, ErrBadMembership,
	ErrLockHeld, ErrLockNotHeld, ErrStaleToken, ErrTooManyWaiters, ErrTooManyLocks, ErrLockWaitTimeout,
	ErrQueueEmpty, ErrQueueFull, ErrItemTooLarge, ErrTooManyQueues, ErrTooManyConsumers, ErrTooManyInFlight,
	ErrNotInFlight, ErrPopWaitTimeout, ErrBarrierOpen, ErrNotParticipant, ErrTooManyBarriers, ErrBarrierWaitTimeout,
	ErrInvalidKeyspacePrefix, ErrInvalidKeyspace, ErrKeyspaceExists, ErrKeyspaceOverlap, ErrKeyspaceHasData,
	ErrKeyspaceNotEmpty, ErrNoKeyspace, ErrTooManyKeyspaces,
	ErrSessionExpired, ErrUnknownSession, ErrSessionMoved, ErrTooManySessions,
	ErrNotLeader, ErrUnavailable, ErrTimeout, ErrOutcomeUnknown, ErrStopped, ErrConnectionLoss, ErrRequestTooLarge,
	ErrThrottled, ErrTooManyWatches, ErrNotReadOnly, ErrSystem, ErrMarshalling, ErrDataInconsistency,
	ErrRequestTimeout, ErrTooManyGroups, ErrWrongGroup, ErrCrossKeyspace, ErrKeyspaceRoot,
	ErrNoQuorum, ErrNoQuorumInFlight, ErrNoQuorumRead, ErrClusterVersion,
}

var byMsg = func() map[string]*Error {
	m := make(map[string]*Error, len(all))
	for _, e := range all {
		if _, dup := m[e.Msg]; dup {
			panic("errs: duplicate message " + e.Msg)
		}
		m[e.Msg] = e
	}
	return m
}()

// byZK maps a ZooKeeper code to the canonical error for it (the first declared).
var byZK = func() map[int32]*Error {
	m := make(map[int32]*Error, len(all))
	for _, e := range all {
		if _, ok := m[e.ZK]; !ok {
			m[e.ZK] = e
		}
	}
	return m
}()

// ZKCode maps err to a ZooKeeper error code; nil maps to 0 (ZOK).
func ZKCode(err error) int32 {
	if err == nil {
		return zkOK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.ZK
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return zkOperationTimeout
	case errors.Is(err, context.Canceled):
		return zkConnectionLoss
	}
	return zkSystemError
}

// FromZKCode returns the error for a ZooKeeper code, nil for 0.
func FromZKCode(code int32) error {
	if code == zkOK {
		return nil
	}
	if e, ok := byZK[code]; ok {
		return e
	}
	return ErrSystem
}

// GRPCStatus converts err to a gRPC status error; nil stays nil.
func GRPCStatus(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		// What the server added to the declared error (fmt.Errorf("%w:
		// detail")) travels after its message; FromGRPC gives it back.
		if detail, ok := strings.CutPrefix(err.Error(), e.Error()+": "); ok && detail != "" {
			return status.Error(e.GRPC, e.Msg+": "+detail)
		}
		return status.Error(e.GRPC, e.Msg)
	}
	if s, ok := status.FromError(err); ok {
		return s.Err()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, ErrTimeout.Msg)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// FromGRPC maps a gRPC error received by a client back to the declared value
// when it is one of ours; otherwise it returns err unchanged.
func FromGRPC(err error) error {
	if err == nil {
		return nil
	}
	s, ok := status.FromError(err)
	if !ok {
		return err
	}
	if e, ok := byMsg[s.Message()]; ok {
		return e
	}
	// A declared error with the server's detail after it (GRPCStatus).
	if msg, detail, ok := strings.Cut(s.Message(), ": "); ok {
		for ; ok; msg, detail, ok = cutNext(s.Message(), msg) {
			if e, known := byMsg[msg]; known && e.GRPC == s.Code() {
				return fmt.Errorf("%w: %s", e, detail)
			}
		}
	}
	switch s.Code() {
	case codes.Unavailable:
		return ErrConnectionLoss
	case codes.DeadlineExceeded:
		return ErrTimeout
	}
	return err
}

// ZKConnectionLoss reports whether the ZooKeeper port answers a request
// that failed with err by closing the client's connection instead of
// sending a reply, as a ZooKeeper server does: it never sends connection
// loss (-4) or operation timeout (-7) in a reply header. The set is every
// error that maps to connection loss (ErrNotLeader, ErrUnavailable,
// ErrOutcomeUnknown, ErrStopped, ErrConnectionLoss: this server cannot
// serve the request now, or cannot tell whether it took effect) and
// ErrTimeout (the outcome is unknown), plus a bare context deadline or
// cancellation, which mean the same. The client reconnects with its session
// id and password (the session lives on) and decides what to retry. The
// coordination waits that time out (ErrLockWaitTimeout and the like) have
// a definite outcome and no ZooKeeper form; they are not in the set.
func ZKConnectionLoss(err error) bool {
	if err == nil {
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		return e.ZK == zkConnectionLoss || e == ErrTimeout
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// Retryable reports whether a request that failed with err definitely did not
// take effect and may be sent again (to this or another server).
func Retryable(err error) bool {
	return errors.Is(err, ErrNotLeader) || errors.Is(err, ErrUnavailable) ||
		errors.Is(err, ErrStopped) || errors.Is(err, ErrThrottled) || errors.Is(err, ErrWrongGroup)
}

// cutNext extends msg, a prefix of full ending before a ": ", to the next
// ": " in full; ok false when there is none.
func cutNext(full, msg string) (string, string, bool) {
	rest := full[len(msg)+2:]
	i := strings.Index(rest, ": ")
	if i < 0 {
		return "", "", false
	}
	msg = full[:len(msg)+2+i]
	return msg, full[len(msg)+2:], true
}
