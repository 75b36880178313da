package server

import (
	"context"
	"errors"
	"time"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
)

// maxListedInFlight bounds the in-flight items QueueStats lists.
const maxListedInFlight = 1000

func toItem(d *coord.Delivery, withData bool) *pb.QueueItem {
	it := &pb.QueueItem{Id: d.ID, Attempt: d.Attempt, DeadlineMs: d.DeadlineMs, SessionId: d.Session}
	if withData {
		it.Data = d.Data
	}
	return it
}

// waitCtx bounds a waiting call by its own timeout_ms as well as ctx.
func waitCtx(ctx context.Context, timeoutMs int64) (context.Context, context.CancelFunc) {
	if timeoutMs > 0 {
		return context.WithTimeout(ctx, time.Duration(timeoutMs)*time.Millisecond)
	}
	return context.WithCancel(ctx)
}

// coordCall submits c, waits for its result and folds the command's own
// error into err.
func (a *api) coordCall(ctx context.Context, c *coord.Command) (coord.Result, uint64, error) {
	out, err := a.s.Submit(ctx, coordCommand(c)).Wait()
	if err == nil {
		err = out.coord.Err
	}
	return out.coord, out.zxid, err
}

func (a *api) Push(ctx context.Context, r *pb.PushRequest) (*pb.PushResponse, error) {
	if len(r.GetData()) > coord.MaxItemBytes {
		return nil, a.done("Push", errs.ErrItemTooLarge) // before the codec, which would call it a too-large request
	}
	res, idx, err := a.coordCall(ctx, &coord.Command{Op: coord.OpPush, Name: r.GetQueue(), Value: r.GetData()})
	if err != nil {
		return nil, a.done("Push", err)
	}
	return &pb.PushResponse{Header: a.header(idx), Id: res.Pushed}, a.done("Push", nil)
}

// Pop is one proposal when an item is ready. Otherwise the pop waits in the
// state and the apply that hands it an item (a push, nack, lease expiry or
// session end) answers it here through its grant.
func (a *api) Pop(ctx context.Context, r *pb.PopRequest) (*pb.PopResponse, error) {
	if err := coord.ValidName(r.GetQueue()); err != nil {
		return nil, a.done("Pop", err)
	}
	id := a.s.nextID()
	key := grantKey{kind: coord.GrantItem, lock: r.GetQueue(), session: r.GetSessionId(), waiter: id}
	// Register before proposing so the grant cannot slip past this call.
	ch, _ := a.s.grants.add(key) // ids are unique: never busy
	defer a.s.grants.remove(key)
	res, idx, err := a.coordCall(ctx, &coord.Command{ID: id, Session: r.GetSessionId(), Op: coord.OpPop, Name: r.GetQueue(),
		Wait: r.GetWait(), VisibilityMs: r.GetVisibilityMs(), Detach: r.GetDetach()})
	if errors.Is(err, errs.ErrTimeout) || errors.Is(err, errs.ErrOutcomeUnknown) {
		// The pop may still be applied: best effort, withdraw it and give
		// back what it took, so nothing waits for a lease or a session end
		// on the caller's behalf. (If the withdrawal is applied first, the
		// item comes back when its lease passes.)
		a.withdrawPop(r, id)
	}
	if err != nil {
		return nil, a.done("Pop", err)
	}
	if res.Granted {
		return &pb.PopResponse{Header: a.header(idx), Item: toItem(res.Item, true)}, a.done("Pop", nil)
	}
	wctx, cancel := waitCtx(ctx, r.GetTimeoutMs())
	defer cancel()
	select {
	case g := <-ch:
		return &pb.PopResponse{Header: a.header(0), Item: toItem(g.Item, true)}, a.done("Pop", nil)
	case <-wctx.Done():
	case <-a.s.stop:
		return nil, a.done("Pop", errs.ErrStopped)
	}
	// Withdraw. An item may have been handed over meanwhile: the caller
	// gets it if it is still there, else it goes back to the queue at once
	// rather than when its lease passes.
	if ctx.Err() != nil {
		a.withdrawPop(r, id)
		return nil, a.done("Pop", ctx.Err())
	}
	cctx, ccancel := context.WithTimeout(context.Background(), a.s.cfg.requestTimeout())
	defer ccancel()
	cres, idx, err := a.coordCall(cctx, &coord.Command{Session: r.GetSessionId(), Op: coord.OpCancelPop, Name: r.GetQueue(), Waiter: id})
	if err != nil {
		return nil, a.done("Pop", err)
	}
	if cres.Item != nil {
		return &pb.PopResponse{Header: a.header(idx), Item: toItem(cres.Item, true)}, a.done("Pop", nil)
	}
	return nil, a.done("Pop", errs.ErrPopWaitTimeout)
}

