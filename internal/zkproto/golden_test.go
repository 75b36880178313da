package zkproto

import (
	"bytes"
	"encoding/hex"
	"reflect"
	"strings"
	"testing"
)

// hx builds bytes from hex fragments; spaces are ignored so each fragment
// can mirror one jute field.
func hx(t testing.TB, parts ...string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(strings.Join(parts, ""), " ", ""))
	if err != nil {
		t.Fatalf("bad hex: %v", err)
	}
	return b
}

func encode(rec Record) []byte {
	e := NewEncoder(nil)
	rec.Encode(e)
	return e.Bytes()
}

// checkGolden asserts rec encodes to want and that want decodes back to rec
// with nothing left over.
func checkGolden(t *testing.T, rec Record, want []byte) {
	t.Helper()
	if got := encode(rec); !bytes.Equal(got, want) {
		t.Fatalf("%T encode:\n got %x\nwant %x", rec, got, want)
	}
	fresh := reflect.New(reflect.TypeOf(rec).Elem()).Interface().(Record)
	d := NewDecoder(want)
	if err := fresh.Decode(d); err != nil {
		t.Fatalf("%T decode: %v", rec, err)
	}
	if err := d.Finish(); err != nil {
		t.Fatalf("%T decode left bytes: %v", rec, err)
	}
	if !reflect.DeepEqual(fresh, rec) {
		t.Fatalf("%T decode:\n got %+v\nwant %+v", rec, fresh, rec)
	}
}

var zeroPasswd = make([]byte, 16)

const passwd16 = "00000010 00000000000000000000000000000000"

func TestGoldenConnectRequest(t *testing.T) {
	// A 3.5+ Java/kazoo client: 45 bytes with the readOnly byte.
	with := hx(t,
		"00000000",         // protocolVersion
		"0000000000000010", // lastZxidSeen 16
		"00007530",         // timeOut 30000
		"0000000000000000", // sessionId 0 (new)
		passwd16,           // passwd: 16 zero bytes
		"01",               // readOnly true
	)
	if len(with) != 45 {
		t.Fatalf("len %d", len(with))
	}
	checkGolden(t, &ConnectRequest{LastZxidSeen: 16, TimeOut: 30000, Passwd: zeroPasswd, ReadOnly: true, HasReadOnly: true}, with)

	// go-zookeeper and pre-3.4 clients: 44 bytes, no readOnly.
	without := with[:44]
	checkGolden(t, &ConnectRequest{LastZxidSeen: 16, TimeOut: 30000, Passwd: zeroPasswd}, without)

	// A resuming session with a null password buffer.
	checkGolden(t, &ConnectRequest{SessionID: 0x0102030405060708, TimeOut: 4000, HasReadOnly: true},
		hx(t, "00000000", "0000000000000000", "00000fa0", "0102030405060708", "ffffffff", "00"))

	// ZooKeeper ignores bytes after the readOnly byte.
	r, err := DecodeConnectRequest(append(append([]byte{}, with...), 9, 9))
	if err != nil || !r.ReadOnly || !r.HasReadOnly || r.TimeOut != 30000 {
		t.Fatalf("trailing: %+v %v", r, err)
	}
	for n := range 44 {
		if _, err := DecodeConnectRequest(with[:n]); err == nil {
			t.Fatalf("truncated to %d decoded", n)
		}
	}
}

func TestGoldenConnectResponse(t *testing.T) {
	base := hx(t, "00000000", "00002710", "00000000deadbeef", passwd16)
	checkGolden(t, &ConnectResponse{TimeOut: 10000, SessionID: 0xdeadbeef, Passwd: zeroPasswd}, base)
	checkGolden(t, &ConnectResponse{TimeOut: 10000, SessionID: 0xdeadbeef, Passwd: zeroPasswd, HasReadOnly: true},
		append(append([]byte{}, base...), 0))

	frame, err := AppendRecordFrame(nil, &ConnectResponse{TimeOut: 10000, SessionID: 0xdeadbeef, Passwd: zeroPasswd, HasReadOnly: true})
	if err != nil || !bytes.Equal(frame, append(hx(t, "00000025"), append(base, 0)...)) {
		t.Fatalf("frame %x %v", frame, err)
	}
}

