package client

import (
	"context"
	"time"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
)

// Barrier is a simple barrier (ZooKeeper's recipe): while it is set, Wait
// blocks; Remove releases every waiter. It belongs to no session.
type Barrier struct {
	c    *Client
	Name string
}

// Barrier returns a handle on the named simple barrier.
func (c *Client) Barrier(name string) *Barrier { return &Barrier{c: c, Name: name} }

// Set raises the barrier (setting a set barrier is a no-op).
func (b *Barrier) Set(ctx context.Context) error {
	return b.c.call(ctx, true, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
		r, err := api.SetBarrier(ctx, &pb.BarrierRequest{Name: b.Name})
		return r.GetHeader(), err
	})
}

// Remove lowers the barrier, releasing every waiter (no-op if not set).
func (b *Barrier) Remove(ctx context.Context) error {
	return b.c.call(ctx, true, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
		r, err := api.RemoveBarrier(ctx, &pb.BarrierRequest{Name: b.Name})
		return r.GetHeader(), err
	})
}

// Wait returns once the barrier is not set (at once if it is not), or
// fails with ErrBarrierWaitTimeout after timeout (0: as long as ctx allows).
func (b *Barrier) Wait(ctx context.Context, timeout time.Duration) error {
	return b.c.do(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
		r, err := api.WaitBarrier(ctx, &pb.WaitBarrierRequest{Name: b.Name, TimeoutMs: timeout.Milliseconds()})
		return r.GetHeader(), err
	})
}

// DoubleBarrier is ZooKeeper's double barrier for a fixed number of
// participants (sessions): Enter returns once that many are inside, Leave
// once all of them have left. If this client's session ends it leaves.
type DoubleBarrier struct {
	c       *Client
	Name    string
	Parties int
	// Timeout bounds each Enter/Leave wait (0: as long as ctx allows).
	Timeout time.Duration
}

// DoubleBarrier returns a handle on the named double barrier for n parties;
// every participant must use the same n.
func (c *Client) DoubleBarrier(name string, n int) *DoubleBarrier {
	return &DoubleBarrier{c: c, Name: name, Parties: n}
}

// Enter blocks until Parties sessions have entered. If it fails (timeout,
// cancelled) this session's entry is withdrawn. Entering is idempotent per
// session, so it is retried on another server after a lost connection.
func (b *DoubleBarrier) Enter(ctx context.Context) error {
	return b.c.do(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
		r, err := api.EnterBarrier(ctx, &pb.DoubleBarrierRequest{SessionId: sid, Name: b.Name, Parties: int32(b.Parties), TimeoutMs: b.Timeout.Milliseconds()})
		return r.GetHeader(), err
	})
}

// Leave leaves and blocks until every participant has left. Leaving before
// the barrier opened withdraws and returns at once. If the wait fails the
// leave still stands.
func (b *DoubleBarrier) Leave(ctx context.Context) error {
	return b.c.do(ctx, true, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
		r, err := api.LeaveBarrier(ctx, &pb.DoubleBarrierRequest{SessionId: sid, Name: b.Name, TimeoutMs: b.Timeout.Milliseconds()})
		return r.GetHeader(), err
	})
}

// BarrierStats is the state of a barrier name: the simple barrier and the
// double barrier of that name.
type BarrierStats = pb.BarrierStatsResponse

// BarrierStats reads a barrier name's state linearizably.
func (c *Client) BarrierStats(ctx context.Context, name string) (*BarrierStats, error) {
	var resp *pb.BarrierStatsResponse
	err := c.call(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.BarrierStats(ctx, &pb.BarrierRequest{Name: name})
		return resp.GetHeader(), err
	})
	return resp, err
}
