package client

import (
	"context"
	"time"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
)

// Queue is a FIFO work queue with at-least-once delivery. Items stay in
// the replicated state until a consumer acks them.
type Queue struct {
	c    *Client
	Name string
}

// Queue returns a handle on the named queue (nothing is created until the
// first push or waiting pop).
func (c *Client) Queue(name string) *Queue { return &Queue{c: c, Name: name} }

// Push appends data (at most 64 KiB) and returns the item's id, the zxid of
// the push. A push that fails with ErrConnectionLoss or ErrTimeout may have
// been applied: a retry may enqueue the item twice.
func (q *Queue) Push(ctx context.Context, data []byte) (uint64, error) {
	var resp *pb.PushResponse
	err := q.c.call(ctx, true, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.Push(ctx, &pb.PushRequest{Queue: q.Name, Data: data})
		return resp.GetHeader(), err
	})
	return resp.GetId(), err
}

// PopOptions configure Pop.
type PopOptions struct {
	// Visibility is how long the item stays invisible to other consumers
	// (default 30s, at most 12h). Ack or Nack it before then, or it is
	// redelivered.
	Visibility time.Duration
	// TryOnly fails at once with ErrQueueEmpty instead of waiting.
	TryOnly bool
	// Timeout bounds the wait (0: as long as ctx allows); then the call
	// fails with ErrPopWaitTimeout and nothing was taken.
	Timeout time.Duration
	// Detach makes the delivery outlive this session: only the visibility
	// lease bounds it, and Ack/Nack by id and attempt works from any
	// session (QueueAck). Without it, the item is redelivered as soon as
	// this session ends.
	Detach bool
}

// Item is a delivered queue item.
type Item struct {
	q        *Queue
	ID       uint64
	Data     []byte
	Attempt  uint32    // 1 on first delivery; more means an earlier consumer did not ack it
	Deadline time.Time // the lease: redelivered after this unless acked
}

// Pop takes the head item. On an empty queue it waits (FIFO among
// consumers) until a push hands it an item, unless TryOnly. A pop that
// fails with ErrConnectionLoss may have taken an item: it is redelivered
// when its lease passes (at-least-once), so it is not retried here.
func (q *Queue) Pop(ctx context.Context, opts PopOptions) (*Item, error) {
	var resp *pb.PopResponse
	err := q.c.do(ctx, true, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.Pop(ctx, &pb.PopRequest{SessionId: sid, Queue: q.Name, VisibilityMs: opts.Visibility.Milliseconds(),
			Wait: !opts.TryOnly, TimeoutMs: opts.Timeout.Milliseconds(), Detach: opts.Detach})
		return resp.GetHeader(), err
	})
	if err != nil {
		return nil, err
	}
	it := resp.GetItem()
	return &Item{q: q, ID: it.GetId(), Data: it.GetData(), Attempt: it.GetAttempt(), Deadline: time.UnixMilli(it.GetDeadlineMs())}, nil
}

// Ack marks the item done: it is removed from the queue. ErrNotInFlight
// means the lease had passed (the item was or will be redelivered).
func (it *Item) Ack(ctx context.Context) error { return it.q.settle(ctx, false, it.ID, it.Attempt) }

// Nack gives the item back: it goes to the front of the queue and the next
// consumer gets it with the next attempt number.
func (it *Item) Nack(ctx context.Context) error { return it.q.settle(ctx, true, it.ID, it.Attempt) }

// Ack acks item id by number (attempt 0: whichever delivery is current),
// e.g. a detached delivery popped by another process.
func (q *Queue) Ack(ctx context.Context, id uint64, attempt uint32) error {
	return q.settle(ctx, false, id, attempt)
}

// Nack is Ack's counterpart for giving an item back.
func (q *Queue) Nack(ctx context.Context, id uint64, attempt uint32) error {
	return q.settle(ctx, true, id, attempt)
}

func (q *Queue) settle(ctx context.Context, nack bool, id uint64, attempt uint32) error {
	return q.c.call(ctx, true, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
		req := &pb.AckRequest{SessionId: sid, Queue: q.Name, Id: id, Attempt: attempt}
		var r *pb.AckResponse
		var err error
		if nack {
			r, err = api.Nack(ctx, req)
		} else {
			r, err = api.Ack(ctx, req)
		}
		return r.GetHeader(), err
	})
}

// QueueStats is a queue's summary.
type QueueStats = pb.QueueStatsResponse

// Stats reads the queue's length, in-flight count and waiting consumers,
// linearizably, listing up to listInFlight in-flight items (without data).
func (q *Queue) Stats(ctx context.Context, listInFlight int) (*QueueStats, error) {
	var resp *pb.QueueStatsResponse
	err := q.c.call(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.QueueStats(ctx, &pb.QueueStatsRequest{Queue: q.Name, Limit: int32(listInFlight)})
		return resp.GetHeader(), err
	})
	return resp, err
}
