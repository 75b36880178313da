package server

import (
	"context"
	"slices"
	"sync"
	"time"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
)

// eventLockLost is a hub notification that a session lost a lock it did not
// release (forced release). Path carries the lock name, Zxid the lost token.
const eventLockLost tree.EventType = -100

// ---- grants: requests waiting here for what an apply gives them ----

// grantKey identifies a waiting request on this server: an acquire (lock,
// session), a pop (also its proposal id: a session may have several), a
// double barrier enter or leave.
type grantKey struct {
	kind    coord.GrantKind
	lock    string
	session int64
	waiter  uint64
}

func keyOf(g coord.Grant) grantKey {
	return grantKey{kind: g.Kind, lock: g.Lock, session: g.Session, waiter: g.Waiter}
}

// grantWaiters hands grants made in apply to the calls waiting for them.
type grantWaiters struct {
	mu sync.Mutex
	m  map[grantKey]chan coord.Grant
}

func (g *grantWaiters) add(k grantKey) (chan coord.Grant, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, busy := g.m[k]; busy {
		return nil, false
	}
	ch := make(chan coord.Grant, 1)
	g.m[k] = ch
	return ch, true
}

func (g *grantWaiters) remove(k grantKey) {
	g.mu.Lock()
	delete(g.m, k)
	g.mu.Unlock()
}

// regrant answers, from a state just installed from a snapshot, every
// waiting request whose grant was made in the skipped range of the log
// (its apply never ran here). Called from the raft loop, so no apply races.
// owns says which names are the restored group's (the other groups'
// waiters are not judged by its state).
func (s *Server) regrant(c *coord.State, owns func(name string) bool) {
	s.grants.mu.Lock()
	defer s.grants.mu.Unlock()
	for k, ch := range s.grants.m {
		if !owns(k.lock) {
			continue
		}
		g, ok := coord.Grant{Kind: k.kind, Lock: k.lock, Session: k.session, Waiter: k.waiter}, false
		switch k.kind {
		case coord.GrantLock:
			if info, found := c.Get(k.lock); found {
				for _, h := range info.Holders {
					if h.Session == k.session {
						g.Token, g.Mode, ok = h.Token, h.Mode, true
					}
				}
			}
		case coord.GrantItem:
			g.Item = c.DeliveryFor(k.lock, k.session, k.waiter)
			ok = g.Item != nil
		case coord.GrantEnter:
			b, found := c.DoubleBarrier(k.lock)
			ok = found && b.Open && slices.Contains(b.Entered, k.session)
		case coord.GrantLeave:
			b, found := c.DoubleBarrier(k.lock)
			ok = !found || (!slices.Contains(b.Leaving, k.session) && !slices.Contains(b.Entered, k.session))
		}
		if ok {
			select {
			case ch <- g:
			default:
			}
		}
	}
}

func (s *Server) deliverGrants(grants []coord.Grant, losses []coord.Loss) {
	for _, g := range grants {
		switch g.Kind {
		case coord.GrantLock:
			s.obs.notify(g.Lock)
		case coord.GrantBarrierRemoved:
			s.barrierObs.notify(g.Lock)
		}
	}
	for _, l := range losses {
		s.obs.notify(l.Lock)
	}
	if len(grants) > 0 {
		s.grants.mu.Lock()
		for _, gr := range grants {
			if ch, ok := s.grants.m[keyOf(gr)]; ok {
				select {
				case ch <- gr:
				default:
				}
			}
		}
		s.grants.mu.Unlock()
	}
	for _, l := range losses {
		s.log.Info("lock lost", "lock", l.Lock, "session", l.Session, "token", l.Token, "reason", l.Reason)
		if h := s.hubs.lookup(l.Session); h != nil {
			h.Notify(tree.Event{Type: eventLockLost, Path: l.Lock, Zxid: int64(l.Token)})
		}
	}
}

// ---- API ----

