package tree

import (
	"bytes"
	"errors"
	"math"
	"math/rand"
	"reflect"
	"runtime"
	"testing"

	"github.com/meridian-coord/meridian/internal/errs"
)

func sampleCommands() []*Command {
	return []*Command{
		{},
		{Op: Op{Type: OpNoop}},
		{ID: math.MaxUint64, TimeMs: math.MinInt64, Session: math.MaxInt64, Op: Op{Type: OpCreate, Path: "/a/b",
			Data: []byte("hello\x00world"), ACL: []ACL{{Perms: PermAll, ID: ID{"world", "anyone"}}, {Perms: 1, ID: ID{"digest", "u:p"}}},
			Mode: ModePersistentSeqTTL, TTLMs: 12345, Version: -1}},
		{Auth: []ID{{"digest", "bob:h"}, {"ip", "::1"}, {"super", ""}}, Op: Op{Type: OpSetData, Path: "/x", Data: []byte{0xff}, Version: math.MinInt32}},
		{Op: Op{Type: OpMulti}, Ops: []Op{
			{Type: OpCreate, Path: "/m", ACL: OpenACL},
			{Type: OpCheck, Path: "/m", Version: math.MaxInt32},
			{Type: OpDelete, Path: "/m", Version: 3},
			{Type: OpSetACL, Path: "/m", ACL: OpenACL, Version: 1},
		}},
		{Op: Op{Type: OpCreateSession}, TimeoutMs: 30000, Password: []byte("0123456789abcdef")},
		{Op: Op{Type: OpCloseSession}, Session: 42},
		{Op: Op{Type: OpExpire}, Sessions: []int64{1, -1, math.MaxInt64, math.MinInt64}},
		{Op: Op{Type: OpReap}, TimeMs: 1700000000000},
		{Op: Op{Type: OpType(200), Mode: CreateMode(-7)}},
		{Op: Op{Type: OpSetData, Path: "/big", Data: bytes.Repeat([]byte{1}, MaxDataBytes)}},
	}
}

// normalize maps empty slices to nil: the codec does not keep the difference.
func normalize(c *Command) *Command {
	n := *c
	if len(n.Auth) == 0 {
		n.Auth = nil
	}
	if len(n.Password) == 0 {
		n.Password = nil
	}
	if len(n.Sessions) == 0 {
		n.Sessions = nil
	}
	normOp := func(op Op) Op {
		if len(op.Data) == 0 {
			op.Data = nil
		}
		if len(op.ACL) == 0 {
			op.ACL = nil
		}
		return op
	}
	n.Op = normOp(n.Op)
	if len(n.Ops) == 0 {
		n.Ops = nil
	}
	n.Ops = append([]Op(nil), n.Ops...)
	for i := range n.Ops {
		n.Ops[i] = normOp(n.Ops[i])
	}
	if len(n.Ops) == 0 {
		n.Ops = nil
	}
	return &n
}

func TestCodecRoundTrip(t *testing.T) {
	cmds := sampleCommands()
	g := &gen{rng: rand.New(rand.NewSource(1))}
	for i := 0; i < 500; i++ {
		cmds = append(cmds, g.command())
	}
	for i, c := range cmds {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatalf("%d: encode: %v", i, err)
		}
		if b[0] != codecVersion {
			t.Fatalf("%d: no version byte", i)
		}
		d, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("%d: decode: %v", i, err)
		}
		if !reflect.DeepEqual(normalize(c), normalize(d)) {
			t.Fatalf("%d: round trip:\n%+v\n%+v", i, c, d)
		}
		// Every strict prefix is refused, and so is a trailing byte.
		for n := 0; n < len(b) && n < 200; n++ {
			if _, err := DecodeCommand(b[:n]); err == nil {
				t.Fatalf("%d: prefix of %d bytes decoded", i, n)
			}
		}
		if _, err := DecodeCommand(append(b[:len(b):len(b)], 0)); !errors.Is(err, errs.ErrMarshalling) {
			t.Fatalf("%d: trailing byte: %v", i, err)
		}
	}
}

