package tree

import (
	"errors"
	"math"
	"testing"

	"github.com/meridian-coord/meridian/internal/errs"
)

func mustApply(t *testing.T, tr *Tree, index uint64, cmd *Command) Result {
	t.Helper()
	res, _ := tr.Apply(int64(index), cmd)
	if res.Err != nil {
		t.Fatalf("apply %d: %v", index, res.Err)
	}
	checkInvariants(t, tr)
	return res
}

func createCmd(path string, mode CreateMode) *Command {
	return &Command{Op: Op{Type: OpCreate, Path: path, ACL: OpenACL, Mode: mode}}
}

// Characters that cannot be written in a datadriven script.
func TestValidatePathCharacters(t *testing.T) {
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"/a\x00b", false},
		{"/a\x01", false},
		{"/a\x1f", false},
		{"/a\x7f", false},
		{"/a\u0080", false},
		{"/a\u009f", false},
		{"/a\u00a0", true},
		{"/a\ud7ff", true},
		{"/a\ue000", false}, // private use area
		{"/a\uf8ff", false},
		{"/a\uf900", true},
		{"/a\uffef", true},
		{"/a\ufff0", false},
		{"/a\ufffd", false},
		{"/a\U0001F600", false}, // a surrogate pair in Java
		{"/a\xff", false},       // invalid UTF-8
		{"/a b", true},
		{"", false},
		{"/" + string(make([]byte, MaxPathBytes)), false},
	} {
		err := ValidatePath(tc.path, false)
		if (err == nil) != tc.ok {
			t.Errorf("ValidatePath(%q) = %v, want ok=%v", tc.path, err, tc.ok)
		}
		if err != nil && err != errs.ErrInvalidPath {
			t.Errorf("ValidatePath(%q) returned %v", tc.path, err)
		}
	}
	long := "/"
	for len(long) < MaxPathBytes {
		long += "a"
	}
	if err := ValidatePath(long, false); err != nil {
		t.Errorf("path of MaxPathBytes refused: %v", err)
	}
	// A sequential create whose suffix would push it over the limit.
	tr := New()
	res, _ := tr.Apply(1, createCmd(long[:MaxPathBytes-5], ModePersistentSequential))
	if res.Err != errs.ErrInvalidPath {
		t.Errorf("over-long sequential path: %v", res.Err)
	}
}

// Sequence numbers and versions are Java ints: they wrap, and a negative
// cversion is formatted as Java's %010d formats it.
func TestInt32Wrap(t *testing.T) {
	tr := New()
	mustApply(t, tr, 1, createCmd("/p", ModePersistent))
	tr.nodes.get("/p").extend().cversion = math.MaxInt32
	if got := mustApply(t, tr, 2, createCmd("/p/s-", ModePersistentSequential)).Op.Path; got != "/p/s-2147483647" {
		t.Errorf("got %s", got)
	}
	if got := mustApply(t, tr, 3, createCmd("/p/s-", ModePersistentSequential)).Op.Path; got != "/p/s--2147483648" {
		t.Errorf("got %s", got)
	}
	tr.nodes.get("/p").extend().cversion = -5
	if got := mustApply(t, tr, 4, createCmd("/p/s-", ModePersistentSequential)).Op.Path; got != "/p/s--000000005" {
		t.Errorf("got %s", got)
	}

	tr.nodes.get("/p").stat.Version = math.MaxInt32
	set := &Command{Op: Op{Type: OpSetData, Path: "/p", Version: math.MaxInt32}}
	if v := mustApply(t, tr, 5, set).Op.Stat.Version; v != math.MinInt32 {
		t.Errorf("version after wrap %d", v)
	}
	set.Op.Version = math.MinInt32
	if v := mustApply(t, tr, 6, set).Op.Stat.Version; v != math.MinInt32+1 {
		t.Errorf("version %d", v)
	}
}

func TestReadsReturnCopies(t *testing.T) {
	tr := New()
	mustApply(t, tr, 1, &Command{Op: Op{Type: OpCreate, Path: "/a", Data: []byte("abc"), ACL: OpenACL}})
	data, _, _ := tr.Get("/a")
	data[0] = 'X'
	acl, _, _ := tr.GetACL("/a")
	acl[0].Perms = 0
	if d, _, _ := tr.Get("/a"); string(d) != "abc" {
		t.Errorf("data aliased: %q", d)
	}
	if a, _, _ := tr.GetACL("/a"); a[0].Perms != PermAll || OpenACL[0].Perms != PermAll {
		t.Error("ACL aliased")
	}
	// The command's buffers are not kept either.
	cmd := &Command{Op: Op{Type: OpSetData, Path: "/a", Data: []byte("xyz"), Version: -1}}
	mustApply(t, tr, 2, cmd)
	cmd.Op.Data[0] = '!'
	if d, _, _ := tr.Get("/a"); string(d) != "xyz" {
		t.Errorf("command data aliased: %q", d)
	}
}

