package client

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/testutil"
	"github.com/meridian-coord/meridian/internal/wire"
)

// answering is a server that answers at once: a session, keepalives, a
// watch stream that stays open, and writes of one znode with a header and
// stat as a member's (each write a new zxid and view).
type answering struct {
	pb.UnimplementedMeridianServer
	zxid atomic.Int64
}

func (a *answering) header() *pb.Header {
	z := a.zxid.Add(1)
	return &pb.Header{Zxid: z, MemberId: 1, LeaderId: 1, Term: 2, View: "1:" + strconv.FormatInt(z, 10)}
}

func (a *answering) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	return &pb.StatusResponse{}, nil
}

func (a *answering) CreateSession(context.Context, *pb.CreateSessionRequest) (*pb.CreateSessionResponse, error) {
	return &pb.CreateSessionResponse{Header: a.header(), SessionId: 7, Password: []byte("0123456789abcdef"), TimeoutMs: 10000}, nil
}

func (a *answering) KeepAlive(context.Context, *pb.KeepAliveRequest) (*pb.KeepAliveResponse, error) {
	return &pb.KeepAliveResponse{Header: &pb.Header{Zxid: a.zxid.Load(), MemberId: 1, LeaderId: 1}}, nil
}

func (a *answering) Watch(_ *pb.WatchRequest, s grpc.ServerStreamingServer[pb.WatchEvent]) error {
	<-s.Context().Done()
	return s.Context().Err()
}

func (a *answering) SetData(_ context.Context, r *pb.SetDataRequest) (*pb.SetDataResponse, error) {
	h := a.header()
	return &pb.SetDataResponse{Header: h, Stat: &pb.Stat{Czxid: 1, Mzxid: h.Zxid, Ctime: 1, Mtime: 2, Version: 3, DataLength: int32(len(r.Data))}}, nil
}

// BenchmarkCallPath is the native API's own cost of a write: closed-loop
// clients, each its own session and connection, calling Set over the lean
// transport on loopback against a server whose handler answers at once, so
// what is measured is the client's call path and the transport's two ends
// (framing, metadata, view, reply decoding), not raft or the tree.
// cpu-µs/op is the process's (both ends). Nothing is asserted.
// Run: go test -run '^$' -bench CallPath -benchmem ./client
func BenchmarkCallPath(b *testing.B) {
	for _, n := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) { benchCallPath(b, n) })
	}
}

func benchCallPath(b *testing.B, clients int) {
	srv := wire.NewServer(&pb.Meridian_ServiceDesc, &answering{}, wire.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	rest := srv.Split(ln)
	defer rest.Close()
	defer srv.Close(time.Second)
	ctx := context.Background()
	cls := make([]*Client, clients)
	for i := range cls {
		c, err := New(ctx, Config{Endpoints: []string{ln.Addr().String()}, KeepEndpointOrder: true, FailFast: true})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		cls[i] = c
	}
	val := make([]byte, 100)
	per := b.N/clients + 1
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := testutil.ProcessCPU()
	for _, c := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if _, err := c.Set(ctx, "/k", val, -1); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64((testutil.ProcessCPU()-cpu0).Nanoseconds())/1e3/float64(per*clients), "cpu-µs/op")
}
