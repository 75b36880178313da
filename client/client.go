// Package client is Meridian's Go client for the native gRPC API.
//
// A Client holds one session. It talks to one server at a time, the nearest
// of its endpoints by measured round trip (nearest.go); when that server
// fails it moves to the next nearest and
// re-attaches the same session (waiting until the new server has caught up
// with everything the client has seen), then re-registers its watches, which
// fire at once for nodes that changed while it was away. Any server accepts
// writes (followers forward them to the leader through raft); when the
// leader is another endpoint in the session's server's region, writes go
// straight to it (route.go).
//
// Errors are the typed values of internal/errs re-exported here (ErrNoNode,
// ErrBadVersion, ...), compare them with errors.Is. A write that fails with
// ErrConnectionLoss or ErrTimeout may or may not have been applied, exactly as
// with ZooKeeper.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/wire"
)

// Errors, re-exported for callers.
var (
	ErrNoNode                  = errs.ErrNoNode
	ErrNodeExists              = errs.ErrNodeExists
	ErrBadVersion              = errs.ErrBadVersion
	ErrNotEmpty                = errs.ErrNotEmpty
	ErrNoChildrenForEphemerals = errs.ErrNoChildrenForEphemerals
	ErrInvalidPath             = errs.ErrInvalidPath
	ErrBadArguments            = errs.ErrBadArguments
	ErrDataTooLarge            = errs.ErrDataTooLarge
	ErrSessionExpired          = errs.ErrSessionExpired
	ErrConnectionLoss          = errs.ErrConnectionLoss
	ErrOutcomeUnknown          = errs.ErrOutcomeUnknown
	ErrTimeout                 = errs.ErrTimeout
	ErrNotLeader               = errs.ErrNotLeader
	ErrNoAuth                  = errs.ErrNoAuth
	ErrLockHeld                = errs.ErrLockHeld
	ErrLockNotHeld             = errs.ErrLockNotHeld
	ErrLockWaitTimeout         = errs.ErrLockWaitTimeout
	ErrStaleToken              = errs.ErrStaleToken
	ErrQueueEmpty              = errs.ErrQueueEmpty
	ErrQueueFull               = errs.ErrQueueFull
	ErrItemTooLarge            = errs.ErrItemTooLarge
	ErrNotInFlight             = errs.ErrNotInFlight
	ErrPopWaitTimeout          = errs.ErrPopWaitTimeout
	ErrTooManyInFlight         = errs.ErrTooManyInFlight
	ErrBarrierOpen             = errs.ErrBarrierOpen
	ErrNotParticipant          = errs.ErrNotParticipant
	ErrBarrierWaitTimeout      = errs.ErrBarrierWaitTimeout
	ErrClosed                  = errors.New("meridian: client closed")
	// ErrNoQuorum: a keyspace's voters are unreachable; not applied.
	ErrNoQuorum = errs.ErrNoQuorum
	// ErrClusterVersion: some member runs an older binary that cannot
	// apply the write's entry format (an upgrade under way); not applied.
	ErrClusterVersion = errs.ErrClusterVersion
	// ErrNoQuorumInFlight: a keyspace lost its quorum while the write
	// waited; outcome unknown.
	ErrNoQuorumInFlight = errs.ErrNoQuorumInFlight
	// ErrNoQuorumRead: the read needed a keyspace's leader, which its
	// unreachable voters leave it without.
	ErrNoQuorumRead = errs.ErrNoQuorumRead
)

// Stat is a znode's metadata (ZooKeeper's Stat).
type Stat = pb.Stat

// Consistency of reads.
type Consistency int

const (
	// Linearizable reads reflect every write committed before they started
	// (one ReadIndex round to the leader, shared among concurrent reads).
	Linearizable Consistency = iota
	// Sequential reads are served by the connected server from its local
	// state, never older than anything this client has already seen.
	Sequential
)