// openACL is ZooDefs.Ids.OPEN_ACL_UNSAFE: perms 31, world:anyone.
const openACL = "00000001 0000001f 00000005 776f726c64 00000006 616e796f6e65"

func TestGoldenCreateRequest(t *testing.T) {
	pkt := hx(t,
		"00000007 00000001", // RequestHeader xid 7, create
		"00000002 2f61",     // path "/a"
		"00000002 6869",     // data "hi"
		"00000002",          // two ACLs
		"0000001f 00000005 776f726c64 00000006 616e796f6e65", // ALL world:anyone
		"00000001 00000006 646967657374 00000005 753a786f78", // READ digest:u:xox
		"00000003", // flags: ephemeral sequential
	)
	body := &CreateRequest{Path: "/a", Data: []byte("hi"), ACL: []ACL{
		{Perms: PermAll, ID: Id{Scheme: "world", ID: "anyone"}},
		{Perms: PermRead, ID: Id{Scheme: "digest", ID: "u:xox"}},
	}, Flags: int32(ModeEphemeralSequential)}
	checkGolden(t, body, pkt[8:])
	h, got, err := DecodeRequest(pkt)
	if err != nil || h != (RequestHeader{Xid: 7, Type: OpCreate}) || !reflect.DeepEqual(got, body) {
		t.Fatalf("DecodeRequest: %+v %+v %v", h, got, err)
	}
	enc, err := EncodeRequest(h, body)
	if err != nil || !bytes.Equal(enc, pkt) {
		t.Fatalf("EncodeRequest %x %v", enc, err)
	}

	// createTTL appends a long; null data is -1.
	checkGolden(t, &CreateTTLRequest{Path: "/t", ACL: []ACL{{Perms: PermAll, ID: Id{"world", "anyone"}}}, Flags: int32(ModePersistentWithTTL), TTL: 60000},
		hx(t, "00000002 2f74", "ffffffff", openACL, "00000005", "000000000000ea60"))
}

func TestGoldenMultiRequest(t *testing.T) {
	pkt := hx(t,
		"00000002 0000000e",                                                      // xid 2, multi
		"00000001 00 ffffffff", "00000002 2f6d", "00000000", openACL, "00000000", // create /m, empty data
		"00000005 00 ffffffff", "00000002 2f6d", "00000001 78", "ffffffff", // setData /m "x" -1
		"0000000d 00 ffffffff", "00000002 2f6d", "00000001", // check /m version 1
		"ffffffff 01 ffffffff", // done
	)
	want := &MultiRequest{Ops: []MultiOp{
		{Type: OpCreate, Op: &CreateRequest{Path: "/m", Data: []byte{}, ACL: []ACL{{Perms: PermAll, ID: Id{"world", "anyone"}}}}},
		{Type: OpSetData, Op: &SetDataRequest{Path: "/m", Data: []byte("x"), Version: -1}},
		{Type: OpCheck, Op: &CheckVersionRequest{Path: "/m", Version: 1}},
	}}
	checkGolden(t, want, pkt[8:])
	h, got, err := DecodeRequest(pkt)
	if err != nil || h.Type != OpMulti || !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeRequest: %+v %+v %v", h, got, err)
	}

	// multiRead: getData and getChildren carry their watch byte.
	read := hx(t,
		"00000003 00000016",
		"00000004 00 ffffffff", "00000002 2f6d 00",
		"00000008 00 ffffffff", "00000001 2f 00",
		"ffffffff 01 ffffffff",
	)
	h, got, err = DecodeRequest(read)
	wantRead := &MultiRequest{Ops: []MultiOp{
		{Type: OpGetData, Op: &GetDataRequest{Path: "/m"}},
		{Type: OpGetChildren, Op: &GetChildrenRequest{Path: "/"}},
	}}
	if err != nil || h.Type != OpMultiRead || !reflect.DeepEqual(got, wantRead) {
		t.Fatalf("multiRead: %+v %+v %v", h, got, err)
	}
	checkGolden(t, wantRead, read[8:])

	// Reads in a multi, writes in a multiRead, and mixes are refused.
	readAsMulti := append(hx(t, "00000003 0000000e"), read[8:]...)
	if _, _, err := DecodeRequest(readAsMulti); !isErr(err, ErrBadMultiOp) {
		t.Fatalf("reads in multi: %v", err)
	}
	writeAsRead := append(hx(t, "00000003 00000016"), pkt[8:]...)
	if _, _, err := DecodeRequest(writeAsRead); !isErr(err, ErrBadMultiOp) {
		t.Fatalf("writes in multiRead: %v", err)
	}

	// The empty multi is just the end header.
	checkGolden(t, &MultiRequest{}, hx(t, "ffffffff 01 ffffffff"))
}

