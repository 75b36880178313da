package server

import (
	"context"
	"crypto/sha1"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/pki"
	"github.com/meridian-coord/meridian/internal/tree"
	"github.com/meridian-coord/meridian/internal/wire"
)

// Who may do what, for both client ports (the request core that uses it is
// request.go). Who sends a request is resolved by identify (the ZooKeeper
// port at its handshake and addauth, the native port on every call); what a
// read may see is decided by authorizeRead; writes carry the identities in
// tree.Command.Auth and are judged where they are applied. The native
// port's per-method rules (administrative methods, session ownership) are
// in grpcRules.

// maxCallDigests bounds the meridian-auth values of one call: each becomes
// one identity (two for the super user) and a command carries at most
// tree.MaxAuthIDs of them, ip and x509 included.
const maxCallDigests = 4

// maxIdentityBytes: identities longer than a command can carry are refused
// rather than cut.
const maxIdentityBytes = 1024

// digestIdentity turns a "user:password" credential into ZooKeeper's digest
// identity (user:base64(sha1(user:password))), plus the super identity when
// it is the configured super digest. ok is false for a credential without a
// colon, which ZooKeeper refuses.
func (s *Server) digestIdentity(cred []byte) (ids []tree.ID, ok bool) {
	user, _, found := strings.Cut(string(cred), ":")
	if !found {
		return nil, false
	}
	sum := sha1.Sum(cred)
	id := user + ":" + base64.StdEncoding.EncodeToString(sum[:])
	ids = append(ids, tree.ID{Scheme: "digest", ID: id})
	if sd := s.cfg.SuperDigest; sd != "" && subtle.ConstantTimeCompare([]byte(id), []byte(sd)) == 1 {
		// ZooKeeper's superDigest: this identity bypasses every ACL.
		ids = append(ids, tree.ID{Scheme: "super"})
	}
	return ids, true
}

// identify resolves who sends requests over a connection: ip (the remote
// address, as ZooKeeper gives every connection), x509 (the verified client
// certificate's subject DN, ZooKeeper's X509AuthenticationProvider) when
// state has one, then each digest credential "user:password".
func (s *Server) identify(remote net.Addr, state *tls.ConnectionState, digests [][]byte) ([]tree.ID, error) {
	ids := []tree.ID{{Scheme: "ip", ID: hostOf(remote)}}
	if state != nil && len(state.VerifiedChains) > 0 && len(state.VerifiedChains[0]) > 0 {
		subj := pki.Subject(state.VerifiedChains[0][0])
		if len(subj) > maxIdentityBytes {
			return nil, fmt.Errorf("client certificate subject longer than %d bytes", maxIdentityBytes)
		}
		if subj != "" {
			ids = append(ids, tree.ID{Scheme: "x509", ID: subj})
		}
	}
	if len(digests) > maxCallDigests {
		return nil, fmt.Errorf("more than %d credentials", maxCallDigests)
	}
	for _, d := range digests {
		if len(d) > maxIdentityBytes {
			return nil, fmt.Errorf("credential longer than %d bytes", maxIdentityBytes)
		}
		more, ok := s.digestIdentity(d)
		if !ok {
			return nil, fmt.Errorf("digest credential without user:password")
		}
		ids = append(ids, more...)
	}
	return ids, nil
}

// isAdmin reports whether ids may administer the cluster: the super user,
// or a client certificate whose subject is listed in AdminSubjects.
func (s *Server) isAdmin(ids []tree.ID) bool {
	for _, id := range ids {
		if id.Scheme == "super" || (id.Scheme == "x509" && slices.Contains(s.cfg.AdminSubjects, id.ID)) {
			return true
		}
	}
	return false
}

// authorizeRead decides whether ids may read path as kind, under the tree's
// read lock. A missing node is not an authorization failure: the read itself
// answers NoNode.
func authorizeRead(t *tree.Tree, path string, kind readKind, ids []tree.ID) error {
	var perm int32
	switch kind {
	case readExists, readCheckVersion:
		return nil
	case readData, readChildren, readChildCount:
		perm = tree.PermRead
	case readACL:
		perm = tree.PermRead | tree.PermAdmin
	default:
		return errs.ErrBadArguments
	}
	if err := t.CheckACL(path, perm, ids); err != nil && !errors.Is(err, errs.ErrNoNode) {
		return err
	}
	return nil
}

