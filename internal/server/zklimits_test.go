package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/zkproto"
)

// TestZKClientThatDoesNotRead: a client that pipelines requests for large
// replies without reading them must not make the server buffer those
// replies (the queue was bounded by frames only: 10,000 replies of 512 KiB
// each is 5 GiB), must not hold up other clients, and, once it reads, gets
// every reply in order. The server stops reading its requests while more
// than zkReadPauseBytes of replies wait, so TCP holds the client back.
func TestZKClientThatDoesNotRead(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	tc.leader()
	addr := tc.zkAddrs()[0]
	other, _ := zkConnect(t, []string{addr})
	big := bytes.Repeat([]byte("m"), 512<<10)
	if _, err := other.Create("/big", big, 0, gozk.WorldACL(gozk.PermAll)); err != nil {
		t.Fatal(err)
	}
	const n = 800 // 400 MiB of replies
	c, _ := rawSession(t, addr, 0, nil, 0)
	go func() {
		for i := 1; i <= n; i++ {
			e := zkproto.NewEncoder(nil)
			(&zkproto.RequestHeader{Xid: int32(i), Type: zkproto.OpGetData}).Encode(e)
			(&zkproto.GetDataRequest{Path: "/big"}).Encode(e)
			if _, err := c.Write(zkproto.AppendFrame(nil, e.Bytes())); err != nil {
				return
			}
		}
	}()
	// Let the server serve what it will while nothing is read.
	time.Sleep(time.Second)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if ms.HeapAlloc > 128<<20 {
		t.Errorf("heap %d MiB while a client does not read its replies: the server buffers them", ms.HeapAlloc>>20)
	}
	// Others are served meanwhile.
	start := time.Now()
	if _, _, err := other.Exists("/big"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("another client waited %v", d)
	}
	// The slow client was held back, not dropped: every reply arrives, in order.
	for i := 1; i <= n; i++ {
		var got zkproto.GetDataResponse
		h := rawReply(t, c, &got)
		if h.Xid != int32(i) || h.Err != 0 || len(got.Data) != len(big) {
			t.Fatalf("reply %d: header %+v, %d bytes", i, h, len(got.Data))
		}
	}
}

// refused reports whether the server closed c without a reply to its
// connect request (a connection or session refused at a limit).
func refused(t *testing.T, addr string) bool {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req, err := zkproto.AppendRecordFrame(nil, &zkproto.ConnectRequest{TimeOut: 4000, Passwd: make([]byte, 16)})
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(req); err != nil {
		return true
	}
	var b [1]byte
	_, err = io.ReadFull(c, b[:])
	return err != nil
}

// fillTo opens limit sessions on addr and checks that one more is refused.
func fillTo(t *testing.T, addr string, limit int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, limit)
	for i := range conns {
		conns[i], _ = rawSession(t, addr, 0, nil, 0)
	}
	if !refused(t, addr) {
		t.Fatalf("session %d was served; the limit is %d", limit+1, limit)
	}
	return conns
}

