package wire

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
)

// A callCtx behaves as context.WithDeadline's context whether or not
// its live context was made yet: deadline, cancel, the parent's end, and
// contexts derived from it.
func TestCallCtxIsADeadlineContext(t *testing.T) {
	testDeadlineContext(t, func(d time.Duration) (context.Context, func()) {
		return WithTimeout(context.Background(), d)
	})
	t.Run("parent's deadline is earlier", func(t *testing.T) {
		parent, pc := context.WithTimeout(context.Background(), time.Minute)
		defer pc()
		ctx, cancel := WithTimeout(parent, time.Hour)
		defer cancel()
		pd, _ := parent.Deadline()
		if d, ok := ctx.Deadline(); !ok || !d.Equal(pd) {
			t.Fatalf("Deadline %v %v, want the parent's %v", d, ok, pd)
		}
	})
	t.Run("parent ends", func(t *testing.T) {
		parent, pc := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
		early := newCallCtx(parent, time.Time{})
		late := newCallCtx(parent, time.Time{})
		done := early.Done()
		pc()
		<-done
		if !errors.Is(late.Err(), context.Canceled) {
			t.Fatalf("Err of a call whose parent ended before Done: %v", late.Err())
		}
		<-late.Done()
		if late.Value(ctxKey{}) != "v" || early.Value(ctxKey{}) != "v" {
			t.Fatal("the parent's values are lost")
		}
	})
}

// testDeadlineContext checks what a call's context (callCtx, serverCtx)
// shares with context.WithDeadline's: mk makes one ending d from now,
// and its cancel.
func testDeadlineContext(t *testing.T, mk func(d time.Duration) (context.Context, func())) {
	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := mk(20 * time.Millisecond)
		defer cancel()
		if ctx.Err() != nil {
			t.Fatalf("Err before the deadline: %v", ctx.Err())
		}
		<-ctx.Done()
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err after the deadline: %v", ctx.Err())
		}
	})
	t.Run("deadline passed unobserved", func(t *testing.T) {
		ctx, cancel := mk(time.Millisecond)
		defer cancel()
		time.Sleep(5 * time.Millisecond)
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err past the deadline, Done never asked for: %v", ctx.Err())
		}
		select {
		case <-ctx.Done():
		default:
			t.Fatal("Done open after Err reported the deadline")
		}
	})
	t.Run("cancel before Done", func(t *testing.T) {
		ctx, cancel := mk(time.Hour)
		cancel()
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("Err after cancel: %v", ctx.Err())
		}
		<-ctx.Done()
	})
	t.Run("cancel after Done", func(t *testing.T) {
		ctx, cancel := mk(time.Hour)
		done := ctx.Done()
		cancel()
		<-done
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("Err after cancel: %v", ctx.Err())
		}
	})
	t.Run("derived contexts need no goroutine", func(t *testing.T) {
		ctx, cancel := mk(time.Hour)
		before := runtime.NumGoroutine()
		var children []context.Context
		for i := 0; i < 100; i++ {
			child, stop := context.WithCancel(ctx)
			defer stop()
			children = append(children, child)
		}
		if n := runtime.NumGoroutine(); n > before+10 {
			t.Fatalf("%d goroutines for 100 derived contexts", n-before)
		}
		cancel()
		for _, c := range children {
			<-c.Done()
			if !errors.Is(c.Err(), context.Canceled) {
				t.Fatalf("derived: %v", c.Err())
			}
		}
	})
}

type ctxKey struct{}

// await returns when the reply comes, at the deadline, or at once when
// the context is cancelled while it waits; a call it ended is no longer
// pending, and a pendingCall used again carries nothing over.
func TestAwait(t *testing.T) {
	cc := &clientConn{pending: map[uint32]*pendingCall{}}
	call := func() (uint32, *pendingCall) {
		p := pendingPool.Get().(*pendingCall)
		cc.mu.Lock()
		cc.next++
		id := cc.next
		cc.pending[id] = p
		cc.mu.Unlock()
		return id, p
	}
	answer := func(id uint32) { // as readLoop does
		cc.mu.Lock()
		p := cc.pending[id]
		delete(cc.pending, id)
		cc.mu.Unlock()
		if p != nil {
			p.finish()
		}
	}
	pending := func(id uint32) bool {
		cc.mu.Lock()
		defer cc.mu.Unlock()
		return cc.pending[id] != nil
	}

	id, p := call()
	answer(id)
	ctx, cancel := WithTimeout(context.Background(), time.Hour)
	if err := cc.await(ctx, id, p); err != nil || p.kept {
		t.Fatalf("reply in time: %v (kept %v)", err, p.kept)
	}
	cancel()
	putPending(p)

	id, p = call()
	ctx, cancel = WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := cc.await(ctx, id, p); !errors.Is(err, context.DeadlineExceeded) || pending(id) {
		t.Fatalf("no reply: %v (still pending: %v), want the deadline", err, pending(id))
	}

	id, p = call()
	ctx, cancel = WithTimeout(context.Background(), 30*time.Second)
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	if err := cc.await(ctx, id, p); !errors.Is(err, context.Canceled) || pending(id) {
		t.Fatalf("cancelled while waiting: %v after %v (still pending: %v), want Canceled", err, time.Since(start), pending(id))
	}
	// A context that has a channel already is waited on through it.
	id, p = call()
	ctx, cancel = WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_ = ctx.Done()
	if err := cc.await(ctx, id, p); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no reply on a context with its channel: %v, want the deadline", err)
	}
	// A pooled call's timer carries nothing over to the next wait.
	for i := 0; i < 50; i++ {
		ctx, cancel := WithTimeout(context.Background(), time.Hour)
		id, p := call()
		if i%2 == 0 {
			time.AfterFunc(time.Millisecond, func() { answer(id) })
		} else {
			time.AfterFunc(time.Millisecond, cancel)
		}
		err := cc.await(ctx, id, p)
		if (i%2 == 0) != (err == nil) {
			t.Fatalf("wait %d: %v", i, err)
		}
		cancel()
		if err == nil {
			putPending(p)
		}
	}
}

