package wire

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/pki"
)

// service answers the calls the tests make.
type service struct {
	pb.UnimplementedMeridianServer
	blocked  chan error    // GetData of "/block" reports its ctx's end here
	entered  chan struct{} // and that it started here
	sent     atomic.Int64
	streamed chan struct{} // closed when Watch has sent everything
	release  chan struct{} // GetData of "/waits" waits for it
	once     sync.Once
}

func (s *service) GetData(ctx context.Context, r *pb.ReadRequest) (*pb.GetDataResponse, error) {
	switch r.GetPath() {
	case "/block":
		select {
		case s.entered <- struct{}{}:
		default:
		}
		_, hasDeadline := ctx.Deadline()
		<-ctx.Done()
		err := ctx.Err()
		if hasDeadline {
			err = errors.New("had a deadline: " + err.Error())
		}
		select {
		case s.blocked <- err:
		default: // nobody is listening (the fuzz test)
		}
		return nil, ctx.Err()
	case "/waits":
		s.entered <- struct{}{}
		Waits(ctx)
		<-s.release
		return &pb.GetDataResponse{}, nil
	case "/fail":
		return nil, status.Error(codes.FailedPrecondition, "node is not empty")
	case "/incoming":
		// The call's metadata as IncomingMetadata has it, "k=v" sorted.
		md, ok := IncomingMetadata(ctx)
		if !ok {
			return nil, status.Error(codes.Internal, "no IncomingMetadata")
		}
		var kv []string
		for k, vs := range md {
			for _, v := range vs {
				kv = append(kv, k+"="+v)
			}
		}
		slices.Sort(kv)
		return &pb.GetDataResponse{Data: []byte(strings.Join(kv, " "))}, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	_ = grpc.SetHeader(ctx, metadata.Pairs("echo", strings.Join(md.Get("x-test"), ",")))
	who := "plaintext"
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			who = ti.State.PeerCertificates[0].Subject.CommonName
		}
	}
	return &pb.GetDataResponse{Data: []byte(r.GetPath() + " " + who)}, nil
}

// Watch sends 64 events with 256 KiB paths: four times the stream window.
func (s *service) Watch(r *pb.WatchRequest, stream pb.Meridian_WatchServer) error {
	path := strings.Repeat("x", 256<<10)
	for i := 0; i < 64; i++ {
		if err := stream.Send(&pb.WatchEvent{Path: path, Zxid: int64(i)}); err != nil {
			return err
		}
		s.sent.Add(1)
	}
	s.once.Do(func() { close(s.streamed) })
	return status.Error(codes.Aborted, "stream done")
}

func newService() *service {
	return &service{blocked: make(chan error, 4), entered: make(chan struct{}, 4), streamed: make(chan struct{}),
		release: make(chan struct{})}
}

// serve starts a Server for svc behind Split and a gRPC server on the
// same port; it returns the address.
func serve(t *testing.T, svc *service, opts Options) string {
	t.Helper()
	_, addr := serveServer(t, svc, opts, 0)
	return addr
}

// serveServer is serve, returning the Server too, whose inlineGrace is
// grace unless 0.
func serveServer(t *testing.T, svc *service, opts Options, grace time.Duration) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var gopts []grpc.ServerOption
	if opts.TLS != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	gs := grpc.NewServer(gopts...)
	pb.RegisterMeridianServer(gs, svc)
	ws := NewServer(&pb.Meridian_ServiceDesc, svc, opts)
	if grace > 0 {
		ws.grace = grace
	}
	go gs.Serve(ws.Split(ln))
	t.Cleanup(func() { gs.Stop(); ws.Close(time.Second) })
	return ws, ln.Addr().String()
}

