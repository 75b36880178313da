package zkproto

// Records of zookeeper.jute, in field order. Each Decode reads its fields
// and returns the Decoder's first error; each Encode writes them.

// --- org.apache.zookeeper.data ---

// Id is an ACL identity: scheme ("world", "digest", "ip", "auth", ...) and id.
type Id struct {
	Scheme string
	ID     string
}

func (r *Id) Encode(e *Encoder) {
	e.Ustring(r.Scheme)
	e.Ustring(r.ID)
}

func (r *Id) Decode(d *Decoder) error {
	r.Scheme = d.Ustring()
	r.ID = d.Ustring()
	return d.Err()
}

// ACL is one access-control entry.
type ACL struct {
	Perms int32
	ID    Id
}

func (r *ACL) Encode(e *Encoder) {
	e.Int(r.Perms)
	r.ID.Encode(e)
}

func (r *ACL) Decode(d *Decoder) error {
	r.Perms = d.Int()
	return r.ID.Decode(d)
}

// aclMinSize is the smallest encoded ACL: perms and two empty strings.
const aclMinSize = 12

func decodeACLs(d *Decoder) []ACL {
	return decodeVector(d, aclMinSize, func(d *Decoder) ACL {
		var a ACL
		a.Decode(d)
		return a
	})
}

// Stat is a znode's metadata as clients see it (68 bytes).
type Stat struct {
	Czxid          int64 // zxid of the create
	Mzxid          int64 // zxid of the last data change
	Ctime          int64 // ms since epoch
	Mtime          int64
	Version        int32 // data version
	Cversion       int32 // children version
	Aversion       int32 // ACL version
	EphemeralOwner int64 // owning session, 0 if not ephemeral
	DataLength     int32
	NumChildren    int32
	Pzxid          int64 // zxid of the last children change
}

// StatSize is the encoded size of a Stat.
const StatSize = 68

func (r *Stat) Encode(e *Encoder) {
	e.Long(r.Czxid)
	e.Long(r.Mzxid)
	e.Long(r.Ctime)
	e.Long(r.Mtime)
	e.Int(r.Version)
	e.Int(r.Cversion)
	e.Int(r.Aversion)
	e.Long(r.EphemeralOwner)
	e.Int(r.DataLength)
	e.Int(r.NumChildren)
	e.Long(r.Pzxid)
}

func (r *Stat) Decode(d *Decoder) error {
	r.Czxid = d.Long()
	r.Mzxid = d.Long()
	r.Ctime = d.Long()
	r.Mtime = d.Long()
	r.Version = d.Int()
	r.Cversion = d.Int()
	r.Aversion = d.Int()
	r.EphemeralOwner = d.Long()
	r.DataLength = d.Int()
	r.NumChildren = d.Int()
	r.Pzxid = d.Long()
	return d.Err()
}

// ClientInfo is one authenticated identity in a WhoAmIResponse.
type ClientInfo struct {
	AuthScheme string
	User       string
}

func (r *ClientInfo) Encode(e *Encoder) {
	e.Ustring(r.AuthScheme)
	e.Ustring(r.User)
}

func (r *ClientInfo) Decode(d *Decoder) error {
	r.AuthScheme = d.Ustring()
	r.User = d.Ustring()
	return d.Err()
}

// --- session handshake ---

// ConnectRequest is the first packet of a connection (no RequestHeader).
// ReadOnly is on the wire only from clients newer than 3.3; HasReadOnly
// records whether it was there, because the server must answer in kind
// (ProtocolManager in ZooKeeper 3.9).
type ConnectRequest struct {
	ProtocolVersion int32
	LastZxidSeen    int64
	TimeOut         int32 // requested session timeout, ms
	SessionID       int64 // 0 for a new session
	Passwd          []byte
	ReadOnly        bool
	HasReadOnly     bool
}

func (r *ConnectRequest) Encode(e *Encoder) {
	e.Int(r.ProtocolVersion)
	e.Long(r.LastZxidSeen)
	e.Int(r.TimeOut)
	e.Long(r.SessionID)
	e.Buffer(r.Passwd)
	if r.HasReadOnly {
		e.Bool(r.ReadOnly)
	}
}

