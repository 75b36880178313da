package client

import (
	"context"
	"sync/atomic"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
)

// CreateMode is ZooKeeper's create mode.
type CreateMode = pb.CreateMode

const (
	Persistent                  = pb.CreateMode_PERSISTENT
	Ephemeral                   = pb.CreateMode_EPHEMERAL
	PersistentSequential        = pb.CreateMode_PERSISTENT_SEQUENTIAL
	EphemeralSequential         = pb.CreateMode_EPHEMERAL_SEQUENTIAL
	Container                   = pb.CreateMode_CONTAINER
	PersistentWithTTL           = pb.CreateMode_PERSISTENT_WITH_TTL
	PersistentSequentialWithTTL = pb.CreateMode_PERSISTENT_SEQUENTIAL_WITH_TTL
)

// AnyVersion matches any version in Set, Delete and Check.
const AnyVersion int32 = -1

// ACL is one access-control entry; an empty list means world:anyone, all permissions.
type ACL = pb.ACL

// CreateOptions configure Create.
type CreateOptions struct {
	Mode CreateMode
	TTL  int64 // milliseconds, for the TTL modes
	ACL  []*ACL
}

// Create creates path with data and returns the created path (with the
// sequence suffix for sequential modes).
func (c *Client) Create(ctx context.Context, path string, data []byte, opts CreateOptions) (string, *Stat, error) {
	var resp *pb.CreateResponse
	err := c.write(ctx, path, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.Create(ctx, &pb.CreateRequest{SessionId: sid, Path: path, Data: data, Acl: opts.ACL, Mode: opts.Mode, TtlMs: opts.TTL})
		return resp.GetHeader(), err
	})
	if err != nil {
		return "", nil, c.explainCreate(ctx, path, opts.Mode, err)
	}
	return resp.GetPath(), resp.GetStat(), nil
}

func optVersion(v int32) *int32 {
	if v < 0 {
		return nil
	}
	return &v
}

// Delete deletes path if its version matches (AnyVersion for any).
func (c *Client) Delete(ctx context.Context, path string, version int32) error {
	err := c.write(ctx, path, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
		r, err := api.Delete(ctx, &pb.DeleteRequest{SessionId: sid, Path: path, Version: optVersion(version)})
		return r.GetHeader(), err
	})
	if err != nil {
		return c.explainWrite(ctx, path, version, err)
	}
	return nil
}

// Set replaces path's data if its version matches (AnyVersion for any).
func (c *Client) Set(ctx context.Context, path string, data []byte, version int32) (*Stat, error) {
	var resp *pb.SetDataResponse
	err := c.write(ctx, path, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.SetData(ctx, &pb.SetDataRequest{SessionId: sid, Path: path, Data: data, Version: optVersion(version)})
		return resp.GetHeader(), err
	})
	if err != nil {
		return nil, c.explainWrite(ctx, path, version, err)
	}
	return resp.GetStat(), nil
}

// SetACL replaces path's ACL if its ACL version matches (AnyVersion for any).
func (c *Client) SetACL(ctx context.Context, path string, acl []*ACL, aversion int32) (*Stat, error) {
	var resp *pb.SetACLResponse
	err := c.write(ctx, path, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.SetACL(ctx, &pb.SetACLRequest{SessionId: sid, Path: path, Acl: acl, Aversion: optVersion(aversion)})
		return resp.GetHeader(), err
	})
	return resp.GetStat(), err
}

// ReadOption tunes one read.
type ReadOption func(*readConfig)

type readConfig struct {
	req   *pb.ReadRequest
	hedge bool
	first pb.ReadRequest // req of the first attempt: one allocation for both
}

// WithConsistency overrides the client's default read consistency.
func WithConsistency(cons Consistency) ReadOption {
	if cons == Sequential {
		return sequentialRead // a func value, not a closure made each call
	}
	return linearizableRead
}

