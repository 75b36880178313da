package server

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
	"github.com/meridian-coord/meridian/internal/watch"
)

// api implements the native gRPC service. Each method translates, calls the
// server, and maps errors once through errs.GRPCStatus.
type api struct {
	pb.UnimplementedMeridianServer
	s *Server
}

func (a *api) header(zxid uint64) *pb.Header {
	return a.fillHeader(&pb.Header{}, zxid, 0)
}

// headerFor is header plus the session's notified zxid (see Header).
func (a *api) headerFor(zxid uint64, session int64) *pb.Header {
	return a.fillHeader(&pb.Header{}, zxid, session)
}

// fillHeader sets h as headerFor(zxid, session) makes it (session 0:
// header's) and returns it.
func (a *api) fillHeader(h *pb.Header, zxid uint64, session int64) *pb.Header {
	if zxid == 0 {
		zxid = uint64(a.s.lastZxid())
	}
	h.Zxid, h.MemberId, h.LeaderId, h.Term = int64(zxid), a.s.cfg.ID, a.s.rep.Leader(), a.s.rep.Term()
	if session != 0 {
		if hb := a.s.hubs.lookup(session); hb != nil {
			h.NotifiedZxid = hb.queuedZxid.Load()
		}
	}
	return h
}

// withHeaderStat is a reply of type R, its Header and its Stat made in
// one allocation, for the replies sent most that carry both: Create,
// SetData, GetData, GetChildren and Exists of a node that exists.
type withHeaderStat[R any] struct {
	r  R
	h  pb.Header
	st pb.Stat
}

func (a *api) done(method string, err error) error {
	a.s.metrics.countNative(method, codeLabel(err))
	return errs.GRPCStatus(err)
}

func codeLabel(err error) string {
	if err == nil {
		return "ok"
	}
	return status.Code(errs.GRPCStatus(err)).String()
}

func version(v *int32) int32 {
	if v == nil {
		return -1
	}
	return *v
}

func toStat(st tree.Stat) *pb.Stat {
	return fillStat(&pb.Stat{}, st)
}

// fillStat sets out to st and returns it.
func fillStat(out *pb.Stat, st tree.Stat) *pb.Stat {
	out.Czxid, out.Mzxid, out.Ctime, out.Mtime = st.Czxid, st.Mzxid, st.Ctime, st.Mtime
	out.Version, out.Cversion, out.Aversion = st.Version, st.Cversion, st.Aversion
	out.EphemeralOwner, out.DataLength = st.EphemeralOwner, st.DataLength
	out.NumChildren, out.Pzxid = st.NumChildren, st.Pzxid
	return out
}

func fromACL(in []*pb.ACL) []tree.ACL {
	if len(in) == 0 {
		return tree.OpenACL
	}
	out := make([]tree.ACL, len(in))
	for i, a := range in {
		out[i] = tree.ACL{Perms: a.GetPerms(), ID: tree.ID{Scheme: a.GetScheme(), ID: a.GetId()}}
	}
	return out
}

func toACL(in []tree.ACL) []*pb.ACL {
	out := make([]*pb.ACL, len(in))
	for i, a := range in {
		out[i] = &pb.ACL{Perms: a.Perms, Scheme: a.ID.Scheme, Id: a.ID.ID}
	}
	return out
}

func createOp(r *pb.CreateRequest) tree.Op {
	return tree.Op{Type: tree.OpCreate, Path: r.GetPath(), Data: nonNull(r.GetData()), ACL: fromACL(r.GetAcl()),
		Mode: tree.CreateMode(r.GetMode()), TTLMs: r.GetTtlMs()}
}

// write hands one write to the request core (fenced if f is set) and
// returns its result.
func (a *api) write(ctx context.Context, session int64, op tree.Op, ops []tree.Op, f *pb.Fence) (tree.Result, uint64, error) {
	if n := a.s.nativeWrites.Add(1); n > routedWriteLimit.Load() && a.s.rep.Leader() == a.s.cfg.ID {
		_ = grpc.SetHeader(ctx, metadata.Pairs(routeHeader, routeThroughSession))
	}
	defer a.s.nativeWrites.Add(-1)
	w := writeRequest{session: session, auth: callerOf(ctx), op: op, ops: ops}
	if f != nil {
		w.fenced, w.lock, w.token = true, f.GetLock(), f.GetToken()
	}
	return a.s.write(ctx, &w)
}