// Decode reads the record; the readOnly byte is taken if any byte is left,
// so the record must be the last thing in d. Bytes after it are ignored,
// as ZooKeeper does.
func (r *ConnectRequest) Decode(d *Decoder) error {
	r.ProtocolVersion = d.Int()
	r.LastZxidSeen = d.Long()
	r.TimeOut = d.Int()
	r.SessionID = d.Long()
	r.Passwd = d.Buffer()
	r.ReadOnly, r.HasReadOnly = false, false
	if d.Err() == nil && d.Remaining() > 0 {
		r.ReadOnly, r.HasReadOnly = d.Bool(), true
	}
	return d.Err()
}

// DecodeConnectRequest decodes the first packet of a connection.
func DecodeConnectRequest(pkt []byte) (*ConnectRequest, error) {
	r := new(ConnectRequest)
	if err := r.Decode(NewDecoder(pkt)); err != nil {
		return nil, err
	}
	return r, nil
}

// ConnectResponse answers a ConnectRequest. Send HasReadOnly equal to the
// request's: a pre-3.4 client does not expect the byte. A TimeOut of 0
// (with SessionID 0 and an empty password) tells the client its session
// expired.
type ConnectResponse struct {
	ProtocolVersion int32
	TimeOut         int32 // negotiated session timeout, ms
	SessionID       int64
	Passwd          []byte
	ReadOnly        bool
	HasReadOnly     bool
}

func (r *ConnectResponse) Encode(e *Encoder) {
	e.Int(r.ProtocolVersion)
	e.Int(r.TimeOut)
	e.Long(r.SessionID)
	e.Buffer(r.Passwd)
	if r.HasReadOnly {
		e.Bool(r.ReadOnly)
	}
}

// Decode: as ConnectRequest.Decode, the readOnly byte is optional.
func (r *ConnectResponse) Decode(d *Decoder) error {
	r.ProtocolVersion = d.Int()
	r.TimeOut = d.Int()
	r.SessionID = d.Long()
	r.Passwd = d.Buffer()
	r.ReadOnly, r.HasReadOnly = false, false
	if d.Err() == nil && d.Remaining() > 0 {
		r.ReadOnly, r.HasReadOnly = d.Bool(), true
	}
	return d.Err()
}

// --- headers ---

// RequestHeader precedes every request after the handshake.
type RequestHeader struct {
	Xid  int32
	Type int32 // opcode
}

func (r *RequestHeader) Encode(e *Encoder) {
	e.Int(r.Xid)
	e.Int(r.Type)
}

func (r *RequestHeader) Decode(d *Decoder) error {
	r.Xid = d.Int()
	r.Type = d.Int()
	return d.Err()
}

// ReplyHeader precedes every reply and notification.
type ReplyHeader struct {
	Xid  int32 // the request's xid, or a special Xid*
	Zxid int64 // last zxid the server has applied
	Err  int32 // Code*
}

func (r *ReplyHeader) Encode(e *Encoder) {
	e.Int(r.Xid)
	e.Long(r.Zxid)
	e.Int(r.Err)
}

func (r *ReplyHeader) Decode(d *Decoder) error {
	r.Xid = d.Int()
	r.Zxid = d.Long()
	r.Err = d.Int()
	return d.Err()
}

// MultiHeader precedes each op of a multi request and each result of a
// multi response; Done marks the end.
type MultiHeader struct {
	Type int32
	Done bool
	Err  int32
}

func (r *MultiHeader) Encode(e *Encoder) {
	e.Int(r.Type)
	e.Bool(r.Done)
	e.Int(r.Err)
}

func (r *MultiHeader) Decode(d *Decoder) error {
	r.Type = d.Int()
	r.Done = d.Bool()
	r.Err = d.Int()
	return d.Err()
}

// --- auth, watches ---

// AuthPacket is sent with xid XidAuth. Type is unused (0).
type AuthPacket struct {
	Type   int32
	Scheme string
	Auth   []byte
}

func (r *AuthPacket) Encode(e *Encoder) {
	e.Int(r.Type)
	e.Ustring(r.Scheme)
	e.Buffer(r.Auth)
}

func (r *AuthPacket) Decode(d *Decoder) error {
	r.Type = d.Int()
	r.Scheme = d.Ustring()
	r.Auth = d.Buffer()
	return d.Err()
}

// SetWatches re-registers watches after a reconnect (xid XidSetWatches).
// Watches whose node changed after RelativeZxid fire at once.
type SetWatches struct {
	RelativeZxid int64
	DataWatches  []string
	ExistWatches []string
	ChildWatches []string
}