// Config configures a Client.
type Config struct {
	Endpoints      []string      // gRPC addresses of the servers
	SessionTimeout time.Duration // requested; the server clamps it (default 10s)
	DialTimeout    time.Duration // per endpoint (default 3s)
	RequestTimeout time.Duration // default for calls whose ctx has no deadline (default 10s)
	Consistency    Consistency   // default read consistency
	Logger         *slog.Logger
	// KeepEndpointOrder tries endpoints in the order given instead of
	// nearest first (by measured round trip, see nearest.go).
	KeepEndpointOrder bool
	// HedgeSequentialReads hedges every eligible sequential read (see
	// WithHedge).
	HedgeSequentialReads bool
	// TLS secures the connections (servers verified against its RootCAs;
	// its client certificate, if any, is the caller's x509 identity). nil:
	// plaintext, for servers configured insecure. See TLSConfig, DevTLS.
	TLS *tls.Config
	// Digest: "user:password" credentials (ZooKeeper's digest scheme),
	// sent with every call as the meridian-auth metadata.
	Digest []string
	// GRPC carries the native API over gRPC's HTTP/2 transport instead
	// of its lean framing (internal/wire), on the same port: for a path
	// that passes only HTTP/2 (a gRPC-aware proxy). Both reach the same
	// handlers; the lean framing costs about half the CPU per call.
	GRPC bool
	// WritesThroughSession sends every write through the session's server
	// (which forwards it to the leader), never straight to the leader
	// (see route.go).
	WritesThroughSession bool
	// WriteRouteIdle: how long a connection opened to send writes straight
	// to the leader stays open without one (default 30 s).
	WriteRouteIdle time.Duration
	// FailFast: New gives up after one round in which no endpoint could
	// be connected to (refused, unresolvable, TLS handshake failed, no
	// answer within DialTimeout), with ErrUnavailable naming every
	// endpoint and why, instead of retrying until its ctx ends. For
	// commands run by hand; a service that starts with its servers wants
	// the retries.
	FailFast bool
}

// Client is a session with a Meridian cluster. It is safe for concurrent use.
type Client struct {
	cfg  Config
	auth []string // credentialPairs(cfg)
	log  *slog.Logger

	mu struct {
		sync.Mutex
		conn     Conn
		api      pb.MeridianClient
		endpoint int               // position in order of the current endpoint
		order    []int             // endpoint indexes, nearest first
		rtt      []time.Duration   // measured per endpoint (nil: not measured)
		hedge    Conn              // to hedgeTo, for hedged reads
		hedgeAPI pb.MeridianClient //
		hedgeTo  int               // endpoint index
		gen      uint64
		session  int64
		password []byte
		timeout  time.Duration
		lastZxid int64
		// sent is what carry sends with every call (view.go): base (its
		// credentials and the session's password, made once a session),
		// lastZxid and the view's header; rebuilt when the zxid changed
		// (sentZxid), nil when the view did.
		sent     []string
		sentZxid int64
		base     []string
		// groups is the client's view: every group's highest index seen
		// (view.go).
		groups map[uint64]uint64
		// viewHeader is groups encoded (view.go), valid while viewEncoded
		// (cleared by a change); viewSendable: not over maxSeenGroups.
		viewHeader   string
		viewSendable bool
		viewEncoded  bool
		// watchZxid: every change up to it has been notified to this
		// client's watches (the last stream's Ready and events); watches are
		// re-registered relative to it.
		watchZxid int64
		expired   bool
		closed    bool
		// delivered is the highest zxid of a notification dispatched to
		// watchers; deliveredCh is closed and replaced when it grows.
		delivered   int64
		deliveredCh chan struct{}
	}
	watches *watchRegistry
	leases  leaseRegistry
	route   routing // writes straight to the leader (route.go)
	// reconnectMu serialises reconnects: calls, the keepalive loop and the
	// watch loop notice a dead server at once, and each reconnect advances
	// the endpoint, so unserialised they would skip the next nearest.
	reconnectMu sync.Mutex

	stop chan struct{}
	// life ends when stop is closed: background work's contexts derive
	// from it.
	life    context.Context
	endLife context.CancelFunc
	wg      sync.WaitGroup
}

