package fsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
)

// WrapClock refuses what Apply would skip and adds at most
// MaxClockEnvelopeBytes.
func TestWrapClock(t *testing.T) {
	inner := treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: "/a", ACL: tree.OpenACL}})
	b, err := WrapClock(MaxPhysicalMs, MaxZxid-1, inner)
	if err != nil {
		t.Fatal(err)
	}
	if len(b)-len(inner) > MaxClockEnvelopeBytes || !bytes.HasSuffix(b, inner) || b[0] != ClockTag {
		t.Fatalf("envelope of %d bytes around %d: %x", len(b), len(inner), b)
	}
	for name, c := range map[string]struct {
		physical, min uint64
		inner         []byte
	}{
		"clock":  {MaxPhysicalMs + 1, 0, inner},
		"min":    {1, MaxZxid, inner},
		"empty":  {1, 0, nil},
		"nested": {1, 0, b},
	} {
		if _, err := WrapClock(c.physical, c.min, c.inner); !errors.Is(err, errs.ErrBadArguments) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A state that ever applied a clock envelope snapshots as version 2, which
// binaries that know only version 1 refuse (their magic check); one that
// never did stays version 1, byte for byte (TestSnapshotEnvelope).
func TestSnapshotVersion2(t *testing.T) {
	f := New(Hooks{})
	inner := treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: "/a", ACL: tree.OpenACL}})
	wrapped, _ := WrapClock(1000, 0, inner)
	apply(t, f, wrapped)
	b, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.HasPrefix(b, snapshotMagic) || !bytes.HasPrefix(b, snapshotMagicV2) {
		t.Fatalf("snapshot starts %q", b[:5])
	}
	// Restored at a later index (raft's empty entries never reach Apply):
	// the last zxid is the snapshot's while it is higher.
	g := New(Hooks{})
	if err := g.Restore(5, b); err != nil || g.LastZxid() != 1000<<16 || g.Applied() != 5 {
		t.Fatalf("restore: %v, last zxid %d, applied %d", err, g.LastZxid(), g.Applied())
	}
	for name, bad := range map[string][]byte{
		"no zxid":     []byte("MRDS2"),
		"zxid 0":      append([]byte("MRDS2\x00"), b[10:]...),
		"zxid beyond": append([]byte("MRDS2\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), b[10:]...),
		"table":       append(append([]byte(nil), b[:9]...), append([]byte{1, 0}, b[10:]...)...),
		"no table":    b[:10],
	} {
		if err := g.Restore(9, bad); err == nil {
			t.Errorf("%s: restored", name)
		}
	}
	if g.Applied() != 5 {
		t.Fatal("a refused snapshot changed the state")
	}
}