func (r *SetWatches) Encode(e *Encoder) {
	e.Long(r.RelativeZxid)
	e.Strings(r.DataWatches)
	e.Strings(r.ExistWatches)
	e.Strings(r.ChildWatches)
}

func (r *SetWatches) Decode(d *Decoder) error {
	r.RelativeZxid = d.Long()
	r.DataWatches = d.Strings()
	r.ExistWatches = d.Strings()
	r.ChildWatches = d.Strings()
	return d.Err()
}

// SetWatches2 is SetWatches plus persistent watches (3.6+).
type SetWatches2 struct {
	RelativeZxid               int64
	DataWatches                []string
	ExistWatches               []string
	ChildWatches               []string
	PersistentWatches          []string
	PersistentRecursiveWatches []string
}

func (r *SetWatches2) Encode(e *Encoder) {
	e.Long(r.RelativeZxid)
	e.Strings(r.DataWatches)
	e.Strings(r.ExistWatches)
	e.Strings(r.ChildWatches)
	e.Strings(r.PersistentWatches)
	e.Strings(r.PersistentRecursiveWatches)
}

func (r *SetWatches2) Decode(d *Decoder) error {
	r.RelativeZxid = d.Long()
	r.DataWatches = d.Strings()
	r.ExistWatches = d.Strings()
	r.ChildWatches = d.Strings()
	r.PersistentWatches = d.Strings()
	r.PersistentRecursiveWatches = d.Strings()
	return d.Err()
}

// WatcherEvent is the body of a notification (xid XidNotification).
type WatcherEvent struct {
	Type  int32 // Event*
	State int32 // State*
	Path  string
}

func (r *WatcherEvent) Encode(e *Encoder) {
	e.Int(r.Type)
	e.Int(r.State)
	e.Ustring(r.Path)
}

func (r *WatcherEvent) Decode(d *Decoder) error {
	r.Type = d.Int()
	r.State = d.Int()
	r.Path = d.Ustring()
	return d.Err()
}

// CheckWatchesRequest asks whether a watch of Type (WatcherType*) exists.
type CheckWatchesRequest struct {
	Path string
	Type int32
}

func (r *CheckWatchesRequest) Encode(e *Encoder) {
	e.Ustring(r.Path)
	e.Int(r.Type)
}

func (r *CheckWatchesRequest) Decode(d *Decoder) error {
	r.Path = d.Ustring()
	r.Type = d.Int()
	return d.Err()
}

// RemoveWatchesRequest removes watches of Type (WatcherType*).
type RemoveWatchesRequest struct {
	Path string
	Type int32
}

func (r *RemoveWatchesRequest) Encode(e *Encoder) {
	e.Ustring(r.Path)
	e.Int(r.Type)
}

func (r *RemoveWatchesRequest) Decode(d *Decoder) error {
	r.Path = d.Ustring()
	r.Type = d.Int()
	return d.Err()
}

// AddWatchRequest adds a persistent watch (Mode is AddWatchMode*).
// ZooKeeper answers it with ErrorResponse{0}.
type AddWatchRequest struct {
	Path string
	Mode int32
}

func (r *AddWatchRequest) Encode(e *Encoder) {
	e.Ustring(r.Path)
	e.Int(r.Mode)
}

func (r *AddWatchRequest) Decode(d *Decoder) error {
	r.Path = d.Ustring()
	r.Mode = d.Int()
	return d.Err()
}

// --- data requests and responses ---

// pathRequest is the shape of every record that is one ustring.
type pathRequest struct{ Path string }

func (r *pathRequest) Encode(e *Encoder) { e.Ustring(r.Path) }

func (r *pathRequest) Decode(d *Decoder) error {
	r.Path = d.Ustring()
	return d.Err()
}

// pathWatchRequest is the shape of {ustring path; boolean watch}.
type pathWatchRequest struct {
	Path  string
	Watch bool
}

func (r *pathWatchRequest) Encode(e *Encoder) {
	e.Ustring(r.Path)
	e.Bool(r.Watch)
}

func (r *pathWatchRequest) Decode(d *Decoder) error {
	r.Path = d.Ustring()
	r.Watch = d.Bool()
	return d.Err()
}

// CreateRequest is create, create2 and createContainer (and those ops in
// a multi). Flags is a CreateMode.
type CreateRequest struct {
	Path  string
	Data  []byte
	ACL   []ACL
	Flags int32
}

