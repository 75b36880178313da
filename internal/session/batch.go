package session

import (
	"encoding/binary"
	"errors"
	"slices"
	"sync"
)

// Batcher collects the sessions touched on a follower until the next flush
// to the leader. It is a set, so its size is bounded by the live sessions;
// the cap only guards against a flood of bogus ids: touches beyond it are
// dropped and counted (their sessions are touched again by the next
// keepalive, well within a timeout). It is safe for concurrent use.
type Batcher struct {
	max     int
	mu      sync.Mutex
	ids     map[int64]struct{}
	dropped uint64
}

// NewBatcher returns a batcher holding at most limit ids (at least 1).
func NewBatcher(limit int) *Batcher {
	return &Batcher{max: max(limit, 1), ids: map[int64]struct{}{}}
}

// Touch adds id to the next batch.
func (b *Batcher) Touch(id int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.ids[id]; ok {
		return
	}
	if len(b.ids) >= b.max {
		b.dropped++
		return
	}
	b.ids[id] = struct{}{}
}

// Flush returns the batch, deduplicated and sorted (nil if empty), and
// starts a new one.
func (b *Batcher) Flush() []int64 {
	b.mu.Lock()
	ids := b.ids
	if len(ids) == 0 {
		b.mu.Unlock()
		return nil
	}
	// The next batch is likely about as large: size the map for it.
	b.ids = make(map[int64]struct{}, len(ids))
	b.mu.Unlock()
	out := make([]int64, 0, len(ids))
	for id := range ids {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Dropped returns how many touches were dropped at the cap, in total.
func (b *Batcher) Dropped() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped
}

// MaxTouches bounds the ids in one encoded batch.
const MaxTouches = 1 << 20

// touchesVersion is the first byte of an encoded batch. Version 1 (signed
// deltas) was never accepted by this decoder.
const touchesVersion = 2

// ErrBadTouches reports a malformed keepalive batch.
var ErrBadTouches = errors.New("session: malformed keepalive batch")

// EncodeTouches encodes a set of session ids for the leader side channel:
// the version byte, the count (uvarint), the smallest id (zigzag varint),
// then each following id as its distance from the previous one (uvarint,
// at least 1). Batcher.Flush output is sorted and unique already; any other
// input is sorted and deduplicated first.
func EncodeTouches(ids []int64) []byte {
	if !isStrictlyIncreasing(ids) {
		ids = slices.Clone(ids)
		slices.Sort(ids)
		ids = slices.Compact(ids)
	}
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(ids)*3)
	b = append(b, touchesVersion)
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for i, id := range ids {
		if i == 0 {
			b = binary.AppendVarint(b, id)
		} else {
			b = binary.AppendUvarint(b, uint64(id)-uint64(ids[i-1]))
		}
	}
	return b
}

func isStrictlyIncreasing(ids []int64) bool {
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			return false
		}
	}
	return true
}

// DecodeTouches decodes a batch from EncodeTouches. It is strict — wrong
// version, non-minimal varints, a zero or overflowing delta, more than
// MaxTouches ids, or trailing bytes all fail with ErrBadTouches — so each
// batch has exactly one encoding; it allocates no more than the input can
// justify and never panics.
func DecodeTouches(b []byte) ([]int64, error) {
	if len(b) < 2 || b[0] != touchesVersion {
		return nil, ErrBadTouches
	}
	b = b[1:]
	n, k := uvarint(b)
	// Every id takes at least one byte, which bounds the allocation.
	if k <= 0 || n > MaxTouches || n > uint64(len(b)-k) {
		return nil, ErrBadTouches
	}
	b = b[k:]
	out := make([]int64, 0, n)
	for i := uint64(0); i < n; i++ {
		if i == 0 {
			v, k := binary.Varint(b)
			if k <= 0 || k != varintLen(v) {
				return nil, ErrBadTouches
			}
			out = append(out, v)
			b = b[k:]
			continue
		}
		d, k := uvarint(b)
		prev := out[len(out)-1]
		// The next id must be greater than prev and fit in an int64.
		if k <= 0 || d == 0 || d > uint64(1<<63-1)-uint64(prev) {
			return nil, ErrBadTouches
		}
		out = append(out, int64(uint64(prev)+d))
		b = b[k:]
	}
	if len(b) != 0 {
		return nil, ErrBadTouches
	}
	return out, nil
}

// uvarint is binary.Uvarint refusing non-minimal encodings.
func uvarint(b []byte) (uint64, int) {
	v, k := binary.Uvarint(b)
	if k > 0 && k != uvarintLen(v) {
		return 0, -1
	}
	return v, k
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func varintLen(v int64) int {
	ux := uint64(v) << 1
	if v < 0 {
		ux = ^ux
	}
	return uvarintLen(ux)
}
