package wire

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// serverCtx is a server call's context: the connection's values, the
// call's incoming metadata and transport stream (as
// metadata.NewIncomingContext and grpc.NewContextWithServerTransportStream
// would give, without their two contexts a call), its deadline, and its
// end: when the call ends, the client cancels it, the connection closes
// (serverConn.close ends every call it holds) or the deadline passes.
//
// Its channel and the deadline's timer are made only when something asks
// for Done (a write waiting for its entry, a stream), and it never
// registers with the connection's context, which every call of the
// connection would contend for: a context derived from it (WithCancel,
// WithTimeout) is ended through AfterFunc, without a goroutine.
type serverCtx struct {
	call     *serverCall
	parent   context.Context // the connection's, for its values
	deadline time.Time       // zero: none

	// valKey, val: the one value WithCallValue gave the call (set before
	// its handler runs, read only after).
	valKey, val any

	mu    sync.Mutex
	err   error         // set once: context.Canceled or DeadlineExceeded
	done  chan struct{} // made by Done; closed when err is set
	timer *time.Timer   // the deadline's, once done is made
	after []*afterFn    // AfterFunc's, run when err is set
	waker chan struct{} // WaitDone's, while it waits: signalled when err is set
}

// afterFn is a function AfterFunc registered: run once, unless stopped.
type afterFn struct {
	f     func()
	state atomic.Int32 // 0 pending, 1 run, 2 stopped
}

func (c *serverCtx) Deadline() (time.Time, bool) { return c.deadline, !c.deadline.IsZero() }

func (c *serverCtx) Done() <-chan struct{} {
	c.mu.Lock()
	if c.done == nil {
		c.done = make(chan struct{})
		switch {
		case c.err != nil:
			close(c.done)
		case c.deadline.IsZero():
		default:
			if d := time.Until(c.deadline); d > 0 {
				c.timer = time.AfterFunc(d, c.expire)
			} else {
				c.err = context.DeadlineExceeded
				close(c.done)
			}
		}
	}
	done := c.done
	c.mu.Unlock()
	return done
}

func (c *serverCtx) Err() error {
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err == nil && !c.deadline.IsZero() && !time.Now().Before(c.deadline) {
		c.end(context.DeadlineExceeded)
		c.mu.Lock()
		err = c.err
		c.mu.Unlock()
	}
	return err
}

func (c *serverCtx) Value(key any) any {
	if c.valKey != nil && key == c.valKey {
		return c.val
	}
	switch key {
	case incomingKey:
		return c.call.ts.incoming.MD()
	case streamKey:
		return grpc.ServerTransportStream(&c.call.ts)
	case callKey{}:
		return c.call
	}
	return c.parent.Value(key)
}

func (c *serverCtx) String() string { return "wire.serverCtx" }

// callKey finds a context's call (Waits).
type callKey struct{}

// AfterFunc runs f once the context ends, unless stop (its result) comes
// first: how the context package ends what is derived from a context that
// is none of its own types (context.AfterFunc's contract, a goroutine for
// f, is kept by its wrapper). f runs on the goroutine that ends the
// context.
func (c *serverCtx) AfterFunc(f func()) (stop func() bool) {
	c.Done()
	a := &afterFn{f: f}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		a.state.Store(1)
		go f()
		return func() bool { return false }
	}
	c.after = append(c.after, a)
	c.mu.Unlock()
	return func() bool {
		if !a.state.CompareAndSwap(0, 2) {
			return false
		}
		c.mu.Lock()
		for i, x := range c.after {
			if x == a {
				c.after = append(c.after[:i], c.after[i+1:]...)
				break
			}
		}
		c.mu.Unlock()
		return true
	}
}