func (r *CreateRequest) Encode(e *Encoder) {
	e.Ustring(r.Path)
	e.Buffer(r.Data)
	encodeVector(e, r.ACL)
	e.Int(r.Flags)
}

func (r *CreateRequest) Decode(d *Decoder) error {
	r.Path = d.Ustring()
	r.Data = d.Buffer()
	r.ACL = decodeACLs(d)
	r.Flags = d.Int()
	return d.Err()
}

// CreateTTLRequest is createTTL: CreateRequest plus a TTL in ms.
type CreateTTLRequest struct {
	Path  string
	Data  []byte
	ACL   []ACL
	Flags int32
	TTL   int64
}

func (r *CreateTTLRequest) Encode(e *Encoder) {
	e.Ustring(r.Path)
	e.Buffer(r.Data)
	encodeVector(e, r.ACL)
	e.Int(r.Flags)
	e.Long(r.TTL)
}

func (r *CreateTTLRequest) Decode(d *Decoder) error {
	r.Path = d.Ustring()
	r.Data = d.Buffer()
	r.ACL = decodeACLs(d)
	r.Flags = d.Int()
	r.TTL = d.Long()
	return d.Err()
}

// CreateResponse answers create.
type CreateResponse struct{ Path string }

func (r *CreateResponse) Encode(e *Encoder) { e.Ustring(r.Path) }

func (r *CreateResponse) Decode(d *Decoder) error {
	r.Path = d.Ustring()
	return d.Err()
}

// Create2Response answers create2, createTTL and createContainer.
type Create2Response struct {
	Path string
	Stat Stat
}

func (r *Create2Response) Encode(e *Encoder) {
	e.Ustring(r.Path)
	r.Stat.Encode(e)
}

func (r *Create2Response) Decode(d *Decoder) error {
	r.Path = d.Ustring()
	return r.Stat.Decode(d)
}

// DeleteRequest is delete; the reply has no body. Version -1 matches any.
type DeleteRequest struct {
	Path    string
	Version int32
}

func (r *DeleteRequest) Encode(e *Encoder) {
	e.Ustring(r.Path)
	e.Int(r.Version)
}

func (r *DeleteRequest) Decode(d *Decoder) error {
	r.Path = d.Ustring()
	r.Version = d.Int()
	return d.Err()
}

// DeleteContainerRequest is deleteContainer, which only ZooKeeper's own
// container manager issues. Its wire form is one length-prefixed path
// (3.9's DeleteContainerRequest; 3.8 sent raw path bytes internally).
type DeleteContainerRequest struct{ Path string }

func (r *DeleteContainerRequest) Encode(e *Encoder) { e.Ustring(r.Path) }

func (r *DeleteContainerRequest) Decode(d *Decoder) error {
	r.Path = d.Ustring()
	return d.Err()
}

// ExistsRequest is exists; Watch sets a watch even if the node is absent.
type ExistsRequest struct {
	Path  string
	Watch bool
}

func (r *ExistsRequest) Encode(e *Encoder)       { (*pathWatchRequest)(r).Encode(e) }
func (r *ExistsRequest) Decode(d *Decoder) error { return (*pathWatchRequest)(r).Decode(d) }

// ExistsResponse answers exists for an existing node (absent: CodeNoNode,
// no body).
type ExistsResponse struct{ Stat Stat }

func (r *ExistsResponse) Encode(e *Encoder)       { r.Stat.Encode(e) }
func (r *ExistsResponse) Decode(d *Decoder) error { return r.Stat.Decode(d) }

// GetDataRequest is getData (also an op of multiRead).
type GetDataRequest struct {
	Path  string
	Watch bool
}

func (r *GetDataRequest) Encode(e *Encoder)       { (*pathWatchRequest)(r).Encode(e) }
func (r *GetDataRequest) Decode(d *Decoder) error { return (*pathWatchRequest)(r).Decode(d) }

// GetDataResponse answers getData (and reconfig). Data nil is sent as a
// null buffer (-1), which clients surface as null/None; a node with empty
// data must be sent as []byte{}.
type GetDataResponse struct {
	Data []byte
	Stat Stat
}

func (r *GetDataResponse) Encode(e *Encoder) {
	e.Buffer(r.Data)
	r.Stat.Encode(e)
}

func (r *GetDataResponse) Decode(d *Decoder) error {
	r.Data = d.Buffer()
	return r.Stat.Decode(d)
}

// SetDataRequest is setData (also an op of multi).
type SetDataRequest struct {
	Path    string
	Data    []byte
	Version int32
}