// withdrawPop cancels the pop proposed with id for a caller that is gone,
// and nacks the item it took, if any.
func (a *api) withdrawPop(r *pb.PopRequest, id uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), a.s.cfg.requestTimeout())
	defer cancel()
	cres, _, err := a.coordCall(ctx, &coord.Command{Session: r.GetSessionId(), Op: coord.OpCancelPop, Name: r.GetQueue(), Waiter: id})
	if err == nil && cres.Item != nil {
		a.coordCall(ctx, &coord.Command{Session: r.GetSessionId(), Op: coord.OpNack, Name: r.GetQueue(), Item: cres.Item.ID, Attempt: cres.Item.Attempt})
	}
}

func (a *api) settle(ctx context.Context, method string, op coord.OpType, r *pb.AckRequest) (*pb.AckResponse, error) {
	_, idx, err := a.coordCall(ctx, &coord.Command{Session: r.GetSessionId(), Op: op, Name: r.GetQueue(), Item: r.GetId(), Attempt: r.GetAttempt()})
	if err != nil {
		return nil, a.done(method, err)
	}
	return &pb.AckResponse{Header: a.header(idx)}, a.done(method, nil)
}

func (a *api) Ack(ctx context.Context, r *pb.AckRequest) (*pb.AckResponse, error) {
	return a.settle(ctx, "Ack", coord.OpAck, r)
}

func (a *api) Nack(ctx context.Context, r *pb.AckRequest) (*pb.AckResponse, error) {
	return a.settle(ctx, "Nack", coord.OpNack, r)
}

// QueueStats answers linearizably.
func (a *api) QueueStats(ctx context.Context, r *pb.QueueStatsRequest) (*pb.QueueStatsResponse, error) {
	if err := coord.ValidName(r.GetQueue()); err != nil {
		return nil, a.done("QueueStats", err)
	}
	if err := a.s.readBarrier(ctx, a.s.groupForName(r.GetQueue()), true, 0); err != nil {
		return nil, a.done("QueueStats", err)
	}
	limit := min(max(int(r.GetLimit()), 0), maxListedInFlight)
	c, idx, unlock := a.s.coordOf(r.GetQueue())
	st := c.QueueStats(r.GetQueue())
	inflight := c.InFlight(r.GetQueue(), limit)
	unlock()
	out := &pb.QueueStatsResponse{Header: a.header(idx), Ready: int64(st.Ready), InFlight: int64(st.InFlight),
		Consumers: int64(st.Consumers), Bytes: st.Bytes, HeadId: st.Head}
	for i := range inflight {
		out.InFlightItems = append(out.InFlightItems, toItem(&inflight[i], false))
	}
	return out, a.done("QueueStats", nil)
}

// ---- barriers ----

func (a *api) SetBarrier(ctx context.Context, r *pb.BarrierRequest) (*pb.BarrierResponse, error) {
	_, idx, err := a.coordCall(ctx, &coord.Command{Op: coord.OpBarrierSet, Name: r.GetName()})
	if err != nil {
		return nil, a.done("SetBarrier", err)
	}
	return &pb.BarrierResponse{Header: a.header(idx)}, a.done("SetBarrier", nil)
}

func (a *api) RemoveBarrier(ctx context.Context, r *pb.BarrierRequest) (*pb.BarrierResponse, error) {
	_, idx, err := a.coordCall(ctx, &coord.Command{Op: coord.OpBarrierRemove, Name: r.GetName()})
	if err != nil {
		return nil, a.done("RemoveBarrier", err)
	}
	return &pb.BarrierResponse{Header: a.header(idx)}, a.done("RemoveBarrier", nil)
}

// WaitBarrier returns once the barrier does not exist: a linearizable read,
// then a wake-up from the apply that removes it (registered before the
// read, so a removal cannot slip between them).
func (a *api) WaitBarrier(ctx context.Context, r *pb.WaitBarrierRequest) (*pb.BarrierResponse, error) {
	if err := coord.ValidName(r.GetName()); err != nil {
		return nil, a.done("WaitBarrier", err)
	}
	ch, ok := a.s.barrierObs.add(r.GetName())
	if !ok {
		return nil, a.done("WaitBarrier", errs.ErrThrottled)
	}
	defer a.s.barrierObs.remove(r.GetName(), ch)
	if err := a.s.readBarrier(ctx, a.s.groupForName(r.GetName()), true, 0); err != nil {
		return nil, a.done("WaitBarrier", err)
	}
	wctx, cancel := waitCtx(ctx, r.GetTimeoutMs())
	defer cancel()
	for {
		c, _, unlock := a.s.coordOf(r.GetName())
		set := c.BarrierExists(r.GetName())
		unlock()
		if !set {
			return &pb.BarrierResponse{Header: a.header(0)}, a.done("WaitBarrier", nil)
		}
		select {
		case <-ch:
		case <-wctx.Done():
			if ctx.Err() != nil {
				return nil, a.done("WaitBarrier", ctx.Err())
			}
			return nil, a.done("WaitBarrier", errs.ErrBarrierWaitTimeout)
		case <-a.s.stop:
			return nil, a.done("WaitBarrier", errs.ErrStopped)
		}
	}
}