func (a *api) Lock(ctx context.Context, r *pb.LockRequest) (*pb.LockResponse, error) {
	if err := coord.ValidName(r.GetName()); err != nil {
		return nil, a.done("Lock", err)
	}
	mode := coord.Exclusive
	if r.GetShared() {
		mode = coord.Shared
	}
	key := grantKey{kind: coord.GrantLock, lock: r.GetName(), session: r.GetSessionId()}
	// Register before proposing so a grant made by a later command (a
	// release) cannot slip past this call.
	ch, ok := a.s.grants.add(key)
	if !ok {
		return nil, a.done("Lock", errs.ErrBadArguments) // this session already waits for this lock here
	}
	defer a.s.grants.remove(key)
	region := r.GetRegion()
	if region == "" && r.GetLocalFirst() > 0 {
		if m, ok := a.s.member(a.s.cfg.ID); ok {
			region = m.Region
		}
	}
	res, idx, err := a.coordCall(ctx, &coord.Command{Session: r.GetSessionId(), Op: coord.OpAcquire,
		Name: r.GetName(), Mode: mode, Wait: r.GetWait(), DelayMs: r.GetDelayMs(), Permits: r.GetPermits(), Value: r.GetValue(),
		LocalFirst: r.GetLocalFirst(), Region: region})
	if err != nil {
		return nil, a.done("Lock", err)
	}
	if res.Granted {
		return &pb.LockResponse{Header: a.header(idx), Token: res.Token}, a.done("Lock", nil)
	}
	// Queued: wait for the grant, the timeout, or the caller to go away.
	wctx := ctx
	if t := r.GetTimeoutMs(); t > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Millisecond)
		defer cancel()
	}
	select {
	case g := <-ch:
		return &pb.LockResponse{Header: a.header(0), Token: g.Token}, a.done("Lock", nil)
	case <-wctx.Done():
	case <-a.s.stop:
		return nil, a.done("Lock", errs.ErrStopped)
	}
	// Withdraw from the queue. The grant may have won the race: then the
	// caller holds the lock, and gets it if it is still there to take it.
	cctx, cancel := context.WithTimeout(context.Background(), a.s.cfg.requestTimeout())
	defer cancel()
	out, err := a.s.Submit(cctx, coordCommand(&coord.Command{Session: r.GetSessionId(), Op: coord.OpCancel, Name: r.GetName()})).Wait()
	if err != nil {
		return nil, a.done("Lock", err)
	}
	cres, idx := out.coord, out.zxid
	if cres.Granted {
		if ctx.Err() == nil {
			return &pb.LockResponse{Header: a.header(idx), Token: cres.Token}, a.done("Lock", nil)
		}
		// Nobody is waiting for this grant any more: give it back.
		a.s.Submit(cctx, coordCommand(&coord.Command{Session: r.GetSessionId(), Op: coord.OpRelease, Name: r.GetName()})).Wait()
	}
	if ctx.Err() != nil {
		return nil, a.done("Lock", ctx.Err())
	}
	return nil, a.done("Lock", errs.ErrLockWaitTimeout)
}

func (a *api) Unlock(ctx context.Context, r *pb.UnlockRequest) (*pb.UnlockResponse, error) {
	_, idx, err := a.coordCall(ctx, &coord.Command{Session: r.GetSessionId(), Op: coord.OpRelease, Name: r.GetName()})
	if err != nil {
		return nil, a.done("Unlock", err)
	}
	return &pb.UnlockResponse{Header: a.header(idx)}, a.done("Unlock", nil)
}

func (a *api) ForceUnlock(ctx context.Context, r *pb.ForceUnlockRequest) (*pb.UnlockResponse, error) {
	_, idx, err := a.coordCall(ctx, &coord.Command{Op: coord.OpForceRelease, Name: r.GetName(), Target: r.GetHolderSessionId()})
	if err != nil {
		return nil, a.done("ForceUnlock", err)
	}
	return &pb.UnlockResponse{Header: a.header(idx)}, a.done("ForceUnlock", nil)
}

// CheckToken answers, linearizably, whether token is the lock's current
// token: for resources outside Meridian that want to fence.
func (a *api) CheckToken(ctx context.Context, r *pb.CheckTokenRequest) (*pb.CheckTokenResponse, error) {
	if err := a.s.readBarrier(ctx, a.s.groupForName(r.GetName()), true, 0); err != nil {
		return nil, a.done("CheckToken", err)
	}
	c, idx, unlock := a.s.coordOf(r.GetName())
	err := c.CheckToken(r.GetName(), r.GetToken())
	unlock()
	return &pb.CheckTokenResponse{Header: a.header(idx), Valid: err == nil}, a.done("CheckToken", nil)
}

func (a *api) ListLocks(ctx context.Context, r *pb.ListLocksRequest) (*pb.ListLocksResponse, error) {
	// Every group's locks (a keyspace's live in its own group), each
	// group read linearizably.
	if err := a.s.readBarrier(ctx, a.s.root, true, 0); err != nil {
		return nil, a.done("ListLocks", err)
	}
	for _, g := range a.s.keyspaceGroups.all() {
		if err := a.s.readBarrier(ctx, g, true, 0); err != nil {
			return nil, a.done("ListLocks", err)
		}
	}
	limit := int(r.GetLimit())
	if limit <= 0 || limit > 10000 {
		limit = 10000
	}
	all, unlock := a.s.wholeTree()
	locks := all.locks(r.GetPrefix(), limit)
	idx := uint64(all.At())
	unlock()
	out := &pb.ListLocksResponse{Header: a.header(idx)}
	for _, l := range locks {
		li := &pb.LockInfo{Name: l.Name, DelayUntilMs: l.DelayUntilMs, Permits: l.Permits}
		for _, h := range l.Holders {
			li.Holders = append(li.Holders, &pb.LockHolder{SessionId: h.Session, Token: h.Token, Shared: h.Mode == coord.Shared, Value: h.Value})
		}
		for _, w := range l.Waiters {
			li.Waiters = append(li.Waiters, &pb.LockWaiter{SessionId: w.Session, Shared: w.Mode == coord.Shared})
		}
		out.Locks = append(out.Locks, li)
	}
	return out, a.done("ListLocks", nil)
}
