package coord

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"sort"

	"github.com/meridian-coord/meridian/internal/errs"
)

// Snapshot versions. Version 1 holds locks and counters; version 2 adds
// queues and barriers after them. A snapshot is written as version 1 while
// no queue or barrier state exists, so it stays byte for byte what older
// binaries write and read; they refuse a version 2 snapshot (an error, not a
// misread), so every member must run this version before queues or
// barriers are used. Version 3 adds cluster settings and the state of
// local-first locks after the version 2 sections (which may then be empty);
// it is written only while a setting or a local-first lock exists. Restore
// reads all three.
const (
	snapshotV1 = 1
	snapshotV2 = 2
	snapshotV3 = 3
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func (s *State) hasV2State() bool {
	return len(s.qs) > 0 || len(s.simple) > 0 || len(s.double) > 0
}

// Snapshot serializes the state deterministically (sorted), with a CRC32C
// trailer.
func (s *State) Snapshot() []byte {
	version := byte(snapshotV1)
	geo := s.localFirstNames()
	switch {
	case len(s.settings) > 0 || len(geo) > 0:
		version = snapshotV3
	case s.hasV2State():
		version = snapshotV2
	}
	b := []byte{version}
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
	if version >= snapshotV2 {
		b = s.appendQueuesAndBarriers(b)
	}
	if version == snapshotV3 {
		snames := make([]string, 0, len(s.settings))
		for n := range s.settings {
			snames = append(snames, n)
		}
		sort.Strings(snames)
		b = binary.AppendUvarint(b, uint64(len(snames)))
		for _, n := range snames {
			b = binary.AppendUvarint(b, uint64(len(n)))
			b = append(b, n...)
			b = binary.AppendUvarint(b, uint64(len(s.settings[n])))
			b = append(b, s.settings[n]...)
		}
		b = binary.AppendUvarint(b, uint64(len(geo)))
		for _, n := range geo {
			l := s.locks[n]
			b = binary.AppendUvarint(b, uint64(len(n)))
			b = append(b, n...)
			b = binary.AppendUvarint(b, uint64(l.localFirst))
			b = binary.AppendUvarint(b, uint64(l.streak))
			b = binary.AppendUvarint(b, uint64(len(l.lastRegion)))
			b = append(b, l.lastRegion...)
			for _, w := range l.waiters { // as many as the lock section has
				b = binary.AppendUvarint(b, uint64(len(w.Region)))
				b = append(b, w.Region...)
			}
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (s *State) appendQueuesAndBarriers(b []byte) []byte {
	names := sortedKeys(s.qs)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		q := s.qs[name]
		b = appendBytes(b, []byte(name))
		b = binary.AppendUvarint(b, uint64(len(q.ready)))
		for _, it := range q.ready {
			b = binary.AppendUvarint(b, it.id)
			b = binary.AppendUvarint(b, uint64(it.attempts))
			b = appendBytes(b, it.data)
		}
		b = binary.AppendUvarint(b, uint64(len(q.inflight)))
		for _, id := range q.inflightIDs() {
			f := q.inflight[id]
			b = binary.AppendUvarint(b, f.id)
			b = binary.AppendUvarint(b, uint64(f.attempts))
			b = appendBytes(b, f.data)
			b = binary.AppendVarint(b, f.session)
			b = binary.AppendVarint(b, f.deadline)
			b = binary.AppendUvarint(b, f.waiter)
		}
		b = binary.AppendUvarint(b, uint64(len(q.consumers)))
		for _, w := range q.consumers {
			b = binary.AppendVarint(b, w.Session)
			b = binary.AppendUvarint(b, w.Waiter)
			b = binary.AppendVarint(b, w.VisibilityMs)
			if w.Detach {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		}
	}
	simple := sortedKeys(s.simple)
	b = binary.AppendUvarint(b, uint64(len(simple)))
	for _, name := range simple {
		b = appendBytes(b, []byte(name))
	}
	double := sortedKeys(s.double)
	b = binary.AppendUvarint(b, uint64(len(double)))
	for _, name := range double {
		d := s.double[name]
		b = appendBytes(b, []byte(name))
		b = binary.AppendUvarint(b, uint64(d.parties))
		if d.open {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		for _, list := range [][]int64{d.entered, d.leaving} {
			b = binary.AppendUvarint(b, uint64(len(list)))
			for _, id := range list {
				b = binary.AppendVarint(b, id)
			}
		}
	}
	return b
}

// Restore parses a Snapshot; corrupt input is an error, never a panic.
func Restore(b []byte) (*State, error) {
	corrupt := func(what string) error { return fmt.Errorf("%w: coord snapshot: %s", errs.ErrDataInconsistency, what) }
	if len(b) < 5 || binary.BigEndian.Uint32(b[len(b)-4:]) != crc32.Checksum(b[:len(b)-4], crcTable) {
		return nil, corrupt("checksum")
	}
	b = b[:len(b)-4]
	version := b[0]
	if version != snapshotV1 && version != snapshotV2 && version != snapshotV3 {
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
	name := func() (string, bool) {
		n := uv(MaxLockNameBytes)
		if fail || n == 0 || n > uint64(len(b)) {
			fail = true
			return "", false
		}
		v := string(b[:n])
		b = b[n:]
		return v, true
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
		if l.delayUntil != 0 {
			s.delayed[name] = struct{}{}
		}
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
	if version >= snapshotV2 && !fail {
		if err := s.restoreQueuesAndBarriers(uv, sv, byt, name, value); err != "" {
			return nil, corrupt(err)
		}
		if version == snapshotV2 && !s.hasV2State() {
			return nil, corrupt("version 2 without queues or barriers")
		}
	}
	if version == snapshotV3 && !fail {
		n := uv(MaxSettings)
		for i := uint64(0); i < n && !fail; i++ {
			k, ok := name()
			v := value()
			if !ok || fail || len(v) == 0 || len(v) > MaxSettingBytes {
				return nil, corrupt("setting")
			}
			if _, dup := s.settings[k]; dup {
				return nil, corrupt("duplicate setting")
			}
			s.settings[k] = string(v)
		}
		nGeo := uv(MaxLocks)
		for i := uint64(0); i < nGeo && !fail; i++ {
			k, _ := name()
			l := s.locks[k]
			if fail || l == nil || l.localFirst != 0 {
				return nil, corrupt("local-first lock")
			}
			l.localFirst = int32(uv(MaxLocalFirst))
			l.streak = int32(uv(MaxLocalFirst))
			l.lastRegion = region(&fail, uv, &b)
			for j := range l.waiters {
				l.waiters[j].Region = region(&fail, uv, &b)
			}
			if l.localFirst == 0 || l.streak > l.localFirst || l.permits > 1 {
				return nil, corrupt("local-first lock fields")
			}
		}
		if len(s.settings) == 0 && nGeo == 0 {
			return nil, corrupt("version 3 without settings or local-first locks")
		}
	}
	if fail || len(b) != 0 {
		return nil, corrupt("truncated or trailing bytes")
	}
	return s, nil
}

// restoreQueuesAndBarriers reads the version 2 sections with the readers of
// Restore and checks the invariants Apply keeps; it returns what is wrong,
// or "".
func (s *State) restoreQueuesAndBarriers(uv func(uint64) uint64, sv func() int64, byt func() byte,
	name func() (string, bool), value func() []byte) string {
	nq := uv(MaxQueues)
	for i := uint64(0); i < nq; i++ {
		qname, ok := name()
		if !ok {
			return "queue name"
		}
		if _, dup := s.qs[qname]; dup {
			return "duplicate queue"
		}
		q := &queue{inflight: map[uint64]*inflight{}}
		s.qs[qname] = q
		seen := map[uint64]bool{}
		item := func() (qitem, bool) {
			it := qitem{id: uv(^uint64(0)), attempts: uint32(uv(math.MaxUint32)), data: value()}
			if it.id == 0 || seen[it.id] {
				return it, false
			}
			seen[it.id] = true
			q.bytes += int64(len(it.data))
			return it, true
		}
		nr := uv(MaxQueueItems)
		for j := uint64(0); j < nr; j++ {
			it, ok := item()
			if !ok || (len(q.ready) > 0 && it.id <= q.ready[len(q.ready)-1].id) {
				return "queue items"
			}
			q.ready = append(q.ready, it)
		}
		nf := uv(MaxQueueItems - nr)
		for j := uint64(0); j < nf; j++ {
			it, ok := item()
			f := &inflight{qitem: it, session: sv(), deadline: sv(), waiter: uv(^uint64(0))}
			if !ok || it.attempts == 0 {
				return "in-flight items"
			}
			q.inflight[it.id] = f
			s.nInflight++
			if f.session != 0 {
				s.trackQ(f.session, qname, 1)
			}
		}
		nc := uv(MaxConsumersPerQueue)
		for j := uint64(0); j < nc; j++ {
			w := Consumer{Session: sv(), Waiter: uv(^uint64(0)), VisibilityMs: sv()}
			d := byt()
			if d > 1 || w.VisibilityMs <= 0 || w.VisibilityMs > MaxVisibilityMs {
				return "consumers"
			}
			w.Detach = d == 1
			q.consumers = append(q.consumers, w)
			s.trackQ(w.Session, qname, 1)
		}
		if (len(q.consumers) > 0 && len(q.ready) > 0) || (nr == 0 && nf == 0 && nc == 0) || q.bytes > MaxQueueBytes {
			return "queue invariants"
		}
		s.qBytes += q.bytes
	}
	if s.qBytes > MaxQueuedBytes {
		return "queued bytes"
	}
	for sess, m := range s.qSession {
		n := 0
		for _, k := range m {
			n += k
		}
		if n > MaxInFlightPerSession {
			return fmt.Sprintf("session %d over its in-flight limit", sess)
		}
	}
	ns := uv(MaxBarriers)
	for i := uint64(0); i < ns; i++ {
		n, ok := name()
		if _, dup := s.simple[n]; !ok || dup {
			return "barrier name"
		}
		s.simple[n] = struct{}{}
	}
	nd := uv(MaxDoubleBarriers)
	for i := uint64(0); i < nd; i++ {
		n, ok := name()
		if _, dup := s.double[n]; !ok || dup {
			return "double barrier name"
		}
		d := &dbarrier{parties: int32(uv(MaxParties))}
		open := byt()
		d.open = open == 1
		members := map[int64]bool{}
		for _, list := range []*[]int64{&d.entered, &d.leaving} {
			k := uv(uint64(d.parties))
			for j := uint64(0); j < k; j++ {
				id := sv()
				if members[id] {
					return "double barrier member"
				}
				members[id] = true
				*list = append(*list, id)
				s.trackB(id, n)
			}
		}
		inside := int32(len(d.entered))
		if d.parties < 1 || open > 1 || len(members) == 0 || int32(len(members)) > d.parties ||
			(!d.open && (inside >= d.parties || len(d.leaving) > 0)) || (d.open && inside == 0) {
			return "double barrier invariants"
		}
		s.double[n] = d
	}
	for _, m := range s.bSession {
		if len(m) > MaxBarriersPerSession {
			return "session in too many barriers"
		}
	}
	s.rebuildLeases()
	return ""
}

// localFirstNames lists the local-first locks, sorted.
func (s *State) localFirstNames() []string {
	var out []string
	for n, l := range s.locks {
		if l.localFirst > 0 {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// region reads a length-prefixed region name for Restore.
func region(fail *bool, uv func(uint64) uint64, b *[]byte) string {
	n := uv(MaxRegionBytes)
	if *fail || n > uint64(len(*b)) {
		*fail = true
		return ""
	}
	v := string((*b)[:n])
	*b = (*b)[n:]
	return v
}
