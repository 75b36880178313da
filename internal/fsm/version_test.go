package fsm

import (
	"errors"
	"testing"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/tree"
)

// An entry of a later kind or format is refused, not skipped: nothing
// changes (not the tree, not Applied, not the last zxid) and no hook
// runs; a malformed entry of a known kind is still skipped.
func TestNewerEntriesRefused(t *testing.T) {
	create := treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: "/a", ACL: tree.OpenACL}})
	acquire := coordEntry(t, &coord.Command{Op: coord.OpAcquire, Name: "l", Session: 1})
	laterOp := append([]byte(nil), acquire...)
	laterOp[1] = 60 // a coordination operation reserved for later binaries
	fenced := coordEntry(t, &coord.Command{Op: coord.OpFenced, Name: "l", Token: 1, Inner: append([]byte{0x04}, create[1:]...)})
	keyspace, err := EncodeKeyspaceCommand(&KeyspaceCommand{Op: KeyspaceRemove, Prefix: "/eu"})
	if err != nil {
		t.Fatal(err)
	}
	laterKeyspace := append([]byte(nil), keyspace...)
	laterKeyspace[1] = keyspaceVersion + 1
	wrapped, err := WrapClock(1000, 0, append([]byte{0xC7}, 1, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"later tree codec":    append([]byte{0x05}, create[1:]...),
		"later entry kind":    {0xC6, 1, 2},
		"last reserved kind":  {0xCF},
		"later coord op":      laterOp,
		"later fenced inner":  fenced,
		"later keyspace code": laterKeyspace,
		"in a clock envelope": wrapped,
	} {
		hooked := false
		f := New(Hooks{Applied: func(*Result) { hooked = true }})
		apply(t, f, create)
		hooked = false
		applied, last := f.Applied(), f.LastZxid()
		r := f.Apply(applied+1, data)
		if !errors.Is(r.Refused, ErrNewerEntry) || r.Skipped != nil || r.Zxid != 0 {
			t.Errorf("%s: %+v, want refused", name, r)
		}
		if f.Applied() != applied || f.LastZxid() != last || f.Tree().NodeCount() != New(Hooks{}).Tree().NodeCount()+1 || hooked {
			t.Errorf("%s: the refused entry changed the state (applied %d, zxid %d) or ran the hook (%v)", name, f.Applied(), f.LastZxid(), hooked)
		}
	}
	// Not reserved: skipped alike on every member, as before.
	for name, data := range map[string][]byte{
		"garbage tree":  {0x01, 0xff},
		"short coord":   {coord.Tag},
		"unknown 0xD0":  {0xD0, 1},
		"bad keyspace0": {KeyspaceTag, 0},
	} {
		f := New(Hooks{})
		r := f.Apply(1, data)
		if r.Refused != nil || r.Skipped == nil || f.Applied() != 1 {
			t.Errorf("%s: %+v, want skipped", name, r)
		}
	}
}

// TestEntryVersion: what a proposer checks against the cluster version.
func TestEntryVersion(t *testing.T) {
	create := []byte{0x01, 0x02}
	clocked, _ := WrapClock(1000, 0, create)
	deps, _ := WrapDeps(1000, 0, nil, create)
	marker, _ := WrapClock(1000, 0, DepsMarker())
	for name, c := range map[string]struct {
		data []byte
		want int
	}{
		"plain":                      {create, UnadvertisedVersion},
		"clock envelope":             {clocked, UnadvertisedVersion},
		"dependency envelope":        {deps, DepsVersion},
		"marker in a clock envelope": {marker, DepsVersion},
		"bare marker":                {DepsMarker(), DepsVersion},
		"empty":                      {nil, UnadvertisedVersion},
	} {
		if got := EntryVersion(c.data); got != c.want {
			t.Errorf("%s: EntryVersion %d, want %d", name, got, c.want)
		}
	}
}