// redactACL is ZooKeeper's getACL answer to a caller without ADMIN on the
// node: digest entries show the user only ("alice:x"), not the password's
// hash, which could be attacked offline.
func redactACL(t *tree.Tree, path string, acl []tree.ACL, ids []tree.ID) []tree.ACL {
	if t.CheckACL(path, tree.PermAdmin, ids) == nil {
		return acl
	}
	out := make([]tree.ACL, len(acl))
	for i, a := range acl {
		if a.ID.Scheme == "digest" {
			user, _, _ := strings.Cut(a.ID.ID, ":")
			a.ID.ID = user + ":x"
		}
		out[i] = a
	}
	return out
}

// ---- the native port ----

// grpcIdentity resolves the caller of a native call: its address and
// verified certificate from the connection, its digests from the
// meridian-auth metadata.
func (s *Server) grpcIdentity(ctx context.Context) ([]tree.ID, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "no peer")
	}
	auth := incoming(ctx, pb.MetadataAuth)
	// A native connection resolves the same credentials once (its address
	// and certificate do not change).
	memo, key := wire.MemoFrom(ctx), ""
	if memo != nil {
		key = strings.Join(auth, "\n")
		if ids, ok := memo.Get(memoIdentity, key); ok {
			return ids.([]tree.ID), nil
		}
	}
	var state *tls.ConnectionState
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		state = &ti.State
	}
	var digests [][]byte
	for _, v := range auth {
		scheme, cred, _ := strings.Cut(v, " ")
		if scheme != "digest" {
			return nil, status.Errorf(codes.Unauthenticated, "%s: unsupported scheme %q (want \"digest user:password\")", pb.MetadataAuth, scheme)
		}
		digests = append(digests, []byte(cred))
	}
	ids, err := s.identify(p.Addr, state, digests)
	if err != nil {
		return nil, status.Errorf(codes.Unauthenticated, "%s: %v", pb.MetadataAuth, err)
	}
	ids = slices.Clip(ids) // shared by the connection's calls: appending copies
	if memo != nil {
		memo.Put(memoIdentity, key, ids)
	}
	return ids, nil
}

// incoming is the values of the call's metadata key (lower case), for
// reading only: the lean transport's own, else gRPC's (a copy).
func incoming(ctx context.Context, key string) []string {
	if vs, ok := wire.IncomingValues(ctx, key); ok {
		return vs
	}
	return metadata.ValueFromIncomingContext(ctx, key)
}

// callKey carries a native call's callInfo.
type callKey struct{}

// callInfo is what the interceptor learned of a native call, one value in
// its context: the caller's identities, the highest zxid its client has
// seen (seenZxid; 0: unknown) and its view (viewOf; nil: none).
type callInfo struct {
	ids  []tree.ID
	seen int64
	view *view
	own  view // what view points to when the call carries one
}

func callOf(ctx context.Context) *callInfo {
	ci, _ := ctx.Value(callKey{}).(*callInfo)
	return ci
}

// callerOf returns the identities the interceptor resolved for this call.
// A call that did not pass the interceptor has none: it acts as world only.
func callerOf(ctx context.Context) []tree.ID {
	if ci := callOf(ctx); ci != nil {
		return ci.ids
	}
	return nil
}

// rpcRule is who may call a native method.
type rpcRule int

const (
	// anyone: data operations are then judged by ACLs, session operations
	// by the session's password.
	anyone rpcRule = iota + 1
	// admin: the super user or an admin x509 subject.
	admin
	// sessionAdmin: the session's owner, or an admin for any session.
	sessionAdmin
	// attach: the handler checks the session password carried in the
	// request itself, after waiting until this server has caught up with
	// the client (a lagging server does not know the session yet).
	attach
)

// nativeRead says which native methods the lean transport serves on the
// connection's reading goroutine when a call arrives alone
// (wire.Options.Inline): the reads, which the ZooKeeper port serves on its
// reading goroutine too. A read waits only at its consistency barrier,
// which lets the reading go on first (readBarrier).
func nativeRead(fullMethod string) bool {
	switch fullMethod {
	case pb.Meridian_GetData_FullMethodName, pb.Meridian_Exists_FullMethodName,
		pb.Meridian_GetChildren_FullMethodName, pb.Meridian_GetACL_FullMethodName:
		return true
	}
	return false
}

