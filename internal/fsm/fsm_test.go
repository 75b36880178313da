package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
)

// TestScripts runs the scripts in testdata/ (rewrite the golden output
// with: go test ./internal/fsm -rewrite). Every entry goes through the
// codec and Apply at the next log index, starting at 1; the output is the
// Result: the proposer's result, the watch events, grants, losses and the
// sessions started and ended.
//
//	create-session [timeout=MS]
//	close-session session=N
//	expire sessions=(N, ...)
//	create path=/a [session=N] [ephemeral] [data=D]
//	set path=/a data=D
//	delete path=/a
//	acquire lock=l session=N [wait] [delay=MS]
//	release lock=l session=N
//	fenced lock=l token=N session=N path=/a data=D    (a fenced set)
//	fenced lock=l token=N session=N inner=close-session|garbage
//	tick
//	push queue=q data=D
//	pop queue=q session=N [wait]
//	enter barrier=b session=N parties=N
//	multi session=N path=/a [ephemeral]                (a multi of one create)
//	garbage [coord]                                    (an entry that does not decode)
//	bad-clock kind=truncated|physical|min|nested|empty (a clock envelope that does not decode)
//	keyspace-create prefix=/eu [region=R] [survival=zone|region|N] [voters=(1,2,3)] [learners=(4)]
//	keyspace-remove prefix=/eu [op=N]                 (op: an unknown op instead)
//	keyspace-for path=/eu/a | name=eu/lock   (not an entry: the owner of a path or name)
//	keyspaces       (not an entry: the table)
//	snapshot        (round trip into a new FSM, which the script continues with)
//	keyspace-fsm    (not an entry: a new, empty keyspace group's FSM from index 0)
//	show
//	stat path=/a    (the node's zxids and versions)
//
// time=MS on any entry sets the proposer's clock from then on (default 1000).
// clock=MS [min=Z] on any entry wraps it in a clock envelope with that
// physical time and minimum zxid. The output names the zxid only where it
// differs from the index (an event's too), as "(ms.logical)" when a clock
// made it.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{t: t, fsm: New(Hooks{}), now: 1000}
		datadriven.RunTest(t, path, h.run)
	})
}

type harness struct {
	t     *testing.T
	fsm   *FSM
	opts  Options
	index uint64
	now   int64
}

func arg(d *datadriven.TestData, key string) (string, bool) {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			if len(a.Vals) == 0 {
				return "", true
			}
			return a.Vals[0], true
		}
	}
	return "", false
}

func (h *harness) int(d *datadriven.TestData, key string) int64 {
	v, ok := arg(d, key)
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		h.t.Fatalf("%s: %s=%s: %v", d.Pos, key, v, err)
	}
	return n
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	if v, ok := arg(d, "time"); ok {
		h.now, _ = strconv.ParseInt(v, 10, 64)
	}
	switch d.Cmd {
	case "show":
		return show(h.fsm)
	case "snapshot":
		return h.roundTrip()
	case "keyspace-fsm":
		h.opts = Options{Keyspace: true}
		h.fsm, h.index = New(Hooks{}, h.opts), 0
		return "keyspace group\n"
	case "stat":
		return h.stat(d)
	case "keyspaces":
		return showKeyspaces(h.fsm)
	case "keyspace-for":
		h.fsm.RLock()
		defer h.fsm.RUnlock()
		var k Keyspace
		var ok bool
		if p, isPath := arg(d, "path"); isPath {
			k, ok = h.fsm.KeyspaceFor(p)
		} else {
			name, _ := arg(d, "name")
			k, ok = h.fsm.KeyspaceForName(name)
		}
		if !ok {
			return "root group\n"
		}
		return fmtKeyspace(k)
	}
	data := h.entry(d)
	if v, ok := arg(d, "clock"); ok {
		physical, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s: clock=%s: %v", d.Pos, v, err)
		}
		if data, err = WrapClock(physical, uint64(h.int(d, "min")), data); err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
	}
	h.index++
	last := h.fsm.LastZxid()
	r := h.fsm.Apply(h.index, data)
	if r.Index != h.index || h.fsm.Applied() != h.index {
		t.Fatalf("%s: applied %d, result index %d, want %d", d.Pos, h.fsm.Applied(), r.Index, h.index)
	}
	// The zxid invariants, on every entry of every script.
	if r.Zxid != 0 && (r.Zxid <= last || r.Zxid < int64(r.Index) || h.fsm.LastZxid() != r.Zxid) {
		t.Fatalf("%s: zxid %d after %d at index %d, last zxid %d", d.Pos, r.Zxid, last, r.Index, h.fsm.LastZxid())
	}
	return fmtResult(&r)
}