// A Go client whose session is on a follower sends its writes straight to
// the leader when the leader is in the same region (client/route.go): a
// hop shorter each way, but the leader then carries those clients'
// connections besides its own and the group's replication. Past
// routedWriteLimit native writes in flight at once the hop saved is small
// against the queue, so the leader's replies tell the clients
// (routeHeader) to send their writes through their own servers for a few
// seconds, spreading the connections over the members again; clients
// beyond the limit move, the others keep their route.
const (
	routeHeader         = "meridian-route" // client.RouteHeader
	routeThroughSession = "session"
)

// routedWriteLimit: the most native writes a leader answers at once
// before its replies say routeThroughSession (a variable for tests).
var routedWriteLimit atomic.Int64

func init() { routedWriteLimit.Store(96) }

func (a *api) Create(ctx context.Context, r *pb.CreateRequest) (*pb.CreateResponse, error) {
	res, idx, err := a.write(ctx, r.GetSessionId(), createOp(r), nil, r.GetFence())
	if err != nil {
		return nil, a.done("Create", err)
	}
	x := &withHeaderStat[pb.CreateResponse]{}
	x.r.Header, x.r.Path, x.r.Stat = a.fillHeader(&x.h, idx, r.GetSessionId()), res.Op.Path, fillStat(&x.st, res.Op.Stat)
	return &x.r, a.done("Create", nil)
}

func (a *api) Delete(ctx context.Context, r *pb.DeleteRequest) (*pb.DeleteResponse, error) {
	_, idx, err := a.write(ctx, r.GetSessionId(), tree.Op{Type: tree.OpDelete, Path: r.GetPath(), Version: version(r.Version)}, nil, r.GetFence())
	if err != nil {
		return nil, a.done("Delete", err)
	}
	return &pb.DeleteResponse{Header: a.headerFor(idx, r.GetSessionId())}, a.done("Delete", nil)
}

func (a *api) SetData(ctx context.Context, r *pb.SetDataRequest) (*pb.SetDataResponse, error) {
	res, idx, err := a.write(ctx, r.GetSessionId(), tree.Op{Type: tree.OpSetData, Path: r.GetPath(), Data: nonNull(r.GetData()), Version: version(r.Version)}, nil, r.GetFence())
	if err != nil {
		return nil, a.done("SetData", err)
	}
	x := &withHeaderStat[pb.SetDataResponse]{}
	x.r.Header, x.r.Stat = a.fillHeader(&x.h, idx, r.GetSessionId()), fillStat(&x.st, res.Op.Stat)
	return &x.r, a.done("SetData", nil)
}

func (a *api) SetACL(ctx context.Context, r *pb.SetACLRequest) (*pb.SetACLResponse, error) {
	if len(r.GetAcl()) == 0 {
		return nil, a.done("SetACL", errs.ErrInvalidACL)
	}
	res, idx, err := a.write(ctx, r.GetSessionId(), tree.Op{Type: tree.OpSetACL, Path: r.GetPath(), ACL: fromACL(r.GetAcl()), Version: version(r.Aversion)}, nil, nil)
	if err != nil {
		return nil, a.done("SetACL", err)
	}
	return &pb.SetACLResponse{Header: a.header(idx), Stat: toStat(res.Op.Stat)}, a.done("SetACL", nil)
}

func (a *api) Multi(ctx context.Context, r *pb.MultiRequest) (*pb.MultiResponse, error) {
	if len(r.GetOps()) > tree.MaxMultiOps {
		return nil, a.done("Multi", errs.ErrRequestTooLarge)
	}
	ops := make([]tree.Op, 0, len(r.GetOps()))
	for _, o := range r.GetOps() {
		switch x := o.GetOp().(type) {
		case *pb.Op_Create:
			ops = append(ops, createOp(x.Create))
		case *pb.Op_Delete:
			ops = append(ops, tree.Op{Type: tree.OpDelete, Path: x.Delete.GetPath(), Version: version(x.Delete.Version)})
		case *pb.Op_SetData:
			ops = append(ops, tree.Op{Type: tree.OpSetData, Path: x.SetData.GetPath(), Data: nonNull(x.SetData.GetData()), Version: version(x.SetData.Version)})
		case *pb.Op_Check:
			ops = append(ops, tree.Op{Type: tree.OpCheck, Path: x.Check.GetPath(), Version: version(x.Check.Version)})
		default:
			return nil, a.done("Multi", errs.ErrBadArguments)
		}
	}
	res, idx, err := a.write(ctx, r.GetSessionId(), tree.Op{Type: tree.OpMulti}, ops, r.GetFence())
	if err != nil && res.Err == nil {
		return nil, a.done("Multi", err) // not applied: the proposal's error
	}
	if errors.Is(res.Err, errs.ErrStaleToken) && len(res.Multi) == 0 {
		return nil, a.done("Multi", res.Err)
	}
	out := &pb.MultiResponse{Header: a.headerFor(idx, r.GetSessionId()), ErrorCode: errs.ZKCode(res.Err)}
	for _, r := range res.Multi {
		or := &pb.OpResult{ErrorCode: errs.ZKCode(r.Err), Path: r.Path}
		if r.Err != nil {
			or.Error = r.Err.Error()
		}
		if r.Type == tree.OpCreate || r.Type == tree.OpSetData {
			or.Stat = toStat(r.Stat)
		}
		out.Results = append(out.Results, or)
	}
	return out, a.done("Multi", nil)
}

