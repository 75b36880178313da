package server

import (
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/meridian-coord/meridian/internal/fsm"
	"github.com/meridian-coord/meridian/internal/testutil/script"
	zk "github.com/meridian-coord/meridian/internal/zkproto"
)

// TestZKScripts runs the scripts in testdata/zk: raw ZooKeeper frames over
// real sockets to a real member, and the frames it answers, printed
// readably. Each file gets its own server (one member unless its first
// directive says otherwise); every directive runs in order, so what a
// script sends without a recv in between is pipelined on the connection.
//
// Directives:
//
//	server [members=N] [peer-delay=DUR] [session-tick=MS] [election-ticks=N]
//	       [four-letter-words=(w,...)] [super=user:password]
//	    Starts the server; must come first (the default is one member).
//	connect NAME [timeout=MS] [resume=OTHER] [password=wrong] [last-zxid=LABEL]
//	        [readonly] [old-client] [member=leader|follower]
//	    Opens a connection and hands over the ConnectRequest; prints the
//	    ConnectResponse (or that the server closed the connection).
//	dial NAME [member=leader|follower]
//	    Opens a connection and sends nothing (for a malformed handshake).
//	send NAME [xid=N] op=OP [path=P] [data=D] [version=V] [flags=MODE]
//	     [acl=(scheme:id:perms,...)] [watch] [repeat=N] ...
//	    Sends requests without reading. A multi or multiRead takes its ops
//	    from the input, one per line (create/delete/setData/check, or
//	    getData/getChildren). repeat=N sends N requests with xids from xid
//	    up, "%d" in path and data replaced by 0..N-1.
//	raw NAME hex=BYTES [frame]
//	    Writes bytes as they are (frame: with a length prefix).
//	recv NAME [count=N]
//	    Reads N frames and prints each: xid, opcode, error name, zxid, body.
//	expect-closed NAME
//	    Reads until the server closes the connection; prints any frame
//	    that arrives first.
//	close NAME
//	    Closes the socket (the session lives on until it expires).
//	fourletter WORD [grep=PREFIX]
//	    Sends a four-letter word on a new connection; prints the answer, or
//	    the keys (mntr's first column) that start with PREFIX.
//	garbage count=N [seed=S]
//	    N connections each send one random request after a valid handshake.
//	outstanding member=follower at-least=N
//	    Waits (10 s at most) for the member's ZooKeeper port to have N
//	    requests outstanding at once: the writes sent were pipelined.
//
// What varies from run to run is normalised: zxids print as labels z1, z2,
// ... in order of first appearance (0 stays 0), sessions as the name of
// the connection that created them, ctime and mtime not at all. The
// harness checks what it hides: reply zxids of a connection never go
// backwards, and a node's mtime is never before its ctime.
func TestZKScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/zk", func(t *testing.T, path string) {
		h := &zkScript{conns: map[string]*scriptConn{}, labels: map[int64]string{}, sessions: map[int64]string{}}
		datadriven.RunTest(t, path, h.run)
	})
}

type zkScript struct {
	tc       *testCluster
	conns    map[string]*scriptConn
	labels   map[int64]string // zxid -> z1, z2, ...
	sessions map[int64]string // session id -> the connection that created it
}

// scriptConn is one client connection of a script.
type scriptConn struct {
	name     string
	c        net.Conn
	session  int64
	passwd   []byte
	ops      map[int32]int32 // xid -> opcode of requests sent and not yet answered
	lastZxid int64
}

// scriptArgs are a directive's arguments, or those of one line of a
// multi's input.
type scriptArgs struct{ script.Args }

// name is the directive's first key-only argument: the connection.
func (a scriptArgs) name(t *testing.T) string {
	if len(a.Args) == 0 || len(a.Args[0].Vals) != 0 {
		t.Fatal("the directive needs a connection name first")
	}
	return a.Args[0].Key
}