// testPKI returns a server TLS configuration that verifies client
// certificates when given, and a client one with the certificate "alice".
func testPKI(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	ca, err := pki.NewCA("test ca")
	if err != nil {
		t.Fatal(err)
	}
	member, err := ca.IssueMember("member-1.meridian", []string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	alice, err := ca.IssueClient("alice", "")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	server = &tls.Config{Certificates: []tls.Certificate{member.TLSCertificate()}, ClientCAs: pool,
		ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}
	client = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{alice.TLSCertificate()}, MinVersion: tls.VersionTLS12}
	return server, client
}

func TestUnaryCall(t *testing.T) {
	serverTLS, clientTLS := testPKI(t)
	for _, tc := range []struct {
		name         string
		server, conn *tls.Config
		who          string
	}{{"plaintext", nil, nil, "plaintext"}, {"tls", serverTLS, clientTLS, "alice"}} {
		t.Run(tc.name, func(t *testing.T) {
			addr := serve(t, newService(), Options{TLS: tc.server})
			conn := Dial(addr, ClientOptions{TLS: tc.conn})
			defer conn.Close()
			api := pb.NewMeridianClient(conn)
			ctx := metadata.AppendToOutgoingContext(context.Background(), "X-Test", "a", "x-test", "b")
			var header metadata.MD
			r, err := api.GetData(ctx, &pb.ReadRequest{Path: "/n"}, grpc.Header(&header))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := string(r.GetData()), "/n "+tc.who; got != want {
				t.Errorf("reply %q, want %q (the caller's identity from the handshake)", got, want)
			}
			if got := header.Get("echo"); len(got) != 1 || got[0] != "a,b" {
				t.Errorf("header echo = %q, want the request's metadata [a,b] back", got)
			}
			_, err = api.GetData(ctx, &pb.ReadRequest{Path: "/fail"})
			if s := status.Convert(err); s.Code() != codes.FailedPrecondition || s.Message() != "node is not empty" {
				t.Errorf("error status %v, want FailedPrecondition 'node is not empty'", err)
			}
			_, err = api.Create(ctx, &pb.CreateRequest{Path: "/c"})
			if status.Code(err) != codes.Unimplemented {
				t.Errorf("unimplemented method: %v", err)
			}
		})
	}
}

// TestCallMetadata: pairs passed as the CallMetadata option reach the
// handler after the context's, its header comes back through it, and a
// connection's metadata decodes right whether its strings are kept
// (repeated keys and values) or not (more keys than it keeps, a value
// that changes).
func TestCallMetadata(t *testing.T) {
	addr := serve(t, newService(), Options{})
	conn := Dial(addr, ClientOptions{})
	defer conn.Close()
	api := pb.NewMeridianClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "X-Test", "a")
	var header metadata.MD
	if _, err := api.GetData(ctx, &pb.ReadRequest{Path: "/n"}, &CallMetadata{Out: []string{"x-test", "c", "x-test", "d"}, Header: &header}); err != nil {
		t.Fatal(err)
	}
	if got := header.Get("echo"); len(got) != 1 || got[0] != "a,c,d" {
		t.Errorf("header echo = %q, want the context's pair then CallMetadata's: [a,c,d]", got)
	}
	for i := 0; i < 2*maxInterned; i++ {
		out := []string{"same", "value", "counter", strconv.Itoa(i), "key-" + strconv.Itoa(i), "v"}
		r, err := api.GetData(context.Background(), &pb.ReadRequest{Path: "/incoming"}, &CallMetadata{Out: out})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"counter=" + strconv.Itoa(i), "key-" + strconv.Itoa(i) + "=v", "same=value"}
		slices.Sort(want)
		if got := string(r.GetData()); got != strings.Join(want, " ") {
			t.Fatalf("call %d: the handler saw %q, want %q", i, got, strings.Join(want, " "))
		}
	}
	if _, err := api.GetData(context.Background(), &pb.ReadRequest{Path: "/n"}, &CallMetadata{Out: []string{"odd"}}); status.Code(err) != codes.Internal {
		t.Errorf("a key without a value: %v, want Internal", err)
	}
}