// stat shows a node's zxids and versions.
func (h *harness) stat(d *datadriven.TestData) string {
	path, _ := arg(d, "path")
	h.fsm.RLock()
	defer h.fsm.RUnlock()
	_, s, err := h.fsm.Tree().Get(path)
	if err != nil {
		return errName(err) + "\n"
	}
	return fmt.Sprintf("czxid=%s mzxid=%s pzxid=%s version=%d cversion=%d\n",
		fmtZxid(s.Czxid), fmtZxid(s.Mzxid), fmtZxid(s.Pzxid), s.Version, s.Cversion)
}

// fmtZxid writes a zxid a clock made as its milliseconds and logical count.
func fmtZxid(z int64) string {
	if z < 1<<LogicalBits {
		return strconv.FormatInt(z, 10)
	}
	return fmt.Sprintf("%d(%d.%d)", z, ZxidPhysicalMs(z), z&(1<<LogicalBits-1))
}

// entry encodes the directive's command as the log carries it.
func (h *harness) entry(d *datadriven.TestData) []byte {
	t := h.t
	path, _ := arg(d, "path")
	value, _ := arg(d, "data")
	lock, _ := arg(d, "lock")
	session := h.int(d, "session")
	id := h.index + 1000 // a proposal id the output can tell from an index
	treeCmd := func(c *tree.Command) []byte {
		c.ID, c.TimeMs = id, h.now
		b, err := tree.EncodeCommand(c)
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		return b
	}
	for _, k := range []string{"queue", "barrier"} {
		if v, ok := arg(d, k); ok {
			lock = v
		}
	}
	coordCmd := func(c *coord.Command) []byte {
		c.ID, c.TimeMs, c.Session, c.Name = id, h.now, session, lock
		b, err := coord.Encode(c)
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		return b
	}
	switch d.Cmd {
	case "create-session":
		timeout := int32(h.int(d, "timeout"))
		if timeout == 0 {
			timeout = 10000
		}
		return treeCmd(&tree.Command{Op: tree.Op{Type: tree.OpCreateSession}, TimeoutMs: timeout,
			Password: []byte("0123456789abcdef")})
	case "close-session":
		return treeCmd(&tree.Command{Session: session, Op: tree.Op{Type: tree.OpCloseSession}})
	case "expire":
		var ids []int64
		for _, a := range d.CmdArgs {
			if a.Key == "sessions" {
				for _, v := range a.Vals {
					n, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						t.Fatalf("%s: %v", d.Pos, err)
					}
					ids = append(ids, n)
				}
			}
		}
		return treeCmd(&tree.Command{Op: tree.Op{Type: tree.OpExpire}, Sessions: ids})
	case "create":
		mode := tree.ModePersistent
		if _, ok := arg(d, "ephemeral"); ok {
			mode = tree.ModeEphemeral
		}
		return treeCmd(&tree.Command{Session: session, Op: tree.Op{Type: tree.OpCreate, Path: path,
			Data: []byte(value), ACL: tree.OpenACL, Mode: mode}})
	case "delete":
		return treeCmd(&tree.Command{Session: session, Op: tree.Op{Type: tree.OpDelete, Path: path, Version: -1}})
	case "set":
		return treeCmd(&tree.Command{Session: session, Op: tree.Op{Type: tree.OpSetData, Path: path,
			Data: []byte(value), Version: -1}})
	case "acquire":
		_, wait := arg(d, "wait")
		return coordCmd(&coord.Command{Op: coord.OpAcquire, Wait: wait, DelayMs: h.int(d, "delay")})
	case "release":
		return coordCmd(&coord.Command{Op: coord.OpRelease})
	case "tick":
		return coordCmd(&coord.Command{Op: coord.OpTick})
	case "push":
		return coordCmd(&coord.Command{Op: coord.OpPush, Value: []byte(value)})
	case "pop":
		_, wait := arg(d, "wait")
		return coordCmd(&coord.Command{Op: coord.OpPop, Wait: wait})
	case "enter":
		return coordCmd(&coord.Command{Op: coord.OpEnter, Parties: int32(h.int(d, "parties"))})
	case "multi":
		mode := tree.ModePersistent
		if _, ok := arg(d, "ephemeral"); ok {
			mode = tree.ModeEphemeral
		}
		return treeCmd(&tree.Command{Session: session, Op: tree.Op{Type: tree.OpMulti},
			Ops: []tree.Op{{Type: tree.OpCreate, Path: path, Data: []byte(value), ACL: tree.OpenACL, Mode: mode}}})
	case "fenced":
		var inner []byte
		switch v, _ := arg(d, "inner"); v {
		case "":
			inner = treeCmd(&tree.Command{Session: session, Op: tree.Op{Type: tree.OpSetData, Path: path,
				Data: []byte(value), Version: -1}})
		case "close-session":
			inner = treeCmd(&tree.Command{Session: session, Op: tree.Op{Type: tree.OpCloseSession}})
		case "garbage":
			inner = []byte{0xff, 0xff}
		default:
			t.Fatalf("%s: unknown inner %q", d.Pos, v)
		}
		return coordCmd(&coord.Command{Op: coord.OpFenced, Token: uint64(h.int(d, "token")), Inner: inner})
	case "keyspace-create", "keyspace-remove":
		c := &KeyspaceCommand{ID: id, TimeMs: h.now, Op: KeyspaceRemove, Prefix: func() string { p, _ := arg(d, "prefix"); return p }()}
		if d.Cmd == "keyspace-create" {
			c.Op, c.Region, c.Survival = KeyspaceCreate, "eu-west", SurvivalZone
			c.Voters, c.Learners = []uint64{1, 2, 3}, h.ids(d, "learners")
			if v, ok := arg(d, "region"); ok {
				c.Region = v
			}
			switch v, _ := arg(d, "survival"); v {
			case "", "zone":
			case "region":
				c.Survival = SurvivalRegion
			default:
				c.Survival = Survival(h.int(d, "survival"))
			}
			if _, ok := arg(d, "voters"); ok {
				c.Voters = h.ids(d, "voters")
			}
		}
		if _, ok := arg(d, "op"); ok {
			c.Op = KeyspaceOp(h.int(d, "op"))
		}
		b, err := EncodeKeyspaceCommand(c)
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		return b
	case "garbage":
		if _, ok := arg(d, "coord"); ok {
			return []byte{coord.Tag, 0xff}
		}
		if _, ok := arg(d, "keyspace"); ok {
			return []byte{KeyspaceTag, 1, byte(KeyspaceCreate), 0xff}
		}
		return []byte{0xff, 0xff}
	case "bad-clock":
		inner := treeCmd(&tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: "/bad-clock", ACL: tree.OpenACL}})
		env := func(physical, minZxid uint64, inner []byte) []byte {
			b := binary.AppendUvarint([]byte{ClockTag}, physical)
			return append(binary.AppendUvarint(b, minZxid), inner...)
		}
		switch v, _ := arg(d, "kind"); v {
		case "truncated":
			return []byte{ClockTag, 0x80}
		case "physical":
			return env(MaxPhysicalMs+1, 0, inner)
		case "min":
			return env(1000, MaxZxid, inner)
		case "nested":
			return env(1000, 0, env(1000, 0, inner))
		case "empty":
			return env(1000, 0, nil)
		default:
			t.Fatalf("%s: unknown kind %q", d.Pos, v)
		}
	}
	t.Fatalf("%s: unknown command %s", d.Pos, d.Cmd)
	return nil
}

