package tree

// This file is the contract between the data tree and everything around it:
// the commands that enter through the raft log, the results returned to the
// proposer, and the events handed to the watch layer. Keep it stable.

// MaxDataBytes is ZooKeeper's jute.maxbuffer less one: the largest znode value.
const MaxDataBytes = 1048575

// Limits on what one command may carry; the codec and Apply both enforce them.
const (
	MaxPathBytes    = 4096  // longest accepted path
	MaxMultiOps     = 1000  // operations in one multi
	MaxACLEntries   = 64    // ACL entries on one node
	MaxAuthIDs      = 16    // identities attached to one command
	MaxExpireBatch  = 10000 // sessions expired by one command
	MinSessionMs    = 100   // smallest session timeout Apply accepts
	MaxSessionMs    = 3600000
	MaxCommandBytes = 2*MaxDataBytes + 1<<20 // codec refuses anything larger
)

// CreateMode values are ZooKeeper's CreateMode flags.
type CreateMode int32

const (
	ModePersistent           CreateMode = 0
	ModeEphemeral            CreateMode = 1
	ModePersistentSequential CreateMode = 2
	ModeEphemeralSequential  CreateMode = 3
	ModeContainer            CreateMode = 4
	ModePersistentTTL        CreateMode = 5
	ModePersistentSeqTTL     CreateMode = 6
)

// Permission bits, as in ZooKeeper's ZooDefs.Perms.
const (
	PermRead   int32 = 1
	PermWrite  int32 = 2
	PermCreate int32 = 4
	PermDelete int32 = 8
	PermAdmin  int32 = 16
	PermAll    int32 = 31
)

// ID is an authenticated identity or an ACL subject: scheme "world" id
// "anyone", scheme "digest" id "user:base64(sha1(user:pass))", scheme "ip"
// id "10.0.0.1" or "10.0.0.0/8", scheme "auth" (ACL only, expands to the
// creator's identities), scheme "super" (identity only: bypasses ACLs).
type ID struct {
	Scheme string
	ID     string
}

// ACL is one ACL entry.
type ACL struct {
	Perms int32
	ID    ID
}

// OpenACL is ZooKeeper's OPEN_ACL_UNSAFE: world:anyone with all permissions.
var OpenACL = []ACL{{Perms: PermAll, ID: ID{Scheme: "world", ID: "anyone"}}}

// Stat is ZooKeeper's znode Stat, field for field.
type Stat struct {
	Czxid          int64
	Mzxid          int64
	Ctime          int64 // ms since the Unix epoch, stamped by the proposer
	Mtime          int64
	Version        int32
	Cversion       int32
	Aversion       int32
	EphemeralOwner int64 // session id, 0 if not ephemeral; for TTL nodes ZooKeeper encodes the TTL here, we do not
	DataLength     int32
	NumChildren    int32
	Pzxid          int64
}

// OpType names an operation. Values that exist in ZooKeeper use its opcode.
type OpType uint8

const (
	OpNone          OpType = 0
	OpCreate        OpType = 1
	OpDelete        OpType = 2
	OpSetData       OpType = 5
	OpSetACL        OpType = 7
	OpCheck         OpType = 13 // only inside a multi
	OpMulti         OpType = 14
	OpCreateSession OpType = 40 // Timeout, Password
	OpCloseSession  OpType = 41 // Session
	OpExpire        OpType = 42 // Sessions: expired by the leader's clock
	OpReap          OpType = 43 // delete expired TTL nodes and empty containers as of TimeMs
	OpNoop          OpType = 44 // used by sync and leader barriers: changes nothing
)

// Op is one tree operation, alone or inside a multi.
type Op struct {
	Type    OpType
	Path    string
	Data    []byte
	ACL     []ACL      // create: required, non-empty; setACL: the new ACL
	Mode    CreateMode // create
	TTLMs   int64      // create with a TTL mode: > 0
	Version int32      // delete/setData/setACL/check: expected version, -1 = any
}

// Command is the payload of one raft log entry.
type Command struct {
	// ID identifies the proposal so the proposing server can hand the result
	// back to its waiter. Apply does not interpret it.
	ID uint64
	// TimeMs is the proposer's wall clock (ms since epoch): ctime/mtime and the
	// TTL/reap deadline. Apply never reads a clock.
	TimeMs int64
	// Session is the session on whose behalf the command runs (0 = none).
	// Ephemeral creates require it to be live.
	Session int64
	// Auth is the requester's identities, for ACL checks done in Apply. A
	// command with no Auth acts as world:anyone only.
	Auth []ID

	// Op is the operation when Type is not OpMulti or a session/system op.
	Op Op
	// Ops are the operations of a multi (Op.Type == OpMulti), applied all or nothing.
	Ops []Op

	// Session operations.
	TimeoutMs int32   // OpCreateSession: negotiated timeout
	Password  []byte  // OpCreateSession: 16 random bytes chosen by the proposer
	Sessions  []int64 // OpExpire: the sessions to expire
}

// OpResult is the outcome of one operation.
type OpResult struct {
	Type OpType
	Err  error  // nil or an errs value
	Path string // create: the created path (with sequence suffix)
	Stat Stat   // create (new node), setData, setACL: the node's stat after the op
}

// Result is what Apply returns to the proposer.
type Result struct {
	Err   error      // nil or an errs value; for a multi, the first failing op's error
	Op    OpResult   // single operation
	Multi []OpResult // multi: one per op. On failure nothing is applied and, as in
	// ZooKeeper, ops before the failed one carry Err nil, the failed one its
	// error, ops after it errs.ErrRuntimeInconsistency.
	// SessionID is the new session for OpCreateSession.
	SessionID int64
	// Deleted lists nodes removed by session close/expire and reap (for logs and tests).
	Deleted []string
}

// EventType values are ZooKeeper's Watcher.Event.EventType codes.
type EventType int32

const (
	EventNodeCreated         EventType = 1
	EventNodeDeleted         EventType = 2
	EventNodeDataChanged     EventType = 3
	EventNodeChildrenChanged EventType = 4
)

// Event is a change to the tree, emitted by Apply in the order it happened.
// A create emits NodeCreated(path) then NodeChildrenChanged(parent); a delete
// NodeDeleted(path) then NodeChildrenChanged(parent); setData
// NodeDataChanged(path). setACL emits nothing (as in ZooKeeper).
type Event struct {
	Type EventType
	Path string
	Zxid int64
	// Changed is, for a notification sent when watches are set again after
	// a reconnect (Zxid -1, as ZooKeeper sends it), the zxid of the change
	// it reports when known (the node's mzxid, pzxid for children); 0
	// otherwise. The native API sends it as the event's zxid so that a
	// client can tell a change it has already seen.
	Changed int64
}

// SessionInfo is a live session as recorded in the tree.
type SessionInfo struct {
	ID        int64
	TimeoutMs int32 // 0: adopted (Tree.AdoptSession), the session's table is elsewhere
	Password  []byte
}
