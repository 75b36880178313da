package client

import (
	"context"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/errs"
)

// LeaderInfo is an election's current leader.
type LeaderInfo struct {
	Elected bool   // false: nobody leads now
	Session int64  // the leader's session
	Token   uint64 // its fencing token (term of office)
	Value   []byte // what it proclaimed
}

func leaderInfo(r *pb.LeaderResponse) LeaderInfo {
	return LeaderInfo{Elected: r.GetElected(), Session: r.GetSessionId(), Token: r.GetToken(), Value: r.GetValue()}
}

// Campaign blocks until this session leads the named election (FIFO among
// candidates), publishing value. The Lease's Token is its fencing token;
// Unlock resigns; Lost() closes if leadership is lost.
func (c *Client) Campaign(ctx context.Context, name string, value []byte) (*Lease, error) {
	return c.Lock(ctx, name, LockOptions{Value: value})
}

// Proclaim publishes a new value while leading.
func (l *Lease) Proclaim(ctx context.Context, value []byte) error {
	return l.c.call(ctx, true, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
		r, err := api.Proclaim(ctx, &pb.ProclaimRequest{SessionId: sid, Name: l.Name, Value: value})
		return r.GetHeader(), err
	})
}

// Leader returns the election's current leader, linearizably.
func (c *Client) Leader(ctx context.Context, name string) (LeaderInfo, error) {
	var resp *pb.LeaderResponse
	err := c.call(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.Leader(ctx, &pb.LeaderRequest{Name: name})
		return resp.GetHeader(), err
	})
	return leaderInfo(resp), err
}

// Observe streams the election's leader: the current one first, then each
// change, until ctx ends or the stream breaks (the channel is then closed;
// call Observe again to resume).
func (c *Client) Observe(ctx context.Context, name string) (<-chan LeaderInfo, error) {
	c.mu.Lock()
	api := c.mu.api
	c.mu.Unlock()
	if api == nil {
		return nil, ErrConnectionLoss
	}
	stream, err := api.Observe(ctx, &pb.LeaderRequest{Name: name})
	if err != nil {
		return nil, errs.FromGRPC(err)
	}
	first, err := stream.Recv()
	if err != nil {
		return nil, errs.FromGRPC(err)
	}
	out := make(chan LeaderInfo, 16)
	out <- leaderInfo(first)
	go func() {
		defer close(out)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case out <- leaderInfo(r):
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// Add atomically adds delta to the named counter and returns its new value
// (delta 0 reads it). Counters start at 0.
func (c *Client) Add(ctx context.Context, name string, delta int64) (int64, error) {
	var resp *pb.AddResponse
	err := c.call(ctx, true, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.Add(ctx, &pb.AddRequest{Name: name, Delta: delta})
		return resp.GetHeader(), err
	})
	return resp.GetValue(), err
}
