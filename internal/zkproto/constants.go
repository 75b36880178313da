package zkproto

import "strconv"

// Opcodes (org.apache.zookeeper.ZooDefs.OpCode), the type of RequestHeader
// and MultiHeader.
const (
	OpNotification         int32 = 0
	OpCreate               int32 = 1
	OpDelete               int32 = 2
	OpExists               int32 = 3
	OpGetData              int32 = 4
	OpSetData              int32 = 5
	OpGetACL               int32 = 6
	OpSetACL               int32 = 7
	OpGetChildren          int32 = 8
	OpSync                 int32 = 9
	OpPing                 int32 = 11
	OpGetChildren2         int32 = 12
	OpCheck                int32 = 13
	OpMulti                int32 = 14
	OpCreate2              int32 = 15
	OpReconfig             int32 = 16
	OpCheckWatches         int32 = 17
	OpRemoveWatches        int32 = 18
	OpCreateContainer      int32 = 19
	OpDeleteContainer      int32 = 20
	OpCreateTTL            int32 = 21
	OpMultiRead            int32 = 22
	OpAuth                 int32 = 100
	OpSetWatches           int32 = 101
	OpSASL                 int32 = 102
	OpGetEphemerals        int32 = 103
	OpGetAllChildrenNumber int32 = 104
	OpSetWatches2          int32 = 105
	OpAddWatch             int32 = 106
	OpWhoAmI               int32 = 107
	OpCreateSession        int32 = -10
	OpCloseSession         int32 = -11
	OpError                int32 = -1
)

var opNames = map[int32]string{
	OpNotification: "notification", OpCreate: "create", OpDelete: "delete",
	OpExists: "exists", OpGetData: "getData", OpSetData: "setData",
	OpGetACL: "getACL", OpSetACL: "setACL", OpGetChildren: "getChildren",
	OpSync: "sync", OpPing: "ping", OpGetChildren2: "getChildren2",
	OpCheck: "check", OpMulti: "multi", OpCreate2: "create2",
	OpReconfig: "reconfig", OpCheckWatches: "checkWatches",
	OpRemoveWatches: "removeWatches", OpCreateContainer: "createContainer",
	OpDeleteContainer: "deleteContainer", OpCreateTTL: "createTTL",
	OpMultiRead: "multiRead", OpAuth: "auth", OpSetWatches: "setWatches",
	OpSASL: "sasl", OpGetEphemerals: "getEphemerals",
	OpGetAllChildrenNumber: "getAllChildrenNumber", OpSetWatches2: "setWatches2",
	OpAddWatch: "addWatch", OpWhoAmI: "whoAmI", OpCreateSession: "createSession",
	OpCloseSession: "closeSession", OpError: "error",
}

// OpName names an opcode for logs; unknown values print as numbers.
func OpName(op int32) string {
	if s, ok := opNames[op]; ok {
		return s
	}
	return "op(" + strconv.Itoa(int(op)) + ")"
}

// Error codes (KeeperException.Code), carried in ReplyHeader.Err,
// MultiHeader.Err and ErrorResponse.Err.
const (
	CodeOK                           int32 = 0
	CodeSystemError                  int32 = -1
	CodeRuntimeInconsistency         int32 = -2
	CodeDataInconsistency            int32 = -3
	CodeConnectionLoss               int32 = -4
	CodeMarshallingError             int32 = -5
	CodeUnimplemented                int32 = -6
	CodeOperationTimeout             int32 = -7
	CodeBadArguments                 int32 = -8
	CodeUnknownSession               int32 = -12
	CodeNewConfigNoQuorum            int32 = -13
	CodeReconfigInProgress           int32 = -14
	CodeAPIError                     int32 = -100
	CodeNoNode                       int32 = -101
	CodeNoAuth                       int32 = -102
	CodeBadVersion                   int32 = -103
	CodeNoChildrenForEphemerals      int32 = -108
	CodeNodeExists                   int32 = -110
	CodeNotEmpty                     int32 = -111
	CodeSessionExpired               int32 = -112
	CodeInvalidCallback              int32 = -113
	CodeInvalidACL                   int32 = -114
	CodeAuthFailed                   int32 = -115
	CodeSessionMoved                 int32 = -118
	CodeNotReadOnly                  int32 = -119
	CodeEphemeralOnLocalSession      int32 = -120
	CodeNoWatcher                    int32 = -121
	CodeRequestTimeout               int32 = -122
	CodeReconfigDisabled             int32 = -123
	CodeSessionClosedRequireSASLAuth int32 = -124
	CodeQuotaExceeded                int32 = -125
	CodeThrottledOp                  int32 = -127
)