// counterPairs appends "counter" with its value and then "k<i>"="v" pairs
// up to n in all, as many as the frame has room for.
type counterPairs struct {
	value int
	n     int
}

func (c counterPairs) AppendPairs(b []byte, max int) ([]byte, int) {
	added, at := 0, 0
	for ; added < c.n && added < max; added++ {
		key := "k" + strconv.Itoa(added)
		if added == 0 {
			key = "counter"
		}
		b, at = BeginPair(b, key)
		if added == 0 {
			b = strconv.AppendInt(b, int64(c.value), 10)
		} else {
			b = append(b, 'v')
		}
		b = EndPair(b, at)
	}
	return b, added
}

// TestCallPairs: Call sends the context's metadata and then the pairs its
// Pairs append, which the handler sees as sent (a value that changes from
// call to call included); the reply's header comes back; pairs beyond
// maxMetadataPairs in all are not sent, and the frame stays well formed.
func TestCallPairs(t *testing.T) {
	addr := serve(t, newService(), Options{})
	conn := Dial(addr, ClientOptions{})
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "X-Test", "a")
	var header metadata.MD
	r := &pb.GetDataResponse{}
	if err := conn.Call(ctx, pb.Meridian_GetData_FullMethodName, &pb.ReadRequest{Path: "/n"}, r, nil, &header); err != nil {
		t.Fatal(err)
	}
	if got := header.Get("echo"); len(got) != 1 || got[0] != "a" || string(r.GetData()) != "/n plaintext" {
		t.Errorf("header echo = %q, reply %q: want [a] and \"/n plaintext\"", got, r.GetData())
	}
	for i := 0; i < 3; i++ {
		if err := conn.Call(ctx, pb.Meridian_GetData_FullMethodName, &pb.ReadRequest{Path: "/incoming"}, r, counterPairs{value: 1000 + i, n: 2}, nil); err != nil {
			t.Fatal(err)
		}
		if got, want := string(r.GetData()), "counter="+strconv.Itoa(1000+i)+" k1=v x-test=a"; got != want {
			t.Errorf("call %d: the handler saw %q, want %q", i, got, want)
		}
	}
	if err := conn.Call(context.Background(), pb.Meridian_GetData_FullMethodName, &pb.ReadRequest{Path: "/incoming"}, r, counterPairs{value: 7, n: maxMetadataPairs + 5}, nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(r.GetData()), "="); got != maxMetadataPairs {
		t.Errorf("%d pairs arrived of %d appended, want the first %d", got, maxMetadataPairs+5, maxMetadataPairs)
	}
	ctx = metadata.AppendToOutgoingContext(context.Background(), "x-test", "a", "x-test", "b")
	if err := conn.Call(ctx, pb.Meridian_GetData_FullMethodName, &pb.ReadRequest{Path: "/incoming"}, r, counterPairs{value: 7, n: maxMetadataPairs}, nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(r.GetData()), "="); got != maxMetadataPairs || !strings.Contains(string(r.GetData()), "x-test=b") {
		t.Errorf("the context's 2 pairs and %d appended: the handler saw %d pairs (%q), want the context's and the first %d appended",
			maxMetadataPairs, got, r.GetData(), maxMetadataPairs-2)
	}
}