// ids reads a list argument of member ids: key=(1, 2, 3).
func (h *harness) ids(d *datadriven.TestData, key string) []uint64 {
	var ids []uint64
	for _, a := range d.CmdArgs {
		if a.Key != key {
			continue
		}
		for _, v := range a.Vals {
			if v == "" {
				continue // key=()
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				h.t.Fatalf("%s: %s: %v", d.Pos, key, err)
			}
			ids = append(ids, n)
		}
	}
	return ids
}

func fmtKeyspace(k Keyspace) string {
	return fmt.Sprintf("%s region=%s survival=%s group=%d voters=%v learners=%v\n",
		k.Prefix, k.Region, k.Survival, k.Group, k.Voters, k.Learners)
}

func showKeyspaces(f *FSM) string {
	f.RLock()
	defer f.RUnlock()
	var out strings.Builder
	for _, k := range f.Keyspaces().List() {
		out.WriteString(fmtKeyspace(k))
	}
	if out.Len() == 0 {
		return "no keyspaces\n"
	}
	return out.String()
}

// roundTrip restores a snapshot into a new FSM, checks that it snapshots
// to the same bytes at the same index, and continues with it.
func (h *harness) roundTrip() string {
	t := h.t
	b, err := h.fsm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	f := New(Hooks{}, h.opts)
	if err := f.Restore(h.fsm.Applied(), b); err != nil {
		t.Fatal(err)
	}
	b2, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, b2) {
		t.Fatalf("snapshot at %d does not round-trip", h.index)
	}
	if f.Applied() != h.fsm.Applied() || f.LastZxid() != h.fsm.LastZxid() {
		t.Fatalf("restored at %d zxid %d, want %d zxid %d", f.Applied(), f.LastZxid(), h.fsm.Applied(), h.fsm.LastZxid())
	}
	h.fsm = f
	version := ""
	if !bytes.HasPrefix(b, snapshotMagic) {
		version = fmt.Sprintf(" (%s, last zxid %s)", b[:5], fmtZxid(f.LastZxid()))
	}
	return fmt.Sprintf("restored at index %d: same %d bytes%s\n", f.Applied(), len(b), version)
}