// grpcRules is every native method's rule. A method not listed is refused,
// so a new RPC cannot be served before someone decides who may call it.
var grpcRules = map[string]rpcRule{
	pb.Meridian_Create_FullMethodName:              anyone,
	pb.Meridian_Delete_FullMethodName:              anyone,
	pb.Meridian_SetData_FullMethodName:             anyone,
	pb.Meridian_SetACL_FullMethodName:              anyone,
	pb.Meridian_Multi_FullMethodName:               anyone,
	pb.Meridian_GetData_FullMethodName:             anyone,
	pb.Meridian_Exists_FullMethodName:              anyone,
	pb.Meridian_GetChildren_FullMethodName:         anyone,
	pb.Meridian_GetACL_FullMethodName:              anyone,
	pb.Meridian_Sync_FullMethodName:                anyone,
	pb.Meridian_CreateSession_FullMethodName:       anyone,
	pb.Meridian_KeepAlive_FullMethodName:           anyone,
	pb.Meridian_CloseSession_FullMethodName:        sessionAdmin,
	pb.Meridian_AttachSession_FullMethodName:       attach,
	pb.Meridian_Watch_FullMethodName:               anyone,
	pb.Meridian_AddWatch_FullMethodName:            anyone,
	pb.Meridian_RemoveWatches_FullMethodName:       anyone,
	pb.Meridian_Lock_FullMethodName:                anyone,
	pb.Meridian_Unlock_FullMethodName:              anyone,
	pb.Meridian_ForceUnlock_FullMethodName:         admin,
	pb.Meridian_CheckToken_FullMethodName:          anyone,
	pb.Meridian_ListLocks_FullMethodName:           anyone,
	pb.Meridian_Proclaim_FullMethodName:            anyone,
	pb.Meridian_Leader_FullMethodName:              anyone,
	pb.Meridian_Observe_FullMethodName:             anyone,
	pb.Meridian_Add_FullMethodName:                 anyone,
	pb.Meridian_Push_FullMethodName:                anyone,
	pb.Meridian_Pop_FullMethodName:                 anyone,
	pb.Meridian_Ack_FullMethodName:                 anyone,
	pb.Meridian_Nack_FullMethodName:                anyone,
	pb.Meridian_QueueStats_FullMethodName:          anyone,
	pb.Meridian_SetBarrier_FullMethodName:          anyone,
	pb.Meridian_RemoveBarrier_FullMethodName:       anyone,
	pb.Meridian_WaitBarrier_FullMethodName:         anyone,
	pb.Meridian_EnterBarrier_FullMethodName:        anyone,
	pb.Meridian_LeaveBarrier_FullMethodName:        anyone,
	pb.Meridian_BarrierStats_FullMethodName:        anyone,
	pb.Meridian_Status_FullMethodName:              anyone,
	pb.Meridian_TransferLeader_FullMethodName:      admin,
	pb.Meridian_SetLeaderPreference_FullMethodName: admin,
	pb.Meridian_Latency_FullMethodName:             anyone,
	pb.Meridian_MemberList_FullMethodName:          anyone,
	pb.Meridian_MemberChange_FullMethodName:        admin,
	pb.Meridian_CreateKeyspace_FullMethodName:      admin,
	pb.Meridian_RemoveKeyspace_FullMethodName:      admin,
	pb.Meridian_ListKeyspaces_FullMethodName:       anyone,
	pb.Meridian_SnapshotSave_FullMethodName:        admin,
}

// errAdminRequired refuses an administrative call.
func errAdminRequired(method string) error {
	return status.Errorf(codes.PermissionDenied, "%s requires an admin identity (the super digest or an admin_subjects client certificate)", method)
}

// authorizeCall applies method's rule to a caller: it resolves the
// identities and refuses what the rule forbids.
func (s *Server) authorizeCall(ctx context.Context, method string) ([]tree.ID, rpcRule, error) {
	rule, ok := grpcRules[method]
	if !ok {
		return nil, 0, status.Errorf(codes.PermissionDenied, "%s: no authorization rule", method)
	}
	ids, err := s.grpcIdentity(ctx)
	if err != nil {
		return nil, 0, err
	}
	if rule == admin && !s.isAdmin(ids) {
		return nil, 0, errAdminRequired(method)
	}
	return ids, rule, nil
}