func TestTLSRequiredWhenServerIsSecure(t *testing.T) {
	serverTLS, _ := testPKI(t)
	addr := serve(t, newService(), Options{TLS: serverTLS})
	conn := Dial(addr, ClientOptions{DialTimeout: 2 * time.Second})
	defer conn.Close()
	_, err := pb.NewMeridianClient(conn).GetData(context.Background(), &pb.ReadRequest{Path: "/n"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("plaintext call to a TLS server: %v, want Unavailable", err)
	}
}

func TestDeadlineAndCancelReachTheHandler(t *testing.T) {
	svc := newService()
	addr := serve(t, svc, Options{})
	conn := Dial(addr, ClientOptions{})
	defer conn.Close()
	api := pb.NewMeridianClient(conn)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := api.GetData(ctx, &pb.ReadRequest{Path: "/block"})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("call past its deadline: %v, want DeadlineExceeded", err)
	}
	// The handler's context had the call's deadline (the client's cancel
	// may still reach it first).
	if err := <-svc.blocked; !strings.HasPrefix(err.Error(), "had a deadline") {
		t.Errorf("handler's context ended with %v, want it to have had the deadline", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err = api.GetData(ctx, &pb.ReadRequest{Path: "/block"})
	if status.Code(err) != codes.Canceled {
		t.Errorf("cancelled call: %v, want Canceled", err)
	}
	select {
	case err := <-svc.blocked:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("handler's context: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler never saw the cancellation")
	}
	// The connection still serves.
	if _, err := api.GetData(context.Background(), &pb.ReadRequest{Path: "/n"}); err != nil {
		t.Fatal(err)
	}
}

func TestStreamHeldByTheClientsWindow(t *testing.T) {
	svc := newService()
	addr := serve(t, svc, Options{})
	conn := Dial(addr, ClientOptions{})
	defer conn.Close()
	stream, err := pb.NewMeridianClient(conn).Watch(context.Background(), &pb.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing read yet: the server stops when the window is spent (one
	// message may overdraw it).
	time.Sleep(300 * time.Millisecond)
	perWindow := int64(StreamWindowBytes/(256<<10)) + 1
	if n := svc.sent.Load(); n > perWindow {
		t.Fatalf("server sent %d messages before the client read any, window holds %d", n, perWindow)
	}
	for i := 0; i < 64; i++ {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if ev.GetZxid() != int64(i) || len(ev.GetPath()) != 256<<10 {
			t.Fatalf("message %d: zxid %d, %d bytes", i, ev.GetZxid(), len(ev.GetPath()))
		}
	}
	<-svc.streamed
	if _, err := stream.Recv(); status.Code(err) != codes.Aborted {
		t.Fatalf("end of stream: %v, want the handler's Aborted", err)
	}
}

func TestGRPCSharesThePort(t *testing.T) {
	serverTLS, clientTLS := testPKI(t)
	addr := serve(t, newService(), Options{TLS: serverTLS})
	gc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	r, err := pb.NewMeridianClient(gc).GetData(context.Background(), &pb.ReadRequest{Path: "/g"})
	if err != nil || string(r.GetData()) != "/g alice" {
		t.Fatalf("gRPC on the shared port: %v %q", err, r.GetData())
	}
	addr = serve(t, newService(), Options{})
	gc2, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer gc2.Close()
	if _, err := pb.NewMeridianClient(gc2).GetData(context.Background(), &pb.ReadRequest{Path: "/g"}); err != nil {
		t.Fatalf("plaintext gRPC on the shared port: %v", err)
	}
}

func TestConcurrentCallsBounded(t *testing.T) {
	svc := newService()
	svc.blocked = make(chan error, 8)
	addr := serve(t, svc, Options{MaxConcurrentCalls: 2})
	// A client that does not keep to the server's limit.
	conn := Dial(addr, ClientOptions{MaxConcurrentCalls: 8})
	defer conn.Close()
	api := pb.NewMeridianClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < 2; i++ {
		go api.GetData(ctx, &pb.ReadRequest{Path: "/block"})
	}
	<-svc.entered
	<-svc.entered
	_, err := api.GetData(context.Background(), &pb.ReadRequest{Path: "/n"})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a third call with two blocked: %v, want ResourceExhausted", err)
	}
	cancel()
	<-svc.blocked
	<-svc.blocked
	if _, err := api.GetData(context.Background(), &pb.ReadRequest{Path: "/n"}); err != nil {
		t.Fatalf("after the blocked calls ended: %v", err)
	}
}

func TestIdleConnectionClosedAndRedialled(t *testing.T) {
	svc := newService()
	addr := serve(t, svc, Options{IdleTimeout: 100 * time.Millisecond})
	conn := Dial(addr, ClientOptions{})
	defer conn.Close()
	api := pb.NewMeridianClient(conn)
	if _, err := api.GetData(context.Background(), &pb.ReadRequest{Path: "/n"}); err != nil {
		t.Fatal(err)
	}
	first := conn.cur
	deadline := time.Now().Add(5 * time.Second)
	for !first.broken() {
		if time.Now().After(deadline) {
			t.Fatal("idle connection not closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := api.GetData(context.Background(), &pb.ReadRequest{Path: "/n"}); err != nil {
		t.Fatalf("call after the idle close: %v", err)
	}
	// A call in flight keeps the connection open past the idle timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	_, err := api.GetData(ctx, &pb.ReadRequest{Path: "/block"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call outliving the idle timeout: %v, want its own deadline", err)
	}
	<-svc.blocked
}

// frame builds a raw frame.
func frame(kind byte, id uint32, body []byte) []byte {
	b, start := beginFrame(nil, kind, id)
	return endFrame(append(b, body...), start)
}

func callBody(method string, payload []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(method)))
	b = append(b, method...)
	b = binary.BigEndian.AppendUint64(b, 0)
	b = binary.BigEndian.AppendUint16(b, 0)
	return append(b, payload...)
}

// TestMalformedInputClosesTheConnection: bad frames close the connection
// that sent them; the server goes on serving others.
func TestMalformedInputClosesTheConnection(t *testing.T) {
	addr := serve(t, newService(), Options{})
	getData := pb.Meridian_GetData_FullMethodName
	for name, input := range map[string][]byte{
		"bad preface":       []byte("MRDNXXXX"),
		"oversized frame":   append([]byte(Preface), 0xff, 0xff, 0xff, 0xff, kindCall, 0, 0, 0, 1),
		"short frame":       append([]byte(Preface), 0, 0, 0, 1, kindCall, 0, 0, 0, 1),
		"unknown kind":      append([]byte(Preface), frame(99, 1, nil)...),
		"truncated call":    append([]byte(Preface), frame(kindCall, 1, []byte{0, 200, 'x'})...),
		"bad metadata":      append([]byte(Preface), frame(kindCall, 1, append(callBody(getData, nil)[:len(getData)+10], 0xff, 0xff))...),
		"reply from client": append([]byte(Preface), frame(kindReply, 1, nil)...),
		"bad credit":        append([]byte(Preface), frame(kindCredit, 1, []byte{1})...),
	} {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(input); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadAll(c); err != nil {
				t.Fatalf("want the server to close the connection, got %v", err)
			}
		})
	}
	// A malformed request message is refused, and the connection lives on.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := append([]byte(Preface), frame(kindCall, 7, callBody(getData, []byte{0xff, 0xff, 0xff}))...)
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	kind, id, body, _, err := readFrame(bufio.NewReader(c), nil)
	if err != nil || kind != kindReply || id != 7 {
		t.Fatalf("reply to a malformed message: kind %d id %d err %v", kind, id, err)
	}
	d := decoder{b: body}
	d.metadata(nil)
	if d.err != nil {
		t.Fatalf("reply to a malformed message: header: %v", d.err)
	}
	if st, _, err := decodeStatus(d.b); err != nil || st == nil || codes.Code(st.GetCode()) != codes.Internal {
		t.Fatalf("status of a malformed message: %v %v", st, err)
	}
	conn := Dial(addr, ClientOptions{})
	defer conn.Close()
	if _, err := pb.NewMeridianClient(conn).GetData(context.Background(), &pb.ReadRequest{Path: "/n"}); err != nil {
		t.Fatalf("server after malformed input: %v", err)
	}
}

