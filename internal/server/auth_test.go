package server

import (
	"context"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/pki"
	"github.com/meridian-coord/meridian/internal/wire"
)

func digestOf(cred string) string {
	user, _, _ := strings.Cut(cred, ":")
	sum := sha1.Sum([]byte(cred))
	return user + ":" + base64.StdEncoding.EncodeToString(sum[:])
}

// identity is one caller of the cross-port test: digest credentials and
// an optional client certificate.
type identity struct {
	name    string
	digests []string
	cert    *tls.Certificate
}

// answer renders a result or the error's ZooKeeper code, the same way for
// both ports.
func answer(v string, err error) string {
	if err == nil {
		return v
	}
	zkErrs := map[error]error{gozk.ErrNoAuth: errs.ErrNoAuth, gozk.ErrNoNode: errs.ErrNoNode, gozk.ErrNodeExists: errs.ErrNodeExists,
		gozk.ErrBadVersion: errs.ErrBadVersion, gozk.ErrNotEmpty: errs.ErrNotEmpty, gozk.ErrInvalidACL: errs.ErrInvalidACL}
	for z, e := range zkErrs {
		if errors.Is(err, z) {
			err = e
		}
	}
	return fmt.Sprintf("error %d", errs.ZKCode(err))
}

// aclOps is what the cross-port test asks of both ports as one caller.
type aclOps interface {
	get(path string) (string, error)
	children(path string) (string, error)
	exists(path string) (string, error)
	getACL(path string) (string, error)
	create(path string) (string, error)
	set(path string, data []byte) error
	del(path string) error
	setACL(path string, acl []gozk.ACL) error
}

type zkOps struct{ c *gozk.Conn }

func fmtACL(scheme, id string, perms int32) string { return fmt.Sprintf("%s:%s:%d", scheme, id, perms) }

func (z zkOps) get(p string) (string, error) { d, _, err := z.c.Get(p); return string(d), err }
func (z zkOps) children(p string) (string, error) {
	k, _, err := z.c.Children(p)
	slices.Sort(k)
	return strings.Join(k, ","), err
}
func (z zkOps) exists(p string) (string, error) {
	ok, _, err := z.c.Exists(p)
	return strconv.FormatBool(ok), err
}
func (z zkOps) getACL(p string) (string, error) {
	acl, _, err := z.c.GetACL(p)
	var out []string
	for _, a := range acl {
		out = append(out, fmtACL(a.Scheme, a.ID, a.Perms))
	}
	return strings.Join(out, " "), err
}
func (z zkOps) create(p string) (string, error) {
	return z.c.Create(p, []byte("c"), 0, gozk.WorldACL(gozk.PermAll))
}
func (z zkOps) set(p string, d []byte) error { _, err := z.c.Set(p, d, -1); return err }
func (z zkOps) del(p string) error           { return z.c.Delete(p, -1) }
func (z zkOps) setACL(p string, acl []gozk.ACL) error {
	_, err := z.c.SetACL(p, acl, -1)
	return err
}

type nativeOps struct{ c *client.Client }

func (n nativeOps) get(p string) (string, error) {
	d, _, err := n.c.Get(context.Background(), p)
	return string(d), err
}
func (n nativeOps) children(p string) (string, error) {
	k, _, err := n.c.Children(context.Background(), p)
	slices.Sort(k)
	return strings.Join(k, ","), err
}
func (n nativeOps) exists(p string) (string, error) {
	ok, _, err := n.c.Exists(context.Background(), p)
	return strconv.FormatBool(ok), err
}
func (n nativeOps) getACL(p string) (string, error) {
	acl, _, err := n.c.GetACL(context.Background(), p)
	var out []string
	for _, a := range acl {
		out = append(out, fmtACL(a.GetScheme(), a.GetId(), a.GetPerms()))
	}
	return strings.Join(out, " "), err
}
func (n nativeOps) create(p string) (string, error) {
	path, _, err := n.c.Create(context.Background(), p, []byte("c"), client.CreateOptions{})
	return path, err
}
func (n nativeOps) set(p string, d []byte) error {
	_, err := n.c.Set(context.Background(), p, d, -1)
	return err
}
func (n nativeOps) del(p string) error { return n.c.Delete(context.Background(), p, -1) }
func (n nativeOps) setACL(p string, acl []gozk.ACL) error {
	var out []*pb.ACL
	for _, a := range acl {
		out = append(out, &pb.ACL{Perms: a.Perms, Scheme: a.Scheme, Id: a.ID})
	}
	_, err := n.c.SetACL(context.Background(), p, out, -1)
	return err
}