// TestDecodeCommandInto: decoding command after command into one Command
// gives each exactly (nothing of the one before stays, and a command's
// slices are not overwritten by the next), and a failed decode leaves it
// empty.
func TestDecodeCommandInto(t *testing.T) {
	cmds := sampleCommands()
	g := &gen{rng: rand.New(rand.NewSource(2))}
	for i := 0; i < 300; i++ {
		cmds = append(cmds, g.command())
	}
	var into, prev Command // prev: into as it was after the previous decode (its slices shared)
	var prevBytes []byte
	for i, c := range cmds {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatalf("%d: encode: %v", i, err)
		}
		if err := DecodeCommandInto(&into, b); err != nil {
			t.Fatalf("%d: decode: %v", i, err)
		}
		if !reflect.DeepEqual(normalize(c), normalize(&into)) {
			t.Fatalf("%d: decoded into a used Command:\n%+v\n%+v", i, c, &into)
		}
		if prevBytes != nil {
			if want, _ := DecodeCommand(prevBytes); !reflect.DeepEqual(normalize(want), normalize(&prev)) {
				t.Fatalf("%d: decoding it changed the previous command's slices", i)
			}
		}
		prev, prevBytes = into, b
	}
	b, _ := EncodeCommand(cmds[0])
	if err := DecodeCommandInto(&into, b[:len(b)-1]); err == nil || !reflect.DeepEqual(into, Command{}) {
		t.Fatalf("truncated: err %v, command %+v", err, into)
	}
}