func TestUnsupportedCallOptionRefused(t *testing.T) {
	addr := serve(t, newService(), Options{})
	conn := Dial(addr, ClientOptions{})
	defer conn.Close()
	_, err := pb.NewMeridianClient(conn).GetData(context.Background(), &pb.ReadRequest{Path: "/n"}, grpc.UseCompressor("gzip"))
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("a compressor: %v, want it refused", err)
	}
}

// FuzzServeConn: whatever a client sends after the preface, the server
// neither panics nor hangs past the input.
func FuzzServeConn(f *testing.F) {
	f.Add(frame(kindCall, 1, callBody(pb.Meridian_GetData_FullMethodName, nil)))
	f.Add(frame(kindCall, 1, callBody(pb.Meridian_Watch_FullMethodName, nil)))
	f.Add(frame(kindCredit, 1, []byte{0, 0, 1, 0}))
	f.Add(frame(kindCancel, 1, nil))
	svc := newService()
	ws := NewServer(&pb.Meridian_ServiceDesc, svc, Options{})
	f.Fuzz(func(t *testing.T, input []byte) {
		server, client := net.Pipe()
		done := make(chan struct{})
		go func() { ws.ServeConn(server); close(done) }()
		go io.Copy(io.Discard, client)
		_ = client.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = client.Write(input)
		client.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("connection not closed after its input ended")
		}
	})
}

