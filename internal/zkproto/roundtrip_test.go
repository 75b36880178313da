package zkproto

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func isErr(err, target error) bool { return errors.Is(err, target) }

var sampleStat = Stat{Czxid: 0x100000001, Mzxid: 0x100000002, Ctime: 1700000000000, Mtime: 1700000000001,
	Version: 3, Cversion: 4, Aversion: 5, EphemeralOwner: 0x7f00000000000001, DataLength: 6, NumChildren: 7, Pzxid: -1}

var sampleACL = []ACL{{Perms: PermAll, ID: Id{"world", "anyone"}}, {Perms: PermRead | PermAdmin, ID: Id{"ip", "10.0.0.0/8"}}}

// allRecords holds a populated value of every record; the round-trip test
// fails if a Record type in this package is missing from it.
func allRecords() []Record {
	return []Record{
		&Id{Scheme: "digest", ID: "u:hash"},
		&ACL{Perms: PermWrite, ID: Id{"auth", ""}},
		&sampleStat,
		&ClientInfo{AuthScheme: "digest", User: "u"},
		&ConnectRequest{ProtocolVersion: 0, LastZxidSeen: 99, TimeOut: 10000, SessionID: 7, Passwd: []byte("0123456789abcdef"), ReadOnly: true, HasReadOnly: true},
		&ConnectResponse{TimeOut: 10000, SessionID: 7, Passwd: []byte("0123456789abcdef"), HasReadOnly: true},
		&RequestHeader{Xid: 12, Type: OpGetData},
		&ReplyHeader{Xid: 12, Zxid: 0x300000004, Err: CodeBadVersion},
		&MultiHeader{Type: OpCheck, Err: -1},
		&AuthPacket{Scheme: "digest", Auth: []byte("u:p")},
		&SetWatches{RelativeZxid: 5, DataWatches: []string{"/a"}, ExistWatches: []string{"/b", "/c"}, ChildWatches: []string{}},
		&SetWatches2{RelativeZxid: 5, DataWatches: []string{"/a"}, ExistWatches: []string{}, ChildWatches: []string{"/c"},
			PersistentWatches: []string{"/p"}, PersistentRecursiveWatches: []string{"/r", "/s"}},
		&WatcherEvent{Type: EventNodeChildrenChanged, State: StateSyncConnected, Path: "/x"},
		&CheckWatchesRequest{Path: "/a", Type: WatcherTypeData},
		&RemoveWatchesRequest{Path: "/a", Type: WatcherTypeAny},
		&AddWatchRequest{Path: "/a", Mode: AddWatchModePersistentRecursive},
		&CreateRequest{Path: "/a", Data: []byte("d"), ACL: sampleACL, Flags: int32(ModeContainer)},
		&CreateTTLRequest{Path: "/a", Data: []byte{}, ACL: sampleACL, Flags: int32(ModePersistentSequentialWithTTL), TTL: 1234},
		&CreateResponse{Path: "/a0000000001"},
		&Create2Response{Path: "/a", Stat: sampleStat},
		&DeleteRequest{Path: "/a", Version: -1},
		&DeleteContainerRequest{Path: "/c"},
		&ExistsRequest{Path: "/a", Watch: true},
		&ExistsResponse{Stat: sampleStat},
		&GetDataRequest{Path: "/a", Watch: true},
		&GetDataResponse{Data: []byte("hello"), Stat: sampleStat},
		&SetDataRequest{Path: "/a", Data: []byte("v"), Version: 2},
		&SetDataResponse{Stat: sampleStat},
		&GetACLRequest{Path: "/a"},
		&GetACLResponse{ACL: sampleACL, Stat: sampleStat},
		&SetACLRequest{Path: "/a", ACL: sampleACL, Version: 0},
		&SetACLResponse{Stat: sampleStat},
		&GetChildrenRequest{Path: "/", Watch: true},
		&GetChildrenResponse{Children: []string{"a", "b", "zookeeper"}},
		&GetChildren2Request{Path: "/"},
		&GetChildren2Response{Children: []string{"x"}, Stat: sampleStat},
		&GetAllChildrenNumberRequest{Path: "/"},
		&GetAllChildrenNumberResponse{TotalNumber: 42},
		&CheckVersionRequest{Path: "/a", Version: 7},
		&SyncRequest{Path: "/a"},
		&SyncResponse{Path: "/a"},
		&GetEphemeralsRequest{PrefixPath: "/e"},
		&GetEphemeralsResponse{Ephemerals: []string{"/e/1", "/e/2"}},
		&WhoAmIResponse{ClientInfo: []ClientInfo{{"ip", "127.0.0.1"}, {"digest", "u"}}},
		&ErrorResponse{Err: CodeNotEmpty},
		&ReconfigRequest{JoiningServers: "server.4=h:2888:3888", LeavingServers: "1", NewMembers: "", CurConfigID: -1},
		&SetSASLRequest{Token: []byte{1, 2, 3}},
		&SetSASLResponse{Token: nil},
		&MultiRequest{Ops: []MultiOp{
			{Type: OpCreate, Op: &CreateRequest{Path: "/a", ACL: sampleACL}},
			{Type: OpCreate2, Op: &CreateRequest{Path: "/b", Data: []byte("x"), ACL: sampleACL, Flags: 1}},
			{Type: OpCreateContainer, Op: &CreateRequest{Path: "/c", ACL: sampleACL, Flags: 4}},
			{Type: OpCreateTTL, Op: &CreateTTLRequest{Path: "/d", ACL: sampleACL, Flags: 5, TTL: 10}},
			{Type: OpDelete, Op: &DeleteRequest{Path: "/e", Version: 3}},
			{Type: OpSetData, Op: &SetDataRequest{Path: "/f", Data: []byte{}, Version: -1}},
			{Type: OpCheck, Op: &CheckVersionRequest{Path: "/g", Version: 0}},
		}},
		&MultiResponse{Results: []OpResult{
			{Type: OpCreate, Path: "/a"},
			{Type: OpCreate2, Path: "/b", Stat: sampleStat},
			{Type: OpDelete},
			{Type: OpSetData, Stat: sampleStat},
			{Type: OpCheck},
			{Type: OpGetData, Data: nil, Stat: sampleStat},
			{Type: OpGetChildren, Children: []string{}},
			{Type: OpError, Err: CodeNoAuth},
		}},
	}
}

