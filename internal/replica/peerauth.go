package replica

import (
	"bufio"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/meridian-coord/meridian/internal/pki"
)

// PeerTLS secures the peer port with mutual TLS: members present Cert both
// when they accept and when they dial, and accept only certificates issued
// by CA. A certificate speaks for member id only if it asserts that
// member's identity (Peer.Identity, or IdentityPattern applied to the id).
// Identities are checked against the member a connection claims to be,
// never against its address: proxies may stand between members.
type PeerTLS struct {
	Cert tls.Certificate
	CA   *x509.CertPool
	// IdentityPattern: pki.MemberIdentity's pattern (default
	// pki.DefaultMemberIdentity).
	IdentityPattern string
}

// ClusterID derives the cluster id of a cluster bootstrapped with token:
// the first 8 bytes of SHA-256("meridian-cluster\x00" + token). It is
// computed once, at bootstrap, and stored with the data; members compare
// it whenever a peer connection opens, so a member of another cluster (or
// a stale member of a cluster that was bootstrapped again) is refused.
func ClusterID(token string) uint64 {
	h := sha256.Sum256([]byte("meridian-cluster\x00" + token))
	id := binary.BigEndian.Uint64(h[:8])
	if id == 0 { // 0 means "none"; never derive it
		id = 1
	}
	return id
}

// FormatClusterID is how a cluster id is shown (Status, logs).
func FormatClusterID(id uint64) string {
	if id == 0 {
		return ""
	}
	return fmt.Sprintf("%016x", id)
}

const (
	// kindHello opens every connection: the dialer's member id (in the
	// sender field) and its cluster id (8 bytes payload). The acceptor
	// answers with a hello of its own: its cluster id, then (only when it
	// refuses) a short reason.
	kindHello byte = 6
	// kindKeepalive (empty payload) is written by a dialer whose
	// connection carried nothing for keepaliveEvery, so that an inbound
	// connection is never idle for inboundIdle while its peer lives, even
	// with latency probes off (ProbeInterval < 0) and between two followers
	// (which otherwise send each other nothing).
	kindKeepalive byte = 7

	helloPayload   = 8
	maxHelloReason = 256

	// helloTimeout bounds, from accept (or dial), the TLS handshake plus
	// the hello exchange; a connection that has not said who it is by then
	// is closed.
	helloTimeout = 5 * time.Second
	// bodyTimeout (plus a second per MiB of declared length) bounds the
	// arrival of a frame body once its header was read, so a stalled frame
	// cannot hold an inbound slot.
	bodyTimeout = 5 * time.Second
)

// inboundIdle: an inbound connection with no frame header for this long
// is closed. Live peers write at least every keepaliveEvery (variables so
// tests can shorten them).
var (
	inboundIdle    = time.Minute
	keepaliveEvery = 20 * time.Second
)

// identityOf is the certificate identity member p must present.
func (t *transport) identityOf(p Peer) string {
	if p.Identity != "" {
		return p.Identity
	}
	pattern := ""
	if t.tls != nil {
		pattern = t.tls.IdentityPattern
	}
	return pki.MemberIdentity(pattern, p.ID)
}

// serverTLS is the listener's configuration: client certificates of the CA
// are required (their identity is checked against the hello).
func (t *transport) serverTLS() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{t.tls.Cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    t.tls.CA,
		MinVersion:   tls.VersionTLS13,
	}
}

// clientTLS is the dialer's configuration for member pc: the server's
// chain must lead to the CA and its certificate assert pc's identity (its
// address is not checked: it may be a proxy's).
func (t *transport) clientTLS(identity string) *tls.Config {
	ca := t.tls.CA
	return &tls.Config{
		Certificates:       []tls.Certificate{t.tls.Cert},
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // replaced by VerifyConnection below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("peer presented no certificate")
			}
			leaf := cs.PeerCertificates[0]
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca, Intermediates: inter,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return fmt.Errorf("peer certificate: %w", err)
			}
			if !pki.HasIdentity(leaf, identity) {
				return fmt.Errorf("peer certificate asserts %q, not %q", pki.Identities(leaf), identity)
			}
			return nil
		},
	}
}

