package wire

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
)

// newServerCtx is a call's context as startCall makes it, md decoded as
// a server connection decodes a call's metadata.
func newServerCtx(parent context.Context, deadline time.Time, md metadata.MD) *serverCtx {
	d := decoder{b: appendMetadata(nil, md, nil)}
	in := d.callMetadata(&interner{share: true}, nil)
	call := &serverCall{ctx: serverCtx{parent: parent, deadline: deadline}, ts: transportStream{method: "/m", incoming: in}}
	call.ctx.call = call
	return &call.ctx
}

// A server call's context behaves as context.WithDeadline's over the
// connection's, with the call's metadata and transport stream in it,
// whether or not its channel was made yet.
func TestServerCtx(t *testing.T) {
	parent := context.WithValue(context.Background(), ctxKey{}, "v")
	t.Run("values", func(t *testing.T) {
		ctx := newServerCtx(parent, time.Time{}, metadata.Pairs("k", "1"))
		if md, ok := metadata.FromIncomingContext(ctx); !ok || md.Get("k")[0] != "1" {
			t.Fatalf("incoming metadata %v %v", md, ok)
		}
		if got, ok := IncomingMetadata(ctx); !ok || got.Get("k")[0] != "1" {
			t.Fatalf("IncomingMetadata %v %v", got, ok)
		}
		if got, ok := IncomingValues(ctx, "k"); !ok || len(got) != 1 || got[0] != "1" {
			t.Fatalf("IncomingValues %v %v", got, ok)
		}
		if got, ok := IncomingValues(ctx, "absent"); !ok || got != nil {
			t.Fatalf("IncomingValues of an absent key: %v %v", got, ok)
		}
		if _, ok := IncomingValues(context.Background(), "k"); ok {
			t.Fatal("IncomingValues of a context that is no call's: ok")
		}
		if m, ok := grpc.Method(ctx); !ok || m != "/m" {
			t.Fatalf("method %q %v", m, ok)
		}
		if err := grpc.SetHeader(ctx, metadata.Pairs("h", "2")); err != nil || ctx.call.ts.headerMD().Get("h")[0] != "2" {
			t.Fatalf("SetHeader: %v", err)
		}
		if ctx.Value(ctxKey{}) != "v" {
			t.Fatal("the connection's values are lost")
		}
	})
	testDeadlineContext(t, func(d time.Duration) (context.Context, func()) {
		var deadline time.Time
		if d > 0 {
			deadline = time.Now().Add(d)
		}
		ctx := newServerCtx(parent, deadline, nil)
		return ctx, ctx.cancel
	})
	t.Run("cancel after Done, then the deadline", func(t *testing.T) {
		ctx := newServerCtx(parent, time.Now().Add(10*time.Millisecond), nil)
		done := ctx.Done()
		ctx.cancel()
		<-done
		time.Sleep(20 * time.Millisecond)
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("Err after cancel and the deadline: %v, want the first end", ctx.Err())
		}
	})
	t.Run("derived contexts register with it, and only while live", func(t *testing.T) {
		ctx := newServerCtx(parent, time.Time{}, nil)
		var children []context.Context
		for i := 0; i < 100; i++ {
			child, stop := context.WithCancel(ctx)
			defer stop()
			children = append(children, child)
		}
		_, stop := context.WithTimeout(ctx, time.Hour)
		stop() // its function is dropped, not kept until ctx ends
		if n := len(ctx.after); n != 100 {
			t.Fatalf("%d functions registered for 100 live derived contexts", n)
		}
		ran := make(chan struct{})
		context.AfterFunc(ctx, func() { close(ran) })
		ctx.cancel()
		for _, c := range children {
			<-c.Done()
			if !errors.Is(c.Err(), context.Canceled) {
				t.Fatalf("derived: %v", c.Err())
			}
		}
		<-ran
		late, stop := context.WithCancel(ctx)
		defer stop()
		<-late.Done() // derived after the end: ended at once
	})
}

// A handler waiting on its call's context sees it end when the client's
// connection closes (the contexts do not watch the connection's).
func TestConnectionCloseEndsCalls(t *testing.T) {
	svc := newService()
	addr := serve(t, svc, Options{})
	conn := Dial(addr, ClientOptions{})
	api := pb.NewMeridianClient(conn)
	go api.GetData(context.Background(), &pb.ReadRequest{Path: "/block"})
	<-svc.entered
	conn.Close()
	select {
	case err := <-svc.blocked:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("handler's context: %v, want Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never saw the connection close")
	}
}
