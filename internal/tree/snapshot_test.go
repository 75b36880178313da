package tree

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"reflect"
	"testing"

	"github.com/meridian-coord/meridian/internal/errs"
)

// richTree has sessions, ephemerals, sequential, container and TTL nodes,
// non-trivial ACLs and data.
func richTree(t testing.TB) *Tree {
	tr := New()
	i := int64(0)
	apply := func(c *Command) Result {
		i++
		res, _ := tr.Apply(i, c)
		if res.Err != nil {
			t.Fatalf("setup %d: %v", i, res.Err)
		}
		return res
	}
	sess := apply(&Command{Op: Op{Type: OpCreateSession}, TimeoutMs: 5000, Password: []byte("0123456789abcdef")}).SessionID
	apply(&Command{Op: Op{Type: OpCreateSession}, TimeoutMs: 9000, Password: []byte("fedcba9876543210")})
	apply(&Command{TimeMs: 100, Op: Op{Type: OpCreate, Path: "/app", Data: []byte("config"), ACL: OpenACL}})
	apply(&Command{TimeMs: 200, Session: sess, Op: Op{Type: OpCreate, Path: "/app/lock-", ACL: OpenACL, Mode: ModeEphemeralSequential}})
	apply(&Command{TimeMs: 300, Op: Op{Type: OpCreate, Path: "/ctr", ACL: OpenACL, Mode: ModeContainer}})
	apply(&Command{TimeMs: 300, Op: Op{Type: OpCreate, Path: "/ctr/x", ACL: OpenACL}})
	apply(&Command{TimeMs: 300, Op: Op{Type: OpDelete, Path: "/ctr/x", Version: -1}})
	apply(&Command{TimeMs: 400, Op: Op{Type: OpCreate, Path: "/ttl", ACL: OpenACL, Mode: ModePersistentTTL, TTLMs: 1000}})
	apply(&Command{TimeMs: 500, Auth: []ID{{"digest", "bob:h"}}, Op: Op{Type: OpCreate, Path: "/secret", Data: []byte{0, 1, 2, 255},
		ACL: []ACL{{Perms: PermAll, ID: ID{"auth", ""}}, {Perms: PermRead, ID: ID{"ip", "10.0.0.0/8"}}}}})
	apply(&Command{TimeMs: 600, Op: Op{Type: OpSetData, Path: "/app", Data: []byte("v2"), Version: 0}})
	apply(&Command{TimeMs: 700, Op: Op{Type: OpMulti}, Ops: []Op{
		{Type: OpCreate, Path: "/m", ACL: OpenACL},
		{Type: OpCreate, Path: "/m/", ACL: OpenACL, Mode: ModePersistentSequential},
		{Type: OpSetACL, Path: "/m", ACL: []ACL{{Perms: PermRead | PermCreate, ID: ID{"world", "anyone"}}}, Version: 0},
	}})
	checkInvariants(t, tr)
	return tr
}

