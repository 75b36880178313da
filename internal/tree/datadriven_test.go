package tree

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/testutil/script"
)

// TestDataDriven runs the scripts in testdata/. Each file starts from New();
// every write is applied at the next log index (printed as zxid=N). After
// every write the harness checks the tree's invariants and that a
// snapshot/restore round trip preserves the digest.
//
// Writes: create, set, delete, setacl, check, multi (one op per input line),
// create-session, close-session, expire, reap, noop, raw (unknown op type).
// Common write args: auth=(scheme:id, ...) session=N time=N (time is sticky),
// direct (bypass the codec).
// Reads: get, ls, stat, getacl, checkacl, count, ephemerals, sessions,
// needs-reap, dump.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{tree: New(), now: 1000}
		datadriven.RunTest(t, path, h.run)
	})
}

type harness struct {
	tree  *Tree
	index uint64
	now   int64
}

var errNames = map[error]string{}

func init() {
	for name, e := range map[string]error{
		"ErrNoNode": errs.ErrNoNode, "ErrNodeExists": errs.ErrNodeExists, "ErrBadVersion": errs.ErrBadVersion,
		"ErrNotEmpty": errs.ErrNotEmpty, "ErrNoChildrenForEphemerals": errs.ErrNoChildrenForEphemerals,
		"ErrBadArguments": errs.ErrBadArguments, "ErrInvalidPath": errs.ErrInvalidPath,
		"ErrDataTooLarge": errs.ErrDataTooLarge, "ErrInvalidACL": errs.ErrInvalidACL, "ErrNoAuth": errs.ErrNoAuth,
		"ErrRuntimeInconsistency": errs.ErrRuntimeInconsistency, "ErrUnimplemented": errs.ErrUnimplemented,
		"ErrSessionExpired": errs.ErrSessionExpired,
	} {
		errNames[e] = name
	}
}

func errName(err error) string {
	if err == nil {
		return "ok"
	}
	if n, ok := errNames[err]; ok {
		return n
	}
	return "unexpected error: " + err.Error()
}

var eventNames = map[EventType]string{
	EventNodeCreated: "NodeCreated", EventNodeDeleted: "NodeDeleted",
	EventNodeDataChanged: "NodeDataChanged", EventNodeChildrenChanged: "NodeChildrenChanged",
}

func fmtStat(s Stat) string {
	return fmt.Sprintf("czxid=%d mzxid=%d pzxid=%d ctime=%d mtime=%d version=%d cversion=%d aversion=%d owner=%d len=%d children=%d",
		s.Czxid, s.Mzxid, s.Pzxid, s.Ctime, s.Mtime, s.Version, s.Cversion, s.Aversion, s.EphemeralOwner, s.DataLength, s.NumChildren)
}

func fmtPerms(p int32) string {
	var b strings.Builder
	for i, c := range "rwcda" {
		if p&(1<<i) != 0 {
			b.WriteRune(c)
		}
	}
	if p&^PermAll != 0 || b.Len() == 0 {
		return strconv.Itoa(int(p))
	}
	return b.String()
}

func fmtACL(acl []ACL) string {
	parts := make([]string, len(acl))
	for i, a := range acl {
		parts[i] = a.ID.Scheme + ":" + a.ID.ID + ":" + fmtPerms(a.Perms)
	}
	return strings.Join(parts, ", ")
}

// args is a parsed directive's arguments, for both directive lines and the
// op lines inside a multi.
type args struct{ script.Args }

// path returns path=..., or else the first key-only argument ("get /a").
func (a args) path() string {
	if v, ok := a.Get("path"); ok {
		return v
	}
	if len(a.Args) > 0 && len(a.Args[0].Vals) == 0 {
		return a.Args[0].Key
	}
	return ""
}

// acl parses acl=(scheme:id:perms, ...) as zkCli writes ACLs; the id is
// everything between the first and the last colon.
func (a args) acl(t *testing.T) []ACL {
	if _, ok := a.Get("acl"); !ok {
		return OpenACL
	}
	out := []ACL{} // acl=() is an empty ACL
	for _, v := range a.Vals("acl") {
		if v == "" {
			continue
		}
		scheme, id, perms := script.ACL(t, v)
		out = append(out, ACL{Perms: perms, ID: ID{Scheme: scheme, ID: id}})
	}
	return out
}

