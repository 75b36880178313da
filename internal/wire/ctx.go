package wire

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// callCtx is a call's context: its parent's values, a deadline, and
// cancellation by cancel, the parent's end or the deadline, like
// context.WithDeadline's. What that costs every call (a timer in the
// runtime's heap, a channel, the cancel context) is made only when
// something asks for Done, or for Err past the deadline: most reads never
// wait for anything, so never do. A caller waiting for a reply on a
// callCtx over a parent that never ends (the client's calls without a
// deadline of their own) waits with its call's own timer instead
// (clientConn.await).
type callCtx struct {
	parent   context.Context
	deadline time.Time // zero: none
	live     atomic.Pointer[liveCtx]

	mu        sync.Mutex
	cancelled bool        // cancel came before live was made
	timer     *time.Timer // await's timer, while it waits: cancel fires it
}

// liveCtx is the context a callCtx hands out once asked for Done.
type liveCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newCallCtx(parent context.Context, deadline time.Time) *callCtx {
	return &callCtx{parent: parent, deadline: deadline}
}

// WithTimeout is context.WithTimeout without its timer or channel until a
// waiter asks for them: a call made with it over this transport costs
// neither when its reply comes in time.
func WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	c := withTimeout(parent, d)
	return c, c.cancel
}

// A Stopper ends the context Bound made: its CancelFunc, as a method.
type Stopper interface{ Stop() }

// Bound is WithTimeout returning the cancel as a Stopper: the context is
// the call's one allocation (a CancelFunc would be a second).
func Bound(parent context.Context, d time.Duration) (context.Context, Stopper) {
	c := withTimeout(parent, d)
	return c, c
}

// Stop is cancel, for Bound's callers.
func (c *callCtx) Stop() { c.cancel() }

func withTimeout(parent context.Context, d time.Duration) *callCtx {
	c := newCallCtx(parent, time.Now().Add(d))
	if pd, ok := parent.Deadline(); ok && pd.Before(c.deadline) {
		c.deadline = pd
	}
	return c
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.deadline, !c.deadline.IsZero() }

func (c *callCtx) Done() <-chan struct{} { return c.make().Done() }

func (c *callCtx) Err() error {
	if l := c.live.Load(); l != nil {
		return l.ctx.Err()
	}
	c.mu.Lock()
	cancelled := c.cancelled
	c.mu.Unlock()
	if !cancelled && c.parent.Err() == nil && (c.deadline.IsZero() || time.Now().Before(c.deadline)) {
		return nil
	}
	return c.make().Err()
}

// Value is the live context's once made (context.WithCancel and friends
// find its cancel context through it, so contexts derived from a callCtx
// are cancelled with it without a goroutine each), the parent's before.
func (c *callCtx) Value(key any) any {
	if l := c.live.Load(); l != nil {
		return l.ctx.Value(key)
	}
	return c.parent.Value(key)
}

func (c *callCtx) String() string { return "wire.callCtx" }

// make returns the live context, making it the first time.
func (c *callCtx) make() context.Context {
	if l := c.live.Load(); l != nil {
		return l.ctx
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.live.Load(); l != nil {
		return l.ctx
	}
	l := &liveCtx{}
	if c.deadline.IsZero() {
		l.ctx, l.cancel = context.WithCancel(c.parent)
	} else {
		l.ctx, l.cancel = context.WithDeadline(c.parent, c.deadline)
	}
	if c.cancelled {
		l.cancel()
	}
	c.live.Store(l)
	return l.ctx
}

// cancel ends the call's context (a call's end, the client's cancel); it
// wakes a wait under way.
func (c *callCtx) cancel() {
	c.mu.Lock()
	c.cancelled = true
	l := c.live.Load()
	if c.timer != nil {
		c.timer.Reset(0)
	}
	c.mu.Unlock()
	if l != nil {
		l.cancel()
	}
}

// wait waits for done, or for ctx's end: nil when done came first, ctx's
// error otherwise (a call's context the client made is waited on by
// await, without Done).
func wait(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
