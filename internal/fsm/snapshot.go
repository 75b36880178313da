package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
)

// Snapshot envelope, the on-disk and peer format of the whole state.
//
// Version 1 (magic "MRDS1"), what every binary before regional keyspaces
// wrote, and still written while the state needs nothing more (the last
// zxid is the applied index, as when no clock envelope was ever applied,
// and no keyspace exists):
//
//	"MRDS1", uvarint len(tree snapshot), tree snapshot, coord snapshot
//
// Version 2 (magic "MRDS2"), written otherwise; older binaries refuse it
// (bad magic) rather than misread it:
//
//	"MRDS2", uvarint lastZxid, uvarint len(table), table,
//	uvarint len(tree snapshot), tree snapshot, coord snapshot
//
// The table section is the keyspace table (keyspace.go), empty when there
// is none. Version 1 is written only while the table is empty, too.
var (
	snapshotMagic   = []byte("MRDS1")
	snapshotMagicV2 = []byte("MRDS2")
)

// Snapshot serializes the whole state (tree, coord, keyspace table, last
// zxid) as of Applied.
func (f *FSM) Snapshot() ([]byte, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var buf bytes.Buffer
	if err := f.tree.Snapshot(&buf); err != nil {
		return nil, err
	}
	treeSnap, coordSnap := buf.Bytes(), f.coord.Snapshot()
	if f.lastZxid == int64(f.applied) && f.keyspaces.Len() == 0 {
		return encodeSnapshot(treeSnap, coordSnap), nil
	}
	return encodeSnapshotV2(f.lastZxid, f.keyspaces.snapshot(), treeSnap, coordSnap), nil
}

// Restore replaces the state with a snapshot taken at index and calls
// Hooks.Restored under the write lock. On an error the state is unchanged.
//
// The last zxid is the snapshot's, or index when that is higher (a
// version 1 snapshot, or one taken before entries that never reach Apply,
// such as raft's empty entries): every later entry has a higher index, so
// the zxids it gets do not depend on which.
func (f *FSM) Restore(index uint64, data []byte) error {
	snap, err := decodeSnapshot(data)
	if err != nil {
		return err
	}
	t, err := tree.Restore(bytes.NewReader(snap.tree))
	if err != nil {
		return err
	}
	c, err := coord.Restore(snap.coord)
	if err != nil {
		return err
	}
	ks, ok := restoreKeyspaceTable(snap.table)
	if !ok {
		return fmt.Errorf("%w: snapshot: bad keyspace table", errs.ErrDataInconsistency)
	}
	if index > MaxZxid {
		return fmt.Errorf("%w: snapshot: index %d beyond the zxid range", errs.ErrDataInconsistency, index)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tree, f.coord, f.keyspaces, f.applied = t, c, ks, index
	f.lastZxid = max(snap.lastZxid, int64(index))
	if f.hooks.Restored != nil {
		f.hooks.Restored()
	}
	return nil
}

func encodeSnapshot(treeSnap, coordSnap []byte) []byte {
	out := make([]byte, 0, len(snapshotMagic)+10+len(treeSnap)+len(coordSnap))
	out = append(out, snapshotMagic...)
	out = binary.AppendUvarint(out, uint64(len(treeSnap)))
	out = append(out, treeSnap...)
	return append(out, coordSnap...)
}

func encodeSnapshotV2(lastZxid int64, table, treeSnap, coordSnap []byte) []byte {
	out := make([]byte, 0, len(snapshotMagicV2)+30+len(table)+len(treeSnap)+len(coordSnap))
	out = append(out, snapshotMagicV2...)
	out = binary.AppendUvarint(out, uint64(lastZxid))
	out = binary.AppendUvarint(out, uint64(len(table)))
	out = append(out, table...)
	out = binary.AppendUvarint(out, uint64(len(treeSnap)))
	out = append(out, treeSnap...)
	return append(out, coordSnap...)
}

// decodedSnapshot is a snapshot envelope's parts.
type decodedSnapshot struct {
	lastZxid           int64
	table, tree, coord []byte
}

func decodeSnapshot(b []byte) (decodedSnapshot, error) {
	var s decodedSnapshot
	corrupt := func(what string) (decodedSnapshot, error) {
		return decodedSnapshot{}, fmt.Errorf("%w: snapshot: %s", errs.ErrDataInconsistency, what)
	}
	field := func() ([]byte, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, false
		}
		out := b[k : k+int(n)]
		b = b[k+int(n):]
		return out, true
	}
	var ok bool
	switch {
	case bytes.HasPrefix(b, snapshotMagic):
		b = b[len(snapshotMagic):]
	case bytes.HasPrefix(b, snapshotMagicV2):
		b = b[len(snapshotMagicV2):]
		z, k := binary.Uvarint(b)
		if k <= 0 || z == 0 || z > MaxZxid {
			return corrupt("bad last zxid")
		}
		b = b[k:]
		s.lastZxid = int64(z)
		if s.table, ok = field(); !ok {
			return corrupt("bad keyspace table length")
		}
	default:
		return corrupt("bad magic")
	}
	if s.tree, ok = field(); !ok {
		return corrupt("bad tree length")
	}
	s.coord = b
	return s, nil
}