// auth parses auth=(scheme:id, ...).
func (a args) auth() []ID {
	var out []ID
	for _, v := range a.Vals("auth") {
		scheme, id, _ := strings.Cut(v, ":")
		out = append(out, ID{Scheme: scheme, ID: id})
	}
	return out
}

var modes = map[string]CreateMode{
	"persistent": ModePersistent, "ephemeral": ModeEphemeral,
	"persistent_sequential": ModePersistentSequential, "ephemeral_sequential": ModeEphemeralSequential,
	"container": ModeContainer, "ttl": ModePersistentTTL, "ttl_sequential": ModePersistentSeqTTL,
}

var opTypes = map[string]OpType{
	"create": OpCreate, "delete": OpDelete, "set": OpSetData, "setacl": OpSetACL, "check": OpCheck, "multi": OpMulti,
}

var opNames = map[OpType]string{}

func init() {
	for k, v := range opTypes {
		opNames[v] = k
	}
}

// op builds a tree op from a directive.
func (a args) op(t *testing.T, cmd string) Op {
	op := Op{Type: opTypes[cmd], Path: a.path(), Version: int32(a.Int(t, "version", -1))}
	if n := a.Int(t, "size", -1); n >= 0 {
		op.Data = bytes.Repeat([]byte("x"), int(n))
	} else if v, ok := a.Get("data"); ok {
		op.Data = []byte(v)
	}
	if cmd == "create" || cmd == "setacl" {
		op.ACL = a.acl(t)
	}
	if m, ok := a.Get("mode"); ok {
		mode, known := modes[m]
		if !known {
			n, err := strconv.Atoi(m)
			if err != nil {
				t.Fatalf("bad mode %q", m)
			}
			mode = CreateMode(n)
		}
		op.Mode = mode
	}
	op.TTLMs = a.Int(t, "ttl", 0)
	return op
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	a := args{script.Args(d.CmdArgs)}
	if _, ok := a.Get("time"); ok {
		h.now = a.Int(t, "time", 0)
	}
	cmd := &Command{TimeMs: h.now, Session: a.Int(t, "session", 0), Auth: a.auth()}
	switch d.Cmd {
	case "create", "set", "delete", "setacl", "check":
		cmd.Op = a.op(t, d.Cmd)
	case "multi":
		cmd.Op.Type = OpMulti
		for _, line := range strings.Split(d.Input, "\n") {
			if strings.TrimSpace(line) == "" {
				continue
			}
			name, opArgs, err := datadriven.ParseLine(line)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := opTypes[name]; !ok {
				if name != "raw" {
					t.Fatalf("unknown op %q", name)
				}
			}
			op := args{script.Args(opArgs)}.op(t, name)
			if name == "raw" {
				op.Type = OpType(args{script.Args(opArgs)}.Int(t, "type", 0))
			}
			cmd.Ops = append(cmd.Ops, op)
		}
	case "create-session":
		cmd.Op.Type = OpCreateSession
		cmd.TimeoutMs = int32(a.Int(t, "timeout", 30000))
		cmd.Password = bytes.Repeat([]byte{7}, int(a.Int(t, "pwlen", 16)))
	case "close-session":
		cmd.Op.Type = OpCloseSession
		cmd.Session = a.Int(t, "id", 0)
	case "expire":
		cmd.Op.Type = OpExpire
		for _, v := range a.Vals("ids") {
			id, _ := strconv.ParseInt(v, 10, 64)
			cmd.Sessions = append(cmd.Sessions, id)
		}
	case "reap":
		cmd.Op.Type = OpReap
	case "noop":
		cmd.Op.Type = OpNoop
	case "raw":
		cmd.Op.Type = OpType(a.Int(t, "type", 0))
	default:
		return h.read(t, d.Cmd, a)
	}
	_, direct := a.Get("direct")
	return h.apply(t, cmd, direct)
}

