package replica

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestApplyErrorFailsReplica: a state machine that refuses a committed
// entry stops its replica (Failed, ErrApply) without applying it or
// anything after it; the other members go on.
func TestApplyErrorFailsReplica(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	old := (lead + 1) % 3
	c.sms[old].mu.Lock()
	c.sms[old].refuse = "newer"
	c.sms[old].mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.reps[lead].Propose(ctx, []byte("newer=1")); err != nil {
		t.Fatal(err)
	}
	if err := c.reps[lead].Propose(ctx, []byte("after=1")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.reps[old].Failed():
	case <-ctx.Done():
		t.Fatal("the replica that cannot apply the entry did not fail")
	}
	if err := c.reps[old].FailErr(); !errors.Is(err, ErrApply) {
		t.Fatalf("FailErr = %v, want ErrApply", err)
	}
	c.sms[old].mu.Lock()
	_, applied := c.sms[old].m["after"]
	c.sms[old].mu.Unlock()
	if applied {
		t.Fatal("an entry after the refused one was applied")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c.sms[lead].mu.Lock()
		_, ok := c.sms[lead].m["after"]
		c.sms[lead].mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the leader did not apply the entries")
		}
	}
}