func (h *zkScript) run(t *testing.T, d *datadriven.TestData) string {
	a := scriptArgs{script.Args(d.CmdArgs)}
	if d.Cmd == "server" {
		if h.tc != nil {
			t.Fatalf("%s: server must be the first directive", d.Pos)
		}
		h.start(t, a)
		return ""
	}
	if h.tc == nil {
		h.start(t, scriptArgs{})
	}
	switch d.Cmd {
	case "connect":
		return h.connect(t, a)
	case "dial":
		h.dial(t, a)
		return ""
	case "send":
		return h.send(t, a, d.Input)
	case "raw":
		c := h.conn(t, a.name(t))
		b, err := hex.DecodeString(strings.ReplaceAll(a.Str("hex", ""), "_", ""))
		if err != nil {
			t.Fatalf("%s: hex: %v", d.Pos, err)
		}
		if a.Has("frame") {
			b = zk.AppendFrame(nil, b)
		}
		if _, err := c.c.Write(b); err != nil {
			return "write: " + err.Error()
		}
		return ""
	case "recv":
		c := h.conn(t, a.name(t))
		var out strings.Builder
		for range a.Int(t, "count", 1) {
			b, err := c.read(10 * time.Second)
			if err != nil {
				fmt.Fprintf(&out, "read: %s\n", readErr(err))
				break
			}
			out.WriteString(h.reply(t, c, b))
		}
		return out.String()
	case "expect-closed":
		c := h.conn(t, a.name(t))
		var out strings.Builder
		deadline := time.Now().Add(10 * time.Second)
		for {
			b, err := c.read(time.Until(deadline))
			if err != nil {
				if errors.Is(err, errStillOpen) {
					out.WriteString("still open\n")
				} else {
					out.WriteString("closed\n")
				}
				break
			}
			out.WriteString(h.reply(t, c, b))
		}
		return out.String()
	case "close":
		h.conn(t, a.name(t)).c.Close()
		return ""
	case "fourletter":
		return h.fourLetter(t, a)
	case "garbage":
		return h.garbage(t, a)
	case "outstanding":
		want := a.Int(t, "at-least", 1)
		if most := mostOutstanding(h.tc.servers[h.member(t, a)], want); most < want {
			return fmt.Sprintf("at most %d requests outstanding at once", most)
		}
		return fmt.Sprintf("at least %d requests outstanding at once", want)
	}
	t.Fatalf("%s: unknown directive %q", d.Pos, d.Cmd)
	return ""
}

// start starts the script's server.
func (h *zkScript) start(t *testing.T, a scriptArgs) {
	delay, err := time.ParseDuration(a.Str("peer-delay", "0s"))
	if err != nil {
		t.Fatal(err)
	}
	members := int(a.Int(t, "members", 1))
	h.tc = newTestCluster(t, members, func(c *Config) {
		// Session timeouts clamp to [1 s, 10 s]: a connection a script
		// leaves idle for a few seconds keeps its session.
		c.SessionTickMs = int(a.Int(t, "session-tick", 500))
		c.ElectionTicks = int(a.Int(t, "election-ticks", int64(c.ElectionTicks)))
		c.FourLetterWords = a.Vals("four-letter-words")
		if v, ok := a.Get("super"); ok {
			sum := sha1.Sum([]byte(v))
			user, _, _ := strings.Cut(v, ":")
			c.SuperDigest = user + ":" + base64.StdEncoding.EncodeToString(sum[:])
		}
		if members > 1 {
			proxyPeers(t, c, delay)
		}
	})
	h.tc.leader()
	// The leader records the cluster version in the first duty ticks after
	// it is elected: a write of its own, with a zxid, that would otherwise
	// land between a script's writes whenever the machine is slow.
	waitRecorded(t, h.tc, fsm.ApplyVersion)
}

// member is the index of the member named by member=leader|follower|N.
func (h *zkScript) member(t *testing.T, a scriptArgs) int {
	lead := h.tc.leader()
	switch m := a.Str("member", "leader"); m {
	case "leader":
		return lead
	case "follower":
		return (lead + 1) % len(h.tc.servers)
	default:
		n, err := strconv.Atoi(m)
		if err != nil || n < 1 || n > len(h.tc.servers) {
			t.Fatalf("member=%s", m)
		}
		return n - 1
	}
}