// checkSessionOwner refuses a request that names a session (any message with
// a non-zero GetSessionId) unless it carries that session's password, with
// the error of an expired session so a guessed id learns nothing.
//
// A native connection remembers the session and password it last verified
// (memoSession) until a session may have ended (sessionEpoch), so a client's
// calls look the session up once, not under the tree's lock on every call.
// A call checked against the memo just as its session ends is as one
// checked just before: the write after the check races the end either way.
func (s *Server) checkSessionOwner(ctx context.Context, rule rpcRule, ids []tree.ID, req any) error {
	sr, ok := req.(interface{ GetSessionId() int64 })
	if !ok || sr.GetSessionId() == 0 || rule == attach {
		return nil
	}
	if rule == sessionAdmin && s.isAdmin(ids) {
		return nil
	}
	pws := incoming(ctx, pb.MetadataSessionPassword)
	if len(pws) != 1 {
		return errs.GRPCStatus(errs.ErrSessionExpired)
	}
	owned := ownedSession{id: sr.GetSessionId(), epoch: s.sessionEpoch.Load()}
	memo := wire.MemoFrom(ctx)
	if memo != nil {
		if v, ok := memo.Get(memoSession, pws[0]); ok && v.(ownedSession) == owned {
			return nil
		}
	}
	s.mu.RLock()
	ok = s.mu.tree.SessionPasswordMatches(owned.id, []byte(pws[0]))
	s.mu.RUnlock()
	if !ok {
		return errs.GRPCStatus(errs.ErrSessionExpired)
	}
	if memo != nil {
		memo.Put(memoSession, pws[0], owned)
	}
	return nil
}

// The slots of a native connection's wire.Memo.
const (
	memoIdentity = iota // the identities of the credentials sent (grpcIdentity)
	memoSession         // the session whose password was sent (checkSessionOwner)
)

// ownedSession is a session whose password a connection sent, verified
// while sessionEpoch was epoch.
type ownedSession struct {
	id    int64
	epoch uint64
}

// unaryAuth authorizes a native call, then serves it, observing its
// latency in meridian_request_duration_seconds (refused calls included).
func (s *Server) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	defer func() { s.metrics.observeNative(info.FullMethod, time.Since(start)) }()
	ids, rule, err := s.authorizeCall(ctx, info.FullMethod)
	if err == nil {
		err = s.checkSessionOwner(ctx, rule, ids, req)
	}
	if err != nil {
		s.metrics.countNative(methodName(info.FullMethod), codeLabel(err))
		return nil, err
	}
	ci := &callInfo{ids: ids, seen: seenFromMetadata(ctx)}
	if viewFromMetadata(ctx, &ci.own) {
		ci.view = &ci.own
	}
	v := ci.view
	resp, err := handler(wire.WithCallValue(ctx, callKey{}, ci), req)
	if v != nil {
		// The client's view with what this call observed, in the reply's
		// Header (in the header metadata when the reply has none: an
		// error, or a message without one); lost only when the reply
		// itself is (the client then keeps what it had), and not sent
		// when it is the view the client sent (nothing to merge).
		s.settle(v)
		if v.grownSinceParse() {
			if h := pb.HeaderOf(resp); h != nil {
				h.View = encodeView(v)
			} else {
				_ = grpc.SetHeader(ctx, metadata.Pairs(seenGroupsHeader, encodeView(v)))
			}
		}
	}
	return resp, err
}

// viewFromMetadata reads the calling client's view (seenGroupsHeader)
// into v; false when absent or malformed (the call then has no view and
// reads by its min_zxid).
func viewFromMetadata(ctx context.Context, v *view) bool {
	vs := incoming(ctx, seenGroupsHeader)
	return len(vs) == 1 && parseView(vs[0], v)
}

// seenFromMetadata is the highest zxid the calling client says it has
// seen (client.SeenZxidHeader), 0 when absent or malformed; what it
// proposes gets a larger zxid (propose.go bounds the claim by the clock).
func seenFromMetadata(ctx context.Context) int64 {
	v := incoming(ctx, seenZxidHeader)
	if len(v) != 1 {
		return 0
	}
	z, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || z < 0 {
		return 0
	}
	return z
}

// seenZxidHeader is client.SeenZxidHeader (the client package imports
// this one's dependencies, not the other way round).
const seenZxidHeader = "meridian-seen-zxid"

func (s *Server) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	ids, rule, err := s.authorizeCall(ctx, info.FullMethod)
	if err != nil {
		s.metrics.countNative(methodName(info.FullMethod), codeLabel(err))
		return err
	}
	ctx = context.WithValue(ctx, callKey{}, &callInfo{ids: ids})
	return handler(srv, &authStream{ServerStream: ss, ctx: ctx, s: s, ids: ids, rule: rule})
}

// authStream checks every message a stream receives as a unary call's.
type authStream struct {
	grpc.ServerStream
	ctx  context.Context
	s    *Server
	ids  []tree.ID
	rule rpcRule
}

func (a *authStream) Context() context.Context { return a.ctx }

func (a *authStream) RecvMsg(m any) error {
	if err := a.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return a.s.checkSessionOwner(a.ctx, a.rule, a.ids, m)
}

func methodName(full string) string {
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[i+1:]
	}
	return full
}