var codeNames = map[int32]string{
	CodeOK: "OK", CodeSystemError: "SYSTEMERROR",
	CodeRuntimeInconsistency: "RUNTIMEINCONSISTENCY",
	CodeDataInconsistency:    "DATAINCONSISTENCY",
	CodeConnectionLoss:       "CONNECTIONLOSS", CodeMarshallingError: "MARSHALLINGERROR",
	CodeUnimplemented: "UNIMPLEMENTED", CodeOperationTimeout: "OPERATIONTIMEOUT",
	CodeBadArguments: "BADARGUMENTS", CodeUnknownSession: "UNKNOWNSESSION",
	CodeNewConfigNoQuorum: "NEWCONFIGNOQUORUM", CodeReconfigInProgress: "RECONFIGINPROGRESS",
	CodeAPIError: "APIERROR", CodeNoNode: "NONODE", CodeNoAuth: "NOAUTH",
	CodeBadVersion: "BADVERSION", CodeNoChildrenForEphemerals: "NOCHILDRENFOREPHEMERALS",
	CodeNodeExists: "NODEEXISTS", CodeNotEmpty: "NOTEMPTY",
	CodeSessionExpired: "SESSIONEXPIRED", CodeInvalidCallback: "INVALIDCALLBACK",
	CodeInvalidACL: "INVALIDACL", CodeAuthFailed: "AUTHFAILED",
	CodeSessionMoved: "SESSIONMOVED", CodeNotReadOnly: "NOTREADONLY",
	CodeEphemeralOnLocalSession: "EPHEMERALONLOCALSESSION", CodeNoWatcher: "NOWATCHER",
	CodeRequestTimeout: "REQUESTTIMEOUT", CodeReconfigDisabled: "RECONFIGDISABLED",
	CodeSessionClosedRequireSASLAuth: "SESSIONCLOSEDREQUIRESASLAUTH",
	CodeQuotaExceeded:                "QUOTAEXCEEDED", CodeThrottledOp: "THROTTLEDOP",
}

// CodeName names an error code as KeeperException.Code does.
func CodeName(code int32) string {
	if s, ok := codeNames[code]; ok {
		return s
	}
	return "code(" + strconv.Itoa(int(code)) + ")"
}

// Special xids (ClientCnxn). Replies to these carry the same xid.
const (
	XidNotification int32 = -1 // server-initiated WatcherEvent
	XidPing         int32 = -2
	XidAuth         int32 = -4 // AuthPacket
	XidSetWatches   int32 = -8 // SetWatches/SetWatches2 sent on reconnect
)

// Watcher event types (Watcher.Event.EventType).
const (
	EventNone                   int32 = -1
	EventNodeCreated            int32 = 1
	EventNodeDeleted            int32 = 2
	EventNodeDataChanged        int32 = 3
	EventNodeChildrenChanged    int32 = 4
	EventDataWatchRemoved       int32 = 5
	EventChildWatchRemoved      int32 = 6
	EventPersistentWatchRemoved int32 = 7
)

// Keeper states (Watcher.Event.KeeperState).
const (
	StateUnknown           int32 = -1 // deprecated, never sent
	StateDisconnected      int32 = 0
	StateNoSyncConnected   int32 = 1 // deprecated, never sent
	StateSyncConnected     int32 = 3
	StateAuthFailed        int32 = 4
	StateConnectedReadOnly int32 = 5
	StateSaslAuthenticated int32 = 6
	StateExpired           int32 = -112
	StateClosed            int32 = 7
)

// Watcher types (Watcher.WatcherType), the type field of
// CheckWatchesRequest and RemoveWatchesRequest.
const (
	WatcherTypeChildren            int32 = 1
	WatcherTypeData                int32 = 2
	WatcherTypeAny                 int32 = 3
	WatcherTypePersistent          int32 = 4
	WatcherTypePersistentRecursive int32 = 5
)

// Permission bits (ZooDefs.Perms).
const (
	PermRead   int32 = 1 << 0
	PermWrite  int32 = 1 << 1
	PermCreate int32 = 1 << 2
	PermDelete int32 = 1 << 3
	PermAdmin  int32 = 1 << 4
	PermAll    int32 = PermRead | PermWrite | PermCreate | PermDelete | PermAdmin
)

// AddWatch modes (ZooDefs.AddWatchModes), AddWatchRequest.Mode.
const (
	AddWatchModePersistent          int32 = 0
	AddWatchModePersistentRecursive int32 = 1
)

// CreateMode is the flags field of CreateRequest/CreateTTLRequest
// (CreateMode.toFlag). The values are an enumeration, not a bit set: 5 is
// a persistent TTL node although bit 0 means ephemeral for 0..3.
type CreateMode int32

const (
	ModePersistent                  CreateMode = 0
	ModeEphemeral                   CreateMode = 1
	ModePersistentSequential        CreateMode = 2
	ModeEphemeralSequential         CreateMode = 3
	ModeContainer                   CreateMode = 4
	ModePersistentWithTTL           CreateMode = 5
	ModePersistentSequentialWithTTL CreateMode = 6
)

// Valid reports whether m is a mode ZooKeeper accepts; others are
// answered with CodeBadArguments (CreateMode.fromFlag).
func (m CreateMode) Valid() bool { return m >= ModePersistent && m <= ModePersistentSequentialWithTTL }

func (m CreateMode) IsEphemeral() bool {
	return m == ModeEphemeral || m == ModeEphemeralSequential
}

func (m CreateMode) IsSequential() bool {
	return m == ModePersistentSequential || m == ModeEphemeralSequential || m == ModePersistentSequentialWithTTL
}

func (m CreateMode) IsContainer() bool { return m == ModeContainer }

func (m CreateMode) IsTTL() bool {
	return m == ModePersistentWithTTL || m == ModePersistentSequentialWithTTL
}