// EnterBarrier returns once the double barrier's parties are all inside.
// On timeout the entry is withdrawn, unless the barrier opened first.
func (a *api) EnterBarrier(ctx context.Context, r *pb.DoubleBarrierRequest) (*pb.DoubleBarrierResponse, error) {
	if err := coord.ValidName(r.GetName()); err != nil {
		return nil, a.done("EnterBarrier", err)
	}
	key := grantKey{kind: coord.GrantEnter, lock: r.GetName(), session: r.GetSessionId()}
	ch, ok := a.s.grants.add(key)
	if !ok {
		return nil, a.done("EnterBarrier", errs.ErrBadArguments) // this session already waits to enter here
	}
	defer a.s.grants.remove(key)
	res, idx, err := a.coordCall(ctx, &coord.Command{Session: r.GetSessionId(), Op: coord.OpEnter, Name: r.GetName(), Parties: r.GetParties()})
	if err != nil {
		return nil, a.done("EnterBarrier", err)
	}
	if res.Granted {
		return &pb.DoubleBarrierResponse{Header: a.header(idx)}, a.done("EnterBarrier", nil)
	}
	wctx, cancel := waitCtx(ctx, r.GetTimeoutMs())
	defer cancel()
	select {
	case <-ch:
		return &pb.DoubleBarrierResponse{Header: a.header(0)}, a.done("EnterBarrier", nil)
	case <-wctx.Done():
	case <-a.s.stop:
		return nil, a.done("EnterBarrier", errs.ErrStopped)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), a.s.cfg.requestTimeout())
	defer ccancel()
	cres, idx, err := a.coordCall(cctx, &coord.Command{Session: r.GetSessionId(), Op: coord.OpCancelEnter, Name: r.GetName()})
	if err != nil {
		return nil, a.done("EnterBarrier", err)
	}
	if cres.Granted {
		if ctx.Err() == nil {
			return &pb.DoubleBarrierResponse{Header: a.header(idx)}, a.done("EnterBarrier", nil)
		}
		// Inside, but nobody is waiting for it: leave so the others can.
		a.coordCall(cctx, &coord.Command{Session: r.GetSessionId(), Op: coord.OpLeave, Name: r.GetName()})
	}
	if ctx.Err() != nil {
		return nil, a.done("EnterBarrier", ctx.Err())
	}
	return nil, a.done("EnterBarrier", errs.ErrBarrierWaitTimeout)
}

// LeaveBarrier returns once every participant has left. On timeout the
// leave stands; only the wait ends.
func (a *api) LeaveBarrier(ctx context.Context, r *pb.DoubleBarrierRequest) (*pb.DoubleBarrierResponse, error) {
	if err := coord.ValidName(r.GetName()); err != nil {
		return nil, a.done("LeaveBarrier", err)
	}
	key := grantKey{kind: coord.GrantLeave, lock: r.GetName(), session: r.GetSessionId()}
	ch, ok := a.s.grants.add(key)
	if !ok {
		return nil, a.done("LeaveBarrier", errs.ErrBadArguments) // this session already waits to leave here
	}
	defer a.s.grants.remove(key)
	res, idx, err := a.coordCall(ctx, &coord.Command{Session: r.GetSessionId(), Op: coord.OpLeave, Name: r.GetName()})
	if err != nil {
		return nil, a.done("LeaveBarrier", err)
	}
	if res.Granted {
		return &pb.DoubleBarrierResponse{Header: a.header(idx)}, a.done("LeaveBarrier", nil)
	}
	wctx, cancel := waitCtx(ctx, r.GetTimeoutMs())
	defer cancel()
	select {
	case <-ch:
		return &pb.DoubleBarrierResponse{Header: a.header(0)}, a.done("LeaveBarrier", nil)
	case <-wctx.Done():
		if ctx.Err() != nil {
			return nil, a.done("LeaveBarrier", ctx.Err())
		}
		return nil, a.done("LeaveBarrier", errs.ErrBarrierWaitTimeout)
	case <-a.s.stop:
		return nil, a.done("LeaveBarrier", errs.ErrStopped)
	}
}

// BarrierStats answers linearizably.
func (a *api) BarrierStats(ctx context.Context, r *pb.BarrierRequest) (*pb.BarrierStatsResponse, error) {
	if err := coord.ValidName(r.GetName()); err != nil {
		return nil, a.done("BarrierStats", err)
	}
	if err := a.s.readBarrier(ctx, a.s.groupForName(r.GetName()), true, 0); err != nil {
		return nil, a.done("BarrierStats", err)
	}
	c, idx, unlock := a.s.coordOf(r.GetName())
	set := c.BarrierExists(r.GetName())
	db, _ := c.DoubleBarrier(r.GetName())
	unlock()
	return &pb.BarrierStatsResponse{Header: a.header(idx), Set: set, Parties: db.Parties, Open: db.Open,
		Entered: db.Entered, Leaving: db.Leaving}, a.done("BarrierStats", nil)
}