var errNames = map[error]string{
	errs.ErrNoNode: "ErrNoNode", errs.ErrNodeExists: "ErrNodeExists", errs.ErrSessionExpired: "ErrSessionExpired",
	errs.ErrStaleToken: "ErrStaleToken", errs.ErrBadArguments: "ErrBadArguments", errs.ErrMarshalling: "ErrMarshalling",
	errs.ErrLockNotHeld: "ErrLockNotHeld", errs.ErrLockHeld: "ErrLockHeld", errs.ErrInvalidPath: "ErrInvalidPath",
	errs.ErrInvalidKeyspacePrefix: "ErrInvalidKeyspacePrefix", errs.ErrInvalidKeyspace: "ErrInvalidKeyspace",
	errs.ErrKeyspaceExists: "ErrKeyspaceExists", errs.ErrKeyspaceOverlap: "ErrKeyspaceOverlap",
	errs.ErrKeyspaceHasData: "ErrKeyspaceHasData", errs.ErrKeyspaceNotEmpty: "ErrKeyspaceNotEmpty",
	errs.ErrNoKeyspace: "ErrNoKeyspace", errs.ErrTooManyKeyspaces: "ErrTooManyKeyspaces",
	errs.ErrUnimplemented: "ErrUnimplemented", errs.ErrTooManySessions: "ErrTooManySessions",
	errs.ErrQueueEmpty: "ErrQueueEmpty", errs.ErrRuntimeInconsistency: "ErrRuntimeInconsistency",
}

