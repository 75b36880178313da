package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/errs"
)

// A local-first lock hands off inside the holder's region first: the
// requester's region defaults to its server's, and after K such hand-offs
// the older waiter from elsewhere gets its turn.
func TestLocalFirstLockHandOff(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) {
		c.Members = slices.Clone(c.Members)
		for i := range c.Members {
			c.Members[i].Region = fmt.Sprintf("r%d", i+1)
		}
	})
	tc.leader()
	eps := tc.endpoints()
	holder := tc.client(eps[0]) // region r1
	far := tc.client(eps[1])    // region r2
	near := tc.client(eps[0])   // region r1
	opts := client.LockOptions{LocalFirst: 1}
	first, err := holder.Lock(ctx(t), "m", opts)
	if err != nil {
		t.Fatal(err)
	}
	waiters := func(n int) {
		t.Helper()
		waitUntil(t, fmt.Sprintf("%d waiters", n), func() bool {
			ls, err := holder.ListLocks(ctx(t), "m")
			return err == nil && len(ls) == 1 && len(ls[0].GetWaiters()) == n
		})
	}
	type grant struct {
		who   string
		lease *client.Lease
	}
	got := make(chan grant, 2)
	lock := func(who string, c *client.Client) {
		l, err := c.Lock(context.Background(), "m", opts)
		if err != nil {
			t.Errorf("%s: %v", who, err)
			return
		}
		got <- grant{who, l}
	}
	go lock("far", far) // waits first
	waiters(1)
	go lock("near", near) // waits second, in the holder's region
	waiters(2)
	if err := first.Unlock(ctx(t)); err != nil {
		t.Fatal(err)
	}
	g1 := <-got
	if g1.who != "near" {
		t.Fatalf("first hand-off went to %s, want near (the holder's region)", g1.who)
	}
	// K = 1: the next hand-off goes to the head of the queue.
	if err := g1.lease.Unlock(ctx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case g2 := <-got:
		if g2.who != "far" || g2.lease.Token <= g1.lease.Token || g1.lease.Token <= first.Token {
			t.Fatalf("second grant %s token %d (first %d, near %d)", g2.who, g2.lease.Token, first.Token, g1.lease.Token)
		}
		// While it exists the lock is local-first for everyone: a FIFO
		// acquire of it is refused, not queued.
		if _, err := near.Lock(ctx(t), "m", client.LockOptions{TryOnly: true}); !errors.Is(err, errs.ErrBadArguments) {
			t.Fatalf("FIFO acquire of a local-first lock: %v, want bad arguments", err)
		}
		g2.lease.Unlock(ctx(t))
	case <-time.After(10 * time.Second):
		t.Fatal("the far waiter was not granted")
	}
}