// dial opens an authenticated connection to member pc: TCP, TLS (unless
// plaintext), then the hello exchange. conn is returned (to be closed by
// the caller) even when the hello fails.
//
// raw, the TCP connection under c, is tracked (t.track) and returned even
// on error (then c is nil) for the caller to untrack; raw nil with an error
// means nothing was connected (or the transport closed: net.ErrClosed).
func (t *transport) dial(pc *peerConn) (c, raw net.Conn, err error) {
	if raw, err = net.DialTimeout("tcp", pc.addr, dialTimeout); err != nil {
		return nil, nil, err
	}
	if !t.track(raw) {
		return nil, nil, net.ErrClosed
	}
	fail := func(f string, args ...any) (net.Conn, net.Conn, error) {
		return nil, raw, fmt.Errorf(f, args...)
	}
	c = raw
	raw.SetDeadline(time.Now().Add(helloTimeout))
	if t.tls != nil {
		tc := tls.Client(raw, t.clientTLS(pc.identity))
		if err := tc.Handshake(); err != nil {
			return fail("TLS handshake: %w", err)
		}
		c = tc
	}
	cid := t.cluster.Load()
	var hello [4 + frameHeader + helloPayload]byte
	binary.BigEndian.PutUint32(hello[:4], frameHeader+helloPayload)
	hello[4] = kindHello
	binary.BigEndian.PutUint64(hello[5:], t.id)
	binary.BigEndian.PutUint64(hello[4+frameHeader:], cid)
	if _, err := c.Write(hello[:]); err != nil {
		return fail("hello: %w", err)
	}
	// The answer is read unbuffered so nothing beyond it is consumed
	// (the acceptor sends nothing else on this connection).
	var hdr [4 + frameHeader]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return fail("no answer to hello (refused: the peer logs why): %w", err)
	}
	n := int(binary.BigEndian.Uint32(hdr[:4]))
	if hdr[4] != kindHello || n < frameHeader+helloPayload || n > frameHeader+helloPayload+maxHelloReason {
		return fail("bad answer to hello (kind %d, length %d)", hdr[4], n)
	}
	body := make([]byte, n-frameHeader)
	if _, err := io.ReadFull(c, body); err != nil {
		return fail("answer to hello: %w", err)
	}
	from, theirs := binary.BigEndian.Uint64(hdr[5:]), binary.BigEndian.Uint64(body)
	if reason := string(body[helloPayload:]); reason != "" {
		return fail("refused by member %d (cluster %s): %q", from, FormatClusterID(theirs), reason)
	}
	if from != pc.id {
		return fail("answered by member %d, dialled member %d", from, pc.id)
	}
	if theirs != cid {
		return fail("member %d belongs to cluster %s, this member to cluster %s", from, FormatClusterID(theirs), FormatClusterID(cid))
	}
	raw.SetDeadline(time.Time{})
	return c, raw, nil
}