func errName(err error) string {
	for e, n := range errNames {
		if errors.Is(err, e) {
			return n
		}
	}
	return err.Error()
}

var eventNames = map[tree.EventType]string{
	tree.EventNodeCreated: "NodeCreated", tree.EventNodeDeleted: "NodeDeleted",
	tree.EventNodeDataChanged: "NodeDataChanged", tree.EventNodeChildrenChanged: "NodeChildrenChanged",
}

func fmtResult(r *Result) string {
	var out strings.Builder
	fmt.Fprintf(&out, "index %d: ", r.Index)
	if r.Zxid != int64(r.Index) {
		fmt.Fprintf(&out, "zxid %s: ", fmtZxid(r.Zxid))
	}
	switch {
	case r.Skipped != nil:
		fmt.Fprintf(&out, "skipped (%v)\n", r.Skipped)
		return out.String()
	case r.KeyspaceCommand != nil:
		if err := r.KeyspaceResult.Err; err != nil {
			fmt.Fprintf(&out, "keyspace %s", errName(err))
		} else {
			fmt.Fprintf(&out, "keyspace ok %s group=%d", r.KeyspaceResult.Keyspace.Prefix, r.KeyspaceResult.Keyspace.Group)
		}
	case r.CoordCommand != nil && r.CoordCommand.Op != coord.OpFenced:
		cr := r.CoordResult
		switch {
		case cr.Err != nil:
			fmt.Fprintf(&out, "coord %s", errName(cr.Err))
		case cr.Granted && cr.Item != nil:
			fmt.Fprintf(&out, "coord delivered item=%d attempt=%d", cr.Item.ID, cr.Item.Attempt)
		case cr.Granted:
			fmt.Fprintf(&out, "coord granted token=%d", cr.Token)
		case cr.Pushed != 0:
			fmt.Fprintf(&out, "coord pushed item=%d", cr.Pushed)
		case cr.Position > 0:
			fmt.Fprintf(&out, "coord waiting position=%d", cr.Position)
		default:
			out.WriteString("coord ok")
		}
	default:
		tr := r.TreeResult
		what := "tree"
		if r.CoordCommand != nil {
			what = "fenced"
		}
		switch {
		case tr.Err != nil:
			fmt.Fprintf(&out, "%s %s", what, errName(tr.Err))
		case tr.SessionID != 0:
			fmt.Fprintf(&out, "%s ok session=%d", what, tr.SessionID)
		case tr.Op.Path != "":
			fmt.Fprintf(&out, "%s ok path=%s", what, tr.Op.Path)
		default:
			fmt.Fprintf(&out, "%s ok", what)
		}
		if len(tr.Deleted) > 0 {
			fmt.Fprintf(&out, " deleted=%s", strings.Join(tr.Deleted, ","))
		}
	}
	fmt.Fprintf(&out, " id=%d\n", r.ID)
	for _, ev := range r.Events {
		fmt.Fprintf(&out, "event %s %s", eventNames[ev.Type], ev.Path)
		if ev.Zxid != int64(r.Index) {
			fmt.Fprintf(&out, " zxid=%s", fmtZxid(ev.Zxid))
		}
		out.WriteString("\n")
	}
	for _, g := range r.Grants {
		switch g.Kind {
		case coord.GrantLock:
			fmt.Fprintf(&out, "grant %s to session %d token=%d %s\n", g.Lock, g.Session, g.Token, g.Mode)
		case coord.GrantItem:
			fmt.Fprintf(&out, "grant item %d of %s to session %d\n", g.Item.ID, g.Lock, g.Session)
		default:
			fmt.Fprintf(&out, "grant kind %d of %s to session %d\n", g.Kind, g.Lock, g.Session)
		}
	}
	for _, l := range r.Losses {
		fmt.Fprintf(&out, "lost %s by session %d token=%d (%s)\n", l.Lock, l.Session, l.Token, l.Reason)
	}
	if r.Started.ID != 0 {
		fmt.Fprintf(&out, "started session %d timeout=%d\n", r.Started.ID, r.Started.TimeoutMs)
	}
	for _, e := range r.Ended {
		how := "closed"
		if e.Expired {
			how = "expired"
		}
		fmt.Fprintf(&out, "ended session %d (%s)\n", e.ID, how)
	}
	return out.String()
}