func TestRoundTripAllRecords(t *testing.T) {
	for _, rec := range allRecords() {
		b := encode(rec)
		fresh := reflect.New(reflect.TypeOf(rec).Elem()).Interface().(Record)
		d := NewDecoder(b)
		if err := fresh.Decode(d); err != nil {
			t.Errorf("%T: decode: %v", rec, err)
			continue
		}
		if err := d.Finish(); err != nil {
			t.Errorf("%T: %v", rec, err)
		}
		if !reflect.DeepEqual(fresh, rec) {
			t.Errorf("%T: round trip\n got %+v\nwant %+v", rec, fresh, rec)
		}
		if b2 := encode(fresh); !bytes.Equal(b, b2) {
			t.Errorf("%T: re-encode differs", rec)
		}
		// Every strict prefix is an error value, never a panic or a
		// silent success (except where trailing fields are optional).
		for n := 0; n < len(b); n++ {
			fresh := reflect.New(reflect.TypeOf(rec).Elem()).Interface().(Record)
			err := fresh.Decode(NewDecoder(b[:n]))
			optional := n == len(b)-1 && (reflect.TypeOf(rec) == reflect.TypeOf(&ConnectRequest{}) || reflect.TypeOf(rec) == reflect.TypeOf(&ConnectResponse{}))
			if err == nil && !optional {
				t.Errorf("%T: prefix %d/%d decoded without error", rec, n, len(b))
				break
			}
		}
	}
}

