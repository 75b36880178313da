package backup

import (
	"bytes"
	"errors"
	"testing"

	"github.com/meridian-coord/meridian/internal/fsm"
	"github.com/meridian-coord/meridian/internal/tree"
)

func stateWith(t *testing.T, paths ...string) []byte {
	f := fsm.New(fsm.Hooks{})
	for i, p := range paths {
		b, err := tree.EncodeCommand(&tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: p, Data: []byte("x"), ACL: tree.OpenACL}})
		if err != nil {
			t.Fatal(err)
		}
		if r := f.Apply(uint64(i+1), b); r.Skipped != nil || r.TreeResult.Err != nil {
			t.Fatalf("%s: %v %v", p, r.Skipped, r.TreeResult.Err)
		}
	}
	b, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A backup reads back as written; inspection restores and counts it; a
// file damaged anywhere is refused.
func TestWriteReadInspect(t *testing.T) {
	root := stateWith(t, "/a", "/b", "/b/c")
	m := Manifest{ClusterID: "c1", CreatedMs: 5, Member: 2, Members: []Member{{ID: 1, Role: "voter"}},
		Groups: []Group{{Group: 0, Index: 3, LastZxid: 3}}}
	file, err := Write(m, [][]byte{root})
	if err != nil {
		t.Fatal(err)
	}
	got, snaps, err := Read(file)
	if err != nil {
		t.Fatal(err)
	}
	if got.ClusterID != "c1" || got.Member != 2 || len(snaps) != 1 || !bytes.Equal(snaps[0], root) || got.Groups[0].Bytes != int64(len(root)) {
		t.Fatalf("read back %+v", got)
	}
	sum, err := Inspect(got, snaps)
	if err != nil {
		t.Fatal(err)
	}
	// The root group's count includes a new tree's own znodes ("/" and
	// /zookeeper's).
	if want := fsm.New(fsm.Hooks{}).Tree().NodeCount() + 3; sum[0].Znodes != want || sum[0].Index != 3 || sum[0].LastZxid != 3 {
		t.Fatalf("summary %+v, want %d znodes at index 3", sum[0], want)
	}
	for name, bad := range map[string][]byte{
		"truncated": file[:len(file)-1],
		"flipped":   append(append([]byte(nil), file[:40]...), append([]byte{file[40] ^ 1}, file[41:]...)...),
		"magic":     append([]byte("MRDBAK2\n"), file[8:]...),
		"empty":     nil,
	} {
		if _, _, err := Read(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Write(m, nil); err == nil {
		t.Error("a backup without the root's snapshot was written")
	}
}