// A call whose context came from WithTimeout ends at its deadline, and a
// cancel while it waits ends it at once, on the server's side too.
func TestWithTimeoutCall(t *testing.T) {
	svc := newService()
	addr := serve(t, svc, Options{})
	conn := Dial(addr, ClientOptions{})
	defer conn.Close()
	api := pb.NewMeridianClient(conn)

	ctx, cancel := WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := api.GetData(ctx, &pb.ReadRequest{Path: "/block"})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call past its deadline: %v, want DeadlineExceeded", err)
	}
	<-svc.blocked
	<-svc.entered

	ctx, cancel = WithTimeout(context.Background(), time.Minute)
	go func() { <-svc.entered; cancel() }()
	_, err = api.GetData(ctx, &pb.ReadRequest{Path: "/block"})
	if status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled call: %v, want Canceled", err)
	}
	select {
	case err := <-svc.blocked:
		if !strings.HasSuffix(err.Error(), context.Canceled.Error()) {
			t.Fatalf("handler's context: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never saw the cancellation")
	}
	ctx, cancel = WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := api.GetData(ctx, &pb.ReadRequest{Path: "/n"}); err != nil {
		t.Fatal(err)
	}
}

// A handler waiting for its write on a server call's context is woken by
// what it waits for, by the context's end (cancel, the deadline) or by a
// stop, and waiting makes neither the context's channel nor its timer.
func TestWaitDoneOnAServerCall(t *testing.T) {
	newCtx := func(d time.Duration) *serverCtx {
		return &serverCtx{call: &serverCall{}, parent: context.Background(), deadline: time.Now().Add(d)}
	}
	closed := make(chan struct{})
	close(closed)
	never := make(chan struct{})

	c := newCtx(time.Minute)
	if got := WaitDone(c, closed, never); got != WaitedDone {
		t.Errorf("done: %v, want WaitedDone", got)
	}
	if got := WaitDone(c, never, closed); got != WaitedStop {
		t.Errorf("stop: %v, want WaitedStop", got)
	}
	if c.done != nil || c.timer != nil || c.Err() != nil {
		t.Errorf("after waiting: channel %v, timer %v, err %v; want none", c.done, c.timer, c.Err())
	}
	if n := testing.AllocsPerRun(100, func() { WaitDone(c, closed, never) }); n != 0 && !raceEnabled {
		t.Errorf("%.1f allocations a wait, want 0", n)
	}

	go func() { time.Sleep(20 * time.Millisecond); c.cancel() }()
	if got := WaitDone(c, never, never); got != WaitedEnded || !errors.Is(c.Err(), context.Canceled) {
		t.Errorf("cancelled: %v, err %v; want WaitedEnded, context.Canceled", got, c.Err())
	}
	// Ended: the next wait sees it at once.
	if got := WaitDone(c, never, never); got != WaitedEnded {
		t.Errorf("after the end: %v, want WaitedEnded", got)
	}

	c = newCtx(30 * time.Millisecond)
	start := time.Now()
	if got := WaitDone(c, never, never); got != WaitedEnded || !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Errorf("past the deadline: %v, err %v; want WaitedEnded, DeadlineExceeded", got, c.Err())
	}
	if el := time.Since(start); el < 25*time.Millisecond {
		t.Errorf("woken %v after the wait began, before the 30 ms deadline", el)
	}
	// A channel the end signalled after the wake-up is drained before it
	// is pooled: the next wait is not woken by it.
	c = newCtx(time.Minute)
	WaitDone(c, closed, never)
	c2 := newCtx(time.Minute)
	go func() { time.Sleep(20 * time.Millisecond); close(never) }()
	if got := WaitDone(c2, never, make(chan struct{})); got != WaitedDone {
		t.Errorf("a fresh wait: %v, want WaitedDone", got)
	}
}

// The one value a server's interceptor gives a call is found through the
// call's context itself; a second one makes a context as WithValue does.
func TestWithCallValue(t *testing.T) {
	type k1 struct{}
	type k2 struct{}
	c := &serverCtx{call: &serverCall{}, parent: context.Background()}
	ctx := WithCallValue(c, k1{}, "one")
	if ctx != context.Context(c) || ctx.Value(k1{}) != "one" {
		t.Fatalf("first value: context %T, value %v", ctx, ctx.Value(k1{}))
	}
	ctx2 := WithCallValue(ctx, k2{}, "two")
	if ctx2 == ctx || ctx2.Value(k1{}) != "one" || ctx2.Value(k2{}) != "two" || ctx.Value(k2{}) != nil {
		t.Errorf("second value: %v %v, the call's own %v", ctx2.Value(k1{}), ctx2.Value(k2{}), ctx.Value(k2{}))
	}
}