// TestDecodeRequestAllOpcodes encodes a request for every opcode the
// server accepts and checks DecodeRequest returns the same typed body.
func TestDecodeRequestAllOpcodes(t *testing.T) {
	reqs := map[int32]Record{
		OpCreate:               &CreateRequest{Path: "/a", Data: []byte("x"), ACL: sampleACL},
		OpCreate2:              &CreateRequest{Path: "/a", Data: []byte("x"), ACL: sampleACL, Flags: 2},
		OpCreateContainer:      &CreateRequest{Path: "/a", Data: []byte{}, ACL: sampleACL, Flags: 4},
		OpCreateTTL:            &CreateTTLRequest{Path: "/a", ACL: sampleACL, Flags: 5, TTL: 100},
		OpDelete:               &DeleteRequest{Path: "/a", Version: -1},
		OpDeleteContainer:      &DeleteContainerRequest{Path: "/a"},
		OpExists:               &ExistsRequest{Path: "/a", Watch: true},
		OpGetData:              &GetDataRequest{Path: "/a"},
		OpSetData:              &SetDataRequest{Path: "/a", Data: []byte("y"), Version: 1},
		OpGetACL:               &GetACLRequest{Path: "/a"},
		OpSetACL:               &SetACLRequest{Path: "/a", ACL: sampleACL, Version: -1},
		OpGetChildren:          &GetChildrenRequest{Path: "/a", Watch: true},
		OpGetChildren2:         &GetChildren2Request{Path: "/a"},
		OpSync:                 &SyncRequest{Path: "/a"},
		OpCheck:                &CheckVersionRequest{Path: "/a", Version: 3},
		OpMulti:                &MultiRequest{Ops: []MultiOp{{Type: OpDelete, Op: &DeleteRequest{Path: "/a"}}}},
		OpMultiRead:            &MultiRequest{Ops: []MultiOp{{Type: OpGetData, Op: &GetDataRequest{Path: "/a"}}}},
		OpReconfig:             &ReconfigRequest{JoiningServers: "j", CurConfigID: 1},
		OpCheckWatches:         &CheckWatchesRequest{Path: "/a", Type: 1},
		OpRemoveWatches:        &RemoveWatchesRequest{Path: "/a", Type: 3},
		OpAuth:                 &AuthPacket{Scheme: "digest", Auth: []byte("a:b")},
		OpSetWatches:           &SetWatches{RelativeZxid: 1, DataWatches: []string{"/a"}, ExistWatches: []string{}, ChildWatches: []string{}},
		OpSetWatches2:          &SetWatches2{DataWatches: []string{}, ExistWatches: []string{}, ChildWatches: []string{}, PersistentWatches: []string{"/p"}, PersistentRecursiveWatches: []string{}},
		OpSASL:                 &SetSASLRequest{Token: []byte("tok")},
		OpGetEphemerals:        &GetEphemeralsRequest{PrefixPath: "/"},
		OpGetAllChildrenNumber: &GetAllChildrenNumberRequest{Path: "/"},
		OpAddWatch:             &AddWatchRequest{Path: "/a", Mode: 0},
		OpPing:                 nil,
		OpCloseSession:         nil,
		OpWhoAmI:               nil,
	}
	for op, body := range reqs {
		pkt, err := EncodeRequest(RequestHeader{Xid: 5, Type: op}, body)
		if err != nil {
			t.Fatal(err)
		}
		h, got, err := DecodeRequest(pkt)
		if err != nil || h.Xid != 5 || h.Type != op {
			t.Errorf("%s: %+v %v", OpName(op), h, err)
			continue
		}
		if body == nil {
			if got != nil {
				t.Errorf("%s: body %T", OpName(op), got)
			}
			continue
		}
		if !reflect.DeepEqual(got, body) {
			t.Errorf("%s: got %+v want %+v", OpName(op), got, body)
		}
		// Trailing bytes are ignored, as by ZooKeeper.
		if _, got, err := DecodeRequest(append(pkt, 1, 2, 3)); err != nil || !reflect.DeepEqual(got, body) {
			t.Errorf("%s trailing: %v", OpName(op), err)
		}
	}
	for _, op := range []int32{OpNotification, OpCreateSession, OpError, 10, 23, 99, 108, 1 << 30} {
		h, body, err := DecodeRequest(hx(t, "00000009", hexInt(op), "deadbeef"))
		if !isErr(err, ErrUnknownOpcode) || h.Xid != 9 || h.Type != op || body != nil {
			t.Errorf("opcode %d: %+v %v %v", op, h, body, err)
		}
	}
	if _, _, err := DecodeRequest([]byte{0, 0, 0, 1, 0, 0}); !isErr(err, ErrShortBuffer) {
		t.Errorf("short header: %v", err)
	}
}

func hexInt(v int32) string {
	b := NewEncoder(nil)
	b.Int(v)
	return string(appendHex(nil, b.Bytes()))
}

func appendHex(dst, b []byte) []byte {
	const digits = "0123456789abcdef"
	for _, c := range b {
		dst = append(dst, digits[c>>4], digits[c&15])
	}
	return dst
}