var (
	sequentialRead   ReadOption = func(rc *readConfig) { rc.setConsistency(Sequential) }
	linearizableRead ReadOption = func(rc *readConfig) { rc.setConsistency(Linearizable) }
)

func (rc *readConfig) setConsistency(cons Consistency) {
	if cons == Sequential {
		rc.req.Consistency = pb.Consistency_SEQUENTIAL
	} else {
		rc.req.Consistency = pb.Consistency_LINEARIZABLE
	}
}

// WithHedge sends a sequential read to the session's server and the nearest
// other server at once; the first answer wins. Linearizable reads, reads
// that set a watch, and reads while the client holds any watch are not
// hedged (see hedgedRead).
func WithHedge() ReadOption { return func(rc *readConfig) { rc.hedge = true } }

func (c *Client) readReq(path string, watch bool, opts []ReadOption) *readConfig {
	rc := &readConfig{hedge: c.cfg.HedgeSequentialReads}
	rc.first.Path, rc.first.Watch = path, watch
	rc.req = &rc.first
	rc.setConsistency(c.cfg.Consistency)
	for _, o := range opts {
		o(rc)
	}
	rc.req.MinZxid = c.LastZxid()
	return rc
}

// read runs one read RPC, hedged when asked and safe. The request is built
// per attempt so min_zxid reflects everything seen by then (the first
// attempt's is the one built to decide on hedging, just before).
func read[T any](c *Client, ctx context.Context, path string, w *watchReg, opts []ReadOption,
	rpc func(context.Context, pb.MeridianClient, *pb.ReadRequest) (T, error), header func(T) *pb.Header) (T, error) {
	rc := c.readReq(path, w != nil, opts)
	var built atomic.Bool // rc.req goes with the first attempt
	return hedgedRead(c, ctx, rc, func(ctx context.Context, api pb.MeridianClient, sid int64) (T, *pb.Header, error) {
		req := rc.req
		if built.Swap(true) {
			req = c.readReq(path, w != nil, opts).req
		}
		req.SessionId = sid
		r, err := rpc(ctx, api, req)
		return r, header(r), err
	})
}

func (c *Client) get(ctx context.Context, path string, w *watchReg, opts []ReadOption) ([]byte, *Stat, error) {
	resp, err := read(c, ctx, path, w, opts, func(ctx context.Context, api pb.MeridianClient, req *pb.ReadRequest) (*pb.GetDataResponse, error) {
		return api.GetData(ctx, req)
	}, (*pb.GetDataResponse).GetHeader)
	if err != nil {
		c.watches.cancel(w)
		return nil, nil, explainRead(path, err)
	}
	if w != nil {
		c.watches.arm(w, resp.GetHeader().GetZxid(), true)
	}
	return resp.GetData(), resp.GetStat(), nil
}

// Get returns path's data and stat.
func (c *Client) Get(ctx context.Context, path string, opts ...ReadOption) ([]byte, *Stat, error) {
	return c.get(ctx, path, nil, opts)
}

