package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/errs"
)

// Writes straight to the leader. A follower that receives a write forwards
// it to the leader through raft and answers once it has learnt the commit
// and applied it: a hop more each way than the leader's own answer, and the
// follower's part of the work besides. When the root group's leader is
// another of the client's endpoints, in the same region as the server
// holding the session, writes (Create, Delete, Set, SetACL) of paths
// outside the regional keyspaces go to it directly, on a second connection
// carrying the same session and credentials. Reads, watches and the
// session stay on the session's server, and a read after a write still
// sees it (the write's zxid travels with every later call).
//
// Writes stay with the session's server when the leader is in another
// region (its answer would take as long either way, and the server near
// the client is the one that counts the client's writes for leader
// placement), for paths of a regional keyspace (their own group's leader
// decides), and, as for hedged reads, while the client has watches: only
// the session's server can hold a reply until the notifications that
// precede it have been sent.
//
// The route is decided in the background after the first write, again
// when a reply names another leader or another session server than the
// route was decided for, and every RemeasureInterval; until then writes
// take the route they had. A client that measured its endpoints knows each
// one's member id already; else it asks them. The leader's connection is
// closed after Config.WriteRouteIdle without a write on it (checked with
// the keepalives), so a client that stopped writing does not hold one;
// the next write goes through the session's server and sets a new
// decision off. Config.WritesThroughSession turns all of it off.
//
// A leader answering many writes at once says so in a reply (RouteHeader):
// past that the hop saved is small against its queue, and the members'
// CPUs share the connections better than the leader alone. The client
// then sends its writes through the session's server for RouteHold
// (jittered, so that the clients told at once do not come back at once),
// keeping the leader's connection, and routes them again after it.

// routeTable is one decision: immutable once published in Client.route.
type routeTable struct {
	leader, self uint64    // the root leader and the session's server it was decided for
	at           time.Time // when
	keyspaces    []string  // regional keyspaces' prefixes: their paths are not routed
	to           int       // endpoint index of the leader (-1: writes stay)
	conn         Conn      // to it
	api          pb.MeridianClient
}

// routing is the client's route state.
type routing struct {
	table      atomic.Pointer[routeTable]
	refreshing atomic.Bool
	lastWrite  atomic.Int64 // unix nanoseconds of the last write routed, or of the table's connection
	held       atomic.Int64 // unix nanoseconds until which writes stay (the leader said it is busy)
	// ids: endpoint index → member id, as its Status said (the refresh
	// goroutine's; one runs at a time).
	ids map[int]uint64
}

// RouteHeader is the reply metadata in which a leader asks clients to
// send their writes through their sessions' servers (value "session").
const RouteHeader = "meridian-route"

// RouteHold is how long writes stay with the session's server after a
// leader asked for it: half to one and a half times this, at random.
const RouteHold = 5 * time.Second

// holdRoute keeps writes on the session's server for about RouteHold.
func (c *Client) holdRoute() {
	d := RouteHold/2 + rand.N(RouteHold)
	c.route.held.Store(time.Now().Add(d).UnixNano())
}

// routeRefreshMin spaces the decisions: a cluster without a leader names
// none in every reply.
const routeRefreshMin = time.Second

// routedWrite returns the route for a write of path, nil to keep it on
// the session's server.
func (c *Client) routedWrite(path string) *routeTable {
	t := c.route.table.Load()
	if t == nil || t.api == nil || !c.watches.empty() || time.Now().UnixNano() < c.route.held.Load() {
		return nil
	}
	for _, p := range t.keyspaces {
		if path == p || strings.HasPrefix(path, p+"/") {
			return nil
		}
	}
	return t
}

// write runs one write of path: on the leader when routed, else (or when
// the leader refused it unapplied) through the session's server.
func (c *Client) write(ctx context.Context, path string, fn func(context.Context, pb.MeridianClient, int64) (*pb.Header, error)) error {
	ctx, bound := c.bounded(ctx)
	defer bound.Stop()
	if t := c.routedWrite(path); t != nil {
		c.mu.Lock()
		sid, expired := c.mu.session, c.mu.expired
		c.mu.Unlock()
		if expired {
			return ErrSessionExpired
		}
		c.route.lastWrite.Store(time.Now().UnixNano())
		h, err := fn(ctx, t.api, sid)
		if err == nil {
			c.mu.Lock()
			c.observe(h)
			c.mu.Unlock()
			if h.GetLeaderId() != t.leader || time.Since(t.at) > RemeasureInterval {
				c.refreshRoute()
			}
			return nil
		}
		err = c.callError(ctx, err)
		switch {
		case errors.Is(err, ErrSessionExpired):
			return err
		case errors.Is(err, ErrConnectionLoss):
			// The leader's connection broke: the outcome is unknown, as
			// on the session's server. Later writes stay there until the
			// route is decided again.
			c.dropRoute(t)
			return err
		case !errs.Retryable(err):
			return err
		}
		// Not applied (the leader stepped down, throttled): through the
		// session's server, which retries.
	}
	h, err := c.doHeader(ctx, true, fn)
	if err == nil && len(c.cfg.Endpoints) > 1 {
		if t := c.route.table.Load(); t == nil || t.leader != h.GetLeaderId() || t.self != h.GetMemberId() ||
			time.Since(t.at) > RemeasureInterval {
			c.refreshRoute()
		}
	}
	return err
}

