package server

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/meridian-coord/meridian/client"
)

// waitForWaiters polls until the lock has n waiters.
func waitForWaiters(t *testing.T, c *client.Client, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		locks, err := c.ListLocks(ctx(t), name)
		if err == nil && len(locks) == 1 && len(locks[0].GetWaiters()) == n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("lock %s never had %d waiters", name, n)
}

func TestLockFIFOHandoffWithFencing(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	c1, c2, c3 := tc.client(), tc.client(), tc.client()
	cx := ctx(t)
	if _, _, err := c1.Create(cx, "/balance", []byte("0"), client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	l1, err := c1.Lock(cx, "db", client.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Fenced("db", l1.Token).Set(cx, "/balance", []byte("1"), -1); err != nil {
		t.Fatalf("holder's fenced write: %v", err)
	}
	if _, err := c2.Lock(cx, "db", client.LockOptions{TryOnly: true}); !errors.Is(err, client.ErrLockHeld) {
		t.Fatalf("try-lock on a held lock: %v", err)
	}
	got2, got3 := make(chan *client.Lease, 1), make(chan *client.Lease, 1)
	go func() { l, _ := c2.Lock(context.Background(), "db", client.LockOptions{}); got2 <- l }()
	waitForWaiters(t, c1, "db", 1)
	go func() { l, _ := c3.Lock(context.Background(), "db", client.LockOptions{}); got3 <- l }()
	waitForWaiters(t, c1, "db", 2)

	if err := l1.Unlock(cx); err != nil {
		t.Fatal(err)
	}
	var l2 *client.Lease
	select {
	case l2 = <-got2:
	case <-time.After(10 * time.Second):
		t.Fatal("first waiter not granted")
	}
	if l2 == nil || l2.Token <= l1.Token {
		t.Fatalf("second grant %+v after token %d", l2, l1.Token)
	}
	select {
	case <-got3:
		t.Fatal("third waiter granted out of order")
	default:
	}
	// The old holder's token is now fenced off; the new one works.
	if _, err := c1.Fenced("db", l1.Token).Set(cx, "/balance", []byte("stale"), -1); !errors.Is(err, client.ErrStaleToken) {
		t.Fatalf("stale token write: %v", err)
	}
	if ok, err := c1.CheckToken(cx, "db", l1.Token); err != nil || ok {
		t.Fatalf("CheckToken(old) = %v, %v", ok, err)
	}
	if ok, err := c1.CheckToken(cx, "db", l2.Token); err != nil || !ok {
		t.Fatalf("CheckToken(current) = %v, %v", ok, err)
	}
	if _, err := c2.Fenced("db", l2.Token).Set(cx, "/balance", []byte("2"), -1); err != nil {
		t.Fatal(err)
	}
	if err := l2.Unlock(cx); err != nil {
		t.Fatal(err)
	}
	select {
	case l3 := <-got3:
		if l3 == nil || l3.Token <= l2.Token {
			t.Fatalf("third grant %+v after token %d", l3, l2.Token)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("second waiter not granted")
	}
	data, _, _ := c1.Get(cx, "/balance")
	if string(data) != "2" {
		t.Fatalf("balance %q: a stale write got through", data)
	}
}

func TestLockReleasedWhenSessionCloses(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	c1, c2 := tc.client(), tc.client()
	cx := ctx(t)
	if _, err := c1.Lock(cx, "job", client.LockOptions{}); err != nil {
		t.Fatal(err)
	}
	got := make(chan *client.Lease, 1)
	go func() { l, _ := c2.Lock(context.Background(), "job", client.LockOptions{}); got <- l }()
	waitForWaiters(t, c2, "job", 1)
	c1.Close()
	select {
	case l := <-got:
		if l == nil {
			t.Fatal("waiter failed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("lock not handed over when the holder's session closed")
	}
}

func TestLockWaitTimeoutLeavesQueue(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	c1, c2 := tc.client(), tc.client()
	cx := ctx(t)
	if _, err := c1.Lock(cx, "q", client.LockOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := c2.Lock(cx, "q", client.LockOptions{Timeout: 300 * time.Millisecond})
	if !errors.Is(err, client.ErrLockWaitTimeout) {
		t.Fatalf("want ErrLockWaitTimeout, got %v", err)
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Fatal("returned before the timeout")
	}
	locks, err := c1.ListLocks(cx, "q")
	if err != nil || len(locks) != 1 || len(locks[0].GetWaiters()) != 0 {
		t.Fatalf("timed-out waiter still queued: %v %v", locks, err)
	}
}

func TestForceUnlockTellsHolder(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	holder, operator := tc.client(), tc.client()
	cx := ctx(t)
	l, err := holder.Lock(cx, "res", client.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := operator.ForceUnlock(cx, "res", holder.SessionID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("holder not told its lock was taken")
	}
	if _, err := holder.Fenced("res", l.Token).Set(cx, "/", nil, -1); !errors.Is(err, client.ErrStaleToken) {
		t.Fatalf("write with a lost lock's token: %v", err)
	}
}

// TestLocksSurviveRestart: holders, queues and tokens are in the replicated
// state (and its snapshots): a full restart keeps them.
func TestLocksSurviveRestart(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.SnapshotEntries = 20; c.SessionTickMs = 1000 })
	tc.leader()
	c1 := tc.client()
	cx := ctx(t)
	l, err := c1.Lock(cx, "persist", client.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ { // push past a snapshot
		c1.Create(cx, "/x", nil, client.CreateOptions{})
		c1.Delete(cx, "/x", -1)
	}
	tc.closeAll()
	for i := range tc.cfgs {
		tc.start(i)
	}
	tc.leader()
	c2 := tc.client()
	if ok, err := c2.CheckToken(cx, "persist", l.Token); err != nil || !ok {
		t.Fatalf("after restart CheckToken = %v, %v", ok, err)
	}
}

func TestSemaphore(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	a, b, c := tc.client(), tc.client(), tc.client()
	cx := ctx(t)
	opts := client.LockOptions{Permits: 2}
	la, err := a.Lock(cx, "pool", opts)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Lock(cx, "pool", opts)
	if err != nil || lb.Token <= la.Token {
		t.Fatalf("second permit: %+v %v", lb, err)
	}
	if _, err := c.Lock(cx, "pool", client.LockOptions{Permits: 2, TryOnly: true}); !errors.Is(err, client.ErrLockHeld) {
		t.Fatalf("third holder of a 2-permit semaphore: %v", err)
	}
	got := make(chan *client.Lease, 1)
	go func() { l, _ := c.Lock(context.Background(), "pool", opts); got <- l }()
	waitForWaiters(t, a, "pool", 1)
	if err := la.Unlock(cx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil || l.Token <= lb.Token {
			t.Fatalf("waiter's permit %+v", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("freed permit not handed to the waiter")
	}
}

// TestElection: campaign blocks until elected, proclaim updates the value,
// observers see each change, resign hands leadership to the next candidate.
func TestElection(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	a, b, obs := tc.client(), tc.client(), tc.client()
	cx := ctx(t)
	la, err := a.Campaign(cx, "svc", []byte("a:1"))
	if err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithCancel(cx)
	defer cancel()
	changes, err := obs.Observe(octx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	expect := func(value string, token uint64) {
		t.Helper()
		select {
		case li := <-changes:
			if !li.Elected || string(li.Value) != value || (token != 0 && li.Token != token) {
				t.Fatalf("observed %+v, want value %q token %d", li, value, token)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no observation of %q", value)
		}
	}
	expect("a:1", la.Token)
	elected := make(chan *client.Lease, 1)
	go func() { l, _ := b.Campaign(context.Background(), "svc", []byte("b:1")); elected <- l }()
	waitForWaiters(t, obs, "svc", 1)
	if err := la.Proclaim(cx, []byte("a:2")); err != nil {
		t.Fatal(err)
	}
	expect("a:2", la.Token)
	if li, err := obs.Leader(cx, "svc"); err != nil || string(li.Value) != "a:2" || li.Session != a.SessionID() {
		t.Fatalf("Leader = %+v %v", li, err)
	}
	if err := la.Unlock(cx); err != nil { // resign
		t.Fatal(err)
	}
	var lb *client.Lease
	select {
	case lb = <-elected:
	case <-time.After(10 * time.Second):
		t.Fatal("next candidate not elected")
	}
	expect("b:1", lb.Token)
	if lb.Token <= la.Token {
		t.Fatalf("new term %d not above %d", lb.Token, la.Token)
	}
	if err := la.Proclaim(cx, []byte("stale")); !errors.Is(err, client.ErrLockNotHeld) {
		t.Fatalf("proclaim after resigning: %v", err)
	}
}

func TestCounter(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		c := tc.client()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 25; j++ {
				if _, err := c.Add(context.Background(), "hits", 1); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if v, err := tc.client().Add(ctx(t), "hits", 0); err != nil || v != 100 {
		t.Fatalf("after 100 concurrent adds: %d, %v", v, err)
	}
}