// authCluster is a one-member cluster with the super digest "super:secret"
// and a TLS ZooKeeper port with the dev certificates (client certificates
// wanted), plus a non-admin client certificate for CN=carol,O=Example.
type authCluster struct {
	*testCluster
	zkTLS string
	carol tls.Certificate
	dev   string
}

func newAuthCluster(t *testing.T, n int) *authCluster {
	ports := freePorts(t, n)
	tc := newTestCluster(t, n, func(c *Config) {
		c.SuperDigest = digestOf("super:secret")
		dir := filepath.Dir(c.TLS.CA)
		c.ZKSecureListen = "127.0.0.1:" + strconv.Itoa(ports[c.ID-1])
		c.ZKTLSCert, c.ZKTLSKey = c.TLS.Cert, c.TLS.Key
		c.ZKTLSClientCA = filepath.Join(dir, pki.CAFile)
		c.ZKTLSClientAuth = "want"
	})
	tc.leader()
	dev := filepath.Dir(tc.cfgs[0].TLS.CA)
	ca, err := pki.LoadCA(dev)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.IssueClient("carol", "Example")
	if err != nil {
		t.Fatal(err)
	}
	return &authCluster{testCluster: tc, zkTLS: tc.cfgs[0].ZKSecureListen, carol: leaf.TLSCertificate(), dev: dev}
}