// New connects to the first reachable endpoint and opens a session.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("meridian client: no endpoints")
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 10 * time.Second
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 3 * time.Second
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.WriteRouteIdle <= 0 {
		cfg.WriteRouteIdle = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	for _, d := range cfg.Digest {
		if err := validDigest(d); err != nil {
			return nil, err
		}
	}
	c := &Client{cfg: cfg, auth: credentialPairs(cfg), log: cfg.Logger, watches: newWatchRegistry(), stop: make(chan struct{})}
	c.life, c.endLife = context.WithCancel(context.Background())
	c.leases.m = map[string]*Lease{}
	c.mu.endpoint = -1
	c.mu.deliveredCh = make(chan struct{})
	c.mu.order = orderByRTT(make([]time.Duration, len(cfg.Endpoints)))
	if !cfg.KeepEndpointOrder && len(cfg.Endpoints) > 1 {
		rtt, ids := measureEndpoints(ctx, cfg)
		c.setOrder(rtt)
		c.route.ids = map[int]uint64{}
		for i, id := range ids {
			if id != 0 {
				c.route.ids[i] = id
			}
		}
	}
	// Retry until ctx ends: servers may still be electing a leader.
	var lastErr error
	var unreachable []error // this round's, while every endpoint failed to connect
	for attempt := 0; ctx.Err() == nil; attempt++ {
		api, gen, err := c.connectNext(ctx)
		if err != nil {
			lastErr = err
			if unreachable != nil || attempt%len(cfg.Endpoints) == 0 {
				unreachable = append(unreachable, err)
			}
			if attempt%len(cfg.Endpoints) == len(cfg.Endpoints)-1 {
				if cfg.FailFast && len(unreachable) == len(cfg.Endpoints) {
					why := make([]string, len(unreachable))
					for i, e := range unreachable {
						why[i] = e.Error()
					}
					return nil, fmt.Errorf("meridian client: could not open a session: %w: no endpoint accepts a connection: %s",
						errs.ErrUnavailable, strings.Join(why, "; "))
				}
				unreachable = nil
				sleepCtx(ctx, backoff(attempt))
			}
			continue
		}
		unreachable = nil
		rctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
		resp, err := api.CreateSession(rctx, &pb.CreateSessionRequest{TimeoutMs: int32(cfg.SessionTimeout.Milliseconds())})
		cancel()
		if err != nil {
			lastErr = errs.FromGRPC(err)
			if errs.Retryable(lastErr) {
				// Same server, after a pause: it may just be electing.
				c.mu.Lock()
				c.mu.endpoint--
				c.mu.Unlock()
			}
			c.dropConn(gen)
			sleepCtx(ctx, backoff(attempt))
			continue
		}
		c.mu.Lock()
		c.mu.session, c.mu.password, c.mu.sent, c.mu.base = resp.GetSessionId(), resp.GetPassword(), nil, nil
		c.mu.timeout = time.Duration(resp.GetTimeoutMs()) * time.Millisecond
		c.observe(resp.GetHeader())
		c.mu.Unlock()
		c.wg.Add(2)
		go c.keepAlive()
		go c.watchLoop()
		if !cfg.KeepEndpointOrder && len(cfg.Endpoints) > 1 {
			c.wg.Add(1)
			go c.remeasure()
		}
		return c, nil
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	return nil, fmt.Errorf("meridian client: could not open a session: %w", lastErr)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func backoff(attempt int) time.Duration {
	d := 50 * time.Millisecond << min(attempt, 5)
	return min(d, time.Second)
}

// connectNext dials the next endpoint in order.
func (c *Client) connectNext(ctx context.Context) (pb.MeridianClient, uint64, error) {
	c.mu.Lock()
	c.mu.endpoint = (c.mu.endpoint + 1) % len(c.cfg.Endpoints)
	addr := c.cfg.Endpoints[c.mu.order[c.mu.endpoint]]
	c.mu.Unlock()
	conn := c.dial(addr)
	// Probe: a Status call proves the endpoint answers. Waiting for the
	// connection to be ready rides out a server still starting; with
	// FailFast a refused connection fails the probe at once.
	pctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	defer cancel()
	api := c.newAPI(conn)
	if _, err := api.Status(pctx, &pb.StatusRequest{}, grpc.WaitForReady(!c.cfg.FailFast)); err != nil {
		conn.Close()
		if c.cfg.FailFast {
			return nil, 0, fmt.Errorf("%s: %s", addr, ConnectFailure(err, c.cfg.DialTimeout))
		}
		return nil, 0, fmt.Errorf("%s: %w", addr, errs.FromGRPC(err))
	}
	c.mu.Lock()
	if c.mu.conn != nil {
		c.mu.conn.Close()
	}
	c.mu.conn, c.mu.api = conn, api
	c.mu.gen++
	gen := c.mu.gen
	c.mu.Unlock()
	c.log.Debug("connected", "endpoint", addr)
	return api, gen, nil
}

// ConnectFailure says why a call that needed a new connection failed:
// for a transport failure in the transport's words (connection refused, no
// such host, the TLS handshake's complaint), for a call that timed out
// "no answer within timeout", else the error as errs declares it.
func ConnectFailure(err error, timeout time.Duration) string {
	s, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	switch s.Code() {
	case codes.DeadlineExceeded:
		return fmt.Sprintf("no answer within %v", timeout)
	case codes.Unavailable:
	default:
		return errs.FromGRPC(err).Error()
	}
	msg := s.Message()
	for _, prefix := range []string{"connection error: desc = ", `"`, "transport: ", "Error while dialing: ", "error while dialing: "} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	return strings.TrimSuffix(msg, `"`)
}

func (c *Client) dropConn(gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.gen == gen && c.mu.conn != nil {
		c.mu.conn.Close()
		c.mu.conn, c.mu.api = nil, nil
	}
}

// SeenZxidHeader is the gRPC metadata key that carries the highest zxid a
// client has seen, with every call.
const SeenZxidHeader = "meridian-seen-zxid"

// observe records the highest zxid seen. Caller holds c.mu.
func (c *Client) observe(h *pb.Header) {
	if h != nil && h.GetZxid() > c.mu.lastZxid {
		c.mu.lastZxid = h.GetZxid()
	}
}

// SessionID returns the session's id.
func (c *Client) SessionID() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.session
}

// SessionTimeout returns the negotiated session timeout.
func (c *Client) SessionTimeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.timeout
}

