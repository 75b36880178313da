package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
)

func keyspaceEntry(t testing.TB, c *KeyspaceCommand) []byte {
	b, err := EncodeKeyspaceCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func createKeyspace(t testing.TB, f *FSM, prefix string) KeyspaceResult {
	r := f.Apply(f.Applied()+1, keyspaceEntry(t, &KeyspaceCommand{Op: KeyspaceCreate, Prefix: prefix,
		Region: "r", Survival: SurvivalZone, Voters: []uint64{1}}))
	if r.Skipped != nil {
		t.Fatal(r.Skipped)
	}
	return r.KeyspaceResult
}

// The table holds MaxKeyspaces; the next create is refused, and a full
// table snapshots and restores.
func TestKeyspaceTableFull(t *testing.T) {
	f := New(Hooks{})
	for i := range MaxKeyspaces {
		if res := createKeyspace(t, f, fmt.Sprintf("/k%04d", i)); res.Err != nil {
			t.Fatalf("keyspace %d: %v", i, res.Err)
		}
	}
	if res := createKeyspace(t, f, "/one-more"); !errors.Is(res.Err, errs.ErrTooManyKeyspaces) {
		t.Fatalf("create beyond the limit: %v", res.Err)
	}
	if _, _, err := f.Tree().Get("/one-more"); !errors.Is(err, errs.ErrNoNode) {
		t.Fatalf("a refused create left a mount znode: %v", err)
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	g := New(Hooks{})
	if err := g.Restore(f.Applied(), snap); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.Keyspaces().List(), g.Keyspaces().List()) {
		t.Fatal("restored table differs")
	}
	if k, ok := g.KeyspaceFor("/k0999/x"); !ok || k.Group != MaxKeyspaces {
		t.Fatalf("lookup after restore: %+v %v", k, ok)
	}
}

// Prefixes are one component deep for now, but the table's rules are
// written for any depth: a prefix inside or above a keyspace overlaps it,
// and lookup takes the longest prefix.
func TestKeyspaceOverlapAndLongestPrefix(t *testing.T) {
	f := New(Hooks{})
	f.keyspaces.insert(&Keyspace{Prefix: "/eu/fr", Region: "eu-west", Survival: SurvivalZone, Group: 7, Voters: []uint64{1}})
	if res := createKeyspace(t, f, "/eu"); !errors.Is(res.Err, errs.ErrKeyspaceOverlap) {
		t.Fatalf("create /eu over /eu/fr: %v", res.Err)
	}
	f.keyspaces.insert(&Keyspace{Prefix: "/eu", Region: "eu-central", Group: 9})
	for path, want := range map[string]uint64{"/eu": 9, "/eu/f": 9, "/eu/fr": 7, "/eu/fr/x/y": 7, "/eu/frx": 9, "/e": 0} {
		k, _ := f.KeyspaceFor(path)
		if k.Group != want {
			t.Errorf("KeyspaceFor(%q) = group %d, want %d", path, k.Group, want)
		}
	}
	if k, _ := f.KeyspaceForName("eu/fr/lock"); k.Group != 7 {
		t.Errorf("KeyspaceForName = group %d, want 7", k.Group)
	}
}

// The mount znode is created and deleted whatever the ACL of "/": the
// server authorized the keyspace command as an operator's.
func TestKeyspaceMountBypassesRootACL(t *testing.T) {
	f := New(Hooks{})
	readOnly := []tree.ACL{{Perms: tree.PermRead, ID: tree.ID{Scheme: "world", ID: "anyone"}}}
	apply(t, f, treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpSetACL, Path: "/", ACL: readOnly, Version: -1}}))
	if r := apply(t, f, treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: "/x", ACL: tree.OpenACL}})); !errors.Is(r.TreeResult.Err, errs.ErrNoAuth) {
		t.Fatalf("plain create under a read-only root: %v", r.TreeResult.Err)
	}
	if res := createKeyspace(t, f, "/eu"); res.Err != nil {
		t.Fatal(res.Err)
	}
	r := apply(t, f, keyspaceEntry(t, &KeyspaceCommand{Op: KeyspaceRemove, Prefix: "/eu"}))
	if r.KeyspaceResult.Err != nil || len(r.Events) != 2 {
		t.Fatalf("remove: %v, events %v", r.KeyspaceResult.Err, r.Events)
	}
}

