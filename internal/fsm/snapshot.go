package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

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
//
// Version 3 (magic "MRDS3"), written only by a keyspace group's state
// machine that remembers ended sessions (sessions.go); older binaries
// refuse it by its magic:
//
//	"MRDS3", uvarint lastZxid, uvarint len(table), table,
//	uvarint len(sessions), sessions,
//	uvarint len(tree snapshot), tree snapshot, coord snapshot
//
// Version 4 (magic "MRDS4"), written by any group whose state depends on
// other groups (deps.go); older binaries refuse it by its magic:
//
//	"MRDS4", uvarint lastZxid, uvarint len(table), table,
//	uvarint len(sessions), sessions, uvarint len(deps), deps,
//	uvarint len(tree snapshot), tree snapshot, coord snapshot
//
// with the sessions section empty in the root group's.
//
// Which group a snapshot belongs to is not in it: a keyspace group's
// adopted sessions (timeout 0) are refused by the root's Restore, and the
// root's sessions (and a sessions section) by a keyspace group's.
var (
	snapshotMagic   = []byte("MRDS1")
	snapshotMagicV2 = []byte("MRDS2")
	snapshotMagicV3 = []byte("MRDS3")
	snapshotMagicV4 = []byte("MRDS4")
)

// Snapshot serializes the whole state (tree, coord, keyspace table, last
// zxid) as of Applied.
func (f *FSM) Snapshot() ([]byte, error) {
	v := f.View()
	var buf bytes.Buffer
	if _, err := v.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// SnapshotAt is Snapshot with the index and last zxid it is at (a backup
// records them).
func (f *FSM) SnapshotAt() (data []byte, index uint64, lastZxid int64, err error) {
	v := f.View()
	var buf bytes.Buffer
	if _, err := v.WriteTo(&buf); err != nil {
		return nil, 0, 0, err
	}
	return buf.Bytes(), v.index, v.lastZxid, nil
}

// View is the whole state as of one applied index, ready to be written as
// a snapshot (WriteTo, the bytes Snapshot returns) on any goroutine while
// Apply goes on: the tree's part is a point-in-time copy (tree.View), the
// rest is encoded when the view is taken.
type View struct {
	index                 uint64
	lastZxid              int64
	version               int // envelope version (1 to 4)
	table, sessions, deps []byte
	tree                  *tree.View
	coord                 []byte
}

// View takes a view of the state under the read lock: a pass over the
// tree's nodes, no encoding of them.
func (f *FSM) View() *View {
	f.mu.RLock()
	defer f.mu.RUnlock()
	v := &View{index: f.applied, lastZxid: f.lastZxid, table: f.keyspaces.snapshot(), tree: f.tree.View(), coord: f.coord.Snapshot()}
	if f.sessions != nil {
		v.sessions = f.sessions.snapshot()
	}
	switch {
	case len(f.deps) > 0 || f.depsFrom > 0:
		v.version, v.deps = 4, encodeDeps(f.deps, f.depsFrom)
	case len(v.sessions) > 0:
		v.version = 3
	case f.lastZxid == int64(f.applied) && f.keyspaces.Len() == 0:
		v.version = 1
	default:
		v.version = 2
	}
	return v
}

// Index is the applied index the view is at.
func (v *View) Index() uint64 { return v.index }

// WriteTo writes the snapshot envelope: the bytes Snapshot returns.
func (v *View) WriteTo(w io.Writer) (int64, error) {
	var body bytes.Buffer
	prefix, err := v.WriteSnapshot(&body)
	if err != nil {
		return 0, err
	}
	n, err := w.Write(prefix)
	if err != nil {
		return int64(n), err
	}
	m, err := body.WriteTo(w)
	return int64(n) + m, err
}

// WriteSnapshot streams the snapshot envelope without holding it: it
// writes everything after the envelope's header (the tree snapshot, then
// coord's) to w, and returns the header, which gives the tree snapshot's
// length and so is known only after it. The envelope is the header
// followed by what was written. Not safe for concurrent use.
func (v *View) WriteSnapshot(w io.Writer) (header []byte, err error) {
	treeLen, err := v.tree.WriteTo(w)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(v.coord); err != nil {
		return nil, err
	}
	switch v.version {
	case 1:
		header = append(header, snapshotMagic...)
	case 2:
		header = append(header, snapshotMagicV2...)
		header = binary.AppendUvarint(header, uint64(v.lastZxid))
		header = appendSection(header, v.table)
	case 3:
		header = append(header, snapshotMagicV3...)
		header = binary.AppendUvarint(header, uint64(v.lastZxid))
		header = appendSection(header, v.table)
		header = appendSection(header, v.sessions)
	default:
		header = append(header, snapshotMagicV4...)
		header = binary.AppendUvarint(header, uint64(v.lastZxid))
		header = appendSection(header, v.table)
		header = appendSection(header, v.sessions)
		header = appendSection(header, v.deps)
	}
	return binary.AppendUvarint(header, uint64(treeLen)), nil
}

func appendSection(b, section []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(section)))
	return append(b, section...)
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
	t, err := tree.RestoreBytes(snap.tree)
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
	deps, depsFrom, ok := restoreDeps(snap.deps)
	if !ok {
		return fmt.Errorf("%w: snapshot: bad dependencies", errs.ErrDataInconsistency)
	}
	var sessions *sessionTable
	if f.sessions != nil {
		if sessions, ok = restoreSessionTable(snap.sessions); !ok {
			return fmt.Errorf("%w: snapshot: bad session tombstones", errs.ErrDataInconsistency)
		}
	} else if len(snap.sessions) > 0 {
		return fmt.Errorf("%w: snapshot: a keyspace group's, not the root's", errs.ErrDataInconsistency)
	}
	for _, s := range t.Sessions() {
		if adopted := s.TimeoutMs == 0; adopted != (f.sessions != nil) {
			return fmt.Errorf("%w: snapshot: session %d of another kind of group", errs.ErrDataInconsistency, s.ID)
		}
	}
	if index > MaxZxid {
		return fmt.Errorf("%w: snapshot: index %d beyond the zxid range", errs.ErrDataInconsistency, index)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tree, f.coord, f.keyspaces, f.applied, f.deps, f.depsFrom = t, c, ks, index, deps, depsFrom
	f.hasDeps.Store(len(deps) > 0)
	if f.sessions != nil {
		f.sessions = sessions
	}
	f.lastZxid = max(snap.lastZxid, int64(index))
	if f.hooks.Restored != nil {
		f.hooks.Restored()
	}
	return nil
}

