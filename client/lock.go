package client

import (
	"context"
	"sync"
	"time"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
)

// LockOptions configure Lock.
type LockOptions struct {
	// Shared takes a read (shared) hold; the default is exclusive.
	Shared bool
	// TryOnly fails at once with ErrLockHeld instead of queueing.
	TryOnly bool
	// Timeout bounds the wait in the queue (0: as long as ctx allows). On
	// timeout the call fails with ErrLockWaitTimeout and holds nothing.
	Timeout time.Duration
	// Delay is the lock-delay: if this session expires while holding the
	// lock, nobody else gets it for this long.
	Delay time.Duration
	// Permits > 1 makes the name a counting semaphore with that many
	// permits (every acquirer must use the same number).
	Permits int
	// Value is published with the hold (an election candidate's value).
	Value []byte
	// LocalFirst = K > 0 makes the name a local-first lock: on release it
	// goes to the oldest waiter from the previous holder's region, ahead of
	// older waiters from elsewhere, at most K times in a row. Every
	// acquirer must use the same K.
	LocalFirst int
	// Region is this client's region for local-first locks (default: the
	// region of the server the session is on).
	Region string
}

// Lease is a held lock. Token is its fencing token: strictly increasing for
// every grant of every lock; pass it to the resource the lock protects, or
// use Fenced writes, so a holder that lost the lock cannot do damage.
type Lease struct {
	c     *Client
	Name  string
	Token uint64

	lostOnce sync.Once
	lost     chan struct{}
}

// Lost is closed when the lease is gone other than by Unlock: the session
// expired or was closed, or an operator forced the lock free.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

func (l *Lease) markLost() { l.lostOnce.Do(func() { close(l.lost) }) }

// Unlock releases the lock; the next waiter is granted it in the same commit.
func (l *Lease) Unlock(ctx context.Context) error {
	err := l.c.call(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
		r, err := api.Unlock(ctx, &pb.UnlockRequest{SessionId: sid, Name: l.Name})
		return r.GetHeader(), err
	})
	l.c.leases.remove(l)
	return err
}

// Lock acquires the named lock for this client's session: one round trip
// and one commit when it is free; otherwise the call waits in a FIFO queue
// on the server. Acquiring is idempotent per session, so a call retried
// after a lost connection finds its own grant or queue place.
func (c *Client) Lock(ctx context.Context, name string, opts LockOptions) (*Lease, error) {
	var resp *pb.LockResponse
	err := c.do(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.Lock(ctx, &pb.LockRequest{SessionId: sid, Name: name, Shared: opts.Shared,
			Wait: !opts.TryOnly, TimeoutMs: opts.Timeout.Milliseconds(), DelayMs: opts.Delay.Milliseconds(),
			Permits: int32(opts.Permits), Value: opts.Value, LocalFirst: int32(opts.LocalFirst), Region: opts.Region})
		return resp.GetHeader(), err
	})
	if err != nil {
		return nil, c.explainLock(ctx, name, opts, err)
	}
	l := &Lease{c: c, Name: name, Token: resp.GetToken(), lost: make(chan struct{})}
	c.leases.add(l)
	return l, nil
}

// CheckToken reports, linearizably, whether token is name's current
// exclusive holder token.
func (c *Client) CheckToken(ctx context.Context, name string, token uint64) (bool, error) {
	var resp *pb.CheckTokenResponse
	err := c.call(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.CheckToken(ctx, &pb.CheckTokenRequest{Name: name, Token: token})
		return resp.GetHeader(), err
	})
	return resp.GetValid(), err
}

// LockInfo describes one lock: holders and waiters.
type LockInfo = pb.LockInfo

// ListLocks lists locks whose name starts with prefix.
func (c *Client) ListLocks(ctx context.Context, prefix string) ([]*LockInfo, error) {
	var resp *pb.ListLocksResponse
	err := c.call(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.ListLocks(ctx, &pb.ListLocksRequest{Prefix: prefix})
		return resp.GetHeader(), err
	})
	return resp.GetLocks(), err
}

// ForceUnlock evicts a holder (an operator action); the holder is told
// through its lease's Lost channel.
func (c *Client) ForceUnlock(ctx context.Context, name string, holderSession int64) error {
	return c.call(ctx, true, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
		r, err := api.ForceUnlock(ctx, &pb.ForceUnlockRequest{Name: name, HolderSessionId: holderSession})
		return r.GetHeader(), err
	})
}

// Fenced returns a view of the client whose writes apply only while token is
// name's current token (else ErrStaleToken): Meridian as fenced storage.
func (c *Client) Fenced(name string, token uint64) *Fenced {
	return &Fenced{c: c, fence: &pb.Fence{Lock: name, Token: token}}
}

// Fenced issues writes conditional on a lock token.
type Fenced struct {
	c     *Client
	fence *pb.Fence
}

// Create is Client.Create under the fence.
func (f *Fenced) Create(ctx context.Context, path string, data []byte, opts CreateOptions) (string, *Stat, error) {
	var resp *pb.CreateResponse
	err := f.c.call(ctx, true, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.Create(ctx, &pb.CreateRequest{SessionId: sid, Path: path, Data: data, Acl: opts.ACL, Mode: opts.Mode, TtlMs: opts.TTL, Fence: f.fence})
		return resp.GetHeader(), err
	})
	return resp.GetPath(), resp.GetStat(), err
}

// Set is Client.Set under the fence.
func (f *Fenced) Set(ctx context.Context, path string, data []byte, version int32) (*Stat, error) {
	var resp *pb.SetDataResponse
	err := f.c.call(ctx, true, func(ctx context.Context, api pb.MeridianClient, sid int64) (h *pb.Header, err error) {
		resp, err = api.SetData(ctx, &pb.SetDataRequest{SessionId: sid, Path: path, Data: data, Version: optVersion(version), Fence: f.fence})
		return resp.GetHeader(), err
	})
	return resp.GetStat(), err
}

// Delete is Client.Delete under the fence.
func (f *Fenced) Delete(ctx context.Context, path string, version int32) error {
	return f.c.call(ctx, true, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
		r, err := api.Delete(ctx, &pb.DeleteRequest{SessionId: sid, Path: path, Version: optVersion(version), Fence: f.fence})
		return r.GetHeader(), err
	})
}

// leaseRegistry tracks held leases so losses reach their Lost channels.
type leaseRegistry struct {
	mu sync.Mutex
	m  map[string]*Lease
}

func (r *leaseRegistry) add(l *Lease) {
	r.mu.Lock()
	r.m[l.Name] = l
	r.mu.Unlock()
}

func (r *leaseRegistry) remove(l *Lease) {
	r.mu.Lock()
	if r.m[l.Name] == l {
		delete(r.m, l.Name)
	}
	r.mu.Unlock()
}

func (r *leaseRegistry) lose(name string, token uint64) {
	r.mu.Lock()
	l := r.m[name]
	if l != nil && l.Token == token {
		delete(r.m, name)
	} else {
		l = nil
	}
	r.mu.Unlock()
	if l != nil {
		l.markLost()
	}
}

func (r *leaseRegistry) loseAll() {
	r.mu.Lock()
	m := r.m
	r.m = map[string]*Lease{}
	r.mu.Unlock()
	for _, l := range m {
		l.markLost()
	}
}
