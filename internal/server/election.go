package server

import (
	"bytes"
	"context"
	"sync"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
)

// maxObserversPerServer bounds Observe streams on one server; beyond it
// Observe fails with ErrThrottled.
const maxObserversPerServer = 10000

// observers wakes Observe streams when a lock's holders change. Signals are
// coalesced (capacity-1 channels): a stream re-reads the current leader.
type observers struct {
	mu sync.Mutex
	m  map[string]map[chan struct{}]struct{}
	n  int
}

func (o *observers) add(name string) (chan struct{}, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n >= maxObserversPerServer {
		return nil, false
	}
	if o.m == nil {
		o.m = map[string]map[chan struct{}]struct{}{}
	}
	set := o.m[name]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		o.m[name] = set
	}
	ch := make(chan struct{}, 1)
	set[ch] = struct{}{}
	o.n++
	return ch, true
}

func (o *observers) remove(name string, ch chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if set := o.m[name]; set != nil {
		if _, ok := set[ch]; ok {
			delete(set, ch)
			o.n--
		}
		if len(set) == 0 {
			delete(o.m, name)
		}
	}
}

func (o *observers) notify(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for ch := range o.m[name] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (o *observers) notifyAll() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, set := range o.m {
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// leaderOf reads an election's current leader (the lock's first holder).
func (s *Server) leaderOf(name string) *pb.LeaderResponse {
	c, _, unlock := s.coordOf(name)
	defer unlock()
	out := &pb.LeaderResponse{}
	if info, ok := c.Get(name); ok && len(info.Holders) > 0 {
		h := info.Holders[0]
		out.Elected, out.SessionId, out.Token, out.Value = true, h.Session, h.Token, h.Value
	}
	return out
}

func (a *api) Proclaim(ctx context.Context, r *pb.ProclaimRequest) (*pb.ProclaimResponse, error) {
	res, idx, err := a.coordCall(ctx, &coord.Command{Session: r.GetSessionId(), Op: coord.OpProclaim, Name: r.GetName(), Value: r.GetValue()})
	if err != nil {
		return nil, a.done("Proclaim", err)
	}
	return &pb.ProclaimResponse{Header: a.header(idx), Token: res.Token}, a.done("Proclaim", nil)
}

// Leader answers linearizably.
func (a *api) Leader(ctx context.Context, r *pb.LeaderRequest) (*pb.LeaderResponse, error) {
	if err := coord.ValidName(r.GetName()); err != nil {
		return nil, a.done("Leader", err)
	}
	if err := a.s.readBarrier(ctx, a.s.groupForName(r.GetName()), true, 0); err != nil {
		return nil, a.done("Leader", err)
	}
	out := a.s.leaderOf(r.GetName())
	out.Header = a.header(0)
	return out, a.done("Leader", nil)
}

func (a *api) Observe(r *pb.LeaderRequest, stream pb.Meridian_ObserveServer) error {
	if err := coord.ValidName(r.GetName()); err != nil {
		return a.done("Observe", err)
	}
	ch, ok := a.s.obs.add(r.GetName())
	if !ok {
		return a.done("Observe", errs.ErrThrottled)
	}
	defer a.s.obs.remove(r.GetName(), ch)
	if err := a.s.readBarrier(stream.Context(), a.s.groupForName(r.GetName()), true, 0); err != nil {
		return a.done("Observe", err)
	}
	var last *pb.LeaderResponse
	for {
		cur := a.s.leaderOf(r.GetName())
		if last == nil || cur.Elected != last.Elected || cur.Token != last.Token || !bytes.Equal(cur.Value, last.Value) {
			cur.Header = a.header(0)
			if err := stream.Send(cur); err != nil {
				return err
			}
			last = cur
		}
		select {
		case <-ch:
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-a.s.stop:
			return a.done("Observe", errs.ErrStopped)
		}
	}
}

// Add applies an atomic add to a counter.
func (a *api) Add(ctx context.Context, r *pb.AddRequest) (*pb.AddResponse, error) {
	res, idx, err := a.coordCall(ctx, &coord.Command{Op: coord.OpAdd, Name: r.GetName(), Delta: r.GetDelta()})
	if err != nil {
		return nil, a.done("Add", err)
	}
	return &pb.AddResponse{Header: a.header(idx), Value: res.Counter}, a.done("Add", nil)
}