// At max_client_connections the ZooKeeper port closes a new connection at
// once, keeps serving the ones it has, and takes new ones again when one
// closes.
func TestZKConnectionLimit(t *testing.T) {
	const limit = 20
	tc := newTestCluster(t, 1, func(c *Config) { c.MaxClientConnections = limit })
	tc.leader()
	addr := tc.zkAddrs()[0]
	conns := fillTo(t, addr, limit)
	// The connections it has are still served.
	rawRequest(t, conns[0], 1, zkproto.OpExists, &zkproto.ExistsRequest{Path: "/"})
	if h := rawReply(t, conns[0], &zkproto.ExistsResponse{}); h.Xid != 1 || h.Err != 0 {
		t.Fatalf("exists on a connection within the limit: %+v", h)
	}
	conns[1].Close()
	deadline := time.Now().Add(5 * time.Second)
	for refused(t, addr) {
		if time.Now().After(deadline) {
			t.Fatal("a new connection is still refused after one of the connections closed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// At max_sessions a new session is refused on both ports (the ZooKeeper
// port closes the connection, as ZooKeeper does when it cannot serve; the
// native API answers RESOURCE_EXHAUSTED), sessions already open keep
// working, and a new one is admitted once one has ended.
func TestSessionLimit(t *testing.T) {
	const limit = 10
	tc := newTestCluster(t, 1, func(c *Config) { c.MaxSessions = limit })
	tc.leader()
	addr := tc.zkAddrs()[0]
	conns := fillTo(t, addr, limit)
	gc, err := grpc.NewClient(tc.servers[0].GRPCAddr(), tc.dialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	native := pb.NewMeridianClient(gc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := native.CreateSession(ctx, &pb.CreateSessionRequest{TimeoutMs: 4000}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("native session beyond the limit: %v, want ResourceExhausted", err)
	}
	rawRequest(t, conns[0], 1, zkproto.OpCreate, &zkproto.CreateRequest{Path: "/x", ACL: []zkproto.ACL{{Perms: gozk.PermAll, ID: zkproto.Id{Scheme: "world", ID: "anyone"}}}})
	if h := rawReply(t, conns[0], &zkproto.CreateResponse{}); h.Xid != 1 || h.Err != 0 {
		t.Fatalf("create in a session within the limit: %+v", h)
	}
	// Close one session (closeSession, no body): a new one is admitted.
	e := zkproto.NewEncoder(nil)
	(&zkproto.RequestHeader{Xid: 2, Type: zkproto.OpCloseSession}).Encode(e)
	if _, err := conns[1].Write(zkproto.AppendFrame(nil, e.Bytes())); err != nil {
		t.Fatal(err)
	}
	rawReply(t, conns[1], nil)
	if _, err := native.CreateSession(ctx, &pb.CreateSessionRequest{TimeoutMs: 4000}); err != nil {
		t.Fatalf("native session after one ended: %v", err)
	}
}

// Thousands of ZooKeeper sessions, each with a data watch on one node: a
// change notifies every one of them, another client is served meanwhile,
// and the server's memory stays bounded.
func TestZKThousandsOfWatchers(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 200
	}
	// Every session connects from 127.0.0.1: no per-address cap, as
	// ZooKeeper would need maxClientCnxns=0 for this.
	tc := newTestCluster(t, 1, func(c *Config) { c.MaxClientCnxns = new(int) })
	tc.leader()
	addr := tc.zkAddrs()[0]
	other, _ := zkConnect(t, []string{addr})
	if _, err := other.Create("/w", []byte("0"), 0, gozk.WorldACL(gozk.PermAll)); err != nil {
		t.Fatal(err)
	}
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	errc := make(chan error, n)
	sem := make(chan struct{}, 64) // handshakes in flight
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			c, err := watchData(addr, "/w")
			if err != nil {
				errc <- fmt.Errorf("session %d: %w", i, err)
				return
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if _, err := other.Set("/w", []byte("1"), -1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, _, err := other.Get("/w"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("another client waited %v while %d notifications went out", d, n)
	}
	for i, c := range conns {
		var ev zkproto.WatcherEvent
		h := rawReply(t, c, &ev)
		if h.Xid != -1 || ev.Path != "/w" || ev.Type != 3 { // -1: notification; 3: NodeDataChanged
			t.Fatalf("session %d: %+v %+v, want a data-changed notification for /w", i, h, ev)
		}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	// 32 KiB per connection and its session and watch, over a 16 MiB base:
	// each connection's 64 KiB read and write buffers came to 128 KiB
	// (262 MiB here, 1.25 GiB at the 10,000-connection limit); now ~10 KiB.
	if limit := uint64(n)*32<<10 + 16<<20; ms.HeapAlloc > limit {
		t.Errorf("heap %d MiB with %d sessions and watches, over %d MiB", ms.HeapAlloc>>20, n, limit>>20)
	}
}

// watchData opens a ZooKeeper session on addr and reads path with a data
// watch (errors, not t.Fatal: it runs in its own goroutine).
func watchData(addr, path string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	frame, err := zkproto.AppendRecordFrame(nil, &zkproto.ConnectRequest{TimeOut: 30000, Passwd: make([]byte, 16)})
	if err == nil {
		e := zkproto.NewEncoder(nil)
		(&zkproto.RequestHeader{Xid: 1, Type: zkproto.OpGetData}).Encode(e)
		(&zkproto.GetDataRequest{Path: path, Watch: true}).Encode(e)
		frame = zkproto.AppendFrame(frame, e.Bytes())
		_, err = c.Write(frame)
	}
	for i := 0; err == nil && i < 2; i++ { // the connect response, the reply
		var n [4]byte
		if _, err = io.ReadFull(c, n[:]); err == nil {
			_, err = io.ReadFull(c, make([]byte, binary.BigEndian.Uint32(n[:])))
		}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