// The codec round-trips, refuses what it cannot carry and never panics on
// a truncated or extended command.
func TestKeyspaceCodec(t *testing.T) {
	c := &KeyspaceCommand{ID: 7, TimeMs: -3, Op: KeyspaceCreate, Prefix: "/eu", Region: "eu-west",
		Survival: SurvivalRegion, Voters: []uint64{3, 1 << 40}, Learners: []uint64{5}}
	b := keyspaceEntry(t, c)
	got, err := DecodeKeyspaceCommand(b)
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for i := range len(b) {
		if _, err := DecodeKeyspaceCommand(b[:i]); err == nil {
			t.Errorf("decoded %d of %d bytes", i, len(b))
		}
	}
	if _, err := DecodeKeyspaceCommand(append(bytes.Clone(b), 0)); err == nil {
		t.Error("decoded a trailing byte")
	}
	for name, bad := range map[string]*KeyspaceCommand{
		"nil":      nil,
		"region":   {Region: string(make([]byte, 65))},
		"prefix":   {Prefix: "/" + string(make([]byte, tree.MaxPathBytes))},
		"voters":   {Voters: make([]uint64, MaxKeyspaceMembers+1)},
		"learners": {Learners: make([]uint64, MaxKeyspaceMembers+1)},
	} {
		if _, err := EncodeKeyspaceCommand(bad); !errors.Is(err, errs.ErrBadArguments) {
			t.Errorf("%s: encoded (%v)", name, err)
		}
	}
	// A member list of MaxKeyspaceMembers in all is the most a group has.
	voters := make([]uint64, MaxKeyspaceMembers)
	for i := range voters {
		voters[i] = uint64(i + 1)
	}
	f := New(Hooks{})
	r := apply(t, f, keyspaceEntry(t, &KeyspaceCommand{Op: KeyspaceCreate, Prefix: "/eu", Region: "r", Survival: SurvivalZone,
		Voters: voters}))
	r2 := apply(t, f, keyspaceEntry(t, &KeyspaceCommand{Op: KeyspaceCreate, Prefix: "/us", Region: "r", Survival: SurvivalZone,
		Voters: voters, Learners: []uint64{MaxKeyspaceMembers + 1}}))
	if r.KeyspaceResult.Err != nil || !errors.Is(r2.KeyspaceResult.Err, errs.ErrInvalidKeyspace) {
		t.Fatalf("at the member limit: %v; beyond: %v", r.KeyspaceResult.Err, r2.KeyspaceResult.Err)
	}
}

// A table section that Apply could not have built is refused, and the
// state stays as it was.
func TestRestoreRefusesBadKeyspaceTable(t *testing.T) {
	f := New(Hooks{})
	createKeyspace(t, f, "/eu")
	createKeyspace(t, f, "/us")
	good, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	table := f.keyspaces.snapshot()
	withTable := func(tb []byte) []byte {
		// "MRDS2", last zxid 2 (one byte), the table, then the rest as is.
		rest := good[6:]
		n := len(table)
		if n >= 128 {
			t.Fatal("test table too long")
		}
		out := append([]byte("MRDS2\x02"), byte(len(tb)))
		out = append(out, tb...)
		return append(out, rest[1+n:]...)
	}
	if err := New(Hooks{}).Restore(2, withTable(table)); err != nil {
		t.Fatalf("the table as written: %v", err)
	}
	entry := func(prefix, region string, survival byte, group byte, voters ...byte) []byte {
		b := append([]byte{byte(len(prefix))}, prefix...)
		b = append(append(b, byte(len(region))), region...)
		b = append(b, survival, group, byte(len(voters)))
		return append(append(b, voters...), 0, 0) // no learners, created at 0
	}
	table2 := func(entries ...[]byte) []byte {
		b := []byte{tableVersion, byte(len(entries))}
		for _, e := range entries {
			b = append(b, e...)
		}
		return b
	}
	eu, us := entry("/eu", "r", 1, 1, 1), entry("/us", "r", 1, 2, 1)
	if err := New(Hooks{}).Restore(2, withTable(table2(eu, us))); err != nil {
		t.Fatalf("a hand-built table: %v", err)
	}
	for name, tb := range map[string][]byte{
		"version":      append([]byte{9}, table[1:]...),
		"count 0":      {tableVersion, 0},
		"count short":  append(table2(eu, us)[:1:1], append([]byte{3}, table2(eu, us)[2:]...)...),
		"trailing":     append(table2(eu, us), 0),
		"unsorted":     table2(us, eu),
		"duplicate":    table2(eu, eu),
		"deep prefix":  table2(entry("/eu/fr", "r", 1, 1, 1)),
		"reserved":     table2(entry("/zookeeper", "r", 1, 1, 1)),
		"group 0":      table2(entry("/eu", "r", 1, 0, 1)),
		"survival":     table2(entry("/eu", "r", 3, 1, 1)),
		"no region":    table2(entry("/eu", "", 1, 1, 1)),
		"no voters":    table2(entry("/eu", "r", 1, 1)),
		"voter 0":      table2(entry("/eu", "r", 1, 1, 0)),
		"unsorted ids": table2(entry("/eu", "r", 1, 1, 2, 1)),
	} {
		g := New(Hooks{})
		if err := g.Restore(2, withTable(tb)); err == nil {
			t.Errorf("%s: restored", name)
		}
		if g.Keyspaces().Len() != 0 || g.Applied() != 0 {
			t.Errorf("%s: a refused snapshot changed the state", name)
		}
	}
}