func (h *zkScript) conn(t *testing.T, name string) *scriptConn {
	c, ok := h.conns[name]
	if !ok {
		t.Fatalf("no connection %q", name)
	}
	return c
}

var errStillOpen = errors.New("still open")

// read reads one frame within d; errStillOpen when none came.
func (c *scriptConn) read(d time.Duration) ([]byte, error) {
	c.c.SetReadDeadline(time.Now().Add(d))
	b, err := zk.ReadFrame(c.c, 4<<20)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil, errStillOpen
	}
	return b, err
}

func readErr(err error) string {
	if errors.Is(err, errStillOpen) {
		return "nothing within 10s"
	}
	return "connection closed"
}

// zxid names a zxid by its label.
func (h *zkScript) zxid(z int64) string {
	if z == 0 {
		return "0"
	}
	if z == -1 {
		return "-1"
	}
	l, ok := h.labels[z]
	if !ok {
		l = fmt.Sprintf("z%d", len(h.labels)+1)
		h.labels[z] = l
	}
	return l
}

// zxidArg reads a zxid given by label (z3) or number.
func (h *zkScript) zxidArg(t *testing.T, a scriptArgs, key string) int64 {
	v, ok := a.Get(key)
	if !ok {
		return 0
	}
	for z, l := range h.labels {
		if l == v {
			return z
		}
	}
	return a.Int(t, key, 0)
}

func (h *zkScript) owner(id int64) string {
	if id == 0 {
		return "0"
	}
	if n, ok := h.sessions[id]; ok {
		return n
	}
	return "other"
}

func (h *zkScript) stat(t *testing.T, s zk.Stat) string {
	if s.Czxid != 0 && (s.Ctime <= 0 || s.Mtime < s.Ctime) {
		t.Errorf("stat with ctime %d and mtime %d", s.Ctime, s.Mtime)
	}
	return fmt.Sprintf("czxid=%s mzxid=%s pzxid=%s version=%d cversion=%d aversion=%d owner=%s len=%d children=%d",
		h.zxid(s.Czxid), h.zxid(s.Mzxid), h.zxid(s.Pzxid), s.Version, s.Cversion, s.Aversion, h.owner(s.EphemeralOwner), s.DataLength, s.NumChildren)
}

func fmtData(b []byte) string {
	if b == nil {
		return "null"
	}
	return strconv.Quote(string(b))
}

func fmtChildren(kids []string) string {
	// ZooKeeper promises no order.
	kids = slices.Clone(kids)
	slices.Sort(kids)
	return "[" + strings.Join(kids, " ") + "]"
}

func scriptPerms(p int32) string {
	var b strings.Builder
	for i, c := range "rwcda" {
		if p&(1<<i) != 0 {
			b.WriteRune(c)
		}
	}
	if p&^zk.PermAll != 0 || b.Len() == 0 {
		return strconv.Itoa(int(p))
	}
	return b.String()
}