func encodeSnapshotV4(lastZxid int64, table, sessions, deps, treeSnap, coordSnap []byte) []byte {
	out := make([]byte, 0, len(snapshotMagicV4)+50+len(table)+len(sessions)+len(deps)+len(treeSnap)+len(coordSnap))
	out = append(out, snapshotMagicV4...)
	out = binary.AppendUvarint(out, uint64(lastZxid))
	for _, section := range [][]byte{table, sessions, deps, treeSnap} {
		out = binary.AppendUvarint(out, uint64(len(section)))
		out = append(out, section...)
	}
	return append(out, coordSnap...)
}

// decodedSnapshot is a snapshot envelope's parts.
type decodedSnapshot struct {
	lastZxid                           int64
	table, sessions, deps, tree, coord []byte
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
	case bytes.HasPrefix(b, snapshotMagicV2), bytes.HasPrefix(b, snapshotMagicV3), bytes.HasPrefix(b, snapshotMagicV4):
		v3, v4 := bytes.HasPrefix(b, snapshotMagicV3), bytes.HasPrefix(b, snapshotMagicV4)
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
		if v3 {
			if s.sessions, ok = field(); !ok || len(s.sessions) == 0 {
				return corrupt("bad sessions length")
			}
		}
		if v4 {
			if s.sessions, ok = field(); !ok {
				return corrupt("bad sessions length")
			}
			if s.deps, ok = field(); !ok || len(s.deps) == 0 {
				return corrupt("bad dependencies length")
			}
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