// read hands a native read to the request core: the request's
// consistency, the caller's identities, and a watch into the session's
// hub if asked.
func (a *api) read(ctx context.Context, r *pb.ReadRequest, kind readKind) (readResult, uint64, error) {
	return a.s.read(ctx, &readRequest{path: r.GetPath(), kind: kind, auth: callerOf(ctx),
		linear: r.GetConsistency() == pb.Consistency_LINEARIZABLE, minZxid: r.GetMinZxid(), view: viewOf(ctx),
		watch: r.GetWatch(), session: r.GetSessionId()}, nil)
}

func (a *api) GetData(ctx context.Context, r *pb.ReadRequest) (*pb.GetDataResponse, error) {
	res, idx, err := a.read(ctx, r, readData)
	if err != nil {
		return nil, a.done("GetData", err)
	}
	x := &withHeaderStat[pb.GetDataResponse]{}
	x.r.Header, x.r.Data, x.r.Stat = a.fillHeader(&x.h, idx, r.GetSessionId()), res.data, fillStat(&x.st, res.stat)
	return &x.r, a.done("GetData", nil)
}

func (a *api) Exists(ctx context.Context, r *pb.ReadRequest) (*pb.ExistsResponse, error) {
	res, idx, err := a.read(ctx, r, readExists)
	if errors.Is(err, errs.ErrNoNode) {
		return &pb.ExistsResponse{Header: a.headerFor(idx, r.GetSessionId()), Exists: false}, a.done("Exists", nil)
	}
	if err != nil {
		return nil, a.done("Exists", err)
	}
	x := &withHeaderStat[pb.ExistsResponse]{}
	x.r.Header, x.r.Exists, x.r.Stat = a.fillHeader(&x.h, idx, r.GetSessionId()), true, fillStat(&x.st, res.stat)
	return &x.r, a.done("Exists", nil)
}

func (a *api) GetChildren(ctx context.Context, r *pb.ReadRequest) (*pb.GetChildrenResponse, error) {
	res, idx, err := a.read(ctx, r, readChildren)
	if err != nil {
		return nil, a.done("GetChildren", err)
	}
	x := &withHeaderStat[pb.GetChildrenResponse]{}
	x.r.Header, x.r.Children, x.r.Stat = a.fillHeader(&x.h, idx, r.GetSessionId()), res.children, fillStat(&x.st, res.stat)
	return &x.r, a.done("GetChildren", nil)
}

func (a *api) GetACL(ctx context.Context, r *pb.ReadRequest) (*pb.GetACLResponse, error) {
	res, idx, err := a.read(ctx, r, readACL) // a watch is refused: getACL sets none
	if err != nil {
		return nil, a.done("GetACL", err)
	}
	return &pb.GetACLResponse{Header: a.header(idx), Acl: toACL(res.acl), Stat: toStat(res.stat)}, a.done("GetACL", nil)
}

func (a *api) Sync(ctx context.Context, r *pb.SyncRequest) (*pb.SyncResponse, error) {
	if err := a.s.readBarrier(ctx, a.s.groupFor(syncPath(r.GetPath())), true, 0); err != nil {
		return nil, a.done("Sync", err)
	}
	return &pb.SyncResponse{Header: a.header(0)}, a.done("Sync", nil)
}

// ---- sessions ----

func (a *api) CreateSession(ctx context.Context, r *pb.CreateSessionRequest) (*pb.CreateSessionResponse, error) {
	ns, idx, err := a.s.createSession(ctx, time.Duration(r.GetTimeoutMs())*time.Millisecond)
	if err != nil {
		return nil, a.done("CreateSession", err)
	}
	return &pb.CreateSessionResponse{Header: a.header(idx), SessionId: ns.id, TimeoutMs: int32(ns.timeout.Milliseconds()), Password: ns.password}, a.done("CreateSession", nil)
}

