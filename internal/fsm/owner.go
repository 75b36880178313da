package fsm

import (
	"strings"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
)

// Which group owns what.
//
// The root group's state machine (New) owns every path and object name no
// keyspace owns; a keyspace group's (NewKeyspace) owns its prefix and the
// paths below it, and the object names of its keyspace (KeyspaceForName's
// rule). Apply refuses a command for what its group does not own with
// errs.ErrWrongGroup, on every member alike, before it changes anything:
// a member that routed a request before it applied the keyspace's
// creation (its table was behind) learns so from the refusal, by which
// time it has applied the creation, and routes it again. So nothing is
// ever written under a keyspace's prefix in the root group, whatever a
// member's view of the table when it proposed.
//
// A keyspace's root znode (its prefix) is made by NewKeyspace, the same on
// every member, and leaves with the keyspace: deleting it is refused
// (errs.ErrKeyspaceRoot).

// NewKeyspace returns the state machine of keyspace k's group: empty but
// for k's root znode (persistent, empty, world ACL; its czxid is k's group
// id, its ctime the keyspace's creation time).
func NewKeyspace(h Hooks, k Keyspace) *FSM {
	f := New(h, Options{Keyspace: true})
	owner := k
	f.owner = &owner
	f.tree.Apply(int64(k.Group), &tree.Command{TimeMs: k.Created, Auth: superAuth,
		Op: tree.Op{Type: tree.OpCreate, Path: k.Prefix, Data: []byte{}, ACL: tree.OpenACL, Mode: tree.ModePersistent}})
	return f
}

// Owner is the keyspace whose group this state machine is; false for the
// root group's.
func (f *FSM) Owner() (Keyspace, bool) {
	if f.owner == nil {
		return Keyspace{}, false
	}
	return *f.owner, true
}

// OwnsPath reports whether this group owns path. Call it under RLock (or
// from the goroutine that applies).
func (f *FSM) OwnsPath(path string) bool {
	if f.owner == nil {
		_, ok := f.keyspaces.For(path)
		return !ok
	}
	return path == f.owner.Prefix || strings.HasPrefix(path, f.owner.Prefix+"/")
}

// OwnsName reports whether this group owns the coordination object name.
func (f *FSM) OwnsName(name string) bool {
	if f.owner == nil {
		_, ok := f.keyspaces.ForName(name)
		return !ok
	}
	base := f.owner.Prefix[1:]
	return name == base || strings.HasPrefix(name, base+"/")
}

// treeOwned checks that every path cmd touches is this group's and that
// it does not delete a keyspace's root znode.
func (f *FSM) treeOwned(cmd *tree.Command) error {
	if err := f.undepended(); err != nil {
		return err
	}
	ops := cmd.Ops
	if cmd.Op.Type != tree.OpMulti {
		ops = []tree.Op{cmd.Op}
	}
	for _, op := range ops {
		if op.Path == "" { // session commands carry no path
			continue
		}
		if !f.OwnsPath(op.Path) {
			return errs.ErrWrongGroup
		}
		if f.owner != nil && op.Type == tree.OpDelete && op.Path == f.owner.Prefix {
			return errs.ErrKeyspaceRoot
		}
	}
	return nil
}

// coordOwned checks that c's object is this group's. The coordination
// tick and cluster settings name no object (a tick is each group's own,
// settings are the root's).
func (f *FSM) coordOwned(c *coord.Command) error {
	if err := f.undepended(); err != nil {
		return err
	}
	switch c.Op {
	case coord.OpTick:
		return nil
	case coord.OpSetting:
		if f.owner != nil {
			return errs.ErrWrongGroup
		}
		return nil
	}
	if !f.OwnsName(c.Name) {
		return errs.ErrWrongGroup
	}
	return nil
}
