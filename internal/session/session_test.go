package session

import (
	"slices"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestTrackerExpiry(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	tr := NewTracker(clk)
	tr.Add(1, time.Second)
	tr.Add(2, 3*time.Second)
	clk.advance(900 * time.Millisecond)
	if got := tr.Expired(10); len(got) != 0 {
		t.Fatalf("early expiry %v", got)
	}
	tr.Touch(1)
	clk.advance(900 * time.Millisecond)
	if got := tr.Expired(10); len(got) != 0 {
		t.Fatalf("touched session expired: %v", got)
	}
	clk.advance(200 * time.Millisecond)
	if got := tr.Expired(10); !slices.Equal(got, []int64{1}) {
		t.Fatalf("expired %v, want [1]", got)
	}
	tr.MarkPending([]int64{1})
	if got := tr.Expired(10); len(got) != 0 {
		t.Fatalf("pending session offered again: %v", got)
	}
	clk.advance(pendingLapse)
	if got := tr.Expired(10); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("after lapse %v, want [1 2]", got)
	}
	if got := tr.Expired(1); !slices.Equal(got, []int64{1}) {
		t.Fatalf("limit: %v", got)
	}
	tr.Remove(1)
	if tr.Touch(1) {
		t.Fatal("touch of removed session succeeded")
	}
}

func TestResetAllGivesFreshTimeouts(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	tr := NewTracker(clk)
	tr.Add(1, time.Second)
	clk.advance(10 * time.Second) // long overdue on the old leader's books
	tr.ResetAll(map[int64]time.Duration{1: time.Second, 7: 2 * time.Second})
	if got := tr.Expired(10); len(got) != 0 {
		t.Fatalf("new leader expired %v at once", got)
	}
	clk.advance(1500 * time.Millisecond)
	if got := tr.Expired(10); !slices.Equal(got, []int64{1}) {
		t.Fatalf("got %v", got)
	}
	if tr.Len() != 2 {
		t.Fatalf("len %d", tr.Len())
	}
	d, ok := tr.NextDeadline()
	if !ok || !d.Equal(time.Unix(1011, 0)) {
		t.Fatalf("next deadline %v %v", d, ok)
	}
}

func TestTouchBatch(t *testing.T) {
	clk := &fakeClock{t: time.Unix(0, 0)}
	tr := NewTracker(clk)
	tr.Add(1, time.Second)
	tr.Add(2, time.Second)
	clk.advance(800 * time.Millisecond)
	tr.TouchBatch([]int64{2, 99})
	clk.advance(800 * time.Millisecond)
	if got := tr.Expired(10); !slices.Equal(got, []int64{1}) {
		t.Fatalf("got %v", got)
	}
}

func TestNegotiate(t *testing.T) {
	tick := 2 * time.Second
	for _, c := range []struct{ in, want time.Duration }{
		{time.Second, 4 * time.Second}, {10 * time.Second, 10 * time.Second}, {time.Hour, 40 * time.Second}, {0, 4 * time.Second},
	} {
		if got := Negotiate(c.in, tick); got != c.want {
			t.Errorf("Negotiate(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestBatcher(t *testing.T) {
	b := NewBatcher(3)
	for _, id := range []int64{5, 1, 5, 3, 9} {
		b.Touch(id)
	}
	if got := b.Flush(); !slices.Equal(got, []int64{1, 3, 5}) {
		t.Fatalf("flush %v", got)
	}
	if b.Dropped() != 1 {
		t.Fatalf("dropped %d", b.Dropped())
	}
	if got := b.Flush(); got != nil {
		t.Fatalf("second flush %v", got)
	}
}

func TestTouchesCodec(t *testing.T) {
	for _, ids := range [][]int64{{}, {1}, {1, 2, 1 << 40, 1<<62 + 5}, {-5, 0, 7}} {
		got, err := DecodeTouches(EncodeTouches(ids))
		if err != nil || !slices.Equal(got, ids) {
			t.Fatalf("round trip %v: %v %v", ids, got, err)
		}
	}
	for _, bad := range [][]byte{nil, {1}, {2, 0}, {1, 5, 2}, {1, 1, 2, 3}, {1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}} {
		if _, err := DecodeTouches(bad); err == nil {
			t.Fatalf("accepted %v", bad)
		}
	}
}

func FuzzDecodeTouches(f *testing.F) {
	f.Add(EncodeTouches([]int64{1, 2, 3}))
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, err := DecodeTouches(b)
		if err != nil {
			return
		}
		if again, err := DecodeTouches(EncodeTouches(ids)); err != nil || !slices.Equal(again, ids) {
			t.Fatalf("re-encode mismatch")
		}
	})
}