func TestAllChildrenNumber(t *testing.T) {
	tr := New()
	for i, p := range []string{"/a", "/a/b", "/a/b/c", "/a/d", "/e"} {
		mustApply(t, tr, uint64(i+1), createCmd(p, ModePersistent))
	}
	for p, want := range map[string]int{"/": 7, "/a": 3, "/a/b": 1, "/a/b/c": 0, "/zookeeper": 1} {
		if got, err := tr.AllChildrenNumber(p); err != nil || got != want {
			t.Errorf("AllChildrenNumber(%s) = %d, %v; want %d", p, got, err, want)
		}
	}
	if _, err := tr.AllChildrenNumber("/x"); err != errs.ErrNoNode {
		t.Errorf("missing node: %v", err)
	}
	if tr.NodeCount() != 8 {
		t.Errorf("NodeCount %d", tr.NodeCount())
	}
}

// Apply enforces the command limits itself, for commands that did not come
// through the codec.
func TestApplyLimits(t *testing.T) {
	tr := New()
	before := tr.Digest()
	for name, cmd := range map[string]*Command{
		"auth":   {Op: Op{Type: OpNoop}, Auth: make([]ID, MaxAuthIDs+1)},
		"multi":  {Op: Op{Type: OpMulti}, Ops: make([]Op, MaxMultiOps+1)},
		"expire": {Op: Op{Type: OpExpire}, Sessions: make([]int64, MaxExpireBatch+1)},
		"acl":    {Op: Op{Type: OpCreate, Path: "/a", ACL: make([]ACL, MaxACLEntries+1)}},
	} {
		res, ev := tr.Apply(1, cmd)
		if res.Err == nil || len(ev) != 0 {
			t.Errorf("%s: %v %v", name, res.Err, ev)
		}
	}
	if res, _ := tr.Apply(1, nil); res.Err != errs.ErrBadArguments {
		t.Errorf("nil command: %v", res.Err)
	}
	if tr.Digest() != before {
		t.Error("refused commands changed the tree")
	}
}

// A TTL deadline past the end of int64 saturates instead of wrapping into the past.
func TestTTLDeadlineSaturates(t *testing.T) {
	tr := New()
	cmd := createCmd("/t", ModePersistentTTL)
	cmd.Op.TTLMs = maxTTLMs
	cmd.TimeMs = math.MaxInt64 - 10
	mustApply(t, tr, 1, cmd)
	if tr.NeedsReap(math.MaxInt64 - 1) {
		t.Error("saturated deadline expired early")
	}
	res, _ := tr.Apply(2, &Command{Op: Op{Type: OpReap}, TimeMs: math.MaxInt64 - 1})
	if len(res.Deleted) != 0 {
		t.Errorf("reaped %v", res.Deleted)
	}
}

func TestDigestCoversState(t *testing.T) {
	base := func() *Tree {
		tr := New()
		mustApply(t, tr, 1, &Command{Op: Op{Type: OpCreateSession}, TimeoutMs: 1000, Password: make([]byte, 16)})
		mustApply(t, tr, 2, &Command{Op: Op{Type: OpCreate, Path: "/a", Data: []byte("d"), ACL: OpenACL}})
		return tr
	}
	ref := base().Digest()
	if base().Digest() != ref {
		t.Fatal("digest not deterministic")
	}
	for name, mutate := range map[string]func(*Tree){
		"data":     func(tr *Tree) { tr.nodes.get("/a").setData([]byte("e")) },
		"mtime":    func(tr *Tree) { tr.nodes.get("/a").stat.Mtime++ },
		"pzxid":    func(tr *Tree) { n := tr.nodes.get("/a"); n.setFamily(n.pzxid()+1, n.cversion()) },
		"acl":      func(tr *Tree) { tr.nodes.get("/a").acl = &[]ACL{{Perms: PermRead, ID: ID{"world", "anyone"}}} },
		"mode":     func(tr *Tree) { tr.nodes.get("/a").mode = uint8(ModeContainer) },
		"session":  func(tr *Tree) { tr.sessions[1].info.TimeoutMs++ },
		"password": func(tr *Tree) { tr.sessions[1].info.Password = []byte("x") },
		"no node":  func(tr *Tree) { tr.nodes.del("/a") },
	} {
		tr := base()
		mutate(tr)
		if tr.Digest() == ref {
			t.Errorf("digest ignores %s", name)
		}
	}
}

func TestErrorsAreErrsValues(t *testing.T) {
	tr := New()
	res, _ := tr.Apply(1, &Command{Op: Op{Type: OpDelete, Path: "/nope", Version: -1}})
	if !errors.Is(res.Err, errs.ErrNoNode) || res.Op.Err != res.Err || res.Op.Type != OpDelete {
		t.Errorf("got %+v", res)
	}
}
