package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/client"
)

// waitStats polls until the queue's stats satisfy ok.
func waitStats(t *testing.T, c *client.Client, name string, ok func(*client.QueueStats) bool) *client.QueueStats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var st *client.QueueStats
	for time.Now().Before(deadline) {
		var err error
		if st, err = c.Queue(name).Stats(ctx(t), 10); err == nil && ok(st) {
			return st
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("queue %s never reached the expected state; last %v", name, st)
	return nil
}

type popResult struct {
	item *client.Item
	err  error
}

func popAsync(c *client.Client, name string, opts client.PopOptions) chan popResult {
	ch := make(chan popResult, 1)
	go func() {
		it, err := c.Queue(name).Pop(context.Background(), opts)
		ch <- popResult{it, err}
	}()
	return ch
}

func recvPop(t *testing.T, ch chan popResult, what string) *client.Item {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.item
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no item", what)
	}
	return nil
}

// TestQueueRedeliveredWhenConsumerDies: at-least-once. A consumer takes an
// item and its session ends without acking; the item goes to the consumer
// waiting on another member, with the next attempt number.
func TestQueueRedeliveredWhenConsumerDies(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	eps := tc.endpoints()
	producer, dying := tc.client(eps[0]), tc.client(eps[1])
	survivor := tc.client(eps[2])
	cx := ctx(t)
	id, err := producer.Queue("work").Push(cx, []byte("job-1"))
	if err != nil {
		t.Fatal(err)
	}
	it, err := dying.Queue("work").Pop(cx, client.PopOptions{Visibility: time.Minute, TryOnly: true})
	if err != nil || it.ID != id || string(it.Data) != "job-1" || it.Attempt != 1 {
		t.Fatalf("first delivery %+v, %v", it, err)
	}
	if _, err := survivor.Queue("work").Pop(cx, client.PopOptions{TryOnly: true}); !errors.Is(err, client.ErrQueueEmpty) {
		t.Fatalf("in-flight item visible to another consumer: %v", err)
	}
	got := popAsync(survivor, "work", client.PopOptions{Visibility: time.Minute})
	waitStats(t, producer, "work", func(st *client.QueueStats) bool { return st.GetConsumers() == 1 })
	dying.Close() // no ack: the session ends
	re := recvPop(t, got, "redelivery after the consumer's session closed")
	if re.ID != id || string(re.Data) != "job-1" || re.Attempt != 2 {
		t.Fatalf("redelivery %+v", re)
	}
	if err := re.Ack(cx); err != nil {
		t.Fatal(err)
	}
	st := waitStats(t, producer, "work", func(st *client.QueueStats) bool { return true })
	if st.GetReady() != 0 || st.GetInFlight() != 0 || st.GetConsumers() != 0 {
		t.Fatalf("after ack: %v", st)
	}
}

