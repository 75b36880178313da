package session

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
)

func TestBatcherDedupesAndSorts(t *testing.T) {
	b := NewBatcher(100)
	for _, id := range []int64{5, 1, 5, 3, -2, 1} {
		b.Touch(id)
	}
	expect(t, "flush", b.Flush(), []int64{-2, 1, 3, 5})
	expect(t, "second flush", b.Flush(), nil)
	b.Touch(7)
	expect(t, "new batch", b.Flush(), []int64{7})
	if b.Dropped() != 0 {
		t.Fatalf("dropped %d", b.Dropped())
	}
}

func TestBatcherCap(t *testing.T) {
	b := NewBatcher(3)
	for _, id := range []int64{5, 1, 5, 3, 9, 10, 1} {
		b.Touch(id)
	}
	expect(t, "capped", b.Flush(), []int64{1, 3, 5})
	if b.Dropped() != 2 {
		t.Fatalf("dropped %d, want 2", b.Dropped())
	}
	b.Touch(9) // room again after the flush
	expect(t, "after flush", b.Flush(), []int64{9})
	z := NewBatcher(0)
	z.Touch(1)
	expect(t, "cap below 1 acts as 1", z.Flush(), []int64{1})
}

func TestBatcherConcurrent(t *testing.T) {
	b := NewBatcher(1 << 20)
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[int64]int{}
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				b.Touch(int64(g*1000 + i))
				if i%100 == 0 {
					ids := b.Flush()
					mu.Lock()
					for _, id := range ids {
						seen[id]++
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for _, id := range b.Flush() {
		seen[id]++
	}
	if len(seen) != 4000 {
		t.Fatalf("saw %d ids, want 4000", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("id %d flushed %d times", id, n)
		}
	}
}

func TestTouchesRoundTrip(t *testing.T) {
	for _, ids := range [][]int64{
		nil, {0}, {1}, {1, 2, 1 << 40, 1<<62 + 5},
		{-5, 0, 7}, {math.MinInt64, math.MaxInt64}, {math.MinInt64, 0, math.MaxInt64},
		{math.MaxInt64 - 1, math.MaxInt64},
	} {
		enc := EncodeTouches(ids)
		got, err := DecodeTouches(enc)
		if err != nil || !slices.Equal(got, ids) && len(ids)+len(got) > 0 {
			t.Fatalf("round trip %v: %v %v", ids, got, err)
		}
	}
	// Unsorted input with duplicates is normalised, not mangled.
	in := []int64{9, 3, 9, -1}
	got, err := DecodeTouches(EncodeTouches(in))
	if err != nil || !slices.Equal(got, []int64{-1, 3, 9}) {
		t.Fatalf("normalised: %v %v", got, err)
	}
	if !slices.Equal(in, []int64{9, 3, 9, -1}) {
		t.Fatal("EncodeTouches modified its input")
	}
	// Compact: dense ids cost about a byte each.
	dense := make([]int64, 1000)
	for i := range dense {
		dense[i] = 1<<56 + int64(i)*3
	}
	if n := len(EncodeTouches(dense)); n > 1000+16 {
		t.Fatalf("1000 dense ids took %d bytes", n)
	}
}

func TestDecodeTouchesRejects(t *testing.T) {
	for _, bad := range [][]byte{
		nil,
		{2},                         // no count
		{1, 0},                      // old version
		{3, 0},                      // unknown version
		{2, 1},                      // count 1, no id
		{2, 2, 2},                   // count 2, one id
		{2, 1, 2, 0},                // trailing byte
		{2, 2, 2, 0},                // zero delta: duplicate id
		{2, 0x80, 0x00},             // non-minimal count
		{2, 1, 0x82, 0x00},          // non-minimal first id
		{2, 2, 0, 0x81, 0x00},       // non-minimal delta
		{2, 0xff, 0xff, 0xff, 0x0f}, // huge count, short input
		{2, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, // varint overflow
		append([]byte{2, 2}, append(binaryVarint(math.MaxInt64), 1)...),    // delta overflows int64
	} {
		if ids, err := DecodeTouches(bad); !errors.Is(err, ErrBadTouches) {
			t.Errorf("accepted % x as %v", bad, ids)
		}
	}
	if ids, err := DecodeTouches([]byte{2, 0}); err != nil || len(ids) != 0 {
		t.Fatalf("empty batch: %v %v", ids, err)
	}
}

func binaryVarint(v int64) []byte {
	b := EncodeTouches([]int64{v})
	return b[2:]
}

// FuzzDecodeTouches checks the decoder never panics, and that whatever it
// accepts is canonical: re-encoding gives back the same bytes.
func FuzzDecodeTouches(f *testing.F) {
	f.Add(EncodeTouches([]int64{1, 2, 3}))
	f.Add(EncodeTouches([]int64{math.MinInt64, -1, 0, 1 << 40, math.MaxInt64}))
	f.Add([]byte{2, 0})
	f.Add([]byte{2, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, err := DecodeTouches(b)
		if err != nil {
			if ids != nil {
				t.Fatal("ids returned with an error")
			}
			return
		}
		if len(ids) > MaxTouches || len(ids) > len(b) {
			t.Fatalf("%d ids from %d bytes", len(ids), len(b))
		}
		for i := 1; i < len(ids); i++ {
			if ids[i] <= ids[i-1] {
				t.Fatalf("not strictly increasing: %v", ids)
			}
		}
		if enc := EncodeTouches(ids); !bytes.Equal(enc, b) {
			t.Fatalf("not canonical: % x re-encodes as % x", b, enc)
		}
	})
}
