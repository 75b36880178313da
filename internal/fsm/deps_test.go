package fsm

import (
	"bytes"
	"errors"
	"maps"
	"testing"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
)

// An entry's dependencies become the group's, on every member alike:
// raised group by group, never lowered, the group's own id left out.
func TestDepsMergedAtApply(t *testing.T) {
	ks := Keyspace{Prefix: "/eu", Region: "eu", Group: 7, Voters: []uint64{1}}
	f := NewKeyspace(Hooks{}, ks)
	create := func(path string) []byte {
		return treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: path, ACL: tree.OpenACL}})
	}
	// Without the lock, MayHaveDeps says what HasDeps says: none until an
	// entry brings some (only the group's own id: still none).
	own, _ := WrapClockDeps(1000, 0, []Dep{{7, 3}}, create("/eu/own"))
	apply(t, f, own)
	if f.MayHaveDeps() || f.HasDeps() {
		t.Fatal("a group with no dependencies says it may have some")
	}
	for _, c := range []struct {
		deps []Dep
		want Deps
	}{
		{[]Dep{{0, 40}, {9, 3}}, Deps{0: 40, 9: 3}},
		{[]Dep{{0, 12}, {7, 99}, {12, 5}}, Deps{0: 40, 9: 3, 12: 5}}, // lower root index, own group
		{nil, Deps{0: 40, 9: 3, 12: 5}},
		{[]Dep{{9, 4}}, Deps{0: 40, 9: 4, 12: 5}},
	} {
		b, err := WrapClockDeps(1000, 0, c.deps, create("/eu/x"))
		if err != nil {
			t.Fatal(err)
		}
		r := f.Apply(f.Applied()+1, b)
		if r.Skipped != nil {
			t.Fatal(r.Skipped)
		}
		f.RLock()
		got := f.Deps()
		f.RUnlock()
		if !maps.Equal(got, c.want) {
			t.Fatalf("after %v: deps %v, want %v", c.deps, got, c.want)
		}
		if !f.MayHaveDeps() {
			t.Fatalf("after %v: MayHaveDeps false with deps %v", c.deps, got)
		}
	}
	// A version 4 snapshot carries them; a restore brings them back.
	snap, err := f.Snapshot()
	if err != nil || !bytes.HasPrefix(snap, snapshotMagicV4) {
		t.Fatalf("snapshot %q..., %v", snap[:min(5, len(snap))], err)
	}
	g := NewKeyspace(Hooks{}, ks)
	if err := g.Restore(f.Applied(), snap); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(g.Deps(), f.Deps()) || g.LastZxid() != f.LastZxid() || !g.MayHaveDeps() {
		t.Fatalf("restored deps %v (may have: %v) zxid %d, want %v %d", g.Deps(), g.MayHaveDeps(), g.LastZxid(), f.Deps(), f.LastZxid())
	}
	again, _ := g.Snapshot()
	if !bytes.Equal(again, snap) {
		t.Fatal("a restored state snapshots differently")
	}
	// A snapshot without dependencies restored over a state with some
	// leaves none.
	plain, _ := NewKeyspace(Hooks{}, ks).Snapshot()
	if err := g.Restore(0, plain); err != nil || g.MayHaveDeps() {
		t.Fatalf("restore of a state without dependencies: %v, may have some: %v", err, g.MayHaveDeps())
	}
	// A root group's version 4 snapshot (no sessions section) too.
	root := New(Hooks{})
	b, _ := WrapClockDeps(1000, 0, []Dep{{7, 2}}, create("/a"))
	apply(t, root, b)
	snap, _ = root.Snapshot()
	r2 := New(Hooks{})
	if err := r2.Restore(root.Applied(), snap); err != nil || !maps.Equal(r2.Deps(), Deps{7: 2}) {
		t.Fatalf("root restore: %v, deps %v", err, r2.Deps())
	}
	// A damaged dependencies section is refused.
	for name, bad := range map[string][]byte{
		"zero index": encodeSnapshotV4(5<<16, nil, nil, []byte{1, 3, 0}, nil, nil),
		"unordered":  encodeSnapshotV4(5<<16, nil, nil, []byte{2, 3, 1, 2, 1}, nil, nil),
		"empty":      encodeSnapshotV4(5<<16, nil, nil, nil, nil, nil),
		"trailing":   encodeSnapshotV4(5<<16, nil, nil, []byte{1, 3, 1, 0}, nil, nil),
	} {
		if err := New(Hooks{}).Restore(9, bad); err == nil {
			t.Errorf("%s: restored", name)
		}
	}
}