func (r *SetDataRequest) Encode(e *Encoder) {
	e.Ustring(r.Path)
	e.Buffer(r.Data)
	e.Int(r.Version)
}

func (r *SetDataRequest) Decode(d *Decoder) error {
	r.Path = d.Ustring()
	r.Data = d.Buffer()
	r.Version = d.Int()
	return d.Err()
}

// SetDataResponse answers setData, and also a standalone check (ZooKeeper
// replies to check with SetDataResponse).
type SetDataResponse struct{ Stat Stat }

func (r *SetDataResponse) Encode(e *Encoder)       { r.Stat.Encode(e) }
func (r *SetDataResponse) Decode(d *Decoder) error { return r.Stat.Decode(d) }

// GetACLRequest is getACL.
type GetACLRequest struct{ Path string }

func (r *GetACLRequest) Encode(e *Encoder)       { (*pathRequest)(r).Encode(e) }
func (r *GetACLRequest) Decode(d *Decoder) error { return (*pathRequest)(r).Decode(d) }

// GetACLResponse answers getACL.
type GetACLResponse struct {
	ACL  []ACL
	Stat Stat
}

func (r *GetACLResponse) Encode(e *Encoder) {
	encodeVector(e, r.ACL)
	r.Stat.Encode(e)
}

func (r *GetACLResponse) Decode(d *Decoder) error {
	r.ACL = decodeACLs(d)
	return r.Stat.Decode(d)
}

// SetACLRequest is setACL; Version is the expected ACL version (aversion).
type SetACLRequest struct {
	Path    string
	ACL     []ACL
	Version int32
}

func (r *SetACLRequest) Encode(e *Encoder) {
	e.Ustring(r.Path)
	encodeVector(e, r.ACL)
	e.Int(r.Version)
}

func (r *SetACLRequest) Decode(d *Decoder) error {
	r.Path = d.Ustring()
	r.ACL = decodeACLs(d)
	r.Version = d.Int()
	return d.Err()
}

// SetACLResponse answers setACL.
type SetACLResponse struct{ Stat Stat }

func (r *SetACLResponse) Encode(e *Encoder)       { r.Stat.Encode(e) }
func (r *SetACLResponse) Decode(d *Decoder) error { return r.Stat.Decode(d) }

// GetChildrenRequest is getChildren (also an op of multiRead).
type GetChildrenRequest struct {
	Path  string
	Watch bool
}

func (r *GetChildrenRequest) Encode(e *Encoder)       { (*pathWatchRequest)(r).Encode(e) }
func (r *GetChildrenRequest) Decode(d *Decoder) error { return (*pathWatchRequest)(r).Decode(d) }

// GetChildrenResponse answers getChildren; names are relative.
type GetChildrenResponse struct{ Children []string }

func (r *GetChildrenResponse) Encode(e *Encoder) { e.Strings(r.Children) }

func (r *GetChildrenResponse) Decode(d *Decoder) error {
	r.Children = d.Strings()
	return d.Err()
}

// GetChildren2Request is getChildren2 (children plus the parent's Stat).
type GetChildren2Request struct {
	Path  string
	Watch bool
}

func (r *GetChildren2Request) Encode(e *Encoder)       { (*pathWatchRequest)(r).Encode(e) }
func (r *GetChildren2Request) Decode(d *Decoder) error { return (*pathWatchRequest)(r).Decode(d) }

// GetChildren2Response answers getChildren2.
type GetChildren2Response struct {
	Children []string
	Stat     Stat
}

func (r *GetChildren2Response) Encode(e *Encoder) {
	e.Strings(r.Children)
	r.Stat.Encode(e)
}

func (r *GetChildren2Response) Decode(d *Decoder) error {
	r.Children = d.Strings()
	return r.Stat.Decode(d)
}

// GetAllChildrenNumberRequest counts all descendants of Path.
type GetAllChildrenNumberRequest struct{ Path string }

func (r *GetAllChildrenNumberRequest) Encode(e *Encoder) { (*pathRequest)(r).Encode(e) }
func (r *GetAllChildrenNumberRequest) Decode(d *Decoder) error {
	return (*pathRequest)(r).Decode(d)
}

// GetAllChildrenNumberResponse answers getAllChildrenNumber.
type GetAllChildrenNumberResponse struct{ TotalNumber int32 }