// tlsFor is a client TLS configuration trusting the dev CA, presenting
// cert if given.
func (ac *authCluster) tlsFor(t *testing.T, cert *tls.Certificate) *tls.Config {
	pool, err := pki.LoadPool(filepath.Join(ac.dev, pki.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return tc
}

func (ac *authCluster) native(t *testing.T, id identity) *client.Client {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: ac.endpoints()[:1], TLS: ac.tlsFor(t, id.cert), Digest: id.digests,
		SessionTimeout: 4 * time.Second, KeepEndpointOrder: true})
	if err != nil {
		t.Fatalf("native client %s: %v", id.name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (ac *authCluster) zk(t *testing.T, id identity) *gozk.Conn {
	tc := ac.tlsFor(t, id.cert)
	dialer := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, network, addr, tc)
	}
	zc, events, err := gozk.Connect([]string{ac.zkTLS}, 4*time.Second, gozk.WithDialer(dialer), gozk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(zc.Close)
	for deadline := time.After(15 * time.Second); zc.State() != gozk.StateHasSession; {
		select {
		case <-events:
		case <-deadline:
			t.Fatalf("zk client %s: no session", id.name)
		}
	}
	for _, d := range id.digests {
		if err := zc.AddAuth("digest", []byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	return zc
}

// TestSameAnswersOnBothPorts sends the same reads and writes as the same
// identities through the ZooKeeper port and the native port, on nodes
// whose ACLs name each scheme, and requires identical answers: one request
// path decides both.
func TestSameAnswersOnBothPorts(t *testing.T) {
	ac := newAuthCluster(t, 1)
	carol := pki.Subject(ac.carol.Leaf)
	ids := []identity{
		{name: "none"},
		{name: "alice", digests: []string{"alice:pa"}},
		{name: "bob", digests: []string{"bob:pb"}},
		{name: "carol-x509", cert: &ac.carol},
		{name: "super", digests: []string{"super:secret"}},
	}
	acls := map[string][]gozk.ACL{
		"/world":  gozk.WorldACL(gozk.PermAll),
		"/digest": {{Perms: gozk.PermAll, Scheme: "digest", ID: digestOf("alice:pa")}},
		// alice may read, bob administer: getACL needs either.
		"/split": {{Perms: gozk.PermRead, Scheme: "digest", ID: digestOf("alice:pa")}, {Perms: gozk.PermAdmin, Scheme: "digest", ID: digestOf("bob:pb")}},
		"/ip":    {{Perms: gozk.PermRead, Scheme: "ip", ID: "127.0.0.1"}},
		"/x509":  {{Perms: gozk.PermAll, Scheme: "x509", ID: carol}},
	}
	nodes := []string{"/world", "/digest", "/split", "/ip", "/x509"}
	admin := nativeOps{ac.native(t, ids[4])}
	for _, p := range nodes {
		if _, err := admin.create(p); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.create(p + "/kid"); err != nil {
			t.Fatal(err)
		}
		if err := admin.setACL(p, acls[p]); err != nil {
			t.Fatal(err)
		}
	}
	run := func(o aclOps) map[string]string {
		out := map[string]string{}
		for _, p := range nodes {
			out[p+" get"] = answer(o.get(p))
			out[p+" children"] = answer(o.children(p))
			out[p+" exists"] = answer(o.exists(p))
			out[p+" getACL"] = answer(o.getACL(p))
			out[p+" create"] = answer(o.create(p + "/new"))
			out[p+" delete"] = answer("ok", o.del(p+"/new"))
			out[p+" set"] = answer("ok", o.set(p, []byte("c")))
			out[p+" setACL"] = answer("ok", o.setACL(p, acls[p]))
			// Put back what a write may have changed, as the super user.
			admin.del(p + "/new")
		}
		return out
	}
	for _, id := range ids {
		zkAns := run(zkOps{ac.zk(t, id)})
		nAns := run(nativeOps{ac.native(t, id)})
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range zkAns {
				if !yield(k) {
					return
				}
			}
		}) {
			if zkAns[k] != nAns[k] {
				t.Errorf("%s %s: zookeeper port %q, native port %q", id.name, k, zkAns[k], nAns[k])
			}
		}
		// Some answers pinned, so both ports cannot agree on being wrong.
		noAuth := fmt.Sprintf("error %d", errs.ZKCode(errs.ErrNoAuth))
		want := map[string]map[string]string{
			"none": {"/digest get": noAuth, "/digest exists": "true", "/digest getACL": noAuth, "/world get": "c",
				"/ip get": "c", "/ip set": noAuth, "/x509 get": noAuth, "/split getACL": noAuth, "/digest children": noAuth},
			"alice": {"/digest get": "c", "/digest set": "ok", "/split getACL": fmtACL("digest", "alice:x", gozk.PermRead) + " " + fmtACL("digest", "bob:x", gozk.PermAdmin),
				"/x509 get": noAuth},
			"bob": {"/digest get": noAuth, "/split get": noAuth, "/split getACL": fmtACL("digest", digestOf("alice:pa"), gozk.PermRead) + " " + fmtACL("digest", digestOf("bob:pb"), gozk.PermAdmin),
				"/split setACL": "ok"},
			"carol-x509": {"/x509 get": "c", "/x509 create": "/x509/new", "/digest get": noAuth, "/x509 getACL": fmtACL("x509", carol, gozk.PermAll)},
			"super":      {"/digest get": "c", "/x509 get": "c", "/ip set": "ok", "/split get": "c"},
		}
		for k, v := range want[id.name] {
			if zkAns[k] != v {
				t.Errorf("%s %s = %q (both ports: %q), want %q", id.name, k, zkAns[k], nAns[k], v)
			}
		}
	}
}

// TestSessionPasswordRemembered: a native connection that has had a
// session's password verified is still refused, on the same connection,
// the session with another's password, another session with that password,
// and the session once it has ended (closed, then expired) — what its
// connection remembers of the password never outlives the session.
func TestSessionPasswordRemembered(t *testing.T) {
	ac := newAuthCluster(t, 1)
	ctx := ctx(t)
	lean := wire.Dial(ac.endpoints()[0], wire.ClientOptions{TLS: ac.tlsFor(t, &ac.carol)})
	t.Cleanup(func() { lean.Close() })
	api := pb.NewMeridianClient(lean)
	newSession := func() (int64, context.Context) {
		r, err := api.CreateSession(ctx, &pb.CreateSessionRequest{TimeoutMs: 2000})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetSessionId(), metadata.AppendToOutgoingContext(ctx, pb.MetadataSessionPassword, string(r.GetPassword()))
	}
	a, withA := newSession()
	b, withB := newSession()
	keep := func(ctx context.Context, sid int64) error {
		_, err := api.KeepAlive(ctx, &pb.KeepAliveRequest{SessionId: sid})
		return err
	}
	expired := func(what string, err error) {
		t.Helper()
		if errs.FromGRPC(err) != errs.ErrSessionExpired {
			t.Fatalf("%s: %v, want session expired", what, err)
		}
	}
	for i := 0; i < 3; i++ { // remembered after the first
		if err := keep(withA, a); err != nil {
			t.Fatalf("a with its password: %v", err)
		}
	}
	expired("b with a's password", keep(withA, b))
	expired("a with b's password", keep(withB, a))
	if err := keep(withA, a); err != nil {
		t.Fatalf("a with its password again: %v", err)
	}
	if _, err := api.CloseSession(withA, &pb.CloseSessionRequest{SessionId: a}); err != nil {
		t.Fatal(err)
	}
	expired("a after it was closed", keep(withA, a))
	_, err := api.Create(withA, &pb.CreateRequest{SessionId: a, Path: "/after", Mode: pb.CreateMode(client.Ephemeral)})
	expired("an ephemeral in a after it was closed", err)
	_, err = api.SetData(withA, &pb.SetDataRequest{SessionId: a, Path: "/", Data: []byte("x")})
	expired("a write in a after it was closed", err)

	if _, err := api.SetData(withB, &pb.SetDataRequest{SessionId: b, Path: "/", Data: []byte("b")}); err != nil {
		t.Fatalf("a write in b with its password: %v", err) // remembered, then let expire
	}
	if _, err := api.Create(withB, &pb.CreateRequest{SessionId: b, Path: "/b", Mode: pb.CreateMode(client.Ephemeral)}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r, err := api.Exists(ctx, &pb.ReadRequest{Path: "/b", Consistency: pb.Consistency_LINEARIZABLE})
		if err != nil {
			t.Fatal(err)
		}
		if !r.GetExists() {
			break // b expired: its ephemeral is gone
		}
		if time.Now().After(deadline) {
			t.Fatal("b never expired")
		}
	}
	expired("b after it expired", keep(withB, b))
	_, err = api.SetData(withB, &pb.SetDataRequest{SessionId: b, Path: "/", Data: []byte("y")})
	expired("a write in b after it expired", err)
}

// rawConn is a bare gRPC connection to addr with TLS config tc.
func rawConn(t *testing.T, addr string, tc *tls.Config) pb.MeridianClient {
	conn, err := grpc.NewClient(addr, client.DialOptions(client.Config{TLS: tc})...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewMeridianClient(conn)
}

// TestStolenSessionID: another caller who knows a session's id but not
// its password cannot close it, create ephemerals in it, lock in it or
// keep it alive; the owner's ephemerals and lock survive. An admin may
// close it by id.
func TestStolenSessionID(t *testing.T) {
	ac := newAuthCluster(t, 1)
	owner := ac.native(t, identity{name: "owner"})
	ctx := ctx(t)
	if _, _, err := owner.Create(ctx, "/mine", nil, client.CreateOptions{Mode: client.Ephemeral}); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Lock(ctx, "L", client.LockOptions{}); err != nil {
		t.Fatal(err)
	}
	sid := owner.SessionID()
	thief := rawConn(t, ac.endpoints()[0], ac.tlsFor(t, &ac.carol))
	wrong := metadata.AppendToOutgoingContext(ctx, pb.MetadataSessionPassword, strings.Repeat("x", 16))
	expired := status.Code(errs.GRPCStatus(errs.ErrSessionExpired))
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{{"no password", ctx}, {"wrong password", wrong}} {
		calls := map[string]func() error{
			"CloseSession": func() error {
				_, err := thief.CloseSession(c.ctx, &pb.CloseSessionRequest{SessionId: sid})
				return err
			},
			"Create ephemeral": func() error {
				_, err := thief.Create(c.ctx, &pb.CreateRequest{SessionId: sid, Path: "/stolen", Mode: pb.CreateMode(client.Ephemeral)})
				return err
			},
			"Lock": func() error {
				_, err := thief.Lock(c.ctx, &pb.LockRequest{SessionId: sid, Name: "L2"})
				return err
			},
			"KeepAlive": func() error {
				_, err := thief.KeepAlive(c.ctx, &pb.KeepAliveRequest{SessionId: sid})
				return err
			},
			"Unlock": func() error {
				_, err := thief.Unlock(c.ctx, &pb.UnlockRequest{SessionId: sid, Name: "L"})
				return err
			},
		}
		for name, call := range calls {
			if err := call(); status.Code(err) != expired || errs.FromGRPC(err) != errs.ErrSessionExpired {
				t.Errorf("%s with %s: %v, want session expired", name, c.name, err)
			}
		}
	}
	if ok, _, err := owner.Exists(ctx, "/stolen"); err != nil || ok {
		t.Fatalf("stolen ephemeral exists=%v err=%v", ok, err)
	}
	if ok, st, err := owner.Exists(ctx, "/mine"); err != nil || !ok || st.GetEphemeralOwner() != sid {
		t.Fatalf("owner's ephemeral: exists=%v %v err=%v", ok, st, err)
	}
	locks, err := owner.ListLocks(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	held := false
	for _, l := range locks {
		for _, h := range l.GetHolders() {
			held = held || (l.GetName() == "L" && h.GetSessionId() == sid)
			if l.GetName() == "L2" {
				t.Fatalf("the thief locked L2 in the owner's session")
			}
		}
	}
	if !held {
		t.Fatalf("owner lost lock L: %v", locks)
	}

	// An admin (the dev admin certificate) may close another session.
	adm := rawConn(t, ac.endpoints()[0], ac.clientTLS())
	if _, err := adm.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: sid}); err != nil {
		t.Fatalf("admin CloseSession: %v", err)
	}
	check := ac.native(t, identity{name: "check"})
	if ok, _, err := check.Exists(ctx, "/mine"); err != nil || ok {
		t.Fatalf("ephemeral after the admin closed its session: exists=%v err=%v", ok, err)
	}
}

// TestAdminOperationsNeedAdmin: membership changes, leader transfer and
// preference and ForceUnlock are refused (PermissionDenied) to a caller
// without an admin identity and change nothing; the dev admin certificate
// and the super digest may.
func TestAdminOperationsNeedAdmin(t *testing.T) {
	ac := newAuthCluster(t, 3)
	ctx := ctx(t)
	holder := ac.native(t, identity{name: "holder"})
	if _, err := holder.Lock(ctx, "L", client.LockOptions{}); err != nil {
		t.Fatal(err)
	}
	lead := uint64(ac.leader() + 1)
	target := lead%3 + 1
	ep := ac.endpoints()[0]
	type caller struct {
		name  string
		api   pb.MeridianClient
		admin bool
	}
	digest := func(cred string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, pb.MetadataAuth, "digest "+cred)
	}
	callers := []caller{
		{"no identity", rawConn(t, ep, ac.tlsFor(t, nil)), false},
		{"x509 non-admin", rawConn(t, ep, ac.tlsFor(t, &ac.carol)), false},
	}
	calls := func(ctx context.Context, api pb.MeridianClient) map[string]func() error {
		return map[string]func() error{
			"MemberChange": func() error {
				_, err := api.MemberChange(ctx, &pb.MemberChangeRequest{Changes: []*pb.MemberChangeOp{{Type: pb.MemberChangeType_REMOVE_MEMBER, Member: &pb.Member{Id: target}}}})
				return err
			},
			"TransferLeader": func() error {
				_, err := api.TransferLeader(ctx, &pb.TransferLeaderRequest{TargetId: target})
				return err
			},
			"SetLeaderPreference": func() error {
				_, err := api.SetLeaderPreference(ctx, &pb.LeaderPreferenceRequest{Region: "local"})
				return err
			},
			"ForceUnlock": func() error {
				_, err := api.ForceUnlock(ctx, &pb.ForceUnlockRequest{Name: "L", HolderSessionId: holder.SessionID()})
				return err
			},
			"SnapshotSave": func() error {
				s, err := api.SnapshotSave(ctx, &pb.SnapshotSaveRequest{})
				if err == nil {
					_, err = s.Recv()
				}
				return err
			},
		}
	}
	for _, c := range callers {
		for _, cctx := range []context.Context{ctx, digest("alice:pa")} {
			for name, call := range calls(cctx, c.api) {
				if err := call(); status.Code(err) != codes.PermissionDenied {
					t.Errorf("%s %s: %v, want PermissionDenied", c.name, name, err)
				}
			}
		}
	}
	// Nothing changed.
	st, err := holder.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetMembers()) != 3 || st.GetLeaderId() != lead || st.GetPreferRegion() != "" {
		t.Fatalf("after refused admin calls: %d members, leader %d (was %d), preference %q", len(st.GetMembers()), st.GetLeaderId(), lead, st.GetPreferRegion())
	}
	if locks, err := holder.ListLocks(ctx, "L"); err != nil || len(locks) != 1 || len(locks[0].GetHolders()) != 1 ||
		locks[0].GetHolders()[0].GetSessionId() != holder.SessionID() {
		t.Fatalf("lock L after a refused ForceUnlock: %v %v", locks, err)
	}

	// The super digest may: preference; the dev admin certificate: the rest.
	if err := calls(digest("super:secret"), rawConn(t, ep, ac.tlsFor(t, nil)))["SetLeaderPreference"](); err != nil {
		t.Fatalf("super SetLeaderPreference: %v", err)
	}
	adm := calls(ctx, rawConn(t, ep, ac.clientTLS()))
	for _, name := range []string{"ForceUnlock", "TransferLeader", "MemberChange"} {
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; {
			if err = adm[name](); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("admin %s: %v", name, err)
		}
	}
	if locks, _ := holder.ListLocks(ctx, "L"); len(locks) != 0 && len(locks[0].GetHolders()) != 0 {
		t.Fatalf("lock L after the admin's ForceUnlock: %v", locks)
	}
}