// GetW is Get plus a one-shot watch on the node's data (fires on change or delete).
func (c *Client) GetW(ctx context.Context, path string, opts ...ReadOption) ([]byte, *Stat, <-chan Event, error) {
	w := c.watches.add(path, kindData)
	data, st, err := c.get(ctx, path, w, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	return data, st, w.ch, nil
}

func (c *Client) exists(ctx context.Context, path string, w *watchReg, opts []ReadOption) (bool, *Stat, error) {
	resp, err := read(c, ctx, path, w, opts, func(ctx context.Context, api pb.MeridianClient, req *pb.ReadRequest) (*pb.ExistsResponse, error) {
		return api.Exists(ctx, req)
	}, (*pb.ExistsResponse).GetHeader)
	if err != nil {
		c.watches.cancel(w)
		return false, nil, explainRead(path, err)
	}
	if w != nil {
		c.watches.arm(w, resp.GetHeader().GetZxid(), resp.GetExists())
	}
	return resp.GetExists(), resp.GetStat(), nil
}

// Exists reports whether path exists, with its stat when it does.
func (c *Client) Exists(ctx context.Context, path string, opts ...ReadOption) (bool, *Stat, error) {
	return c.exists(ctx, path, nil, opts)
}

// ExistsW is Exists plus a one-shot watch that fires when the node is
// created, changed or deleted.
func (c *Client) ExistsW(ctx context.Context, path string, opts ...ReadOption) (bool, *Stat, <-chan Event, error) {
	w := c.watches.add(path, kindExist)
	ok, st, err := c.exists(ctx, path, w, opts)
	if err != nil {
		return false, nil, nil, err
	}
	return ok, st, w.ch, nil
}

func (c *Client) children(ctx context.Context, path string, w *watchReg, opts []ReadOption) ([]string, *Stat, error) {
	resp, err := read(c, ctx, path, w, opts, func(ctx context.Context, api pb.MeridianClient, req *pb.ReadRequest) (*pb.GetChildrenResponse, error) {
		return api.GetChildren(ctx, req)
	}, (*pb.GetChildrenResponse).GetHeader)
	if err != nil {
		c.watches.cancel(w)
		return nil, nil, explainRead(path, err)
	}
	if w != nil {
		c.watches.arm(w, resp.GetHeader().GetZxid(), true)
	}
	return resp.GetChildren(), resp.GetStat(), nil
}

// Children returns the sorted child names of path.
func (c *Client) Children(ctx context.Context, path string, opts ...ReadOption) ([]string, *Stat, error) {
	return c.children(ctx, path, nil, opts)
}

// ChildrenW is Children plus a one-shot watch on the child list (fires on a
// child created or deleted, or the node deleted).
func (c *Client) ChildrenW(ctx context.Context, path string, opts ...ReadOption) ([]string, *Stat, <-chan Event, error) {
	w := c.watches.add(path, kindChild)
	kids, st, err := c.children(ctx, path, w, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	return kids, st, w.ch, nil
}

// GetACL returns path's ACL and stat.
func (c *Client) GetACL(ctx context.Context, path string, opts ...ReadOption) ([]*ACL, *Stat, error) {
	resp, err := read(c, ctx, path, nil, opts, func(ctx context.Context, api pb.MeridianClient, req *pb.ReadRequest) (*pb.GetACLResponse, error) {
		req.SessionId = 0
		return api.GetACL(ctx, req)
	}, (*pb.GetACLResponse).GetHeader)
	return resp.GetAcl(), resp.GetStat(), err
}

// Sync waits until the connected server has applied every write committed
// before the call, so the next sequential read is linearizable.
func (c *Client) Sync(ctx context.Context) error {
	return c.call(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
		r, err := api.Sync(ctx, &pb.SyncRequest{})
		return r.GetHeader(), err
	})
}

// Op is one operation of a Multi; build them with CreateOp, DeleteOp, SetOp, CheckOp.
type Op = pb.Op

func CreateOp(path string, data []byte, opts CreateOptions) *Op {
	return &pb.Op{Op: &pb.Op_Create{Create: &pb.CreateRequest{Path: path, Data: data, Acl: opts.ACL, Mode: opts.Mode, TtlMs: opts.TTL}}}
}
func DeleteOp(path string, version int32) *Op {
	return &pb.Op{Op: &pb.Op_Delete{Delete: &pb.DeleteRequest{Path: path, Version: optVersion(version)}}}
}
func SetOp(path string, data []byte, version int32) *Op {
	return &pb.Op{Op: &pb.Op_SetData{SetData: &pb.SetDataRequest{Path: path, Data: data, Version: optVersion(version)}}}
}
func CheckOp(path string, version int32) *Op {
	return &pb.Op{Op: &pb.Op_Check{Check: &pb.CheckOp{Path: path, Version: optVersion(version)}}}
}

// OpResult is one operation's outcome in a Multi.
type OpResult = pb.OpResult

// Multi applies ops atomically: all or none. On failure it returns the
// failing op's error together with the per-op results.
func (c *Client) Multi(ctx context.Context, ops ...*Op) ([]*OpResult, error) {
	var resp *pb.MultiResponse
	err := c.call(ctx, true, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.Multi(ctx, &pb.MultiRequest{SessionId: sid, Ops: ops})
		return resp.GetHeader(), err
	})
	if err != nil {
		return nil, err
	}
	if resp.GetErrorCode() != 0 {
		return resp.GetResults(), zkError(resp.GetErrorCode())
	}
	return resp.GetResults(), nil
}