func TestGoldenMultiResponse(t *testing.T) {
	// A multi of three ops whose second failed with NONODE: ZooKeeper
	// sends err 0 in the ReplyHeader and an ErrorResult per op.
	body := hx(t,
		"ffffffff 00 00000000", "00000000", // before the failure: OK
		"ffffffff 00 ffffff9b", "ffffff9b", // the failure: NONODE (-101)
		"ffffffff 00 fffffffe", "fffffffe", // after: RUNTIMEINCONSISTENCY (-2)
		"ffffffff 01 ffffffff",
	)
	fail := MultiFailure(3, 1, CodeNoNode)
	checkGolden(t, fail, body)
	frame := EncodeReply(ReplyHeader{Xid: 2, Zxid: 0x20, Err: 0}, fail)
	want := append(hx(t, "00000040", "00000002 0000000000000020 00000000"), body...)
	if !bytes.Equal(frame, want) {
		t.Fatalf("reply:\n got %x\nwant %x", frame, want)
	}

	var st Stat
	st.Version = 1
	stat := encode(&st)
	ok := &MultiResponse{Results: []OpResult{
		{Type: OpCreate, Path: "/m"},
		{Type: OpCreate2, Path: "/n", Stat: st},
		{Type: OpDelete},
		{Type: OpSetData, Stat: st},
		{Type: OpCheck},
	}}
	checkGolden(t, ok, hx(t,
		"00000001 00 00000000", "00000002 2f6d",
		"0000000f 00 00000000", "00000002 2f6e", hex.EncodeToString(stat),
		"00000002 00 00000000",
		"00000005 00 00000000", hex.EncodeToString(stat),
		"0000000d 00 00000000",
		"ffffffff 01 ffffffff",
	))
	reads := &MultiResponse{Results: []OpResult{
		{Type: OpGetData, Data: []byte("x"), Stat: st},
		{Type: OpGetChildren, Children: []string{"a", "b"}},
		{Type: OpError, Err: CodeNoNode},
	}}
	checkGolden(t, reads, hx(t,
		"00000004 00 00000000", "00000001 78", hex.EncodeToString(stat),
		"00000008 00 00000000", "00000002 00000001 61 00000001 62",
		"ffffffff 00 ffffff9b", "ffffff9b",
		"ffffffff 01 ffffffff",
	))
}

func TestGoldenStat(t *testing.T) {
	st := Stat{Czxid: 1, Mzxid: 2, Ctime: 3, Mtime: 4, Version: 5, Cversion: 6, Aversion: 7,
		EphemeralOwner: 8, DataLength: 9, NumChildren: 10, Pzxid: 11}
	want := hx(t,
		"0000000000000001 0000000000000002 0000000000000003 0000000000000004",
		"00000005 00000006 00000007",
		"0000000000000008",
		"00000009 0000000a",
		"000000000000000b")
	if len(want) != StatSize {
		t.Fatal(len(want))
	}
	checkGolden(t, &st, want)
	checkGolden(t, &GetDataResponse{Data: []byte{}, Stat: st}, append(hx(t, "00000000"), want...))
	checkGolden(t, &GetDataResponse{Stat: st}, append(hx(t, "ffffffff"), want...))
}