func (r *GetAllChildrenNumberResponse) Encode(e *Encoder) { e.Int(r.TotalNumber) }

func (r *GetAllChildrenNumberResponse) Decode(d *Decoder) error {
	r.TotalNumber = d.Int()
	return d.Err()
}

// CheckVersionRequest is check (also an op of multi).
type CheckVersionRequest struct {
	Path    string
	Version int32
}

func (r *CheckVersionRequest) Encode(e *Encoder) {
	e.Ustring(r.Path)
	e.Int(r.Version)
}

func (r *CheckVersionRequest) Decode(d *Decoder) error {
	r.Path = d.Ustring()
	r.Version = d.Int()
	return d.Err()
}

// SyncRequest is sync.
type SyncRequest struct{ Path string }

func (r *SyncRequest) Encode(e *Encoder)       { (*pathRequest)(r).Encode(e) }
func (r *SyncRequest) Decode(d *Decoder) error { return (*pathRequest)(r).Decode(d) }

// SyncResponse answers sync with the request's path.
type SyncResponse struct{ Path string }

func (r *SyncResponse) Encode(e *Encoder)       { (*pathRequest)(r).Encode(e) }
func (r *SyncResponse) Decode(d *Decoder) error { return (*pathRequest)(r).Decode(d) }

// GetEphemeralsRequest lists the session's ephemerals under PrefixPath.
type GetEphemeralsRequest struct{ PrefixPath string }

func (r *GetEphemeralsRequest) Encode(e *Encoder) { e.Ustring(r.PrefixPath) }

func (r *GetEphemeralsRequest) Decode(d *Decoder) error {
	r.PrefixPath = d.Ustring()
	return d.Err()
}

// GetEphemeralsResponse answers getEphemerals with absolute paths.
type GetEphemeralsResponse struct{ Ephemerals []string }

func (r *GetEphemeralsResponse) Encode(e *Encoder) { e.Strings(r.Ephemerals) }

func (r *GetEphemeralsResponse) Decode(d *Decoder) error {
	r.Ephemerals = d.Strings()
	return d.Err()
}

// WhoAmIResponse answers whoAmI (which has no request body).
type WhoAmIResponse struct{ ClientInfo []ClientInfo }

func (r *WhoAmIResponse) Encode(e *Encoder) { encodeVector(e, r.ClientInfo) }

func (r *WhoAmIResponse) Decode(d *Decoder) error {
	r.ClientInfo = decodeVector(d, 8, func(d *Decoder) ClientInfo {
		var c ClientInfo
		c.Decode(d)
		return c
	})
	return d.Err()
}

// ErrorResponse is the body of an error result in a multi response, and
// ZooKeeper's (always zero) reply to addWatch.
type ErrorResponse struct{ Err int32 }

func (r *ErrorResponse) Encode(e *Encoder) { e.Int(r.Err) }

func (r *ErrorResponse) Decode(d *Decoder) error {
	r.Err = d.Int()
	return d.Err()
}

// ReconfigRequest is reconfig (dynamic membership change).
// Null strings read as "".
type ReconfigRequest struct {
	JoiningServers string
	LeavingServers string
	NewMembers     string
	CurConfigID    int64
}

func (r *ReconfigRequest) Encode(e *Encoder) {
	e.Ustring(r.JoiningServers)
	e.Ustring(r.LeavingServers)
	e.Ustring(r.NewMembers)
	e.Long(r.CurConfigID)
}

func (r *ReconfigRequest) Decode(d *Decoder) error {
	r.JoiningServers = d.Ustring()
	r.LeavingServers = d.Ustring()
	r.NewMembers = d.Ustring()
	r.CurConfigID = d.Long()
	return d.Err()
}

// SetSASLRequest is the body of an OpSASL request: one SASL token. (The
// server reads it as GetSASLRequest, which has the same layout.)
type SetSASLRequest struct{ Token []byte }

func (r *SetSASLRequest) Encode(e *Encoder) { e.Buffer(r.Token) }

func (r *SetSASLRequest) Decode(d *Decoder) error {
	r.Token = d.Buffer()
	return d.Err()
}

// SetSASLResponse answers OpSASL with the server's token.
type SetSASLResponse struct{ Token []byte }

func (r *SetSASLResponse) Encode(e *Encoder) { e.Buffer(r.Token) }

func (r *SetSASLResponse) Decode(d *Decoder) error {
	r.Token = d.Buffer()
	return d.Err()
}