// end ends the context with err, unless it ended before.
func (c *serverCtx) end(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	if c.done != nil {
		close(c.done)
	}
	if c.waker != nil {
		select {
		case c.waker <- struct{}{}:
		default:
		}
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	after := c.after
	c.after = nil
	c.mu.Unlock()
	for _, a := range after {
		if a.state.CompareAndSwap(0, 1) {
			a.f()
		}
	}
}

func (c *serverCtx) expire() { c.end(context.DeadlineExceeded) }

// WithCallValue is context.WithValue(ctx, key, val), without a context of
// its own when ctx is a server call's that has no such value yet (a
// server's interceptor hands its handler the call's identity so).
func WithCallValue(ctx context.Context, key, val any) context.Context {
	if c, ok := ctx.(*serverCtx); ok && c.valKey == nil && key != nil {
		c.valKey, c.val = key, val
		return c
	}
	return context.WithValue(ctx, key, val)
}

// Waited says what WaitDone saw first.
type Waited int

const (
	WaitedDone  Waited = iota // done
	WaitedStop                // stop
	WaitedEnded               // ctx ended (its Err says why)
)

// wakePool recycles the channels WaitDone is woken on.
var wakePool = sync.Pool{New: func() any { return make(chan struct{}, 1) }}

// WaitDone waits for done, stop or ctx's end. On a server call's context
// (a handler waiting for its write to be applied) it makes neither the
// context's channel nor its deadline's timer, as Done would: it waits on a
// pooled channel that the context's end signals, and a pooled timer ends
// the context at its deadline. Other contexts are waited on through Done.
func WaitDone(ctx context.Context, done, stop <-chan struct{}) Waited {
	if c, ok := ctx.(*serverCtx); ok {
		c.mu.Lock()
		ok = c.err == nil && c.done == nil && c.waker == nil
		if ok {
			c.waker = wakePool.Get().(chan struct{})
		}
		c.mu.Unlock()
		if ok {
			return c.waitWoken(done, stop)
		}
	}
	select {
	case <-done:
		return WaitedDone
	case <-stop:
		return WaitedStop
	case <-ctx.Done():
		return WaitedEnded
	}
}

// waitWoken is WaitDone on c, whose waker the caller set. The deadline
// ends c through a pooled timer's function, which signals the waker as
// every end does: the select has no timer channel of its own.
func (c *serverCtx) waitWoken(done, stop <-chan struct{}) Waited {
	var w *deadlineTimer
	if !c.deadline.IsZero() {
		w = deadlinePool.Get().(*deadlineTimer)
		w.c.Store(c)
		w.t.Reset(time.Until(c.deadline))
	}
	var r Waited
	select {
	case <-done:
		r = WaitedDone
	case <-stop:
		r = WaitedStop
	case <-c.waker:
		r = WaitedEnded
	}
	c.mu.Lock()
	wk := c.waker
	c.waker = nil
	c.mu.Unlock()
	select {
	case <-wk: // the end came after the wake-up: not for the next user
	default:
	}
	wakePool.Put(wk)
	if w != nil && w.t.Stop() {
		w.c.Store(nil)
		deadlinePool.Put(w)
	} // else it fired: its function may still run, so it is not reused
	return r
}

// deadlineTimer ends the context it holds at its deadline (waitWoken).
type deadlineTimer struct {
	t *time.Timer
	c atomic.Pointer[serverCtx]
}

// deadlinePool recycles waitWoken's timers.
var deadlinePool = sync.Pool{New: func() any {
	w := &deadlineTimer{}
	w.t = time.AfterFunc(time.Hour, func() {
		if c := w.c.Load(); c != nil {
			c.expire()
		}
	})
	w.t.Stop()
	return w
}}

// cancel ends the call's context (the call's end, the client's cancel,
// the connection's close).
func (c *serverCtx) cancel() { c.end(context.Canceled) }

// incomingKey and streamKey are the context keys under which
// metadata.FromIncomingContext and grpc.ServerTransportStreamFromContext
// look (unexported in their packages: learned by asking a keyProbe).
var incomingKey, streamKey = func() (any, any) {
	p := &keyProbe{Context: context.Background()}
	metadata.FromIncomingContext(p)
	in := p.key
	grpc.ServerTransportStreamFromContext(p)
	if in == nil || p.key == nil {
		panic("wire: the metadata and transport stream context keys could not be learned")
	}
	return in, p.key
}()

// keyProbe records the key it was last asked a value for.
type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Value(key any) any { p.key = key; return nil }