func TestGoldenReplies(t *testing.T) {
	// Ping reply: xid -2, no body.
	if got := EncodeReply(ReplyHeader{Xid: XidPing, Zxid: 5}, nil); !bytes.Equal(got,
		hx(t, "00000010 fffffffe 0000000000000005 00000000")) {
		t.Fatalf("ping %x", got)
	}
	// Error reply: header only.
	if got := EncodeReply(ReplyHeader{Xid: 9, Zxid: 5, Err: CodeNoNode}, nil); !bytes.Equal(got,
		hx(t, "00000010 00000009 0000000000000005 ffffff9b")) {
		t.Fatalf("error %x", got)
	}
	// Notification: xid -1, WatcherEvent{NodeDataChanged, SyncConnected, "/a"}.
	if got := EncodeNotification(-1, WatcherEvent{Type: EventNodeDataChanged, State: StateSyncConnected, Path: "/a"}); !bytes.Equal(got,
		hx(t, "0000001e ffffffff ffffffffffffffff 00000000", "00000003 00000003 00000002 2f61")) {
		t.Fatalf("notification %x", got)
	}
	// An unencodable body turns into a MARSHALLINGERROR reply, not a panic.
	bad := &MultiResponse{Results: []OpResult{{Type: 42}}}
	if got := EncodeReply(ReplyHeader{Xid: 3, Zxid: 1}, bad); !bytes.Equal(got,
		hx(t, "00000010 00000003 0000000000000001 fffffffb")) {
		t.Fatalf("bad body %x", got)
	}
	if _, err := AppendReply(nil, ReplyHeader{}, bad); !isErr(err, ErrEncode) {
		t.Fatalf("AppendReply err %v", err)
	}
	for _, op := range []MultiOp{{Type: OpDelete, Op: &CreateRequest{}}, {Type: OpCreate}, {Type: OpCreate, Op: (*CreateRequest)(nil)}} {
		if _, err := EncodeRequest(RequestHeader{Type: OpMulti}, &MultiRequest{Ops: []MultiOp{op}}); !isErr(err, ErrEncode) {
			t.Errorf("mismatched multi op %+v: %v", op, err)
		}
	}
	// SetWatches with xid -8.
	pkt := hx(t, "fffffff8 00000065", "0000000000000064",
		"00000001 00000002 2f61", "00000000", "00000002 00000002 2f62 00000002 2f63")
	h, body, err := DecodeRequest(pkt)
	want := &SetWatches{RelativeZxid: 100, DataWatches: []string{"/a"}, ExistWatches: []string{}, ChildWatches: []string{"/b", "/c"}}
	if err != nil || h.Xid != XidSetWatches || !reflect.DeepEqual(body, want) {
		t.Fatalf("setWatches %+v %+v %v", h, body, err)
	}
	// Auth with xid -4.
	pkt = hx(t, "fffffffc 00000064", "00000000", "00000006 646967657374", "00000006 753a70617373")
	h, body, err = DecodeRequest(pkt)
	if err != nil || h.Xid != XidAuth || !reflect.DeepEqual(body, &AuthPacket{Scheme: "digest", Auth: []byte("u:pass")}) {
		t.Fatalf("auth %+v %+v %v", h, body, err)
	}
	// WhoAmI reply.
	checkGolden(t, &WhoAmIResponse{ClientInfo: []ClientInfo{{AuthScheme: "ip", User: "127.0.0.1"}}},
		hx(t, "00000001", "00000002 6970", "00000009 3132372e302e302e31"))
}