func (a *api) liveSession(id int64) (tree.SessionInfo, error) {
	a.s.mu.RLock()
	si, ok := a.s.mu.tree.Session(id)
	a.s.mu.RUnlock()
	if !ok {
		return si, errs.ErrSessionExpired
	}
	return si, nil
}

func (a *api) KeepAlive(ctx context.Context, r *pb.KeepAliveRequest) (*pb.KeepAliveResponse, error) {
	si, err := a.liveSession(r.GetSessionId())
	if err != nil {
		return nil, a.done("KeepAlive", err)
	}
	a.s.touch(si.ID)
	return &pb.KeepAliveResponse{Header: a.header(0), TimeoutMs: si.TimeoutMs}, a.done("KeepAlive", nil)
}

func (a *api) CloseSession(ctx context.Context, r *pb.CloseSessionRequest) (*pb.CloseSessionResponse, error) {
	idx, err := a.s.closeSession(ctx, r.GetSessionId(), nil)
	if err != nil {
		return nil, a.done("CloseSession", err)
	}
	return &pb.CloseSessionResponse{Header: a.header(idx)}, a.done("CloseSession", nil)
}

func (a *api) AttachSession(ctx context.Context, r *pb.AttachSessionRequest) (*pb.AttachSessionResponse, error) {
	si, err := a.s.resumeSession(ctx, r.GetSessionId(), r.GetPassword(), newView(r.GetLastZxid()), false)
	if err != nil {
		return nil, a.done("AttachSession", err)
	}
	return &pb.AttachSessionResponse{Header: a.header(0), TimeoutMs: si.TimeoutMs}, a.done("AttachSession", nil)
}

// ---- watches ----

// The watch manager inspects the tree through wholeTree (keyspaces.go):
// every group's state under its read lock.

