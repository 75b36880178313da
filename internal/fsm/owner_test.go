package fsm

import (
	"errors"
	"testing"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
)

// A keyspace's state machine starts with its root znode, the same on every
// member, and refuses what its group does not own; the root refuses what a
// keyspace owns.
func TestKeyspaceOwnership(t *testing.T) {
	ks := Keyspace{Prefix: "/eu", Region: "eu", Survival: SurvivalZone, Group: 42, Voters: []uint64{1}, Created: 1700000000000}
	f := NewKeyspace(Hooks{}, ks)
	_, st, err := f.Tree().Get("/eu")
	if err != nil || st.Czxid != 42 || st.Ctime != ks.Created {
		t.Fatalf("root znode: %+v, %v", st, err)
	}
	g := NewKeyspace(Hooks{}, ks)
	a, _ := f.Snapshot()
	b, _ := g.Snapshot()
	if string(a) != string(b) {
		t.Fatal("two members' new keyspace state machines differ")
	}
	create := func(f *FSM, path string) error {
		return apply(t, f, treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: path, Data: []byte("x"), ACL: tree.OpenACL}})).TreeResult.Err
	}
	if err := create(f, "/eu/a"); err != nil {
		t.Fatalf("create in the keyspace: %v", err)
	}
	for _, p := range []string{"/us", "/europe", "/"} {
		if err := create(f, p+"/x"); !errors.Is(err, errs.ErrWrongGroup) {
			t.Fatalf("create %s/x in /eu's group: %v", p, err)
		}
	}
	multi := &tree.Command{Op: tree.Op{Type: tree.OpMulti}, Ops: []tree.Op{
		{Type: tree.OpCreate, Path: "/eu/b", Data: []byte{}, ACL: tree.OpenACL},
		{Type: tree.OpCreate, Path: "/us/b", Data: []byte{}, ACL: tree.OpenACL}}}
	if r := apply(t, f, treeEntry(t, multi)); !errors.Is(r.TreeResult.Err, errs.ErrWrongGroup) {
		t.Fatalf("multi across groups: %v", r.TreeResult.Err)
	}
	if _, _, err := f.Tree().Get("/eu/b"); !errors.Is(err, errs.ErrNoNode) {
		t.Fatal("half a refused multi applied")
	}
	del := treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpDelete, Path: "/eu", Version: -1}})
	if r := apply(t, f, del); !errors.Is(r.TreeResult.Err, errs.ErrKeyspaceRoot) {
		t.Fatalf("delete of the keyspace root: %v", r.TreeResult.Err)
	}

	// Coordination objects by name.
	lock := func(f *FSM, name string) error {
		return apply(t, f, coordEntry(t, &coord.Command{Op: coord.OpAcquire, Name: name, Mode: coord.Exclusive})).CoordResult.Err
	}
	if err := lock(f, "us/l"); !errors.Is(err, errs.ErrWrongGroup) {
		t.Fatalf("lock us/l in /eu's group: %v", err)
	}
	// (Sessions are the root group's; this one has none yet, so the lock
	// is refused for its session, after the ownership check passed.)
	if err := lock(f, "eu/l"); errors.Is(err, errs.ErrWrongGroup) {
		t.Fatalf("lock eu/l in /eu's group: %v", err)
	}
	set := coordEntry(t, &coord.Command{Op: coord.OpSetting, Name: "x", Value: []byte("1")})
	if r := apply(t, f, set); !errors.Is(r.CoordResult.Err, errs.ErrWrongGroup) {
		t.Fatalf("a cluster setting in a keyspace's group: %v", r.CoordResult.Err)
	}

	// The root group refuses what a keyspace owns, and keeps the rest.
	root := New(Hooks{})
	if r := createKeyspace(t, root, "/eu"); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := create(root, "/eu/x"); !errors.Is(err, errs.ErrWrongGroup) {
		t.Fatalf("root group: create /eu/x: %v", err)
	}
	if err := create(root, "/europe"); err != nil {
		t.Fatalf("root group: create /europe: %v", err)
	}
	if err := lock(root, "eu/l"); !errors.Is(err, errs.ErrWrongGroup) {
		t.Fatalf("root group: lock eu/l: %v", err)
	}
	sess := apply(t, root, treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreateSession}, TimeoutMs: 10000,
		Password: make([]byte, 16)})).TreeResult.SessionID
	held := apply(t, root, coordEntry(t, &coord.Command{Op: coord.OpAcquire, Session: sess, Name: "europe", Mode: coord.Exclusive})).CoordResult
	if held.Err != nil || !held.Granted {
		t.Fatalf("root group: lock europe: %+v", held)
	}
	fenced := func(path string) error {
		inner := treeEntry(t, &tree.Command{Session: sess, Op: tree.Op{Type: tree.OpSetData, Path: path, Data: []byte("y"), Version: -1}})
		return apply(t, root, coordEntry(t, &coord.Command{Op: coord.OpFenced, Session: sess, Name: "europe", Token: held.Token, Inner: inner})).TreeResult.Err
	}
	if err := fenced("/eu/a"); !errors.Is(err, errs.ErrCrossKeyspace) {
		t.Fatalf("a fenced write outside its lock's keyspace: %v", err)
	}
	if err := fenced("/europe"); err != nil {
		t.Fatalf("a fenced write in its lock's group: %v", err)
	}
}