func show(f *FSM) string {
	f.RLock()
	defer f.RUnlock()
	var out strings.Builder
	fmt.Fprintf(&out, "applied %d\n", f.Applied())
	if f.LastZxid() != int64(f.Applied()) {
		fmt.Fprintf(&out, "last zxid %s\n", fmtZxid(f.LastZxid()))
	}
	for _, s := range f.Tree().Sessions() {
		fmt.Fprintf(&out, "session %d timeout=%d ephemerals=%v\n", s.ID, s.TimeoutMs, f.Tree().Ephemerals(s.ID, "/"))
	}
	for _, k := range f.Keyspaces().List() {
		out.WriteString("keyspace " + fmtKeyspace(k))
	}
	if f.IsKeyspace() {
		tombs, floor := f.Tombstones()
		fmt.Fprintf(&out, "participants %v floor=%d\n", f.Participants(), floor)
		for _, ts := range tombs {
			fmt.Fprintf(&out, "tombstone session %d end=%d\n", ts.Session, ts.EndMs)
		}
	}
	for _, l := range f.Coord().List("", 1000) {
		fmt.Fprintf(&out, "%s:", l.Name)
		if l.DelayUntilMs > 0 {
			fmt.Fprintf(&out, " delay-until=%d", l.DelayUntilMs)
		}
		for _, hd := range l.Holders {
			fmt.Fprintf(&out, " holder(s%d,t%d)", hd.Session, hd.Token)
		}
		for _, w := range l.Waiters {
			fmt.Fprintf(&out, " waiter(s%d)", w.Session)
		}
		out.WriteString("\n")
	}
	return out.String()
}

// The snapshot envelope's bytes are the on-disk and peer format: magic
// "MRDS1", the tree snapshot's length as a uvarint, the tree snapshot, then
// coord's, to the end.
func TestSnapshotEnvelope(t *testing.T) {
	f := New(Hooks{})
	apply(t, f, treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreateSession}, TimeoutMs: 5000,
		Password: []byte("0123456789abcdef")}))
	apply(t, f, treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: "/a", Data: []byte("x"), ACL: tree.OpenACL}}))
	apply(t, f, coordEntry(t, &coord.Command{Op: coord.OpAcquire, Name: "l", Session: 1}))
	got, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var treeSnap bytes.Buffer
	if err := f.Tree().Snapshot(&treeSnap); err != nil {
		t.Fatal(err)
	}
	want := append([]byte("MRDS1"), binary.AppendUvarint(nil, uint64(treeSnap.Len()))...)
	want = append(append(want, treeSnap.Bytes()...), f.Coord().Snapshot()...)
	if !bytes.Equal(got, want) {
		t.Fatalf("snapshot envelope changed:\n got %x\nwant %x", got, want)
	}
	// An empty state, byte for byte: pins the envelope and both empty
	// snapshots together.
	empty, err := New(Hooks{}).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	const wantEmpty = "MRDS1\x80\x01MTRE\x02\x00\x03\x01/\x00\x01>\x05world\x06anyone\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
		"\x02\x00\x00\x00\n/zookeeper\x00\x01>\x05world\x06anyone\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00" +
		"\x10/zookeeper/quota\x00\x01>\x05world\x06anyone\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00BJ\x10\xf2" +
		"\x01\x00\x00\xc5%1\x04"
	if string(empty) != wantEmpty {
		t.Fatalf("empty state's snapshot changed: %q", empty)
	}
}