func TestEncodeLimits(t *testing.T) {
	long := "/" + string(bytes.Repeat([]byte("a"), MaxPathBytes))
	bigACL := make([]ACL, MaxACLEntries+1)
	for name, tc := range map[string]struct {
		c   *Command
		err error
	}{
		"nil":      {nil, errs.ErrBadArguments},
		"path":     {&Command{Op: Op{Path: long}}, errs.ErrInvalidPath},
		"data":     {&Command{Op: Op{Data: make([]byte, MaxDataBytes+1)}}, errs.ErrDataTooLarge},
		"acl":      {&Command{Op: Op{ACL: bigACL}}, errs.ErrInvalidACL},
		"acl id":   {&Command{Op: Op{ACL: []ACL{{ID: ID{"digest", string(make([]byte, maxIDBytes+1))}}}}}, errs.ErrInvalidACL},
		"auth":     {&Command{Auth: make([]ID, MaxAuthIDs+1)}, errs.ErrBadArguments},
		"auth id":  {&Command{Auth: []ID{{"digest", string(make([]byte, maxIDBytes+1))}}}, errs.ErrBadArguments},
		"ops":      {&Command{Ops: make([]Op, MaxMultiOps+1)}, errs.ErrBadArguments},
		"sessions": {&Command{Sessions: make([]int64, MaxExpireBatch+1)}, errs.ErrBadArguments},
		"password": {&Command{Password: make([]byte, maxPasswordBytes+1)}, errs.ErrBadArguments},
		"multi data": {&Command{Ops: []Op{
			{Data: make([]byte, MaxDataBytes)}, {Data: make([]byte, MaxDataBytes)}, {Data: make([]byte, MaxDataBytes)},
		}}, errs.ErrRequestTooLarge},
	} {
		if _, err := EncodeCommand(tc.c); err != tc.err {
			t.Errorf("%s: got %v, want %v", name, err, tc.err)
		}
	}
	// Exactly at the limits is fine.
	ok := &Command{Op: Op{Path: long[:MaxPathBytes], Data: make([]byte, MaxDataBytes), ACL: make([]ACL, MaxACLEntries)},
		Auth: make([]ID, MaxAuthIDs), Sessions: make([]int64, MaxExpireBatch)}
	b, err := EncodeCommand(ok)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeCommand(b); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeRejects(t *testing.T) {
	valid, _ := EncodeCommand(&Command{Op: Op{Type: OpNoop}})
	for name, b := range map[string][]byte{
		"empty":       nil,
		"version":     append([]byte{3}, valid[1:]...),
		"too large":   make([]byte, MaxCommandBytes+1),
		"bad varint":  {1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"auth count":  {1, 0, 0, 0, MaxAuthIDs + 1},
		"int32 range": append(append([]byte{1, 0, 0, 0, 0, 1, 0, 0, 0}, 0x80, 0x80, 0x80, 0x80, 0x10), 0, 0),
	} {
		if _, err := DecodeCommand(b); err == nil {
			t.Errorf("%s: decoded", name)
		} else if !errors.Is(err, errs.ErrMarshalling) && !errors.Is(err, errs.ErrRequestTooLarge) {
			t.Errorf("%s: error %v", name, err)
		}
	}
}

// A length or count prefix that claims far more than the input holds must
// fail without allocating for the claim.
func TestDecodeLyingPrefix(t *testing.T) {
	inputs := [][]byte{
		// version, ID, TimeMs, Session, no auth, op type, path length 2^62.
		{1, 0, 0, 0, 0, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40},
		// ... empty path, data length 1 MiB with 3 bytes present.
		{1, 0, 0, 0, 0, 1, 0, 0x80, 0x80, 0x40, 1, 2, 3},
		// Sessions count 10000 with nothing after it.
		append(mustEncodeNoSessions(), 0x90, 0x4e),
	}
	for i, b := range inputs {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for j := 0; j < 100; j++ {
			if _, err := DecodeCommand(b); err == nil {
				t.Fatalf("%d: decoded", i)
			}
		}
		runtime.ReadMemStats(&after)
		if perCall := (after.TotalAlloc - before.TotalAlloc) / 100; perCall > 4096 {
			t.Errorf("%d: %d bytes allocated per call for a %d-byte input", i, perCall, len(b))
		}
	}
}

// mustEncodeNoSessions returns an encoded command minus its final (empty)
// Sessions count, for appending a forged one.
func mustEncodeNoSessions() []byte {
	b, err := EncodeCommand(&Command{Op: Op{Type: OpExpire}})
	if err != nil {
		panic(err)
	}
	return b[:len(b)-1]
}

func FuzzDecodeCommand(f *testing.F) {
	for _, c := range sampleCommands() {
		if len(c.Op.Data) > 1000 {
			continue
		}
		b, err := EncodeCommand(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	g := &gen{rng: rand.New(rand.NewSource(2))}
	for i := 0; i < 30; i++ {
		b, _ := EncodeCommand(g.command())
		f.Add(b)
	}
	base := richTree(f)
	baseSnap := snapshot(f, base)
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommand(b)
		if err != nil {
			if !errors.Is(err, errs.ErrMarshalling) && !errors.Is(err, errs.ErrRequestTooLarge) {
				t.Fatalf("unexpected error type: %v", err)
			}
			return
		}
		// What decodes re-encodes to something that decodes the same.
		b2, err := EncodeCommand(c)
		if err != nil {
			t.Fatalf("decoded command does not re-encode: %v", err)
		}
		c2, err := DecodeCommand(b2)
		if err != nil || !reflect.DeepEqual(normalize(c), normalize(c2)) {
			t.Fatalf("re-encode round trip: %v", err)
		}
		// And applying it to a populated tree neither panics nor breaks
		// invariants; a failed command changes nothing.
		tr, err := Restore(bytes.NewReader(baseSnap))
		if err != nil {
			t.Fatal(err)
		}
		res, events := tr.Apply(1000, c)
		checkInvariants(t, tr)
		if res.Err != nil && (len(events) != 0 || tr.Digest() != base.Digest()) {
			t.Fatalf("failed command (%v) changed the tree", res.Err)
		}
	})
}

// ZooKeeper distinguishes null data from empty data; the log must too.
func TestNullDataSurvivesCodec(t *testing.T) {
	for name, data := range map[string][]byte{"null": nil, "empty": {}, "bytes": []byte("x")} {
		b, err := EncodeCommand(&Command{Op: Op{Type: OpCreate, Path: "/a", Data: data}})
		if err != nil {
			t.Fatal(err)
		}
		c, err := DecodeCommand(b)
		if err != nil {
			t.Fatal(err)
		}
		if (c.Op.Data == nil) != (data == nil) || !bytes.Equal(c.Op.Data, data) {
			t.Errorf("%s: decoded %#v", name, c.Op.Data)
		}
	}
	// Version 1 stored plain bytes, and the tree then kept empty data as null.
	v1 := []byte{1, 0, 0, 0, 0, byte(OpCreate), 2, '/', 'a', 0, 0, 0, 0, 0, 0, 0, 0, 0}
	c, err := DecodeCommand(v1)
	if err != nil {
		t.Fatal(err)
	}
	if c.Op.Data != nil || c.Op.Path != "/a" || c.Op.Type != OpCreate {
		t.Errorf("version 1: decoded %+v", c.Op)
	}
}