// TestQueueRedeliveredWhenConsumerCrashes: a consumer that takes an item
// and then goes silent (no close, no keepalives: a crashed process) loses it
// when its session expires, long before the item's own lease would end.
func TestQueueRedeliveredWhenConsumerCrashes(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	eps := tc.endpoints()
	survivor := tc.client(eps[0])
	cx := ctx(t)
	id, err := survivor.Queue("work").Push(cx, []byte("job"))
	if err != nil {
		t.Fatal(err)
	}
	// The crashing consumer speaks raw gRPC so nothing keeps its session alive.
	conn, err := grpc.NewClient(eps[1], tc.dialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := pb.NewMeridianClient(conn)
	sess, err := api.CreateSession(cx, &pb.CreateSessionRequest{TimeoutMs: 300})
	if err != nil {
		t.Fatal(err)
	}
	// Calls naming the session carry its password, as the client does.
	owner := metadata.AppendToOutgoingContext(cx, pb.MetadataSessionPassword, string(sess.GetPassword()))
	start := time.Now()
	pop, err := api.Pop(owner, &pb.PopRequest{SessionId: sess.GetSessionId(), Queue: "work", VisibilityMs: 60000})
	if err != nil || pop.GetItem().GetId() != id {
		t.Fatalf("crashing consumer's pop: %v %v", pop, err)
	}
	re, err := survivor.Queue("work").Pop(cx, client.PopOptions{Visibility: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if re.ID != id || re.Attempt != 2 || time.Since(start) > 30*time.Second {
		t.Fatalf("redelivery %+v after %v", re, time.Since(start))
	}
	if _, err := api.Ack(owner, &pb.AckRequest{SessionId: sess.GetSessionId(), Queue: "work", Id: id}); err == nil {
		t.Fatal("the expired consumer acked the redelivery")
	}
	if err := re.Ack(cx); err != nil {
		t.Fatal(err)
	}
}

// TestQueueLeaseExpiry: an unacked delivery is redelivered when its
// visibility lease passes (the leader's tick), and the late consumer can
// no longer settle it.
func TestQueueLeaseExpiry(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	slow, fast := tc.client(), tc.client()
	cx := ctx(t)
	if _, err := slow.Queue("q").Push(cx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	first, err := slow.Queue("q").Pop(cx, client.PopOptions{Visibility: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	second, err := fast.Queue("q").Pop(cx, client.PopOptions{Visibility: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Fatalf("redelivered after %v, before the 300ms lease passed", time.Since(start))
	}
	if second.ID != first.ID || second.Attempt != 2 {
		t.Fatalf("redelivery %+v after %+v", second, first)
	}
	if err := first.Ack(cx); !errors.Is(err, client.ErrNotInFlight) {
		t.Fatalf("ack after the lease passed: %v", err)
	}
	if err := second.Nack(cx); err != nil {
		t.Fatal(err)
	}
	third, err := slow.Queue("q").Pop(cx, client.PopOptions{TryOnly: true})
	if err != nil || third.ID != first.ID || third.Attempt != 3 {
		t.Fatalf("after nack: %+v %v", third, err)
	}
}

// TestQueueBlockingPopGrantedByPush: waiting consumers are served FIFO by
// the pushes of another client, each in the push's own commit.
func TestQueueBlockingPopGrantedByPush(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	eps := tc.endpoints()
	a, b, producer := tc.client(eps[0]), tc.client(eps[1]), tc.client(eps[2])
	cx := ctx(t)
	gotA := popAsync(a, "jobs", client.PopOptions{})
	waitStats(t, producer, "jobs", func(st *client.QueueStats) bool { return st.GetConsumers() == 1 })
	gotB := popAsync(b, "jobs", client.PopOptions{})
	waitStats(t, producer, "jobs", func(st *client.QueueStats) bool { return st.GetConsumers() == 2 })
	id1, err := producer.Queue("jobs").Push(cx, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	itA := recvPop(t, gotA, "first waiter")
	if itA.ID != id1 || string(itA.Data) != "one" || itA.Attempt != 1 {
		t.Fatalf("first waiter got %+v", itA)
	}
	select {
	case r := <-gotB:
		t.Fatalf("second waiter served out of order: %+v", r)
	default:
	}
	id2, err := producer.Queue("jobs").Push(cx, []byte("two"))
	if err != nil {
		t.Fatal(err)
	}
	if itB := recvPop(t, gotB, "second waiter"); itB.ID != id2 {
		t.Fatalf("second waiter got %+v", itB)
	}
	// A waiting pop that times out is withdrawn and takes nothing.
	_, err = a.Queue("jobs").Pop(cx, client.PopOptions{Timeout: 200 * time.Millisecond})
	if !errors.Is(err, client.ErrPopWaitTimeout) {
		t.Fatalf("timed-out pop: %v", err)
	}
	st := waitStats(t, producer, "jobs", func(*client.QueueStats) bool { return true })
	if st.GetConsumers() != 0 || st.GetInFlight() != 2 {
		t.Fatalf("after the timeout: %v", st)
	}
	if _, err := producer.Queue("jobs").Push(cx, make([]byte, 64<<10+1)); !errors.Is(err, client.ErrItemTooLarge) {
		t.Fatalf("oversized push: %v", err)
	}
}

// TestQueueDetachedAckFromAnotherSession is what the CLI does: pop
// detached in one session, which then closes; ack from another.
func TestQueueDetachedAckFromAnotherSession(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	popper, acker := tc.client(), tc.client()
	cx := ctx(t)
	if _, err := popper.Queue("d").Push(cx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	it, err := popper.Queue("d").Pop(cx, client.PopOptions{Detach: true, Visibility: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	popper.Close()
	st := waitStats(t, acker, "d", func(*client.QueueStats) bool { return true })
	if st.GetInFlight() != 1 || st.GetReady() != 0 {
		t.Fatalf("detached delivery did not outlive its session: %v", st)
	}
	if err := acker.Queue("d").Ack(cx, it.ID, it.Attempt+1); !errors.Is(err, client.ErrNotInFlight) {
		t.Fatalf("ack with the wrong attempt: %v", err)
	}
	if err := acker.Queue("d").Ack(cx, it.ID, it.Attempt); err != nil {
		t.Fatal(err)
	}
}

// TestDoubleBarrier: N real clients; nobody gets through Enter before all N
// have entered, nobody through Leave before all N have left.
func TestDoubleBarrier(t *testing.T) {
	const n = 4
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	eps := tc.endpoints()
	var cs []*client.Client
	for i := 0; i < n; i++ {
		cs = append(cs, tc.client(eps[i%len(eps)]))
	}
	obs := tc.client()
	waitBarrier := func(ok func(*client.BarrierStats) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if st, err := obs.BarrierStats(ctx(t), "b"); err == nil && ok(st) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("barrier never reached the expected state")
	}
	run := func(op func(b *client.DoubleBarrier) error, clients []*client.Client) chan error {
		done := make(chan error, len(clients))
		for _, c := range clients {
			go func() { done <- op(c.DoubleBarrier("b", n)) }()
		}
		return done
	}
	enter := func(b *client.DoubleBarrier) error { return b.Enter(context.Background()) }
	leave := func(b *client.DoubleBarrier) error { return b.Leave(context.Background()) }
	expectNone := func(ch chan error, what string) {
		t.Helper()
		select {
		case err := <-ch:
			t.Fatalf("%s returned early: %v", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	expectAll := func(ch chan error, k int, what string) {
		t.Helper()
		for i := 0; i < k; i++ {
			select {
			case err := <-ch:
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: only %d of %d returned", what, i, k)
			}
		}
	}
	first := run(enter, cs[:n-1])
	waitBarrier(func(st *client.BarrierStats) bool { return len(st.GetEntered()) == n-1 })
	expectNone(first, "enter")
	last := run(enter, cs[n-1:])
	expectAll(first, n-1, "enter")
	expectAll(last, 1, "last enter")
	if err := cs[0].DoubleBarrier("b", n).Enter(ctx(t)); err != nil { // a retry finds its own entry
		t.Fatalf("re-enter: %v", err)
	}
	if err := obs.DoubleBarrier("b", n).Enter(ctx(t)); !errors.Is(err, client.ErrBarrierOpen) {
		t.Fatalf("enter of an open barrier by a newcomer: %v", err)
	}
	leaving := run(leave, cs[:n-1])
	waitBarrier(func(st *client.BarrierStats) bool { return len(st.GetLeaving()) == n-1 })
	expectNone(leaving, "leave")
	lastLeave := run(leave, cs[n-1:])
	expectAll(leaving, n-1, "leave")
	expectAll(lastLeave, 1, "last leave")
	waitBarrier(func(st *client.BarrierStats) bool { return st.GetParties() == 0 })
}

// TestDoubleBarrierSessionEnd: a participant that dies before the barrier
// opens withdraws (the others keep waiting); after it opened, its end
// counts as its leave.
func TestDoubleBarrierSessionEnd(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	a, b, c := tc.client(), tc.client(), tc.client()
	entered := make(chan error, 1)
	go func() { entered <- a.DoubleBarrier("b", 2).Enter(context.Background()) }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if st, err := c.BarrierStats(ctx(t), "b"); err == nil && len(st.GetEntered()) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("enter not registered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	a.Close()
	<-entered
	short := c.DoubleBarrier("b", 2)
	short.Timeout = 300 * time.Millisecond
	if err := short.Enter(ctx(t)); !errors.Is(err, client.ErrBarrierWaitTimeout) {
		t.Fatalf("a dead session released the barrier: %v", err)
	}
	if st, err := c.BarrierStats(ctx(t), "b"); err != nil || st.GetParties() != 0 {
		t.Fatalf("timed-out enter not withdrawn: %v %v", st, err)
	}
	both := make(chan error, 1)
	go func() { both <- b.DoubleBarrier("b", 2).Enter(context.Background()) }()
	if err := c.DoubleBarrier("b", 2).Enter(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-both; err != nil {
		t.Fatal(err)
	}
	left := make(chan error, 1)
	go func() { left <- c.DoubleBarrier("b", 2).Leave(context.Background()) }()
	time.Sleep(100 * time.Millisecond)
	b.Close()
	select {
	case err := <-left:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("leave not released by the other participant's session end")
	}
}

func TestSimpleBarrier(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	eps := tc.endpoints()
	owner, w1, w2 := tc.client(eps[0]), tc.client(eps[1]), tc.client(eps[2])
	cx := ctx(t)
	if err := w1.Barrier("gate").Wait(cx, 0); err != nil {
		t.Fatalf("wait on an unset barrier: %v", err)
	}
	if err := owner.Barrier("gate").Set(cx); err != nil {
		t.Fatal(err)
	}
	if err := w1.Barrier("gate").Wait(cx, 200*time.Millisecond); !errors.Is(err, client.ErrBarrierWaitTimeout) {
		t.Fatalf("wait on a set barrier: %v", err)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	for _, c := range []*client.Client{w1, w2} {
		wg.Add(1)
		go func() { defer wg.Done(); errc <- c.Barrier("gate").Wait(context.Background(), 0) }()
	}
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-errc:
		t.Fatalf("waiter passed a set barrier: %v", err)
	default:
	}
	if err := owner.Barrier("gate").Remove(cx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("waiters not released by remove")
	}
	for i := 0; i < 2; i++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// TestQueuesSurviveRestart: items, deliveries and barriers are in the
// replicated state and its snapshots.
func TestQueuesSurviveRestart(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.SnapshotEntries = 20; c.SessionTickMs = 1000 })
	tc.leader()
	c1 := tc.client()
	cx := ctx(t)
	var ids []uint64
	for i := 0; i < 30; i++ { // push past a snapshot
		id, err := c1.Queue("persist").Push(cx, []byte(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := c1.Barrier("gate").Set(cx); err != nil {
		t.Fatal(err)
	}
	tc.closeAll()
	for i := range tc.cfgs {
		tc.start(i)
	}
	tc.leader()
	c2 := tc.client()
	for i, want := range ids {
		it, err := c2.Queue("persist").Pop(cx, client.PopOptions{TryOnly: true})
		if err != nil || it.ID != want || string(it.Data) != fmt.Sprint(i) {
			t.Fatalf("item %d after restart: %+v %v", i, it, err)
		}
	}
	if st, err := c2.BarrierStats(cx, "gate"); err != nil || !st.GetSet() {
		t.Fatalf("barrier after restart: %v %v", st, err)
	}
}

// TestQueuePopCancelledLeavesNoGhost: a consumer that gives up waiting
// (context cancelled) is withdrawn, so the next push goes to a live one.
func TestQueuePopCancelledLeavesNoGhost(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	eps := tc.endpoints()
	quitter, worker := tc.client(eps[1]), tc.client(eps[2])
	cx := ctx(t)
	qctx, cancel := context.WithCancel(context.Background())
	got := popAsync(quitter, "g", client.PopOptions{})
	done := make(chan error, 1)
	go func() { _, err := quitter.Queue("g").Pop(qctx, client.PopOptions{}); done <- err }()
	waitStats(t, worker, "g", func(st *client.QueueStats) bool { return st.GetConsumers() == 2 })
	cancel()
	if err := <-done; err == nil {
		t.Fatal("cancelled pop returned an item")
	}
	waitStats(t, worker, "g", func(st *client.QueueStats) bool { return st.GetConsumers() == 1 })
	// The remaining waiter (the first pop) gets the first push; the second
	// push is free for another consumer: nothing went to the quitter.
	if _, err := worker.Queue("g").Push(cx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	recvPop(t, got, "the waiter that stayed")
	if _, err := worker.Queue("g").Push(cx, []byte("b")); err != nil {
		t.Fatal(err)
	}
	it, err := worker.Queue("g").Pop(cx, client.PopOptions{TryOnly: true})
	if err != nil || string(it.Data) != "b" {
		t.Fatalf("second item: %+v %v", it, err)
	}
}
