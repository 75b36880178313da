package zk

// Opcodes (org.apache.zookeeper.ZooDefs.OpCode).
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

// Special xids.
const (
	XidNotification int32 = -1
	XidPing         int32 = -2
	XidAuth         int32 = -4
	XidSetWatches   int32 = -8
)

// Keeper states for notifications.
const (
	StateSyncConnected int32 = 3
	StateExpired       int32 = -112
)

// Stat is ZooKeeper's Stat record.
type Stat struct {
	Czxid, Mzxid, Ctime, Mtime  int64
	Version, Cversion, Aversion int32
	EphemeralOwner              int64
	DataLength, NumChildren     int32
	Pzxid                       int64
}

func (s *Stat) Encode(e *Encoder) {
	e.Long(s.Czxid)
	e.Long(s.Mzxid)
	e.Long(s.Ctime)
	e.Long(s.Mtime)
	e.Int(s.Version)
	e.Int(s.Cversion)
	e.Int(s.Aversion)
	e.Long(s.EphemeralOwner)
	e.Int(s.DataLength)
	e.Int(s.NumChildren)
	e.Long(s.Pzxid)
}

func (s *Stat) Decode(d *Decoder) {
	s.Czxid, s.Mzxid, s.Ctime, s.Mtime = d.Long(), d.Long(), d.Long(), d.Long()
	s.Version, s.Cversion, s.Aversion = d.Int(), d.Int(), d.Int()
	s.EphemeralOwner = d.Long()
	s.DataLength, s.NumChildren = d.Int(), d.Int()
	s.Pzxid = d.Long()
}

// ACL is one ACL entry.
type ACL struct {
	Perms      int32
	Scheme, ID string
}

func DecodeACLs(d *Decoder) []ACL {
	n := d.count(12)
	out := make([]ACL, 0, n)
	for i := 0; i < n && d.Err() == nil; i++ {
		out = append(out, ACL{Perms: d.Int(), Scheme: d.Ustring(), ID: d.Ustring()})
	}
	return out
}

func EncodeACLs(e *Encoder, acl []ACL) {
	e.Int(int32(len(acl)))
	for _, a := range acl {
		e.Int(a.Perms)
		e.String(a.Scheme)
		e.String(a.ID)
	}
}

// ConnectRequest opens or resumes a session. ReadOnly is optional on the
// wire: old clients omit the trailing byte.
type ConnectRequest struct {
	ProtocolVersion int32
	LastZxidSeen    int64
	TimeoutMs       int32
	SessionID       int64
	Passwd          []byte
	ReadOnly        bool
	HasReadOnly     bool
}

func DecodeConnectRequest(b []byte) (*ConnectRequest, error) {
	d := NewDecoder(b)
	r := &ConnectRequest{ProtocolVersion: d.Int(), LastZxidSeen: d.Long(), TimeoutMs: d.Int(), SessionID: d.Long(), Passwd: d.Buffer()}
	if d.Err() == nil && d.Remaining() >= 1 {
		r.ReadOnly, r.HasReadOnly = d.Bool(), true
	}
	return r, d.Finish()
}

// ConnectResponse answers a ConnectRequest; ReadOnly is sent only if the
// client sent it.
type ConnectResponse struct {
	ProtocolVersion int32
	TimeoutMs       int32
	SessionID       int64
	Passwd          []byte
	ReadOnly        bool
	WithReadOnly    bool
}

func (r *ConnectResponse) Encode(e *Encoder) {
	e.Int(r.ProtocolVersion)
	e.Int(r.TimeoutMs)
	e.Long(r.SessionID)
	e.Buffer(r.Passwd)
	if r.WithReadOnly {
		e.Bool(r.ReadOnly)
	}
}

// ReplyHeader precedes every reply body.
type ReplyHeader struct {
	Xid  int32
	Zxid int64
	Err  int32
}

// Reply encodes a full reply frame: header then body (body may be nil).
func Reply(h ReplyHeader, body func(*Encoder)) []byte {
	e := &Encoder{B: make([]byte, 4, 64)}
	e.Int(h.Xid)
	e.Long(h.Zxid)
	e.Int(h.Err)
	if body != nil && h.Err == 0 {
		body(e)
	}
	b := e.B
	n := len(b) - 4
	b[0], b[1], b[2], b[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return b
}

// WatcherEvent is a notification body.
func WatcherEvent(e *Encoder, typ, state int32, path string) {
	e.Int(typ)
	e.Int(state)
	e.String(path)
}

// MultiHeader precedes each op of a multi request/response.
type MultiHeader struct {
	Type int32
	Done bool
	Err  int32
}

// MultiOp is one decoded multi operation.
type MultiOp struct {
	Type    int32 // OpCreate/OpCreate2/OpCreateTTL/OpCreateContainer, OpDelete, OpSetData, OpCheck; for multiRead OpGetData/OpGetChildren
	Path    string
	Data    []byte
	ACL     []ACL
	Flags   int32
	TTL     int64
	Version int32
}

// MaxMultiOps bounds a decoded multi.
const MaxMultiOps = 10000

// DecodeMulti decodes a multi (or multiRead) request body.
func DecodeMulti(d *Decoder) ([]MultiOp, error) {
	var ops []MultiOp
	for i := 0; ; i++ {
		h := MultiHeader{Type: d.Int(), Done: d.Bool(), Err: d.Int()}
		if d.Err() != nil {
			return nil, d.Err()
		}
		if h.Done {
			return ops, nil
		}
		if i >= MaxMultiOps {
			return nil, ErrBadLength
		}
		op := MultiOp{Type: h.Type}
		switch h.Type {
		case OpCreate, OpCreate2, OpCreateContainer:
			op.Path, op.Data, op.ACL, op.Flags = d.Ustring(), d.Buffer(), DecodeACLs(d), d.Int()
		case OpCreateTTL:
			op.Path, op.Data, op.ACL, op.Flags, op.TTL = d.Ustring(), d.Buffer(), DecodeACLs(d), d.Int(), d.Long()
		case OpDelete, OpCheck:
			op.Path, op.Version = d.Ustring(), d.Int()
		case OpSetData:
			op.Path, op.Data, op.Version = d.Ustring(), d.Buffer(), d.Int()
		case OpGetData, OpGetChildren:
			op.Path = d.Ustring()
		default:
			return nil, ErrUnknownOp
		}
		if d.Err() != nil {
			return nil, d.Err()
		}
		ops = append(ops, op)
	}
}

// ErrUnknownOp reports an opcode the codec does not know.
var ErrUnknownOp = errorString("zk: unknown opcode")

type errorString string

func (e errorString) Error() string { return string(e) }
