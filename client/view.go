package client

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/wire"
)

// SeenGroupsHeader is the gRPC metadata key of the client's view, sent
// with every call and returned by the server with what the call observed:
// for every raft group (the root, and each regional keyspace's) the
// highest log index of its state this client has seen, directly or
// through what that state depended on, as "group:index" pairs joined by
// commas ("-": none yet). A server reads a keyspace from its own copy as soon as that copy
// has applied the client's index of it, instead of first asking the
// keyspace's leader (possibly a region away) whether it is behind the
// zxid the client saw elsewhere; with the view, min_zxid is not a floor.
// A server that does not know the header ignores it, and min_zxid (the
// client's last zxid, sent too) keeps reads as fresh as before. A reply
// that has a Header returns the view in its view field instead (no
// metadata to decode on every write).
const SeenGroupsHeader = "meridian-seen-groups"

// maxSeenGroups bounds the view: the most groups a server accepts in it
// (twice the groups a member can run, for removed keyspaces' ids). A view
// beyond it is not sent: reads fall back to min_zxid.
const maxSeenGroups = 2048

// carry is the unary interceptor of the client's connections: every call
// carries the credentials, the session's password (once there is a
// session), the highest zxid the client has seen (a write's zxid must
// exceed it, also in another raft group: regional keyspaces order a
// session's writes across groups by zxid) and the view; the view the
// server returns (in the reply's Header, or its header metadata) is
// merged. On the lean transport the pairs go as its
// call option, without copying the context's metadata on every call.
func (c *Client) carry(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.mu.Lock()
	kv := c.sentLocked()
	c.mu.Unlock()
	if c.cfg.GRPC {
		var md metadata.MD
		err := invoker(metadata.AppendToOutgoingContext(ctx, kv...), method, req, reply, cc, append(opts, grpc.Header(&md))...)
		c.mergeReply(md, reply)
		return err
	}
	// One allocation for the option, the header it fills and the options
	// (the generated code's one, grpc.StaticMethod, and this one).
	x := &carried{}
	x.cm = wire.CallMetadata{Out: kv, Header: &x.md}
	if len(opts) < len(x.opts) {
		n := copy(x.opts[:], opts)
		x.opts[n] = &x.cm
		opts = x.opts[:n+1]
	} else {
		opts = append(opts, &x.cm)
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	c.mergeReply(x.md, reply)
	return err
}

// carried is what carry hands the lean transport with a call.
type carried struct {
	cm   wire.CallMetadata
	md   metadata.MD
	opts [3]grpc.CallOption
}

// mergeReply merges the view a reply carries: in its Header, or in its
// header metadata (a reply without a Header, an error, a server before
// Header.view); and a leader's request that writes go through the
// session's server (route.go).
func (c *Client) mergeReply(md metadata.MD, reply any) {
	if v := pb.HeaderOf(reply).GetView(); v != "" {
		c.mergeView(v)
	}
	if vs := md.Get(SeenGroupsHeader); len(vs) == 1 {
		c.mergeView(vs[0])
	}
	if vs := md.Get(RouteHeader); len(vs) == 1 && vs[0] == "session" {
		c.holdRoute()
	}
}

// sentLocked is what carry sends, built again only when the zxid seen,
// the view or the session changed. The slice is shared by the calls in
// flight: nobody may modify it. Caller holds c.mu.
func (c *Client) sentLocked() []string {
	if c.mu.sent != nil && c.mu.sentZxid == c.mu.lastZxid {
		return c.mu.sent
	}
	// A write raises the zxid and the view: the pairs and both values are
	// made in one allocation when they fit (the values are strings into
	// x.buf, never written again), not four.
	x := &sentBlock{}
	used := 0
	keep := func(b []byte) string {
		if len(b) == 0 || used+len(b) > len(x.buf) {
			return string(b)
		}
		n := copy(x.buf[used:], b)
		s := unsafe.String(&x.buf[used], n)
		used += n
		return s
	}
	view, sendable := c.viewHeaderLocked(keep, x.buf[:0]) // encoded in place when it fits
	var digits [20]byte
	zxid := keep(strconv.AppendInt(digits[:0], c.mu.lastZxid, 10))
	base := c.basePairsLocked()
	kv := x.kv[:0]
	if len(base)+4 > len(x.kv) {
		kv = make([]string, 0, len(base)+4)
	}
	kv = append(kv, base...)
	kv = append(kv, SeenZxidHeader, zxid)
	if sendable {
		kv = append(kv, SeenGroupsHeader, view)
	}
	c.mu.sent, c.mu.sentZxid = slices.Clip(kv), c.mu.lastZxid
	return c.mu.sent
}

// sentBlock is what sentLocked makes in one allocation when it fits.
type sentBlock struct {
	kv  [8]string // credentials, password, zxid and view pairs
	buf [64]byte  // the zxid's and the view's values
}

// basePairsLocked is the credentials and the session's password as pairs,
// made once a session (shared: nobody may modify it). Caller holds c.mu.
func (c *Client) basePairsLocked() []string {
	if c.mu.base == nil {
		c.mu.base = slices.Clip(withPassword(c.auth, c.mu.password, 0))
		if c.mu.base == nil {
			c.mu.base = []string{}
		}
	}
	return c.mu.base
}

// viewHeaderLocked is the view in SeenGroupsHeader's form, encoded again
// after a change into scratch (grown when it does not fit; keep makes the
// string of its bytes); false when it is too large to send. Caller holds
// c.mu.
func (c *Client) viewHeaderLocked(keep func([]byte) string, scratch []byte) (string, bool) {
	if !c.mu.viewEncoded {
		b, ok := c.appendViewLocked(scratch)
		c.mu.viewHeader, c.mu.viewSendable, c.mu.viewEncoded = keep(b), ok, true
	}
	return c.mu.viewHeader, c.mu.viewSendable
}

// appendViewLocked appends the view's encoding to b (viewHeaderLocked
// keeps the result until the view changes); false when it has more than
// maxSeenGroups groups. Caller holds c.mu.
func (c *Client) appendViewLocked(b []byte) ([]byte, bool) {
	if len(c.mu.groups) > maxSeenGroups {
		return b, false
	}
	if len(c.mu.groups) == 0 {
		return append(b, '-'), true
	}
	if len(c.mu.groups) == 1 { // one group (no keyspaces): no sorting
		for g, i := range c.mu.groups {
			b = pb.AppendViewPair(b, g, i)
		}
		return b, true
	}
	ids := make([]uint64, 0, len(c.mu.groups))
	for g := range c.mu.groups {
		ids = append(ids, g)
	}
	slices.Sort(ids)
	for i, g := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = pb.AppendViewPair(b, g, c.mu.groups[g])
	}
	return b, true
}

// mergeView raises the view to a server's, group by group; a malformed
// pair is ignored.
func (c *Client) mergeView(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.groups == nil {
		c.mu.groups = map[uint64]uint64{}
	}
	for pair := range strings.SplitSeq(s, ",") {
		g, i, ok := pb.ParseViewPair(pair)
		if ok && i > c.mu.groups[g] {
			c.mu.groups[g] = i
			c.mu.viewEncoded, c.mu.sent = false, nil // encoded again when next sent
		}
	}
}