// TestSharedMetadataBlock: a server connection decodes a metadata block
// sent again to the callMD it made of it before, and a changed block (or
// one after a block too large to keep) to a new one with its own values;
// a block whose keys are the last one's shares its keys, and costs one
// allocation and its new value, not a map; looking up a key sent once
// makes nothing.
func TestSharedMetadataBlock(t *testing.T) {
	in := &interner{share: true}
	decode := func(b []byte) *callMD {
		t.Helper()
		d := decoder{b: append(b, 0xAA)} // a byte after the block stays unread
		m := d.callMetadata(in, nil)
		if d.err != nil || len(d.b) != 1 || d.b[0] != 0xAA {
			t.Fatalf("decode: err %v, %d bytes left", d.err, len(d.b))
		}
		return m
	}
	a := appendMetadata(nil, nil, []string{"user", "alice", "seen", "7"})
	first := decode(slices.Clone(a))
	again := decode(slices.Clone(a))
	if first != again || again.get("seen")[0] != "7" {
		t.Fatalf("the same block decoded to another callMD: %v, %v", first.MD(), again.MD())
	}
	if reflect.ValueOf(first.MD()).Pointer() != reflect.ValueOf(again.MD()).Pointer() {
		t.Fatal("the same block's map made twice")
	}
	b := appendMetadata(nil, nil, []string{"user", "alice", "seen", "8"})
	changed := decode(slices.Clone(b))
	if changed.get("seen")[0] != "8" || first.get("seen")[0] != "7" || first.MD().Get("seen")[0] != "7" {
		t.Fatalf("a changed block: %v (the first still %v)", changed.MD(), first.MD())
	}
	if &changed.keys[0] != &first.keys[0] {
		t.Fatal("a block with the last one's keys did not share them")
	}
	blocks := [2][]byte{a, b}
	i := 0
	if n := testing.AllocsPerRun(100, func() {
		i++
		d := decoder{b: blocks[i%2]}
		if m := d.callMetadata(in, nil); d.err != nil || m.get("seen")[0] != string("78"[i%2]) {
			t.Fatalf("block %d: %v %v", i, m.MD(), d.err)
		}
	}); n > 2 {
		t.Errorf("%.1f allocations a block whose value changed, want 2 (the callMD, the value)", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		if changed.get("user")[0] != "alice" || changed.get("nobody") != nil {
			t.Fatal("get")
		}
	}); n != 0 {
		t.Errorf("%.1f allocations a lookup, want 0", n)
	}
	// Pairs in other places, a key in upper case, a key sent twice.
	for _, c := range []struct {
		kv   []string
		want metadata.MD
	}{
		{[]string{"seen", "9", "User", "bob"}, metadata.MD{"seen": {"9"}, "user": {"bob"}}},
		{[]string{"seen", "9", "user", "bob", "x", "1", "X", "2"}, metadata.MD{"seen": {"9"}, "user": {"bob"}, "x": {"1", "2"}}},
		{[]string{"user", "alice"}, metadata.MD{"user": {"alice"}}},
		{[]string{"user", "alice", "seen", "8"}, metadata.MD{"user": {"alice"}, "seen": {"8"}}},
	} {
		m := decode(appendMetadata(nil, nil, c.kv))
		if !reflect.DeepEqual(m.MD(), c.want) {
			t.Fatalf("%q decoded to %v, want %v", c.kv, m.MD(), c.want)
		}
		for k, vs := range c.want {
			if got := m.get(k); !slices.Equal(got, vs) {
				t.Fatalf("%q: get(%q) = %q, want %q", c.kv, k, got, vs)
			}
		}
	}
	if first.get("seen")[0] != "7" || len(first.MD()) != 2 {
		t.Fatalf("the first block's metadata changed: %v", first.MD())
	}
	big := appendMetadata(nil, nil, []string{"user", strings.Repeat("x", maxInternedValue+1)})
	decode(slices.Clone(big))
	if in.cur != nil || len(in.prev) != 0 {
		t.Fatalf("kept the pairs of a block with a value of %d bytes", maxInternedValue+1)
	}
	if m := decode(slices.Clone(b)); m.get("seen")[0] != "8" {
		t.Fatalf("after a large block: %v", m.MD())
	}
}

