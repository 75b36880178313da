package server

// The ZooKeeper listener's authentication: the identities a connection
// starts with (its address, a verified client certificate), addauth with
// the digest scheme, and the glue between the sasl opcode and the
// DIGEST-MD5 exchange in sasl.go. What an identity may do is decided in
// core.go, the same for both ports.

import (
	"crypto/tls"
	"strings"

	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
	zk "github.com/meridian-coord/meridian/internal/zkproto"
)

// identity is the connection's identities before any addauth: ZooKeeper
// gives every connection the ip identity of its peer, and a TLS connection
// with a verified client certificate its x509 subject.
func (c *zkConn) identity() []tree.ID {
	var state *tls.ConnectionState
	if tc, ok := c.c.(*tls.Conn); ok {
		st := tc.ConnectionState()
		state = &st
	}
	ids, err := c.s.identify(c.c.RemoteAddr(), state, nil)
	if err != nil {
		// A certificate subject too long to carry: the connection keeps
		// only its address, never more rights than it proved.
		c.s.log.Warn("zk client identity", "remote", c.c.RemoteAddr().String(), "err", err)
		return []tree.ID{{Scheme: "ip", ID: hostOf(c.c.RemoteAddr())}}
	}
	return ids
}

// addAuth serves addauth: a digest identity is added to the connection's;
// false (the connection closes) for any other scheme or a malformed one.
func (c *zkConn) addAuth(hdr zk.RequestHeader, r *zk.AuthPacket) bool {
	if r.Scheme != "digest" || !strings.Contains(string(r.Auth), ":") || len(c.auth) >= tree.MaxAuthIDs-1 {
		// ZooKeeper answers an unusable scheme with AuthFailed and closes.
		c.count(hdr.Type, errs.ErrAuthFailed)
		c.enqueue(zk.EncodeReply(zk.ReplyHeader{Xid: hdr.Xid, Err: zk.CodeAuthFailed}, nil))
		c.close("auth failed")
		return false
	}
	ids, _ := c.s.digestIdentity(r.Auth)
	c.auth = append(c.auth, ids...)
	// ZooKeeper echoes the request's xid: kazoo sends -4, go-zookeeper a
	// normal one.
	c.count(hdr.Type, nil)
	c.enqueue(zk.EncodeReply(zk.ReplyHeader{Xid: hdr.Xid}, nil))
	return true
}

// saslStep serves one sasl request, a step of the DIGEST-MD5 exchange
// (sasl.go); once it succeeds the connection has the sasl identity of its
// user. False (the connection closes) when the exchange fails.
func (c *zkConn) saslStep(hdr zk.RequestHeader, r *zk.SetSASLRequest, reply func(int64, error, zk.Record)) bool {
	if c.sasl == nil {
		c.sasl = &digestMD5{users: c.s.saslUsers}
	}
	token, user, err := c.sasl.step(r.Token)
	if err != nil || len(c.s.saslUsers) == 0 || len(c.auth) >= tree.MaxAuthIDs-1 {
		// ZooKeeper drops a client whose authentication failed.
		c.count(hdr.Type, errs.ErrAuthFailed)
		c.enqueue(zk.EncodeReply(zk.ReplyHeader{Xid: hdr.Xid, Err: zk.CodeAuthFailed}, nil))
		c.close("SASL authentication failed")
		return false
	}
	if user != "" {
		c.auth = append(c.auth, tree.ID{Scheme: "sasl", ID: user})
		c.sasl = nil
	}
	reply(c.s.lastZxid(), nil, &zk.SetSASLResponse{Token: token})
	return true
}
