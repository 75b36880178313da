package coord

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sort"

	"github.com/meridian-coord/meridian/internal/errs"
)

const snapshotVersion = 1

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Snapshot serializes the lock table deterministically (sorted), with a
// CRC32C trailer.
func (s *State) Snapshot() []byte {
	b := []byte{snapshotVersion}
	names := s.sortedNames()
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		l := s.locks[name]
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = binary.AppendVarint(b, l.delayUntil)
		b = binary.AppendUvarint(b, uint64(l.permits))
		b = binary.AppendUvarint(b, uint64(len(l.holders)))
		for _, h := range l.holders {
			b = binary.AppendVarint(b, h.Session)
			b = binary.AppendUvarint(b, h.Token)
			b = append(b, byte(h.Mode))
			b = binary.AppendVarint(b, l.delays[h.Session])
			b = binary.AppendUvarint(b, uint64(len(h.Value)))
			b = append(b, h.Value...)
		}
		b = binary.AppendUvarint(b, uint64(len(l.waiters)))
		for _, w := range l.waiters {
			b = binary.AppendVarint(b, w.Session)
			b = append(b, byte(w.Mode))
			b = binary.AppendVarint(b, w.DelayMs)
			b = binary.AppendUvarint(b, uint64(len(w.Value)))
			b = append(b, w.Value...)
		}
	}
	cnames := make([]string, 0, len(s.counters))
	for n := range s.counters {
		cnames = append(cnames, n)
	}
	sort.Strings(cnames)
	b = binary.AppendUvarint(b, uint64(len(cnames)))
	for _, n := range cnames {
		b = binary.AppendUvarint(b, uint64(len(n)))
		b = append(b, n...)
		b = binary.AppendVarint(b, s.counters[n])
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// Restore parses a Snapshot; corrupt input is an error, never a panic.
func Restore(b []byte) (*State, error) {
	corrupt := func(what string) error { return fmt.Errorf("%w: coord snapshot: %s", errs.ErrDataInconsistency, what) }
	if len(b) < 5 || binary.BigEndian.Uint32(b[len(b)-4:]) != crc32.Checksum(b[:len(b)-4], crcTable) {
		return nil, corrupt("checksum")
	}
	b = b[:len(b)-4]
	if b[0] != snapshotVersion {
		return nil, corrupt("version")
	}
	b = b[1:]
	fail := false
	uv := func(max uint64) uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > max {
			fail = true
			return 0
		}
		b = b[n:]
		return v
	}
	sv := func() int64 {
		v, n := binary.Varint(b)
		if n <= 0 {
			fail = true
			return 0
		}
		b = b[n:]
		return v
	}
	byt := func() byte {
		if len(b) == 0 {
			fail = true
			return 0
		}
		v := b[0]
		b = b[1:]
		return v
	}
	value := func() []byte {
		n := uv(MaxValueBytes)
		if fail || n > uint64(len(b)) {
			fail = true
			return nil
		}
		if n == 0 {
			return nil
		}
		v := append([]byte(nil), b[:n]...)
		b = b[n:]
		return v
	}
	s := New()
	nLocks := uv(MaxLocks)
	for i := uint64(0); i < nLocks && !fail; i++ {
		nl := uv(MaxLockNameBytes)
		if fail || nl > uint64(len(b)) {
			return nil, corrupt("lock name")
		}
		name := string(b[:nl])
		b = b[nl:]
		if _, dup := s.locks[name]; dup {
			return nil, corrupt("duplicate lock")
		}
		l := &lock{delayUntil: sv(), permits: int32(uv(MaxPermits))}
		if l.permits < 1 {
			return nil, corrupt("permits")
		}
		nh := uv(uint64(len(b)))
		for j := uint64(0); j < nh && !fail; j++ {
			h := Holder{Session: sv(), Token: uv(^uint64(0)), Mode: Mode(byt())}
			if d := sv(); d > 0 {
				if l.delays == nil {
					l.delays = map[int64]int64{}
				}
				l.delays[h.Session] = d
			}
			h.Value = value()
			l.holders = append(l.holders, h)
			s.track(h.Session, name)
		}
		nw := uv(uint64(len(b)))
		for j := uint64(0); j < nw && !fail; j++ {
			w := Waiter{Session: sv(), Mode: Mode(byt()), DelayMs: sv(), Value: value()}
			l.waiters = append(l.waiters, w)
			s.track(w.Session, name)
		}
		s.locks[name] = l
	}
	nCounters := uv(MaxCounters)
	for i := uint64(0); i < nCounters && !fail; i++ {
		nl := uv(MaxLockNameBytes)
		if fail || nl > uint64(len(b)) {
			return nil, corrupt("counter name")
		}
		name := string(b[:nl])
		b = b[nl:]
		v := sv()
		if _, dup := s.counters[name]; dup || v == 0 {
			return nil, corrupt("duplicate or zero counter")
		}
		s.counters[name] = v
	}
	if fail || len(b) != 0 {
		return nil, corrupt("truncated or trailing bytes")
	}
	return s, nil
}