// dropRoute stops routing writes on t (its connection failed) until the
// next decision.
func (c *Client) dropRoute(t *routeTable) {
	stay := &routeTable{leader: t.leader, self: t.self, at: t.at, keyspaces: t.keyspaces, to: -1}
	if c.route.table.CompareAndSwap(t, stay) {
		t.conn.Close()
	}
}

// idleRoute closes the leader's connection once no write has been routed
// on it for Config.WriteRouteIdle. The next write goes through the
// session's server and, the table being old, has the route decided again.
func (c *Client) idleRoute() {
	t := c.route.table.Load()
	if t == nil || t.conn == nil || time.Since(time.Unix(0, c.route.lastWrite.Load())) < c.cfg.WriteRouteIdle {
		return
	}
	idle := &routeTable{leader: t.leader, self: t.self, keyspaces: t.keyspaces, to: -1}
	if c.route.table.CompareAndSwap(t, idle) {
		// A write that took the route just before may still be on it.
		time.AfterFunc(c.cfg.RequestTimeout, func() { t.conn.Close() })
	}
}

// refreshRoute decides the route again in the background, unless a
// decision is under way or was made less than routeRefreshMin ago.
func (c *Client) refreshRoute() {
	if len(c.cfg.Endpoints) < 2 || c.cfg.WritesThroughSession {
		return
	}
	if t := c.route.table.Load(); t != nil && time.Since(t.at) < routeRefreshMin {
		return
	}
	if !c.route.refreshing.CompareAndSwap(false, true) {
		return
	}
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		c.route.refreshing.Store(false)
		return
	}
	api := c.mu.api
	c.wg.Add(1) // under c.mu: Close waits for it once closed is set
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		defer c.route.refreshing.Store(false)
		if api == nil {
			return
		}
		ctx, cancel := context.WithTimeout(c.life, 2*c.cfg.DialTimeout)
		defer cancel()
		old := c.route.table.Load()
		t, err := c.decideRoute(ctx, api, old)
		if err != nil {
			// Writes stay with the session's server; decided again on
			// a later write, routeRefreshMin from now at the soonest.
			c.log.Debug("write route not decided", "err", err)
			t = &routeTable{at: time.Now(), to: -1}
		}
		if t.conn != nil {
			c.route.lastWrite.Store(time.Now().UnixNano())
		}
		c.route.table.Store(t)
		if old != nil && old.conn != nil && old.conn != t.conn {
			// Writes may still be in flight on it: close it once they
			// have had their time.
			time.AfterFunc(c.cfg.RequestTimeout, func() { old.conn.Close() })
		}
		c.mu.Lock()
		closed := c.mu.closed
		c.mu.Unlock()
		if closed && t.conn != nil {
			t.conn.Close()
		}
	}()
}

// decideRoute asks the session's server (api) who leads and where the
// members are, and finds the leader among the endpoints: by asking each
// its member id, the one the leader had last time first.
func (c *Client) decideRoute(ctx context.Context, api pb.MeridianClient, old *routeTable) (*routeTable, error) {
	st, err := api.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		return nil, err
	}
	t := &routeTable{leader: st.GetLeaderId(), self: st.GetMemberId(), at: time.Now(), to: -1}
	for _, ks := range st.GetKeyspaces() {
		t.keyspaces = append(t.keyspaces, ks.GetPrefix())
	}
	region := map[uint64]string{}
	for _, m := range st.GetMembers() {
		region[m.GetId()] = m.GetRegion()
	}
	if t.leader == 0 || t.leader == t.self || region[t.leader] != region[t.self] {
		return t, nil
	}
	if old != nil && old.conn != nil && old.leader == t.leader {
		t.to, t.conn, t.api = old.to, old.conn, old.api
		return t, nil
	}
	if c.route.ids == nil {
		c.route.ids = map[int]uint64{}
	}
	order := make([]int, 0, len(c.cfg.Endpoints))
	for i := range c.cfg.Endpoints {
		if c.route.ids[i] == t.leader {
			order = append([]int{i}, order...)
		} else if id, known := c.route.ids[i]; !known || id != t.self {
			order = append(order, i)
		}
	}
	for _, i := range order {
		conn := c.dial(c.cfg.Endpoints[i])
		lapi := c.newAPI(conn)
		sctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
		ls, err := lapi.Status(sctx, &pb.StatusRequest{})
		cancel()
		if err != nil {
			conn.Close()
			continue
		}
		c.route.ids[i] = ls.GetMemberId()
		if ls.GetMemberId() == t.leader {
			t.to, t.conn, t.api = i, conn, lapi
			return t, nil
		}
		conn.Close()
	}
	return t, nil
}