// LastZxid returns the highest zxid this client has seen.
func (c *Client) LastZxid() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.lastZxid
}

// Endpoint returns the address of the server currently in use.
func (c *Client) Endpoint() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.endpoint < 0 {
		return ""
	}
	return c.cfg.Endpoints[c.mu.order[c.mu.endpoint]]
}

// Close closes the session (its ephemerals are deleted) and the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil
	}
	c.mu.closed = true
	expired := c.mu.expired
	c.mu.Unlock()
	var err error
	if !expired {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
		err = c.call(ctx, true, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
			r, err := api.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: sid})
			return r.GetHeader(), err
		})
		cancel()
	}
	close(c.stop)
	c.endLife()
	c.mu.Lock()
	if c.mu.conn != nil {
		c.mu.conn.Close()
	}
	if c.mu.hedge != nil {
		c.mu.hedge.Close()
	}
	c.mu.Unlock()
	if t := c.route.table.Load(); t != nil && t.conn != nil {
		t.conn.Close()
	}
	c.wg.Wait()
	c.watches.closeAll(EventSessionClosed)
	c.leases.loseAll()
	return err
}

// call runs one RPC against the current server, failing over on connection
// errors. Reads (idempotent) are retried on another server; writes are
// retried only when the error proves they were not applied.
func (c *Client) call(ctx context.Context, write bool, fn func(context.Context, pb.MeridianClient, int64) (*pb.Header, error)) error {
	ctx, bound := c.bounded(ctx)
	defer bound.Stop()
	return c.do(ctx, write, fn)
}

// bounded is ctx with the default deadline (Config.RequestTimeout) when it
// has none of its own. It is the lean transport's WithTimeout: a call that
// gets its reply in time costs no timer or channel of its own.
func (c *Client) bounded(ctx context.Context) (context.Context, wire.Stopper) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, noStop{}
	}
	return wire.Bound(ctx, c.cfg.RequestTimeout)
}

// noStop is the Stopper of a context bounded left as it was.
type noStop struct{}

func (noStop) Stop() {}

// do is call without the default deadline, for calls that may block as long
// as their caller wants (lock waits).
func (c *Client) do(ctx context.Context, write bool, fn func(context.Context, pb.MeridianClient, int64) (*pb.Header, error)) error {
	_, err := c.doHeader(ctx, write, fn)
	return err
}

// doHeader is do, returning the reply's header.
func (c *Client) doHeader(ctx context.Context, write bool, fn func(context.Context, pb.MeridianClient, int64) (*pb.Header, error)) (*pb.Header, error) {
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		api, gen, sid, expired := c.mu.api, c.mu.gen, c.mu.session, c.mu.expired
		c.mu.Unlock()
		if expired {
			return nil, ErrSessionExpired
		}
		if api == nil {
			if err := c.reconnect(ctx, gen); err != nil {
				return nil, err
			}
			continue
		}
		// The highest zxid this client has seen travels with every call
		// (carry, view.go).
		h, err := fn(ctx, api, sid)
		if err == nil {
			c.mu.Lock()
			c.observe(h)
			c.mu.Unlock()
			c.awaitNotified(ctx, h.GetNotifiedZxid())
			return h, nil
		}
		err = c.callError(ctx, err)
		switch {
		case errors.Is(err, ErrSessionExpired):
			return nil, err
		case errors.Is(err, ErrConnectionLoss):
			// The server is gone; move on. A write's outcome is unknown.
			c.dropConn(gen)
			if write {
				return nil, err
			}
		case errs.Retryable(err):
			// Not applied (no leader yet, throttled): wait and retry.
		default:
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(backoff(attempt)):
		}
	}
}

