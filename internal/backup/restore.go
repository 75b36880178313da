package backup

import (
	"fmt"
	"slices"

	"github.com/meridian-coord/meridian/internal/fsm"
	"github.com/meridian-coord/meridian/internal/tree"
)

// Prepared is a backup made ready to seed a new cluster (Prepare).
type Prepared struct {
	Root      []byte // the root group's state machine snapshot
	RootIndex uint64
	Groups    []PreparedGroup
}

// PreparedGroup is one keyspace group's state to seed, with the first
// configuration the root's keyspace table gives it.
type PreparedGroup struct {
	Keyspace fsm.Keyspace
	Index    uint64
	Data     []byte
}

// Prepare turns a backup into the state a new cluster starts from: every
// group restored, and every session the backup holds ended (the new
// cluster's clients have none of them): its ephemerals deleted and its
// locks, queue leases and barrier places released, as an expiry would,
// by commands applied to each group's state after its saved index (at
// nowMs). members are the new cluster's member ids: every keyspace's
// first voters and learners must be among them, else the error names
// what is missing (the new cluster would run the keyspace without them).
// Every member of the new cluster prepares the same file the same way.
func Prepare(m Manifest, snaps [][]byte, nowMs int64, members []uint64) (Prepared, error) {
	var out Prepared
	root := fsm.New(fsm.Hooks{})
	if err := root.Restore(m.Groups[0].Index, snaps[0]); err != nil {
		return out, fmt.Errorf("root group: %w", err)
	}
	var ids []int64
	for _, s := range root.Tree().Sessions() {
		ids = append(ids, s.ID)
	}
	if err := expire(root, ids, nowMs); err != nil {
		return out, fmt.Errorf("root group: %w", err)
	}
	data, idx, _, err := root.SnapshotAt()
	if err != nil {
		return out, err
	}
	out.Root, out.RootIndex = data, idx
	table := root.Keyspaces().List()
	for i, g := range m.Groups[1:] {
		ks, err := keyspaceOf(table, g.Group)
		if err != nil {
			return out, err
		}
		for _, id := range append(slices.Clone(ks.Voters), ks.Learners...) {
			if !slices.Contains(members, id) {
				return out, fmt.Errorf("keyspace %s: member %d of its group is not a member of the new cluster (give the new cluster the saved member ids: %v)",
					ks.Prefix, id, append(slices.Clone(ks.Voters), ks.Learners...))
			}
		}
		f := fsm.NewKeyspace(fsm.Hooks{}, ks)
		if err := f.Restore(g.Index, snaps[i+1]); err != nil {
			return out, fmt.Errorf("keyspace %s: %w", ks.Prefix, err)
		}
		if err := expire(f, f.Participants(), nowMs); err != nil {
			return out, fmt.Errorf("keyspace %s: %w", ks.Prefix, err)
		}
		data, idx, _, err := f.SnapshotAt()
		if err != nil {
			return out, err
		}
		out.Groups = append(out.Groups, PreparedGroup{Keyspace: ks, Index: idx, Data: data})
	}
	return out, nil
}

// expire ends sessions ids in f, in batches, each a command at the next
// index.
func expire(f *fsm.FSM, ids []int64, nowMs int64) error {
	slices.Sort(ids)
	for len(ids) > 0 {
		n := min(len(ids), tree.MaxExpireBatch)
		b, err := tree.EncodeCommand(&tree.Command{TimeMs: nowMs, Op: tree.Op{Type: tree.OpExpire}, Sessions: ids[:n]})
		if err != nil {
			return err
		}
		if r := f.Apply(f.Applied()+1, b); r.Skipped != nil {
			return r.Skipped
		}
		ids = ids[n:]
	}
	return nil
}