// A read that arrives alone is served by the goroutine that read it, which
// then reads on: no worker is started for a client that waits for each
// reply.
func TestLoneReadsServedByTheReader(t *testing.T) {
	ws, addr := serveServer(t, newService(), getDataInline, time.Hour) // a slow machine's read is not handed on either
	conn := Dial(addr, ClientOptions{})
	defer conn.Close()
	api := pb.NewMeridianClient(conn)
	for i := 0; i < 100; i++ {
		if _, err := api.GetData(context.Background(), &pb.ReadRequest{Path: "/n"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := ws.workers.Load(); n != 0 {
		t.Errorf("%d workers started for 100 reads made one at a time, want 0", n)
	}
	// A method not named Inline goes to a worker.
	if _, err := api.Exists(context.Background(), &pb.ReadRequest{Path: "/n"}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Exists: %v, want Unimplemented from the test service", err)
	}
	// (The worker counts itself once the call has been answered.)
	for deadline := time.Now().Add(5 * time.Second); ws.workers.Load() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers after a call of a method not inline, want 1", ws.workers.Load())
		}
	}
}

// A read that says it waits (Waits) lets the connection's next call be
// read at once, not after inlineGrace.
func TestWaitsReadsOn(t *testing.T) {
	svc := newService()
	_, addr := serveServer(t, svc, getDataInline, time.Hour) // without Waits, the next call would wait an hour
	testNextCallAnswered(t, svc, addr, "/waits", func() { close(svc.release) })
}

// A read that blocks without saying so loses the reading after
// inlineGrace: the connection's next call is answered meanwhile.
func TestBlockedReadHandsOnTheReading(t *testing.T) {
	svc := newService()
	_, addr := serveServer(t, svc, getDataInline, 0)
	testNextCallAnswered(t, svc, addr, "/block", nil)
}

// testNextCallAnswered starts a read of path, which blocks, and checks
// that a second call on the same connection is answered while it does;
// release (nil: cancel) ends the first.
func testNextCallAnswered(t *testing.T, svc *service, addr, path string, release func()) {
	t.Helper()
	conn := Dial(addr, ClientOptions{})
	defer conn.Close()
	api := pb.NewMeridianClient(conn)
	first, cancelFirst := context.WithCancel(context.Background())
	defer cancelFirst()
	done := make(chan error, 1)
	go func() {
		_, err := api.GetData(first, &pb.ReadRequest{Path: path})
		done <- err
	}()
	<-svc.entered
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := api.GetData(ctx, &pb.ReadRequest{Path: "/n"}); err != nil {
		t.Fatalf("a call behind a blocked %s: %v", path, err)
	}
	if release != nil {
		release()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return
	}
	cancelFirst()
	<-done
}

// getDataInline is the Options of the tests of reads served inline.
var getDataInline = Options{Inline: func(m string) bool { return m == pb.Meridian_GetData_FullMethodName }}

// Calls that arrive while the server closes are either counted before
// Close waits for them or refused: no call starts during the wait (the
// race detector reports a call counted from zero while Close waits).
func TestCallsDuringClose(t *testing.T) {
	for round := 0; round < 50; round++ {
		ws, addr := serveServer(t, newService(), Options{}, 0)
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				conn := Dial(addr, ClientOptions{})
				defer conn.Close()
				api := pb.NewMeridianClient(conn)
				for j := 0; j < 50; j++ {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					_, err := api.GetData(ctx, &pb.ReadRequest{Path: "/n"})
					cancel()
					if err != nil {
						return // closed under it
					}
				}
			}()
		}
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		ws.Close(time.Second)
		wg.Wait()
	}
}