// accepted runs the acceptor's side of the handshake on a new inbound
// connection: TLS (unless plaintext), then the hello. It returns the
// connection to read frames from, a buffered reader on it and the member
// it speaks for, or ok false (the reason logged) when it must be closed.
func (t *transport) accepted(raw net.Conn) (c net.Conn, r *bufio.Reader, member uint64, ok bool) {
	remote := raw.RemoteAddr().String()
	raw.SetDeadline(time.Now().Add(helloTimeout))
	c = raw
	var cert *x509.Certificate
	if t.tls != nil {
		tc := tls.Server(raw, t.serverTLS())
		if err := tc.Handshake(); err != nil {
			t.log.Warn("peer TLS handshake failed; closing connection", "remote", remote, "err", err)
			return nil, nil, 0, false
		}
		cert = tc.ConnectionState().PeerCertificates[0]
		c = tc
	}
	r = bufio.NewReaderSize(c, 64<<10)
	var hdr [4 + frameHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		t.log.Warn("no hello from peer; closing connection", "remote", remote, "err", err)
		return nil, nil, 0, false
	}
	if n := binary.BigEndian.Uint32(hdr[:4]); hdr[4] != kindHello || n != frameHeader+helloPayload {
		t.log.Warn("peer connection does not open with a hello; closing it", "remote", remote, "kind", hdr[4], "len", n)
		return nil, nil, 0, false
	}
	var body [helloPayload]byte
	if _, err := io.ReadFull(r, body[:]); err != nil {
		t.log.Warn("truncated hello; closing connection", "remote", remote, "err", err)
		return nil, nil, 0, false
	}
	member = binary.BigEndian.Uint64(hdr[5:])
	theirs := binary.BigEndian.Uint64(body[:])
	answer := func(cid uint64, reason string) {
		out := make([]byte, 4+frameHeader+helloPayload+len(reason))
		binary.BigEndian.PutUint32(out[:4], uint32(frameHeader+helloPayload+len(reason)))
		out[4] = kindHello
		binary.BigEndian.PutUint64(out[5:], t.id)
		binary.BigEndian.PutUint64(out[4+frameHeader:], cid)
		copy(out[4+frameHeader+helloPayload:], reason)
		c.Write(out) // a failure shows on the next read
	}
	refuse := func(reason string, args ...any) {
		t.log.Warn("peer refused; closing connection", append([]any{"remote", remote, "claimed_member", member, "reason", reason}, args...)...)
	}
	identity, isMember := t.memberIdentity(member)
	switch {
	case member == 0 || member == t.id:
		refuse("claims to be this member or member 0")
		return nil, nil, 0, false
	case cert != nil && !pki.HasIdentity(cert, identity):
		refuse("certificate does not assert the identity of the member it claims to be",
			"expected_identity", identity, "certificate_identities", pki.Identities(cert))
		return nil, nil, 0, false
	case !isMember:
		refuse("not a member")
		answer(0, "not a member of this member's configuration")
		return nil, nil, 0, false
	case theirs == 0:
		refuse("hello without a cluster id")
		answer(t.cluster.Load(), "hello without a cluster id")
		return nil, nil, 0, false
	}
	ours, err := t.adoptCluster(theirs)
	if err != nil {
		refuse("cannot store the cluster id", "err", err)
		return nil, nil, 0, false
	}
	if ours != theirs {
		refuse("member of another cluster", "their_cluster", FormatClusterID(theirs), "our_cluster", FormatClusterID(ours))
		answer(ours, "member of another cluster")
		return nil, nil, 0, false
	}
	answer(ours, "")
	raw.SetDeadline(time.Time{})
	return c, r, member, true
}

// memberIdentity returns the identity member id must present and whether
// id is in the configuration.
func (t *transport) memberIdentity(id uint64) (string, bool) {
	ident, ok := (*t.members.Load())[id]
	if !ok {
		ident = t.identityOf(Peer{ID: id})
	}
	return ident, ok
}

// adoptCluster returns this member's cluster id; a member that joined with
// empty storage has none and takes (and stores) theirs, from the first
// authenticated hello it accepts.
func (t *transport) adoptCluster(theirs uint64) (uint64, error) {
	if cid := t.cluster.Load(); cid != 0 {
		return cid, nil
	}
	t.adoptMu.Lock()
	defer t.adoptMu.Unlock()
	if cid := t.cluster.Load(); cid != 0 {
		return cid, nil
	}
	if t.adopt != nil {
		if err := t.adopt(theirs); err != nil {
			return 0, err
		}
	}
	t.cluster.Store(theirs)
	t.log.Info("joined cluster", "cluster_id", FormatClusterID(theirs))
	return theirs, nil
}
