package client

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
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
// client's last zxid, sent too) keeps reads as fresh as before.
const SeenGroupsHeader = "meridian-seen-groups"

// maxSeenGroups bounds the view: the most groups a server accepts in it
// (twice the groups a member can run, for removed keyspaces' ids). A view
// beyond it is not sent: reads fall back to min_zxid.
const maxSeenGroups = 2048

// carryView is the unary interceptor that sends the view with a call and
// merges the one the server returns.
func (c *Client) carryView(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.mu.Lock()
	h, ok := c.viewHeaderLocked()
	c.mu.Unlock()
	if ok {
		ctx = metadata.AppendToOutgoingContext(ctx, SeenGroupsHeader, h)
	}
	var md metadata.MD
	err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&md))...)
	if vs := md.Get(SeenGroupsHeader); len(vs) == 1 {
		c.mergeView(vs[0])
	}
	return err
}

// viewHeaderLocked is the view in SeenGroupsHeader's form; false when it
// is too large to send. Caller holds c.mu.
func (c *Client) viewHeaderLocked() (string, bool) {
	if c.mu.viewHeader == "" {
		c.mu.viewHeader, c.mu.viewSendable = c.encodeViewLocked()
	}
	return c.mu.viewHeader, c.mu.viewSendable
}

// encodeViewLocked encodes the view (viewHeaderLocked keeps the result
// until the view changes). Caller holds c.mu.
func (c *Client) encodeViewLocked() (string, bool) {
	if len(c.mu.groups) > maxSeenGroups {
		return "", false
	}
	if len(c.mu.groups) == 0 {
		return "-", true
	}
	ids := make([]uint64, 0, len(c.mu.groups))
	for g := range c.mu.groups {
		ids = append(ids, g)
	}
	slices.Sort(ids)
	var b strings.Builder
	for i, g := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(g, 10))
		b.WriteByte(':')
		b.WriteString(strconv.FormatUint(c.mu.groups[g], 10))
	}
	return b.String(), true
}

// mergeView raises the view to a server's, group by group; a malformed
// pair is ignored.
func (c *Client) mergeView(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.groups == nil {
		c.mu.groups = map[uint64]uint64{}
	}
	for _, pair := range strings.Split(s, ",") {
		gs, is, ok := strings.Cut(pair, ":")
		if !ok {
			continue
		}
		g, err1 := strconv.ParseUint(gs, 10, 64)
		i, err2 := strconv.ParseUint(is, 10, 64)
		if err1 == nil && err2 == nil && i > c.mu.groups[g] {
			c.mu.groups[g] = i
			c.mu.viewHeader = "" // encoded again when next sent
		}
	}
}
