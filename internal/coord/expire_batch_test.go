package coord

import "testing"

// TestExpireBatchTokenReuse is the regression test for a bug the chaos
// suite found (seed 5000): one expire command ending the holder and the
// first waiter granted the lock to that waiter and then, in the same apply,
// to the next waiter, both with the command's index as token. The second
// holder's token was then also the first one's, so the expired session's
// fenced writes passed the fence.
func TestExpireBatchTokenReuse(t *testing.T) {
	s := New()
	live := func(int64) bool { return true }
	acq := func(index uint64, session int64) Result {
		r, _, _ := s.Apply(index, &Command{Session: session, Op: OpAcquire, Name: "l", Mode: Exclusive, Wait: true}, live)
		return r
	}
	if r := acq(10, 1); !r.Granted || r.Token != 10 {
		t.Fatalf("first acquire: %+v", r)
	}
	acq(11, 2) // queued
	acq(12, 3) // queued behind 2
	// Sessions 1 (holder) and 2 (first waiter) expire in one command.
	grants, losses := s.SessionsEnded(20, 0, []int64{1, 2}, true)
	if len(losses) != 1 || losses[0].Session != 1 || losses[0].Token != 10 {
		t.Fatalf("losses %+v: want only session 1's hold (token 10)", losses)
	}
	if len(grants) != 1 || grants[0].Session != 3 || grants[0].Token != 20 {
		t.Fatalf("grants %+v: want one grant, to session 3, token 20", grants)
	}
	if err := s.CheckToken("l", 20); err != nil {
		t.Fatalf("session 3's token: %v", err)
	}
	info, _ := s.Get("l")
	if len(info.Holders) != 1 || info.Holders[0].Session != 3 {
		t.Fatalf("holders %+v", info.Holders)
	}
}
