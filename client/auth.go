package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/pki"
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

// dialOptions are the options of every connection the client opens:
// transport security and the credentials sent with each call.
func (c *Client) dialOptions(extra ...grpc.DialOption) []grpc.DialOption {
	return append(append(dialOptions(c.cfg, c.sessionPassword), grpc.WithChainUnaryInterceptor(c.carryView)), extra...)
}

// dialOptions for cfg; password, when set, returns the session password to
// send (nil before the session exists).
func dialOptions(cfg Config, password func() []byte) []grpc.DialOption {
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS.Clone())
	}
	var auth []string
	for _, d := range cfg.Digest {
		auth = append(auth, pb.MetadataAuth, "digest "+d)
	}
	decorate := func(ctx context.Context) context.Context {
		kv := auth
		if password != nil {
			if pw := password(); len(pw) > 0 {
				kv = append(kv[:len(kv):len(kv)], pb.MetadataSessionPassword, string(pw))
			}
		}
		if len(kv) == 0 {
			return ctx
		}
		return metadata.AppendToOutgoingContext(ctx, kv...)
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithStaticStreamWindowSize(pb.StreamWindowBytes), grpc.WithStaticConnWindowSize(pb.ConnWindowBytes),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(decorate(ctx), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(decorate(ctx), desc, cc, method, opts...)
		}),
	}
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

// DialOptions are the gRPC options a raw connection needs to talk to the
// servers as cfg would (transport security and the meridian-auth
// metadata). Calls that name a session must add its password themselves.
func DialOptions(cfg Config) []grpc.DialOption { return dialOptions(cfg, nil) }
