package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/pki"
	"github.com/meridian-coord/meridian/internal/wire"
)

// TLSConfig builds a client TLS configuration: servers verified against the
// CA in caFile, and, when certFile is given, the client certificate
// certFile/keyFile, whose subject becomes the caller's x509 identity.
func TLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := pki.LoadPool(caFile)
		if err != nil {
			return nil, fmt.Errorf("meridian client: %w", err)
		}
		tc.RootCAs = pool
	}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("meridian client: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// DevTLS is the TLS configuration of a client of a dev or test cluster
// whose throwaway PKI (pki.Dev) is in dir: its CA and its admin client
// certificate.
func DevTLS(dir string) (*tls.Config, error) {
	return TLSConfig(filepath.Join(dir, pki.CAFile), filepath.Join(dir, pki.ClientFile), filepath.Join(dir, pki.ClientKeyFile))
}

// Conn is a connection to one server that the native API's generated
// client runs on: the lean transport's (internal/wire) by default, gRPC's
// with Config.GRPC.
type Conn interface {
	grpc.ClientConnInterface
	Close() error
}

// dial opens the client's connection to addr: transport security and the
// credentials sent with each call, and the view carried with it.
func (c *Client) dial(addr string) Conn {
	_, stream := interceptors(c.cfg, c.sessionPassword)
	return dial(c.cfg, addr, []grpc.UnaryClientInterceptor{c.carry}, []grpc.StreamClientInterceptor{stream})
}

// Dial opens a connection to addr as a client configured by cfg would
// (transport, security, the meridian-auth metadata). Calls that name a
// session must add its password themselves.
func Dial(cfg Config, addr string) Conn {
	unary, stream := interceptors(cfg, nil)
	return dial(cfg, addr, []grpc.UnaryClientInterceptor{unary}, []grpc.StreamClientInterceptor{stream})
}

// maxMessageBytes bounds a message either way on a gRPC connection (the
// lean transport's frames are bounded by wire.MaxFrameBytes).
const maxMessageBytes = 8 << 20

func dial(cfg Config, addr string, unary []grpc.UnaryClientInterceptor, stream []grpc.StreamClientInterceptor) Conn {
	if !cfg.GRPC {
		return wire.Dial(addr, wire.ClientOptions{TLS: cfg.TLS, DialTimeout: cfg.DialTimeout, Unary: unary, Stream: stream})
	}
	conn, err := grpc.NewClient(addr, append(grpcDialOptions(cfg, unary, stream),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes)))...)
	if err != nil {
		// Only a malformed target fails here; the lean transport fails
		// the same address at its first call.
		return failedConn{err: status.Errorf(codes.Unavailable, "%s: %v", addr, err)}
	}
	return conn
}

// failedConn fails every call with the error that kept it from existing.
type failedConn struct{ err error }

func (f failedConn) Invoke(context.Context, string, any, any, ...grpc.CallOption) error { return f.err }
func (f failedConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, f.err
}
func (f failedConn) Close() error { return nil }

// interceptors send cfg's credentials with every call and, when password
// is set, the session password (nil before the session exists).
func interceptors(cfg Config, password func() []byte) (grpc.UnaryClientInterceptor, grpc.StreamClientInterceptor) {
	auth := credentialPairs(cfg)
	decorate := func(ctx context.Context) context.Context {
		kv := auth
		if password != nil {
			kv = withPassword(auth, password(), 0)
		}
		if len(kv) == 0 {
			return ctx
		}
		return metadata.AppendToOutgoingContext(ctx, kv...)
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(decorate(ctx), method, req, reply, cc, opts...)
		}, func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(decorate(ctx), desc, cc, method, opts...)
		}
}

// withPassword is auth followed by the session password's pair when there
// is one (a new slice with room for extra more strings, auth when not).
func withPassword(auth []string, password []byte, extra int) []string {
	if len(password) == 0 && extra == 0 {
		return auth
	}
	kv := append(make([]string, 0, len(auth)+2+extra), auth...)
	if len(password) > 0 {
		kv = append(kv, pb.MetadataSessionPassword, string(password))
	}
	return kv
}

// credentialPairs are cfg's credentials as metadata pairs (key, value, …).
func credentialPairs(cfg Config) []string {
	var auth []string
	for _, d := range cfg.Digest {
		auth = append(auth, pb.MetadataAuth, "digest "+d)
	}
	return auth
}

// sessionPassword is the password of the client's session, once it has one.
func (c *Client) sessionPassword() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.password
}

// validDigest checks a "user:password" credential.
func validDigest(d string) error {
	if !strings.Contains(d, ":") {
		return fmt.Errorf("meridian client: a digest credential is not user:password")
	}
	return nil
}

// DialOptions are the gRPC options a raw gRPC connection needs to talk to
// the servers as cfg would (transport security and the meridian-auth
// metadata). Calls that name a session must add its password themselves.
func DialOptions(cfg Config) []grpc.DialOption {
	unary, stream := interceptors(cfg, nil)
	return grpcDialOptions(cfg, []grpc.UnaryClientInterceptor{unary}, []grpc.StreamClientInterceptor{stream})
}

// grpcDialOptions are a gRPC connection's transport security, flow-control
// windows and interceptors.
func grpcDialOptions(cfg Config, unary []grpc.UnaryClientInterceptor, stream []grpc.StreamClientInterceptor) []grpc.DialOption {
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS.Clone())
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithStaticStreamWindowSize(pb.StreamWindowBytes), grpc.WithStaticConnWindowSize(pb.ConnWindowBytes),
		grpc.WithChainUnaryInterceptor(unary...), grpc.WithChainStreamInterceptor(stream...)}
}