// apply runs cmd through the codec, as the server does, unless direct is
// set: then Apply sees it as is (to test Apply's own validation of what
// the codec would refuse).
func (h *harness) apply(t *testing.T, cmd *Command, direct bool) string {
	dec := cmd
	if !direct {
		b, err := EncodeCommand(cmd)
		if err != nil {
			return "encode: " + errName(err)
		}
		if dec, err = DecodeCommand(b); err != nil {
			t.Fatalf("decode: %v", err)
		}
	}
	h.index++
	res, events := h.tree.Apply(int64(h.index), dec)
	checkInvariants(t, h.tree)
	checkRoundTrip(t, h.tree)

	var out strings.Builder
	fmt.Fprintf(&out, "zxid=%d %s\n", h.index, errName(res.Err))
	if res.Op.Err != res.Err && cmd.Op.Type != OpMulti {
		fmt.Fprintf(&out, "op error mismatch: %v\n", res.Op.Err)
	}
	printOp := func(prefix string, r OpResult) {
		if r.Path != "" {
			fmt.Fprintf(&out, "%spath=%s\n", prefix, r.Path)
		}
		if r.Stat != (Stat{}) {
			fmt.Fprintf(&out, "%sstat: %s\n", prefix, fmtStat(r.Stat))
		}
	}
	printOp("", res.Op)
	for i, r := range res.Multi {
		name, ok := opNames[r.Type]
		if !ok {
			name = fmt.Sprintf("type=%d", r.Type)
		}
		fmt.Fprintf(&out, "op %d %s: %s\n", i, name, errName(r.Err))
		printOp("  ", r)
	}
	if res.SessionID != 0 {
		fmt.Fprintf(&out, "session=%d\n", res.SessionID)
	}
	if len(res.Deleted) > 0 {
		fmt.Fprintf(&out, "deleted: %s\n", strings.Join(res.Deleted, " "))
	}
	for _, ev := range events {
		if ev.Zxid != int64(h.index) {
			t.Errorf("event %v has zxid %d, want %d", ev, ev.Zxid, h.index)
		}
		fmt.Fprintf(&out, "event %s %s\n", eventNames[ev.Type], ev.Path)
	}
	return out.String()
}

func (h *harness) read(t *testing.T, cmd string, a args) string {
	tr := h.tree
	p := a.path()
	switch cmd {
	case "get":
		data, st, err := tr.Get(p)
		if err != nil {
			return errName(err)
		}
		return fmt.Sprintf("data=%q\nstat: %s", data, fmtStat(st))
	case "stat":
		st, err := tr.Exists(p)
		if err != nil {
			return errName(err)
		}
		return fmtStat(st)
	case "ls":
		names, st, err := tr.Children(p)
		if err != nil {
			return errName(err)
		}
		return fmt.Sprintf("[%s] cversion=%d pzxid=%d children=%d", strings.Join(names, " "), st.Cversion, st.Pzxid, st.NumChildren)
	case "getacl":
		acl, st, err := tr.GetACL(p)
		if err != nil {
			return errName(err)
		}
		return fmt.Sprintf("%s aversion=%d", fmtACL(acl), st.Aversion)
	case "checkacl":
		return errName(tr.CheckACL(p, script.Perms(t, a.Str("perm", "r")), a.auth()))
	case "count":
		n, err := tr.AllChildrenNumber(p)
		if err != nil {
			return errName(err)
		}
		return strconv.Itoa(n)
	case "ephemerals":
		return fmt.Sprintf("%v", tr.Ephemerals(a.Int(t, "session", 0), a.Str("prefix", "")))
	case "sessions":
		var out strings.Builder
		for _, s := range tr.Sessions() {
			fmt.Fprintf(&out, "session %d timeout=%d ephemerals=%v\n", s.ID, s.TimeoutMs, tr.Ephemerals(s.ID, ""))
		}
		fmt.Fprintf(&out, "nodes=%d ephemerals=%d", tr.NodeCount(), tr.EphemeralCount())
		return out.String()
	case "needs-reap":
		return strconv.FormatBool(tr.NeedsReap(a.Int(t, "time", h.now)))
	case "validate":
		return errName(ValidatePath(p, a.Str("seq", "false") == "true"))
	case "dump":
		var out strings.Builder
		for _, path := range tr.sortedPaths() {
			n := tr.nodes.get(path)
			fmt.Fprintf(&out, "%s data=%q %s\n", path, n.data(), fmtStat(n.Stat()))
		}
		return out.String()
	}
	t.Fatalf("unknown command %q", cmd)
	return ""
}
