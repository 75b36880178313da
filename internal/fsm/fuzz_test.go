package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/tree"
)

// FuzzApply feeds arbitrary entries (wrapped in clock envelopes or not) to
// two state machines: Apply never panics, both decide the same, the zxid
// rule holds, and the state snapshots and restores to the same bytes.
func FuzzApply(f *testing.F) {
	create := func(path string) []byte {
		b, _ := tree.EncodeCommand(&tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: path, ACL: tree.OpenACL}})
		return b
	}
	session, _ := tree.EncodeCommand(&tree.Command{Op: tree.Op{Type: tree.OpCreateSession}, TimeoutMs: 5000,
		Password: []byte("0123456789abcdef")})
	acquire, _ := coord.Encode(&coord.Command{Op: coord.OpAcquire, Name: "l", Session: 1})
	wrap := func(physical, minZxid uint64, inner []byte) []byte {
		b := binary.AppendUvarint([]byte{ClockTag}, physical)
		return append(binary.AppendUvarint(b, minZxid), inner...)
	}
	withDeps := func(physical, minZxid uint64, deps []Dep, inner []byte) []byte {
		b, _ := WrapClockDeps(physical, minZxid, deps, inner)
		return b
	}
	keyspace, _ := EncodeKeyspaceCommand(&KeyspaceCommand{Op: KeyspaceCreate, Prefix: "/eu", Region: "eu",
		Survival: SurvivalZone, Voters: []uint64{1, 2}, Learners: []uint64{3}})
	removeKeyspace, _ := EncodeKeyspaceCommand(&KeyspaceCommand{Op: KeyspaceRemove, Prefix: "/eu"})
	for _, seed := range [][]byte{
		create("/a"), acquire, session, keyspace, removeKeyspace, wrap(3000, 7, keyspace),
		{KeyspaceTag, 1}, {KeyspaceTag, 1, 1, 0, 0, 3, '/', 'e', 'u', 0, 1, 0, 0},
		wrap(1000, 0, create("/a")), wrap(1000, 5000, acquire), wrap(MaxPhysicalMs, MaxZxid-1, session),
		wrap(MaxPhysicalMs+1, 0, create("/a")), wrap(0, MaxZxid, acquire), wrap(1, 1, wrap(1, 1, acquire)),
		{ClockTag}, {ClockTag, 0x80}, {ClockTag, 1, 1}, {coord.Tag}, nil,
		withDeps(1000, 0, []Dep{{0, 3}, {9, 2}}, create("/a")), withDeps(1, 1, []Dep{{2, 1}}, acquire),
		{DepsTag, 1, 1, 2, 5, 1, 3, 1}, {DepsTag, 1, 1, 1, 5, 0}, {DepsTag, 1, 1, 0x80, 0x80, 1},
	} {
		f.Add(seed, uint8(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, gap uint8) {
		a, b := New(Hooks{}), New(Hooks{})
		// A session and a lock for the entry to act on, then the entry
		// twice (the second sees what the first did).
		entries := [][]byte{session, wrap(2000, 0, create("/a")), acquire, keyspace, data, data}
		index := uint64(0)
		for _, e := range entries {
			index += uint64(gap%4) + 1
			last := a.LastZxid()
			applied := a.Applied()
			ra := a.Apply(index, e)
			rb := b.Apply(index, bytes.Clone(e))
			if !reflect.DeepEqual(ra, rb) {
				t.Fatalf("members diverge at %d:\n%+v\n%+v", index, ra, rb)
			}
			if ra.Refused != nil {
				// A later format: nothing changed, and the member stops.
				if !errors.Is(ra.Refused, ErrNewerEntry) || a.Applied() != applied || a.LastZxid() != last || ra.Zxid != 0 {
					t.Fatalf("refused entry at %d changed the state: %+v", index, ra)
				}
				return
			}
			if ra.Zxid != 0 && (ra.Zxid <= last || ra.Zxid < int64(index) || a.LastZxid() != ra.Zxid) {
				t.Fatalf("zxid %d after %d at index %d", ra.Zxid, last, index)
			}
			if ra.Zxid == 0 && (ra.Skipped == nil || a.LastZxid() != last) {
				t.Fatalf("no zxid at index %d, but not skipped as exhausted: %+v", index, ra)
			}
		}
		snap, err := a.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		c := New(Hooks{})
		if err := c.Restore(a.Applied(), snap); err != nil {
			t.Fatal(err)
		}
		again, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(snap, again) || c.LastZxid() != a.LastZxid() ||
			!reflect.DeepEqual(c.Keyspaces().List(), a.Keyspaces().List()) {
			t.Fatalf("snapshot does not round-trip (last zxid %d, restored %d)", a.LastZxid(), c.LastZxid())
		}
	})
}

// FuzzRestore: a snapshot that does not parse is refused, never a panic,
// and one that is accepted snapshots again to something that restores.
func FuzzRestore(f *testing.F) {
	g := New(Hooks{})
	withDeps := func(physical, minZxid uint64, deps []Dep, inner []byte) []byte {
		b, _ := WrapClockDeps(physical, minZxid, deps, inner)
		return b
	}
	keyspace, _ := EncodeKeyspaceCommand(&KeyspaceCommand{Op: KeyspaceCreate, Prefix: "/eu", Region: "eu",
		Survival: SurvivalZone, Voters: []uint64{1, 2}})
	empty, _ := g.Snapshot()
	g.Apply(1, keyspace)
	withTable, _ := g.Snapshot()
	create, _ := tree.EncodeCommand(&tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: "/a", ACL: tree.OpenACL}})
	g.Apply(2, withDeps(1000, 0, []Dep{{0, 1}, {5, 9}}, create))
	withDeps4, _ := g.Snapshot()
	for _, seed := range [][]byte{empty, withTable, withDeps4, nil, []byte("MRDS2"), []byte("MRDS1\x00"), []byte("MRDS4\x02\x00\x00\x01\x00")} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m := New(Hooks{})
		if err := m.Restore(3, data); err != nil {
			return
		}
		b, err := m.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if err := New(Hooks{}).Restore(3, b); err != nil {
			t.Fatalf("a restored state snapshots to what does not restore: %v", err)
		}
	})
}