// WrapClockDeps refuses what Apply would skip; Apply skips, on every
// member, a malformed dependency list.
func TestDepsEnvelopeRefusals(t *testing.T) {
	inner := treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: "/a", ACL: tree.OpenACL}})
	too := make([]Dep, MaxDeps+1)
	for i := range too {
		too[i] = Dep{uint64(i), 1}
	}
	wrapped, _ := WrapClockDeps(1, 0, []Dep{{1, 1}}, inner)
	for name, deps := range map[string][]Dep{
		"zero index": {{1, 0}},
		"unordered":  {{2, 1}, {1, 1}},
		"duplicate":  {{2, 1}, {2, 3}},
		"too many":   too,
	} {
		if _, err := WrapClockDeps(1, 0, deps, inner); !errors.Is(err, errs.ErrBadArguments) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := WrapClockDeps(1, 0, []Dep{{1, 1}}, wrapped); !errors.Is(err, errs.ErrBadArguments) {
		t.Errorf("nested: %v", err)
	}
	if _, err := WrapClock(1, 0, wrapped); !errors.Is(err, errs.ErrBadArguments) {
		t.Errorf("nested in a plain envelope: %v", err)
	}
	if b, err := WrapClockDeps(5, 0, nil, inner); err != nil || b[0] != ClockTag {
		t.Errorf("no dependencies: %x, %v", b, err)
	}
	n := len(wrapped) - len(inner)
	for name, data := range map[string][]byte{
		"truncated":  wrapped[:4],
		"zero index": append([]byte{DepsTag, 1, 0, 1, 1, 0}, inner...),
		"unordered":  append([]byte{DepsTag, 1, 0, 2, 3, 1, 2, 1}, inner...),
		"count":      append([]byte{DepsTag, 1, 0, 0xff, 0x7f}, inner...),
		"nested":     append(append([]byte(nil), wrapped[:n]...), wrapped...),
	} {
		f := New(Hooks{})
		r := f.Apply(1, data)
		if r.Skipped == nil || len(f.Deps()) != 0 {
			t.Errorf("%s: applied (%+v), deps %v", name, r, f.Deps())
		}
	}
}

// A group keeps at most MaxDeps dependencies: the lowest keyspace id goes
// first, never the root's.
func TestDepsBounded(t *testing.T) {
	f := New(Hooks{})
	inner := treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: "/a", ACL: tree.OpenACL}})
	deps := make([]Dep, MaxDeps)
	deps[0] = Dep{0, 1} // the root's own id in the root group: left out
	for i := 1; i < MaxDeps; i++ {
		deps[i] = Dep{uint64(i + 1), 1}
	}
	b, err := WrapClockDeps(1, 0, deps, inner)
	if err != nil {
		t.Fatal(err)
	}
	apply(t, f, b)
	if len(f.Deps()) != MaxDeps-1 {
		t.Fatalf("%d deps", len(f.Deps()))
	}
	k := NewKeyspace(Hooks{}, Keyspace{Prefix: "/eu", Group: 1})
	deps[0] = Dep{0, 9}
	b, _ = WrapClockDeps(1, 0, deps, treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: "/eu/a", ACL: tree.OpenACL}}))
	apply(t, k, b)
	b, _ = WrapClockDeps(2, 0, []Dep{{5000, 3}}, treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: "/eu/b", ACL: tree.OpenACL}}))
	apply(t, k, b)
	d := k.Deps()
	if len(d) != MaxDeps || d[0] != 9 || d[5000] != 3 {
		t.Fatalf("%d deps, root %d, newest %d", len(d), d[0], d[5000])
	}
	if _, ok := d[2]; ok {
		t.Fatal("the lowest keyspace id was kept")
	}
}