// FuzzMetadata: a server connection's decoding of successive metadata
// blocks (kept pairs, shared maps) gives what decoding each alone gives,
// and malformed blocks fail without panicking.
func FuzzMetadata(f *testing.F) {
	f.Add(appendMetadata(nil, nil, []string{"user", "alice", "seen", "7"}), appendMetadata(nil, nil, []string{"user", "alice", "seen", "8"}))
	f.Add(appendMetadata(nil, nil, []string{"a", "1"}), appendMetadata(nil, nil, []string{"A", "1", "a", "2"}))
	f.Add([]byte{0, 1, 0, 1}, []byte{0, 0})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		in := &interner{share: true}
		for _, blk := range [][]byte{a, b, a, a, b} {
			plain := decoder{b: slices.Clone(blk)}
			want := plain.metadata(nil)
			shared := decoder{b: slices.Clone(blk)}
			m := shared.callMetadata(in, nil)
			if (plain.err == nil) != (shared.err == nil) || len(plain.b) != len(shared.b) {
				t.Fatalf("%x: err %v / %v, %d / %d bytes left", blk, plain.err, shared.err, len(plain.b), len(shared.b))
			}
			if plain.err != nil {
				continue
			}
			if got := m.MD(); !reflect.DeepEqual(got, want) {
				t.Fatalf("%x: shared %v, alone %v", blk, got, want)
			}
			for k, vs := range want {
				if got := m.get(k); !slices.Equal(got, vs) {
					t.Fatalf("%x: get(%q) = %q, alone %q", blk, k, got, vs)
				}
			}
		}
	})
}

// Reading a frame into a buffer large enough allocates nothing: the
// reading goroutines of both ends read one for every call.
func TestReadFrameAllocatesNothing(t *testing.T) {
	var stream []byte
	for i := range 200 {
		stream = append(stream, frame(kindReply, uint32(i), []byte("a reply's body"))...)
	}
	br := bufio.NewReader(bytes.NewReader(stream))
	buf := make([]byte, 0, 512)
	next := uint32(0)
	n := testing.AllocsPerRun(100, func() {
		kind, id, body, _, err := readFrame(br, buf)
		if err != nil || kind != kindReply || id != next || string(body) != "a reply's body" {
			t.Fatalf("frame %d: kind %d id %d body %q err %v", next, kind, id, body, err)
		}
		next++
	})
	if n != 0 {
		t.Errorf("%.1f allocations a frame, want 0", n)
	}
}