func scriptACL(acl []zk.ACL) string {
	parts := make([]string, len(acl))
	for i, a := range acl {
		parts[i] = a.ID.Scheme + ":" + a.ID.ID + ":" + scriptPerms(a.Perms)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// dial opens a connection named by a's first argument.
func (h *zkScript) dial(t *testing.T, a scriptArgs) *scriptConn {
	name := a.name(t)
	if old, ok := h.conns[name]; ok {
		old.c.Close()
	}
	nc, err := net.Dial("tcp", h.tc.zkAddrs()[h.member(t, a)])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &scriptConn{name: name, c: nc, ops: map[int32]int32{}}
	h.conns[name] = c
	return c
}

// connect opens a connection and runs the handshake.
func (h *zkScript) connect(t *testing.T, a scriptArgs) string {
	name := a.name(t)
	var of *scriptConn // the connection whose session this one resumes
	if v, ok := a.Get("resume"); ok {
		of = h.conn(t, v)
	}
	c := h.dial(t, a)
	nc := c.c
	req := &zk.ConnectRequest{TimeOut: int32(a.Int(t, "timeout", 4000)), Passwd: make([]byte, 16),
		ReadOnly: a.Has("readonly"), HasReadOnly: !a.Has("old-client"), LastZxidSeen: h.zxidArg(t, a, "last-zxid")}
	if of != nil {
		req.SessionID, req.Passwd = of.session, slices.Clone(of.passwd)
		c.lastZxid = of.lastZxid
		if a.Str("password", "") == "wrong" {
			req.Passwd[0] ^= 0xff
		}
	}
	frame, err := zk.AppendRecordFrame(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(frame); err != nil {
		return "write: " + err.Error()
	}
	b, err := c.read(10 * time.Second)
	if err != nil {
		return "no ConnectResponse: " + readErr(err)
	}
	var resp zk.ConnectResponse
	d := zk.NewDecoder(b)
	if err := resp.Decode(d); err != nil {
		t.Fatalf("ConnectResponse %x: %v", b, err)
	}
	var out strings.Builder
	switch {
	case resp.SessionID == 0:
		fmt.Fprintf(&out, "session expired: timeout=%d session=0", resp.TimeOut)
	case req.SessionID == 0:
		h.sessions[resp.SessionID] = name
		fmt.Fprintf(&out, "session=new timeout=%d", resp.TimeOut)
	case resp.SessionID == req.SessionID:
		fmt.Fprintf(&out, "session=resumed(%s) timeout=%d", h.owner(resp.SessionID), resp.TimeOut)
	default:
		fmt.Fprintf(&out, "session=another (asked to resume %s) timeout=%d", h.owner(req.SessionID), resp.TimeOut)
	}
	c.session, c.passwd = resp.SessionID, resp.Passwd
	if resp.SessionID != 0 && req.SessionID != 0 && !slices.Equal(resp.Passwd, req.Passwd) {
		out.WriteString(" password changed")
	}
	if len(resp.Passwd) != 16 {
		fmt.Fprintf(&out, " password of %d bytes", len(resp.Passwd))
	}
	if resp.ProtocolVersion != 0 {
		fmt.Fprintf(&out, " protocol=%d", resp.ProtocolVersion)
	}
	if resp.ReadOnly {
		out.WriteString(" readonly")
	}
	if !resp.HasReadOnly {
		out.WriteString(" (no readOnly byte)")
	}
	return out.String()
}

var scriptModes = map[string]zk.CreateMode{
	"persistent": zk.ModePersistent, "ephemeral": zk.ModeEphemeral,
	"sequential": zk.ModePersistentSequential, "ephemeral_sequential": zk.ModeEphemeralSequential,
	"container": zk.ModeContainer, "ttl": zk.ModePersistentWithTTL, "ttl_sequential": zk.ModePersistentSequentialWithTTL,
}

var scriptOps = func() map[string]int32 {
	m := map[string]int32{}
	for op := int32(-11); op <= 107; op++ {
		if n := zk.OpName(op); !strings.HasPrefix(n, "op(") {
			m[n] = op
		}
	}
	return m
}()

// acl parses acl=(scheme:id:perms, ...) as zkCli writes ACLs (the id is
// what lies between the first and the last colon); the scheme digestpw
// takes user:password and becomes the digest ACL of that password. The
// default is world:anyone:rwcda.
func (a scriptArgs) acl(t *testing.T) []zk.ACL {
	if !a.Has("acl") {
		return []zk.ACL{{Perms: zk.PermAll, ID: zk.Id{Scheme: "world", ID: "anyone"}}}
	}
	out := []zk.ACL{}
	for _, v := range a.Vals("acl") {
		if v == "" {
			continue
		}
		scheme, user, perms := script.ACL(t, v)
		id := zk.Id{Scheme: scheme, ID: user}
		if id.Scheme == "digestpw" {
			sum := sha1.Sum([]byte(id.ID))
			user, _, _ := strings.Cut(id.ID, ":")
			id = zk.Id{Scheme: "digest", ID: user + ":" + base64.StdEncoding.EncodeToString(sum[:])}
		}
		out = append(out, zk.ACL{Perms: perms, ID: id})
	}
	return out
}

func (a scriptArgs) data() []byte {
	if v, ok := a.Get("data"); ok {
		return []byte(v)
	}
	return nil
}

func (a scriptArgs) flags(t *testing.T) int32 {
	m, ok := a.Get("flags")
	if !ok {
		return 0
	}
	if mode, ok := scriptModes[m]; ok {
		return int32(mode)
	}
	return int32(a.Int(t, "flags", 0))
}

// record builds the request record of opcode op from a.
func (h *zkScript) record(t *testing.T, op int32, a scriptArgs) zk.Record {
	path, version, w := a.Str("path", ""), int32(a.Int(t, "version", -1)), a.Has("watch")
	switch op {
	case zk.OpCreate, zk.OpCreate2, zk.OpCreateContainer:
		return &zk.CreateRequest{Path: path, Data: a.data(), ACL: a.acl(t), Flags: a.flags(t)}
	case zk.OpCreateTTL:
		return &zk.CreateTTLRequest{Path: path, Data: a.data(), ACL: a.acl(t), Flags: a.flags(t), TTL: a.Int(t, "ttl", 0)}
	case zk.OpDelete:
		return &zk.DeleteRequest{Path: path, Version: version}
	case zk.OpDeleteContainer:
		return &zk.DeleteContainerRequest{Path: path}
	case zk.OpExists:
		return &zk.ExistsRequest{Path: path, Watch: w}
	case zk.OpGetData:
		return &zk.GetDataRequest{Path: path, Watch: w}
	case zk.OpSetData:
		return &zk.SetDataRequest{Path: path, Data: a.data(), Version: version}
	case zk.OpGetACL:
		return &zk.GetACLRequest{Path: path}
	case zk.OpSetACL:
		return &zk.SetACLRequest{Path: path, ACL: a.acl(t), Version: version}
	case zk.OpGetChildren:
		return &zk.GetChildrenRequest{Path: path, Watch: w}
	case zk.OpGetChildren2:
		return &zk.GetChildren2Request{Path: path, Watch: w}
	case zk.OpSync:
		return &zk.SyncRequest{Path: path}
	case zk.OpCheck:
		return &zk.CheckVersionRequest{Path: path, Version: version}
	case zk.OpAuth:
		return &zk.AuthPacket{Scheme: a.Str("scheme", "digest"), Auth: a.data()}
	case zk.OpSetWatches:
		return &zk.SetWatches{RelativeZxid: h.zxidArg(t, a, "rel"), DataWatches: a.Vals("data-watches"),
			ExistWatches: a.Vals("exist-watches"), ChildWatches: a.Vals("child-watches")}
	case zk.OpSetWatches2:
		return &zk.SetWatches2{RelativeZxid: h.zxidArg(t, a, "rel"), DataWatches: a.Vals("data-watches"),
			ExistWatches: a.Vals("exist-watches"), ChildWatches: a.Vals("child-watches"),
			PersistentWatches: a.Vals("persistent-watches"), PersistentRecursiveWatches: a.Vals("recursive-watches")}
	case zk.OpAddWatch:
		mode := zk.AddWatchModePersistent
		if a.Str("mode", "persistent") == "recursive" {
			mode = zk.AddWatchModePersistentRecursive
		}
		return &zk.AddWatchRequest{Path: path, Mode: mode}
	case zk.OpRemoveWatches:
		return &zk.RemoveWatchesRequest{Path: path, Type: int32(a.Int(t, "type", int64(zk.WatcherTypeAny)))}
	case zk.OpCheckWatches:
		return &zk.CheckWatchesRequest{Path: path, Type: int32(a.Int(t, "type", int64(zk.WatcherTypeAny)))}
	case zk.OpGetEphemerals:
		return &zk.GetEphemeralsRequest{PrefixPath: a.Str("prefix", "/")}
	case zk.OpGetAllChildrenNumber:
		return &zk.GetAllChildrenNumberRequest{Path: path}
	case zk.OpSASL:
		return &zk.SetSASLRequest{Token: a.data()}
	}
	return nil // ping, closeSession, whoAmI, and opcodes that carry no body here
}

// send encodes and writes requests without reading replies.
func (h *zkScript) send(t *testing.T, a scriptArgs, input string) string {
	c := h.conn(t, a.name(t))
	opName := a.Str("op", "")
	op, ok := scriptOps[opName]
	if !ok {
		n, err := strconv.Atoi(opName)
		if err != nil {
			t.Fatalf("unknown op %q", opName)
		}
		op = int32(n)
	}
	xid := int32(a.Int(t, "xid", 0))
	switch op {
	case zk.OpPing:
		xid = int32(a.Int(t, "xid", int64(zk.XidPing)))
	case zk.OpSetWatches, zk.OpSetWatches2:
		xid = int32(a.Int(t, "xid", int64(zk.XidSetWatches)))
	default:
		if !a.Has("xid") {
			t.Fatal("send needs xid=")
		}
	}
	var buf []byte
	n := int(a.Int(t, "repeat", 1))
	for i := range n {
		ra := a
		if n > 1 {
			ra = scriptArgs{slices.Clone(a.Args)}
			for j, arg := range ra.Args {
				if arg.Key == "path" || arg.Key == "data" {
					vals := slices.Clone(arg.Vals)
					for k := range vals {
						vals[k] = strings.ReplaceAll(vals[k], "%d", strconv.Itoa(i))
					}
					ra.Args[j].Vals = vals
				}
			}
		}
		var body zk.Record
		if op == zk.OpMulti || op == zk.OpMultiRead {
			body = h.multi(t, input)
		} else {
			body = h.record(t, op, ra)
		}
		pkt, err := zk.EncodeRequest(zk.RequestHeader{Xid: xid + int32(i), Type: op}, body)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		buf = zk.AppendFrame(buf, pkt)
		c.ops[xid+int32(i)] = op
	}
	if _, err := c.c.Write(buf); err != nil {
		return "write: " + err.Error()
	}
	return ""
}

// multi parses a multi's ops, one per input line.
func (h *zkScript) multi(t *testing.T, input string) *zk.MultiRequest {
	m := &zk.MultiRequest{}
	for _, line := range strings.Split(input, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		name, opArgs, err := datadriven.ParseLine(line)
		if err != nil {
			t.Fatal(err)
		}
		op, ok := scriptOps[name]
		if !ok {
			t.Fatalf("unknown multi op %q", name)
		}
		m.Ops = append(m.Ops, zk.MultiOp{Type: op, Op: h.record(t, op, scriptArgs{script.Args(opArgs)})})
	}
	return m
}

// reply prints one frame the server sent on c.
func (h *zkScript) reply(t *testing.T, c *scriptConn, b []byte) string {
	d := zk.NewDecoder(b)
	var hdr zk.ReplyHeader
	if err := hdr.Decode(d); err != nil {
		return fmt.Sprintf("short frame %x\n", b)
	}
	if hdr.Zxid > 0 {
		if hdr.Zxid < c.lastZxid {
			t.Errorf("%s: xid %d answered with zxid %d, below the %d of an earlier frame", c.name, hdr.Xid, hdr.Zxid, c.lastZxid)
		}
		c.lastZxid = hdr.Zxid
	}
	var out strings.Builder
	op, known := c.ops[hdr.Xid]
	switch {
	case hdr.Xid == zk.XidNotification:
		var ev zk.WatcherEvent
		if err := ev.Decode(d); err != nil {
			return fmt.Sprintf("notification: %v %x\n", err, b)
		}
		fmt.Fprintf(&out, "notification %s %s %s zxid=%s", eventName(ev.Type), stateName(ev.State), ev.Path, h.zxid(hdr.Zxid))
		op, known = zk.OpNotification, true
	case !known:
		fmt.Fprintf(&out, "xid=%d (not asked) %s zxid=%s", hdr.Xid, zk.CodeName(hdr.Err), h.zxid(hdr.Zxid))
	default:
		delete(c.ops, hdr.Xid)
		fmt.Fprintf(&out, "xid=%d %s %s zxid=%s", hdr.Xid, zk.OpName(op), zk.CodeName(hdr.Err), h.zxid(hdr.Zxid))
	}
	if known && op != zk.OpNotification && hdr.Err == 0 {
		out.WriteString(h.body(t, op, d))
	}
	if d.Err() != nil {
		fmt.Fprintf(&out, " (body: %v)", d.Err())
	} else if n := d.Remaining(); n > 0 {
		fmt.Fprintf(&out, " (%d more bytes: %x)", n, b[d.Offset():])
	}
	out.WriteString("\n")
	return out.String()
}

// body decodes and prints the body of a successful reply to op.
func (h *zkScript) body(t *testing.T, op int32, d *zk.Decoder) string {
	switch op {
	case zk.OpCreate:
		var r zk.CreateResponse
		r.Decode(d)
		return " path=" + r.Path
	case zk.OpCreate2, zk.OpCreateTTL, zk.OpCreateContainer:
		var r zk.Create2Response
		r.Decode(d)
		return " path=" + r.Path + "\n  stat: " + h.stat(t, r.Stat)
	case zk.OpExists, zk.OpSetData, zk.OpSetACL, zk.OpCheck:
		var s zk.Stat
		s.Decode(d)
		return "\n  stat: " + h.stat(t, s)
	case zk.OpGetData:
		var r zk.GetDataResponse
		r.Decode(d)
		return " data=" + fmtData(r.Data) + "\n  stat: " + h.stat(t, r.Stat)
	case zk.OpGetACL:
		var r zk.GetACLResponse
		r.Decode(d)
		return " acl=" + scriptACL(r.ACL) + "\n  stat: " + h.stat(t, r.Stat)
	case zk.OpGetChildren:
		var r zk.GetChildrenResponse
		r.Decode(d)
		return " children=" + fmtChildren(r.Children)
	case zk.OpGetChildren2:
		var r zk.GetChildren2Response
		r.Decode(d)
		return " children=" + fmtChildren(r.Children) + "\n  stat: " + h.stat(t, r.Stat)
	case zk.OpSync:
		var r zk.SyncResponse
		r.Decode(d)
		return " path=" + r.Path
	case zk.OpMulti, zk.OpMultiRead:
		var r zk.MultiResponse
		r.Decode(d)
		var out strings.Builder
		for i, res := range r.Results {
			fmt.Fprintf(&out, "\n  op %d: %s", i, zk.OpName(res.Type))
			switch res.Type {
			case zk.OpError:
				out.WriteString(" " + zk.CodeName(res.Err))
			case zk.OpCreate:
				out.WriteString(" path=" + res.Path)
			case zk.OpCreate2:
				out.WriteString(" path=" + res.Path + "\n    stat: " + h.stat(t, res.Stat))
			case zk.OpSetData:
				out.WriteString("\n    stat: " + h.stat(t, res.Stat))
			case zk.OpGetData:
				out.WriteString(" data=" + fmtData(res.Data) + "\n    stat: " + h.stat(t, res.Stat))
			case zk.OpGetChildren:
				out.WriteString(" children=" + fmtChildren(res.Children))
			}
		}
		return out.String()
	case zk.OpAddWatch:
		var r zk.ErrorResponse
		r.Decode(d)
		return fmt.Sprintf(" err=%s", zk.CodeName(r.Err))
	case zk.OpWhoAmI:
		var r zk.WhoAmIResponse
		r.Decode(d)
		var ids []string
		for _, ci := range r.ClientInfo {
			ids = append(ids, ci.AuthScheme+":"+ci.User)
		}
		return " identities=(" + strings.Join(ids, ", ") + ")"
	case zk.OpGetEphemerals:
		var r zk.GetEphemeralsResponse
		r.Decode(d)
		return " ephemerals=" + fmtChildren(r.Ephemerals)
	case zk.OpGetAllChildrenNumber:
		var r zk.GetAllChildrenNumberResponse
		r.Decode(d)
		return fmt.Sprintf(" total=%d", r.TotalNumber)
	case zk.OpSASL:
		var r zk.SetSASLResponse
		r.Decode(d)
		return fmt.Sprintf(" token=%d bytes", len(r.Token))
	}
	return "" // no body: delete, ping, auth, setWatches, closeSession, ...
}

var scriptEvents = map[int32]string{
	zk.EventNone: "None", zk.EventNodeCreated: "NodeCreated", zk.EventNodeDeleted: "NodeDeleted",
	zk.EventNodeDataChanged: "NodeDataChanged", zk.EventNodeChildrenChanged: "NodeChildrenChanged",
	zk.EventDataWatchRemoved: "DataWatchRemoved", zk.EventChildWatchRemoved: "ChildWatchRemoved",
	zk.EventPersistentWatchRemoved: "PersistentWatchRemoved",
}

func eventName(t int32) string {
	if n, ok := scriptEvents[t]; ok {
		return n
	}
	return fmt.Sprintf("event(%d)", t)
}

var scriptStates = map[int32]string{
	zk.StateDisconnected: "Disconnected", zk.StateSyncConnected: "SyncConnected", zk.StateAuthFailed: "AuthFailed",
	zk.StateConnectedReadOnly: "ConnectedReadOnly", zk.StateSaslAuthenticated: "SaslAuthenticated",
	zk.StateExpired: "Expired", zk.StateClosed: "Closed",
}

func stateName(s int32) string {
	if n, ok := scriptStates[s]; ok {
		return n
	}
	return fmt.Sprintf("state(%d)", s)
}

// fourLetter sends a four-letter word instead of a ConnectRequest.
func (h *zkScript) fourLetter(t *testing.T, a scriptArgs) string {
	word := a.name(t)
	c, err := net.Dial("tcp", h.tc.zkAddrs()[h.member(t, a)])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte(word))
	b, err := io.ReadAll(c)
	if err != nil {
		return "read: " + err.Error()
	}
	grep, ok := a.Get("grep")
	if !ok {
		return string(b)
	}
	var out strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		if key, _, _ := strings.Cut(line, "\t"); strings.HasPrefix(key, grep) {
			out.WriteString(key + "\n") // values vary
		}
	}
	return out.String()
}

// garbage throws random request bodies at the listener after valid
// handshakes; connections may close, the server must live.
func (h *zkScript) garbage(t *testing.T, a scriptArgs) string {
	addr := h.tc.zkAddrs()[h.member(t, a)]
	seed := uint64(a.Int(t, "seed", 1))
	rng := rand.New(rand.NewPCG(seed, seed+1))
	ops := []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 17, 18, 19, 20, 21, 22, 100, 101, 103, 104, 105, 106, 107, 999}
	n := int(a.Int(t, "count", 300))
	for i := range n {
		c, _ := rawSession(t, addr, 0, nil, 0)
		body := zk.NewEncoder(nil)
		body.Int(int32(i))
		body.Int(ops[rng.IntN(len(ops))])
		junk := make([]byte, rng.IntN(64))
		for j := range junk {
			junk[j] = byte(rng.IntN(256))
		}
		c.Write(zk.AppendFrame(nil, append(body.Bytes(), junk...)))
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		c.Read(make([]byte, 64))
		c.Close()
	}
	return fmt.Sprintf("%d connections sent a random request", n)
}