// callError is a failed call's error as the client reports it: a cancel
// that was not the caller's is a lost connection (another call or the
// keepalive closed it under the call); an expired session is marked.
func (c *Client) callError(ctx context.Context, err error) error {
	if status.Code(err) == codes.Canceled && ctx.Err() == nil {
		err = ErrConnectionLoss
	}
	err = errs.FromGRPC(err)
	if errors.Is(err, ErrSessionExpired) {
		c.markExpired()
	}
	return err
}

// notifyWait bounds how long a reply waits for the notifications that
// precede it; past it (a stalled or reconnecting stream) the reply goes out
// and the notifications follow when the stream resumes.
const notifyWait = 2 * time.Second

// awaitNotified holds a reply until every watch notification the server
// queued before it has been dispatched, so a watcher sees an event before it
// sees data that follows the change (ZooKeeper's ordering guarantee).
func (c *Client) awaitNotified(ctx context.Context, zxid int64) {
	if zxid <= 0 {
		return
	}
	timer := time.NewTimer(notifyWait)
	defer timer.Stop()
	for {
		c.mu.Lock()
		done, ch := c.mu.delivered >= zxid, c.mu.deliveredCh
		c.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-timer.C:
			return
		case <-c.stop:
			return
		}
	}
}

// reconnect moves the session to the next reachable server.
func (c *Client) reconnect(ctx context.Context, gen uint64) error {
	c.reconnectMu.Lock()
	defer c.reconnectMu.Unlock()
	c.mu.Lock()
	if c.mu.gen != gen && c.mu.api != nil {
		c.mu.Unlock()
		return nil // someone else already reconnected
	}
	closed := c.mu.closed && c.mu.session == 0
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	var lastErr error
	for attempt := 0; attempt < 2*len(c.cfg.Endpoints); attempt++ {
		if ctx.Err() != nil {
			break
		}
		api, ngen, err := c.connectNext(ctx)
		if err != nil {
			lastErr = err
			continue
		}
		c.mu.Lock()
		sid, pw, last := c.mu.session, c.mu.password, c.mu.lastZxid
		c.mu.Unlock()
		_, err = api.AttachSession(ctx, &pb.AttachSessionRequest{SessionId: sid, Password: pw, LastZxid: last})
		if err == nil {
			return nil
		}
		err = errs.FromGRPC(err)
		if errors.Is(err, ErrSessionExpired) {
			c.markExpired()
			return err
		}
		lastErr = err
		c.dropConn(ngen)
		select {
		case <-ctx.Done():
		case <-time.After(backoff(attempt)):
		}
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	return fmt.Errorf("%w: %v", ErrConnectionLoss, lastErr)
}

func (c *Client) markExpired() {
	c.mu.Lock()
	already := c.mu.expired
	c.mu.expired = true
	c.mu.Unlock()
	if !already {
		c.log.Warn("session expired", "session", c.SessionID())
		c.watches.closeAll(EventSessionExpired)
		c.leases.loseAll()
	}
}

// keepAlive pings the current server three times per session timeout.
func (c *Client) keepAlive() {
	defer c.wg.Done()
	next := c.SessionTimeout() / 3
	for {
		select {
		case <-c.stop:
			return
		case <-time.After(next):
		}
		c.idleRoute()
		every := c.SessionTimeout() / 3
		next = every
		ctx, cancel := context.WithTimeout(context.Background(), every)
		var gen uint64
		err := c.call(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
			c.mu.Lock()
			gen = c.mu.gen
			c.mu.Unlock()
			r, err := api.KeepAlive(ctx, &pb.KeepAliveRequest{SessionId: sid})
			return r.GetHeader(), err
		})
		cancel()
		if errors.Is(err, ErrSessionExpired) {
			return
		}
		if errors.Is(err, ErrTimeout) {
			// The server holds the connection but does not answer (stopped,
			// hung): leave it, as ZooKeeper's client does after its read
			// timeout, so the next call moves the session to another server
			// before the session times out: at once, not a period later.
			c.dropConn(gen)
			next = 0
		}
		if err != nil {
			c.log.Debug("keepalive failed", "err", err)
		}
	}
}