// A snapshot that does not parse is refused and leaves the state as it was.
func TestRestoreRefusesBadSnapshot(t *testing.T) {
	f := New(Hooks{})
	apply(t, f, treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: "/a", ACL: tree.OpenACL}}))
	before, _ := f.Snapshot()
	good := append([]byte(nil), before...)
	for name, b := range map[string][]byte{
		"empty":          nil,
		"bad magic":      append([]byte("MRDS2"), good[5:]...),
		"tree too long":  append([]byte("MRDS1\xff\x01"), good[6:]...),
		"truncated tree": good[:10],
		"no length":      []byte("MRDS1"),
		"corrupt coord":  append(good[:len(good):len(good)], 0xff, 0xff, 0xff),
		"corrupt tree":   append([]byte("MRDS1\x02xx"), good[6:]...),
	} {
		if err := f.Restore(99, b); err == nil {
			t.Errorf("%s: restored", name)
		}
		after, _ := f.Snapshot()
		if !bytes.Equal(before, after) || f.Applied() != 1 {
			t.Fatalf("%s: a refused snapshot changed the state", name)
		}
	}
}

// Hooks run inside the write lock: no reader can see the new state before
// the member has reacted to it (triggered the watches of the change).
func TestHooksRunUnderWriteLock(t *testing.T) {
	var f *FSM
	var applied []uint64
	restored := 0
	f = New(Hooks{
		Applied: func(r *Result) {
			if f.mu.TryRLock() {
				t.Error("Applied hook ran without the write lock")
				f.mu.RUnlock()
			}
			if f.Applied() != r.Index {
				t.Errorf("Applied hook at %d sees applied %d", r.Index, f.Applied())
			}
			applied = append(applied, r.Index)
		},
		Restored: func() {
			if f.mu.TryRLock() {
				t.Error("Restored hook ran without the write lock")
				f.mu.RUnlock()
			}
			restored++
		},
	})
	apply(t, f, treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: "/a", ACL: tree.OpenACL}}))
	f.Apply(2, []byte{0xff}) // skipped, but applied: the hook runs too
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(7, snap); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(applied) != "[1 2]" || restored != 1 || f.Applied() != 7 {
		t.Fatalf("applied hooks %v, restored %d, applied %d", applied, restored, f.Applied())
	}
}

func treeEntry(t *testing.T, c *tree.Command) []byte {
	b, err := tree.EncodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func coordEntry(t *testing.T, c *coord.Command) []byte {
	b, err := coord.Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func apply(t *testing.T, f *FSM, data []byte) Result {
	r := f.Apply(f.Applied()+1, data)
	if r.Skipped != nil {
		t.Fatal(r.Skipped)
	}
	return r
}

// A view written after more entries were applied gives the snapshot of
// the state when it was taken, at its index.
func TestViewIsPointInTime(t *testing.T) {
	f := New(Hooks{})
	apply(t, f, treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreateSession}, TimeoutMs: 5000,
		Password: []byte("0123456789abcdef")}))
	apply(t, f, treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: "/a", Data: []byte("x"), ACL: tree.OpenACL}}))
	apply(t, f, coordEntry(t, &coord.Command{Op: coord.OpAcquire, Name: "l", Session: 1}))
	want, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	v := f.View()
	apply(t, f, treeEntry(t, &tree.Command{Op: tree.Op{Type: tree.OpSetData, Path: "/a", Data: []byte("y"), Version: -1}}))
	apply(t, f, coordEntry(t, &coord.Command{Op: coord.OpRelease, Name: "l", Session: 1}))
	var buf bytes.Buffer
	if _, err := v.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) || v.Index() != 3 {
		t.Fatalf("view at %d changed with the state", v.Index())
	}
	g := New(Hooks{})
	if err := g.Restore(v.Index(), buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	if data, _, _ := g.Tree().Get("/a"); string(data) != "x" {
		t.Fatalf("restored /a = %q", data)
	}
}