func (a *api) Watch(r *pb.WatchRequest, stream pb.Meridian_WatchServer) error {
	if _, err := a.liveSession(r.GetSessionId()); err != nil {
		return a.done("Watch", err)
	}
	// Watches are judged on this server's state: one behind what the client
	// has read (restarted and replaying its log, or lagging) would report a
	// node the client saw as deleted, or fire watches for changes the client
	// already knows. Wait until it has caught up, as AttachSession does.
	bctx, cancel := context.WithTimeout(stream.Context(), a.s.cfg.requestTimeout())
	err := a.s.barrierAll(bctx, newView(max(r.GetRelativeZxid(), r.GetMinZxid())), false)
	cancel()
	if err != nil {
		return a.done("Watch", err)
	}
	h := a.s.hubs.get(r.GetSessionId(), a.s.cfg.MaxQueuedEvents)
	gen := h.attach()
	// ready tells the client up to which zxid its watches are now covered:
	// every later change is either notified on this stream or was notified
	// by SetWatches.
	all, unlock := a.s.wholeTree()
	ready := all.At()
	unlock()
	if n := len(r.GetData()) + len(r.GetExist()) + len(r.GetChild()) + len(r.GetPersistent()) + len(r.GetPersistentRecursive()); n > 0 {
		if n > a.s.cfg.MaxWatchesPerSession {
			return a.done("Watch", errs.ErrTooManyWatches)
		}
		all, unlock := a.s.wholeTree()
		ready = all.At()
		err := a.s.watches.SetWatchesKept(h, r.GetRelativeZxid(), all,
			r.GetData(), r.GetExist(), r.GetChild(), r.GetPersistent(), r.GetPersistentRecursive())
		unlock()
		if err != nil {
			// Some watches could not be registered: say so rather than
			// leave the client believing it watches them.
			return a.done("Watch", err)
		}
	}
	if err := stream.Send(&pb.WatchEvent{Ready: true, Zxid: ready}); err != nil {
		return err
	}
	ctx := stream.Context()
	for {
		evs, overflow, done, expired, replaced := h.take(gen)
		if replaced {
			return status.Error(codes.Aborted, "watch stream replaced by a newer one")
		}
		for _, ev := range evs {
			zxid := ev.Zxid
			if zxid < 0 && ev.Changed > 0 {
				zxid = ev.Changed // a reconnect's notification: the change it reports
			}
			msg := &pb.WatchEvent{Type: pb.EventType(ev.Type), Path: ev.Path, Zxid: zxid}
			if ev.Type == eventLockLost {
				msg = &pb.WatchEvent{LockLost: ev.Path, LostToken: uint64(ev.Zxid)}
			}
			if err := stream.Send(msg); err != nil {
				return err
			}
		}
		switch {
		case expired:
			stream.Send(&pb.WatchEvent{SessionExpired: true})
			return nil
		case done:
			return a.done("Watch", errs.ErrStopped)
		case overflow:
			a.s.watches.RemoveAll(h)
			return a.done("Watch", errs.ErrTooManyWatches)
		}
		select {
		case <-h.signal:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (a *api) AddWatch(ctx context.Context, r *pb.AddWatchRequest) (*pb.AddWatchResponse, error) {
	if err := tree.ValidatePath(r.GetPath(), false); err != nil {
		return nil, a.done("AddWatch", err)
	}
	if _, err := a.liveSession(r.GetSessionId()); err != nil {
		return nil, a.done("AddWatch", err)
	}
	k := watch.KindPersistent
	if r.GetMode() == pb.WatchMode_PERSISTENT_RECURSIVE_WATCH {
		k = watch.KindPersistentRecursive
	}
	h := a.s.hubs.get(r.GetSessionId(), a.s.cfg.MaxQueuedEvents)
	if err := a.s.watches.Add(h, r.GetPath(), k); err != nil {
		return nil, a.done("AddWatch", err)
	}
	return &pb.AddWatchResponse{Header: a.header(0)}, a.done("AddWatch", nil)
}

func (a *api) RemoveWatches(ctx context.Context, r *pb.RemoveWatchesRequest) (*pb.RemoveWatchesResponse, error) {
	h := a.s.hubs.get(r.GetSessionId(), a.s.cfg.MaxQueuedEvents)
	if err := a.s.watches.Remove(h, r.GetPath(), watch.KindFromWatcherType(int32(r.GetType()))); err != nil {
		return nil, a.done("RemoveWatches", err)
	}
	return &pb.RemoveWatchesResponse{Header: a.header(0)}, a.done("RemoveWatches", nil)
}

// ---- cluster ----

func (a *api) Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error) {
	return a.status(), a.done("Status", nil)
}

// status is this member's view of the cluster, the one both the native
// Status and the HTTP port's /status serve (the latter in the CLI's JSON
// form), so `meridian status -o json` and /status cannot drift.
func (a *api) status() *pb.StatusResponse {
	st := a.s.rep.Status()
	nodes, _, sessions := a.s.treeCounts()
	out := &pb.StatusResponse{
		Header: a.header(0), MemberId: a.s.cfg.ID, LeaderId: st.Leader, Term: st.Term,
		CommitIndex: st.Commit, AppliedIndex: st.Applied, Role: st.Role, SnapshotIndex: st.SnapshotIndex,
		FirstIndex: st.FirstIndex, LastIndex: st.LastIndex, ClusterId: st.ClusterID,
		Sessions: int64(sessions), Znodes: int64(nodes), Watches: int64(a.s.watches.Count()), Version: Version,
		Placement: a.s.PlacementDecision().Reason, PreferRegion: a.s.preferredRegion(),
		TickMs: st.Tick.Milliseconds(), ElectionTimeoutMs: (st.Tick * time.Duration(a.s.cfg.ElectionTicks)).Milliseconds(),
		ApplyVersion: int64(a.s.applyVersion()), ClusterVersion: int64(a.s.recordedVersion()),
	}
	for _, m := range a.s.members() {
		out.Members = append(out.Members, toPBMember(m, st.Progress[m.ID]))
	}
	a.s.mu.RLock()
	list := a.s.fsm.Keyspaces().List()
	a.s.mu.RUnlock()
	for _, ks := range list {
		out.Keyspaces = append(out.Keyspaces, a.s.keyspaceInfo(ks))
	}
	return out
}

func (a *api) TransferLeader(ctx context.Context, r *pb.TransferLeaderRequest) (*pb.TransferLeaderResponse, error) {
	if m, known := a.s.member(r.GetTargetId()); !known || m.Role == "learner" {
		return nil, a.done("TransferLeader", errs.ErrBadArguments)
	}
	ctx, cancel := a.s.withTimeout(ctx)
	defer cancel()
	if err := a.s.rep.TransferLeadership(ctx, r.GetTargetId()); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = errs.ErrTimeout
		}
		return nil, a.done("TransferLeader", err)
	}
	return &pb.TransferLeaderResponse{Header: a.header(0)}, a.done("TransferLeader", nil)
}

// nonNull: protobuf bytes cannot be null, so native writes store empty data,
// never ZooKeeper's null (which only the ZooKeeper protocol can ask for).
func nonNull(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// syncPath is the path a Sync names ("" or an invalid path: the root's).
func syncPath(p string) string {
	if tree.ValidatePath(p, false) != nil {
		return "/"
	}
	return p
}