// Status returns the connected server's view of the cluster.
func (c *Client) Status(ctx context.Context) (*pb.StatusResponse, error) {
	var resp *pb.StatusResponse
	err := c.call(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.Status(ctx, &pb.StatusRequest{})
		return resp.GetHeader(), err
	})
	return resp, err
}

// PreferLeaderRegion sets the operator's preferred leader region (empty:
// clear it); the leader moves to a voter there. Replicated, so it outlives
// leader changes.
func (c *Client) PreferLeaderRegion(ctx context.Context, region string) error {
	return c.call(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
		r, err := api.SetLeaderPreference(ctx, &pb.LeaderPreferenceRequest{Region: region})
		return r.GetHeader(), err
	})
}

// TransferLeader asks the cluster to move leadership to member id.
func (c *Client) TransferLeader(ctx context.Context, id uint64) error {
	return c.call(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
		r, err := api.TransferLeader(ctx, &pb.TransferLeaderRequest{TargetId: id})
		return r.GetHeader(), err
	})
}

// Members lists the cluster's members (replicated with raft's
// configuration) and the log index of the last membership change.
func (c *Client) Members(ctx context.Context) (*pb.MemberListResponse, error) {
	var resp *pb.MemberListResponse
	err := c.call(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.MemberList(ctx, &pb.MemberListRequest{})
		return resp.GetHeader(), err
	})
	return resp, err
}

// ChangeMembers adds, promotes, demotes or removes members: one change
// simply, several at once through joint consensus. It returns the new
// membership once the serving member has applied the change. Like a write,
// it is not retried after a lost connection (its outcome is unknown then).
func (c *Client) ChangeMembers(ctx context.Context, changes ...*pb.MemberChangeOp) (*pb.MemberListResponse, error) {
	var resp *pb.MemberListResponse
	err := c.call(ctx, true, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.MemberChange(ctx, &pb.MemberChangeRequest{Changes: changes})
		return resp.GetHeader(), err
	})
	return resp, err
}

// CreateKeyspace creates a regional keyspace for prefix ("/eu": its znodes
// and the coordination objects named "eu/..." live in their own raft group)
// homed in region home, surviving the loss of a zone ("zone", the default)
// or of a region ("region"). Admin only. Not retried after a lost
// connection, like a write.
func (c *Client) CreateKeyspace(ctx context.Context, prefix, home, survival string) (*pb.Keyspace, error) {
	var resp *pb.KeyspaceResponse
	err := c.call(ctx, true, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.CreateKeyspace(ctx, &pb.KeyspaceRequest{Prefix: prefix, Home: home, Survival: survival})
		return resp.GetHeader(), err
	})
	return resp.GetKeyspace(), err
}

// RemoveKeyspace removes an empty keyspace. Admin only.
func (c *Client) RemoveKeyspace(ctx context.Context, prefix string) error {
	return c.call(ctx, true, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
		r, err := api.RemoveKeyspace(ctx, &pb.KeyspaceRequest{Prefix: prefix})
		return r.GetHeader(), err
	})
}

// Keyspaces lists the regional keyspaces, with the serving member's view
// of each one's group (leader, last zxid).
func (c *Client) Keyspaces(ctx context.Context) ([]*pb.Keyspace, error) {
	var resp *pb.ListKeyspacesResponse
	err := c.call(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.ListKeyspaces(ctx, &pb.ListKeyspacesRequest{})
		return resp.GetHeader(), err
	})
	return resp.GetKeyspaces(), err
}