// A dependency marker makes the group's Deps complete from its index: it
// merges the indexes it names and, after it, a command in a clock
// envelope without dependencies is refused (errs.ErrClusterVersion, so
// that its proposer retries it with them), changing nothing, on every
// member alike; in a dependency envelope, even an empty one, commands
// apply. The marker survives a snapshot; a marker outside a dependency
// envelope is skipped.
func TestDepsMarker(t *testing.T) {
	ks := Keyspace{Prefix: "/eu", Region: "eu", Group: 7, Voters: []uint64{1}}
	f := NewKeyspace(Hooks{}, ks)
	create := func(path string) []byte {
		return treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: path, ACL: tree.OpenACL}})
	}
	clock := func(inner []byte) []byte {
		b, err := WrapClock(1000, 0, inner)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	deps := func(d []Dep, inner []byte) []byte {
		b, err := WrapDeps(1000, 0, d, inner)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Before the marker: commands without dependencies apply (an older
	// member's), and a bare marker is skipped.
	if r := apply(t, f, clock(create("/eu/old"))); r.TreeResult.Err != nil {
		t.Fatal(r.TreeResult.Err)
	}
	if r := f.Apply(f.Applied()+1, clock(DepsMarker())); r.Skipped == nil || f.DepsFrom() != 0 {
		t.Fatalf("a marker in a clock envelope: skipped %v, marker at %d", r.Skipped, f.DepsFrom())
	}
	at := f.Applied() + 1
	if r := apply(t, f, deps([]Dep{{0, 30}, {9, 4}}, DepsMarker())); r.TreeResult.Err != nil || r.CoordResult.Err != nil {
		t.Fatalf("marker: %+v", r)
	}
	if f.DepsFrom() != at || !maps.Equal(f.Deps(), Deps{0: 30, 9: 4}) {
		t.Fatalf("after the marker: from %d deps %v, want %d and the marker's", f.DepsFrom(), f.Deps(), at)
	}
	// After it: refused without dependencies, applied with (none needed).
	state := func() []byte { // tree and coordination state (a refusal still takes a zxid)
		var b bytes.Buffer
		if err := f.Tree().Snapshot(&b); err != nil {
			t.Fatal(err)
		}
		return append(b.Bytes(), f.Coord().Snapshot()...)
	}
	before := state()
	lock := coordEntry(t, &coord.Command{Op: coord.OpAcquire, Name: "eu/l", Session: 5})
	for name, entry := range map[string][]byte{"tree": clock(create("/eu/new")), "coord": clock(lock)} {
		r := apply(t, f, entry)
		if !errors.Is(r.TreeResult.Err, errs.ErrClusterVersion) && !errors.Is(r.CoordResult.Err, errs.ErrClusterVersion) {
			t.Fatalf("%s command without dependencies after the marker: %+v, want ErrClusterVersion", name, r)
		}
	}
	if !bytes.Equal(before, state()) {
		t.Fatal("a refused command changed the state")
	}
	if r := apply(t, f, deps(nil, create("/eu/new"))); r.TreeResult.Err != nil {
		t.Fatalf("command in an empty dependency envelope after the marker: %v", r.TreeResult.Err)
	}
	if r := apply(t, f, deps([]Dep{{9, 9}}, DepsMarker())); f.DepsFrom() != at || f.Deps()[9] != 9 || r.Skipped != nil {
		t.Fatalf("a second marker: from %d deps %v skipped %v", f.DepsFrom(), f.Deps(), r.Skipped)
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	g := NewKeyspace(Hooks{}, ks)
	if err := g.Restore(f.Applied(), snap); err != nil {
		t.Fatal(err)
	}
	if g.DepsFrom() != at || !maps.Equal(g.Deps(), f.Deps()) {
		t.Fatalf("restored: from %d deps %v, want %d %v", g.DepsFrom(), g.Deps(), at, f.Deps())
	}
	// A group with only a marker (no dependencies) keeps it too.
	h := New(Hooks{})
	apply(t, h, clock(create("/a")))
	apply(t, h, deps(nil, DepsMarker()))
	snap, _ = h.Snapshot()
	r := New(Hooks{})
	if err := r.Restore(h.Applied(), snap); err != nil || r.DepsFrom() != 2 {
		t.Fatalf("restored root: from %d, %v", r.DepsFrom(), err)
	}
}