func snapshot(t testing.TB, tr *Tree) []byte {
	var buf bytes.Buffer
	if err := tr.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sameReads compares everything a client or the server can observe.
func sameReads(t *testing.T, a, b *Tree) {
	t.Helper()
	if a.Digest() != b.Digest() || a.NodeCount() != b.NodeCount() || a.EphemeralCount() != b.EphemeralCount() {
		t.Fatal("digest or counts differ")
	}
	if !reflect.DeepEqual(a.Sessions(), b.Sessions()) {
		t.Fatal("sessions differ")
	}
	for _, s := range a.Sessions() {
		if !reflect.DeepEqual(a.Ephemerals(s.ID, "/"), b.Ephemerals(s.ID, "/")) {
			t.Fatalf("ephemerals of %d differ", s.ID)
		}
	}
	for _, p := range a.sortedPaths() {
		da, sa, _ := a.Get(p)
		db, sb, err := b.Get(p)
		ca, _, _ := a.Children(p)
		cb, _, _ := b.Children(p)
		aa, _, _ := a.GetACL(p)
		ab, _, _ := b.GetACL(p)
		if err != nil || !bytes.Equal(da, db) || sa != sb || !reflect.DeepEqual(ca, cb) || !reflect.DeepEqual(aa, ab) {
			t.Fatalf("%s differs", p)
		}
	}
	for _, now := range []int64{0, 1000, 1399, 1400, 1e12} {
		if a.NeedsReap(now) != b.NeedsReap(now) {
			t.Fatalf("NeedsReap(%d) differs", now)
		}
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	for name, tr := range map[string]*Tree{"new": New(), "rich": richTree(t), "random": randomTree(t, 7, 3000)} {
		t.Run(name, func(t *testing.T) {
			r := checkRoundTrip(t, tr)
			sameReads(t, tr, r)
			// The restored tree behaves the same from here on, reap included.
			for _, cmd := range []*Command{
				{TimeMs: 1e12, Op: Op{Type: OpReap}},
				{Op: Op{Type: OpExpire}, Sessions: []int64{1, 2}},
				{Op: Op{Type: OpCreate, Path: "/app/", ACL: OpenACL, Mode: ModePersistentSequential}},
			} {
				ra, ea := tr.Apply(1<<20, cmd)
				rb, eb := r.Apply(1<<20, cmd)
				if !reflect.DeepEqual(ra, rb) || !reflect.DeepEqual(ea, eb) {
					t.Fatalf("diverged after restore: %+v %v vs %+v %v", ra, ea, rb, eb)
				}
			}
			sameReads(t, tr, r)
		})
	}
}

func TestSnapshotCorruptionDetected(t *testing.T) {
	snap := snapshot(t, richTree(t))
	for i := range snap {
		for _, flip := range []byte{0x01, 0x80, 0xff} {
			bad := append([]byte(nil), snap...)
			bad[i] ^= flip
			if _, err := Restore(bytes.NewReader(bad)); !errors.Is(err, errs.ErrDataInconsistency) {
				t.Fatalf("byte %d ^ %#x: err %v", i, flip, err)
			}
		}
	}
	for n := 0; n < len(snap); n++ {
		if _, err := Restore(bytes.NewReader(snap[:n])); !errors.Is(err, errs.ErrDataInconsistency) {
			t.Fatalf("truncated to %d: err %v", n, err)
		}
	}
	if _, err := Restore(bytes.NewReader(append(snap, 0))); !errors.Is(err, errs.ErrDataInconsistency) {
		t.Fatalf("extra byte: err %v", err)
	}
}

// A snapshot with a valid checksum but inconsistent content is refused too.
func TestSnapshotInvariantsChecked(t *testing.T) {
	for name, corrupt := range map[string]func(tr *Tree){
		"orphan owner":  func(tr *Tree) { delete(tr.sessions, 1) },
		"owner on node": func(tr *Tree) { tr.nodes.get("/app").extend().owner = 2 },
		"bad mode":      func(tr *Tree) { tr.nodes.get("/app").mode = 9 },
		"ttl":           func(tr *Tree) { tr.nodes.get("/ttl").expiry().ms = 0 },
		"acl":           func(tr *Tree) { tr.nodes.get("/app").acl = &[]ACL{{Perms: 1, ID: ID{"super", ""}}} },
		"empty acl":     func(tr *Tree) { tr.nodes.get("/app").acl = new([]ACL) },
		"orphan node": func(tr *Tree) {
			n := &node{acl: &openACL}
			n.setPathData("/nope/x", nil)
			tr.nodes.put(n)
		},
		"no root": func(tr *Tree) {
			tr.nodes.del("/")
		},
	} {
		tr := richTree(t)
		corrupt(tr)
		if _, err := Restore(bytes.NewReader(snapshot(t, tr))); !errors.Is(err, errs.ErrDataInconsistency) {
			t.Errorf("%s: err %v", name, err)
		}
	}
	// A node stores no DataLength or NumChildren (they are len of the data
	// and of the child set), so wrong ones are written into the snapshot's
	// bytes instead.
	bad := snapshotWithStat(richTree(t), "/app", func(s *Stat) { s.NumChildren = 5 })
	if _, err := Restore(bytes.NewReader(bad)); !errors.Is(err, errs.ErrDataInconsistency) {
		t.Errorf("numChildren: err %v", err)
	}
	bad = snapshotWithStat(richTree(t), "/app", func(s *Stat) { s.DataLength = 1 })
	if _, err := Restore(bytes.NewReader(bad)); !errors.Is(err, errs.ErrDataInconsistency) {
		t.Errorf("dataLength: err %v", err)
	}
}

// snapshotWithStat is the snapshot of tr (WriteTo's format) with the Stat
// written for path changed by edit.
func snapshotWithStat(tr *Tree, path string, edit func(*Stat)) []byte {
	v := tr.View()
	v.WriteTo(io.Discard) // sorts v.nodes
	b := append(snapshotMagic[:], snapshotVersion)
	b = binary.AppendUvarint(b, uint64(len(v.sessions)))
	for i := range v.sessions {
		b = appendSessionInfo(b, &v.sessions[i])
	}
	b = binary.AppendUvarint(b, uint64(len(v.nodes)))
	for _, n := range v.nodes {
		st := n.Stat()
		if n.path() == path {
			edit(&st)
		}
		b = appendNodeStat(b, n, &st)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n -= len(p); w.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func TestSnapshotWriteError(t *testing.T) {
	tr := randomTree(t, 3, 3000)
	size := len(snapshot(t, tr))
	for _, n := range []int{0, size / 2, size - 1} {
		if err := tr.Snapshot(&failWriter{n: n}); err == nil {
			t.Errorf("write error after %d bytes not reported", n)
		}
	}
}

// FuzzRestore feeds Restore arbitrary bytes. With reseal the checksum is
// recomputed first, so the fuzzer gets past it and exercises the parser and
// the invariant checks.
func FuzzRestore(f *testing.F) {
	for _, tr := range []*Tree{New(), richTree(f), randomTree(f, 1, 300)} {
		f.Add(snapshot(f, tr), false)
		f.Add(snapshot(f, tr), true)
	}
	f.Fuzz(func(t *testing.T, b []byte, reseal bool) {
		if reseal && len(b) >= 4 {
			b = append([]byte(nil), b...)
			binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
		}
		tr, err := Restore(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, errs.ErrDataInconsistency) {
				t.Fatalf("error not wrapping ErrDataInconsistency: %v", err)
			}
			return
		}
		checkInvariants(t, tr)
		checkRoundTrip(t, tr)
	})
}

// A node created with null data reads back null, one created with empty
// data reads back empty, and a snapshot keeps the difference.
func TestNullDataSurvivesSnapshot(t *testing.T) {
	tr := New()
	for i, c := range []*Command{
		{Op: Op{Type: OpCreate, Path: "/null", ACL: OpenACL}},
		{Op: Op{Type: OpCreate, Path: "/empty", Data: []byte{}, ACL: OpenACL}},
		{Op: Op{Type: OpCreate, Path: "/set", Data: []byte("x"), ACL: OpenACL}},
		{Op: Op{Type: OpSetData, Path: "/set", Version: -1}},
	} {
		if res, _ := tr.Apply(int64(i+1), c); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	back, err := Restore(bytes.NewReader(snapshot(t, tr)))
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []*Tree{tr, back} {
		for path, wantNull := range map[string]bool{"/null": true, "/empty": false, "/set": true} {
			data, st, err := x.Get(path)
			if err != nil || (data == nil) != wantNull || len(data) != 0 || st.DataLength != 0 {
				t.Errorf("%s: data %#v, stat %+v, err %v", path, data, st, err)
			}
		}
	}
}

// An adopted session (no timeout, no password) owns ephemerals like any
// session, survives a snapshot, and ending it deletes them.
func TestAdoptedSessionRoundTrip(t *testing.T) {
	tr := New()
	if !tr.AdoptSession(7) || tr.AdoptSession(7) || tr.AdoptSession(0) {
		t.Fatal("AdoptSession accepts a session twice or a zero id")
	}
	res, _ := tr.Apply(1, &Command{Session: 7, Op: Op{Type: OpCreate, Path: "/e", ACL: OpenACL, Mode: ModeEphemeral}})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if tr.ForgetSession(7) {
		t.Fatal("forgot a session that owns an ephemeral")
	}
	var buf bytes.Buffer
	if err := tr.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	r, err := Restore(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := r.Session(7); !ok || s.TimeoutMs != 0 || len(r.Ephemerals(7, "/")) != 1 {
		t.Fatalf("restored %+v %v", s, ok)
	}
	res, events := r.Apply(2, &Command{Op: Op{Type: OpExpire}, Sessions: []int64{7}})
	if res.Err != nil || len(events) != 2 || r.SessionCount() != 0 {
		t.Fatalf("expire: %+v %v", res, events)
	}
	r.AdoptSession(8)
	if !r.ForgetSession(8) || r.SessionCount() != 0 {
		t.Fatal("ForgetSession kept an empty adopted session")
	}
}

// A view is the state when it was taken: written after the tree has
// changed in every way a node can (data, ACL, stat, children, deletion,
// sessions), it gives the bytes a snapshot taken at that moment gives.
func TestViewIsPointInTime(t *testing.T) {
	tr := richTree(t)
	want := snapshot(t, tr)
	v := tr.View()
	i := int64(100)
	for _, c := range []*Command{
		// Nodes in the reap indexes: a TTL node (in the heap) and an
		// empty container (in the set), changed after the view.
		{TimeMs: 800, Op: Op{Type: OpSetData, Path: "/ttl", Data: []byte("t"), Version: -1}},
		{TimeMs: 800, Op: Op{Type: OpSetData, Path: "/ctr", Data: []byte("c"), Version: -1}},
		// A multi that changes nodes and then fails: rolled back.
		{TimeMs: 800, Op: Op{Type: OpMulti}, Ops: []Op{
			{Type: OpSetData, Path: "/app", Data: []byte("rolled back"), Version: -1},
			{Type: OpCreate, Path: "/m/rolled", ACL: OpenACL},
			{Type: OpDelete, Path: "/nope", Version: -1},
		}},
		{TimeMs: 800, Op: Op{Type: OpSetData, Path: "/app", Data: []byte("v3"), Version: -1}},
		{TimeMs: 800, Op: Op{Type: OpSetACL, Path: "/app", ACL: []ACL{{Perms: PermRead | PermCreate, ID: ID{"world", "anyone"}}}, Version: -1}},
		{TimeMs: 800, Op: Op{Type: OpCreate, Path: "/app/child", ACL: OpenACL}},
		{TimeMs: 800, Op: Op{Type: OpDelete, Path: "/ttl", Version: -1}},
		{Op: Op{Type: OpCreateSession}, TimeoutMs: 5000, Password: []byte("aaaaaaaaaaaaaaaa")},
		{Op: Op{Type: OpExpire}, Sessions: []int64{1}},
	} {
		i++
		if res, _ := tr.Apply(i, c); res.Err != nil && c.Op.Type != OpMulti {
			t.Fatalf("%v: %v", c.Op.Type, res.Err)
		}
		checkInvariants(t, tr)
	}
	// The reap deletes the empty container, copied since (the TTL node
	// was deleted above).
	if res, _ := tr.Apply(i+1, &Command{TimeMs: 1e12, Op: Op{Type: OpReap}}); len(res.Deleted) != 1 || res.Deleted[0] != "/ctr" {
		t.Fatalf("reap deleted %v", res.Deleted)
	}
	checkInvariants(t, tr)
	var buf bytes.Buffer
	if n, err := v.WriteTo(&buf); err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteTo: %d, %v (wrote %d)", n, err, buf.Len())
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatal("the view changed with the tree")
	}
	if bytes.Equal(snapshot(t, tr), want) {
		t.Fatal("the tree did not change")
	}
	// Written twice, the same bytes.
	buf.Reset()
	if _, err := v.WriteTo(&buf); err != nil || !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("second WriteTo: %v", err)
	}
}

// RestoreBytes copies out what it keeps: overwriting its input afterwards
// changes nothing in the restored tree.
func TestRestoreBytesKeepsNothing(t *testing.T) {
	b := snapshot(t, richTree(t))
	tr, err := RestoreBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	want := snapshot(t, tr)
	if !bytes.Equal(want, b) {
		t.Fatal("restored tree snapshots differently")
	}
	for i := range b {
		b[i] = 0xff
	}
	if !bytes.Equal(snapshot(t, tr), want) {
		t.Fatal("the restored tree shares its input's bytes")
	}
	checkInvariants(t, tr)
}

// A session's password matches only that live session's own: not another
// session's, not once the session has ended, and never an adopted
// session's (which has none), even with an empty password.
func TestSessionPasswordMatches(t *testing.T) {
	tr := New()
	pw := []byte("0123456789abcdef")
	res, _ := tr.Apply(5, &Command{Op: Op{Type: OpCreateSession}, TimeoutMs: MinSessionMs, Password: pw})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	id := res.SessionID
	tr.AdoptSession(9)
	switch {
	case !tr.SessionPasswordMatches(id, pw):
		t.Fatal("the session's own password does not match")
	case tr.SessionPasswordMatches(id, []byte("0123456789abcdeX")), tr.SessionPasswordMatches(id, nil):
		t.Fatal("another password matches")
	case tr.SessionPasswordMatches(id+1, pw):
		t.Fatal("the password matches another session id")
	case tr.SessionPasswordMatches(9, nil), tr.SessionPasswordMatches(9, []byte{}):
		t.Fatal("an adopted session matches an empty password")
	}
	if res, _ := tr.Apply(6, &Command{Session: id, Op: Op{Type: OpCloseSession}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	if tr.SessionPasswordMatches(id, pw) {
		t.Fatal("a closed session's password still matches")
	}
}