// TestPlaintextClientRefused: a TLS gRPC port serves no plaintext client.
func TestPlaintextClientRefused(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	tc.leader()
	conn, err := grpc.NewClient(tc.endpoints()[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := pb.NewMeridianClient(conn).Status(cctx, &pb.StatusRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("plaintext Status on a TLS port: %v, want Unavailable", err)
	}
	_, err = client.New(cctx, client.Config{Endpoints: tc.endpoints(), DialTimeout: time.Second})
	if err == nil {
		t.Fatal("a plaintext client opened a session on a TLS port")
	}
}

// TestEveryMethodHasARule: the authorization table covers every method of
// the service, and names no method the service lacks.
func TestEveryMethodHasARule(t *testing.T) {
	sd := pb.Meridian_ServiceDesc
	seen := map[string]bool{}
	var names []string
	for _, m := range sd.Methods {
		names = append(names, m.MethodName)
	}
	for _, s := range sd.Streams {
		names = append(names, s.StreamName)
	}
	for _, n := range names {
		full := "/" + sd.ServiceName + "/" + n
		seen[full] = true
		if _, ok := grpcRules[full]; !ok {
			t.Errorf("%s has no authorization rule", full)
		}
	}
	for m := range grpcRules {
		if !seen[m] {
			t.Errorf("rule for %s, which the service does not have", m)
		}
	}
}

// TestMemberAddCarriesIdentity: the certificate identity given to member
// add is kept in the replicated member record; one with whitespace is
// refused.
func TestMemberAddCarriesIdentity(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	tc.leader()
	c := tc.client()
	ports := freePorts(t, 2)
	m := &pb.Member{Id: 7, PeerAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]), GrpcAddr: fmt.Sprintf("127.0.0.1:%d", ports[1]), Identity: "node-7.example"}
	bad := proto.Clone(m).(*pb.Member)
	bad.Identity = "node 7"
	if _, err := c.ChangeMembers(ctx(t), &pb.MemberChangeOp{Type: pb.MemberChangeType_ADD_LEARNER, Member: bad}); !errors.Is(err, errs.ErrBadMembership) {
		t.Fatalf("identity with whitespace: %v", err)
	}
	if _, err := c.ChangeMembers(ctx(t), &pb.MemberChangeOp{Type: pb.MemberChangeType_ADD_LEARNER, Member: m}); err != nil {
		t.Fatal(err)
	}
	r, err := c.Members(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range r.GetMembers() {
		if got.GetId() == 7 && got.GetIdentity() != "node-7.example" {
			t.Fatalf("member 7 identity %q", got.GetIdentity())
		}
	}
	if m, ok := tc.servers[0].member(7); !ok || m.Identity != "node-7.example" || tc.cfgs[0].memberIdentity(m) != "node-7.example" {
		t.Fatalf("member record %+v", m)
	}
}

// TestNativeClientOverGRPC: the Go client with Config.GRPC (the native
// API over gRPC's HTTP/2 transport, not the lean one) carries what every
// call needs the same way: its session password (an ephemeral node and a
// lock, which name the session), its digest credential (a node only that
// identity may read) and its view (a read after its own write on another
// member sees the write).
func TestNativeClientOverGRPC(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func(ep string) *client.Client {
		c, err := client.New(ctx, client.Config{Endpoints: []string{ep}, KeepEndpointOrder: true, SessionTimeout: 5 * time.Second,
			TLS: tc.clientTLS(), GRPC: true, Digest: []string{"alice:secret"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	eps := tc.endpoints()
	a, b := dial(eps[0]), dial(eps[1])
	acl := []*client.ACL{{Perms: 31 /* ALL */, Scheme: "digest", Id: digestOf("alice:secret")}}
	if _, _, err := a.Create(ctx, "/grpc", []byte("v1"), client.CreateOptions{Mode: client.Ephemeral, ACL: acl}); err != nil {
		t.Fatalf("ephemeral create over gRPC: %v", err)
	}
	if _, err := a.Set(ctx, "/grpc", []byte("v2"), -1); err != nil {
		t.Fatal(err)
	}
	data, _, err := a.Get(ctx, "/grpc", client.WithConsistency(client.Sequential))
	if err != nil || string(data) != "v2" {
		t.Fatalf("read own write: %q %v", data, err)
	}
	l, err := b.Lock(ctx, "grpc-lock", client.LockOptions{})
	if err != nil {
		t.Fatalf("lock over gRPC: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("unlock over gRPC: %v", err)
	}
	stranger, err := client.New(ctx, client.Config{Endpoints: []string{eps[0]}, KeepEndpointOrder: true, SessionTimeout: 5 * time.Second,
		TLS: tc.clientTLS(), GRPC: true})
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	if _, _, err := stranger.Get(ctx, "/grpc", client.WithConsistency(client.Sequential)); !errors.Is(err, client.ErrNoAuth) {
		t.Fatalf("a client without the digest read the node: %v", err)
	}
}
