package zk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func TestConnectRequestWithAndWithoutReadOnly(t *testing.T) {
	body := binary.BigEndian.AppendUint32(nil, 0)
	body = binary.BigEndian.AppendUint64(body, 42)
	body = binary.BigEndian.AppendUint32(body, 30000)
	body = binary.BigEndian.AppendUint64(body, 7)
	body = binary.BigEndian.AppendUint32(body, 2)
	body = append(body, 0xaa, 0xbb)
	r, err := DecodeConnectRequest(body)
	if err != nil || r.HasReadOnly || r.LastZxidSeen != 42 || r.TimeoutMs != 30000 || r.SessionID != 7 || !bytes.Equal(r.Passwd, []byte{0xaa, 0xbb}) {
		t.Fatalf("old client: %+v %v", r, err)
	}
	r, err = DecodeConnectRequest(append(body, 1))
	if err != nil || !r.HasReadOnly || !r.ReadOnly {
		t.Fatalf("new client: %+v %v", r, err)
	}
	if _, err := DecodeConnectRequest(append(body, 1, 2)); err == nil {
		t.Fatal("trailing bytes accepted")
	}
	if _, err := DecodeConnectRequest(body[:10]); err == nil {
		t.Fatal("truncated request accepted")
	}
}

func TestMultiRoundTripAndGolden(t *testing.T) {
	// multi: create /a "x" open-ACL persistent, check /a version 0, end.
	e := &Encoder{}
	e.Int(OpCreate)
	e.Bool(false)
	e.Int(-1)
	e.String("/a")
	e.Buffer([]byte("x"))
	EncodeACLs(e, []ACL{{Perms: 31, Scheme: "world", ID: "anyone"}})
	e.Int(0)
	e.Int(OpCheck)
	e.Bool(false)
	e.Int(-1)
	e.String("/a")
	e.Int(0)
	e.Int(-1)
	e.Bool(true)
	e.Int(-1)
	want := []byte{
		0, 0, 0, 1, 0, 0xff, 0xff, 0xff, 0xff, // header create
		0, 0, 0, 2, '/', 'a', 0, 0, 0, 1, 'x', // path, data
		0, 0, 0, 1, 0, 0, 0, 31, 0, 0, 0, 5, 'w', 'o', 'r', 'l', 'd', 0, 0, 0, 6, 'a', 'n', 'y', 'o', 'n', 'e', // acl
		0, 0, 0, 0, // flags
		0, 0, 0, 13, 0, 0xff, 0xff, 0xff, 0xff, // header check
		0, 0, 0, 2, '/', 'a', 0, 0, 0, 0, // path, version
		0xff, 0xff, 0xff, 0xff, 1, 0xff, 0xff, 0xff, 0xff, // done
	}
	if !bytes.Equal(e.B, want) {
		t.Fatalf("encoding\n got %x\nwant %x", e.B, want)
	}
	d := NewDecoder(e.B)
	ops, err := DecodeMulti(d)
	if err != nil || d.Finish() != nil || len(ops) != 2 || ops[0].Path != "/a" || string(ops[0].Data) != "x" || ops[1].Type != OpCheck {
		t.Fatalf("decode: %+v %v", ops, err)
	}
}

func TestLyingLengthsDoNotAllocate(t *testing.T) {
	// A buffer claiming 2 GiB in a 12-byte packet.
	d := NewDecoder([]byte{0x7f, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8})
	if d.Buffer() != nil || !errors.Is(d.Err(), ErrBadLength) {
		t.Fatalf("lying buffer length: %v", d.Err())
	}
	d = NewDecoder([]byte{0x7f, 0xff, 0xff, 0xff})
	if d.Strings(); !errors.Is(d.Err(), ErrBadLength) {
		t.Fatalf("lying vector length: %v", d.Err())
	}
	if _, err := ReadFrame(bytes.NewReader([]byte{0x7f, 0xff, 0xff, 0xff}), DefaultMaxPacket); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized frame: %v", err)
	}
	if _, err := ReadFrame(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xfe}), DefaultMaxPacket); !errors.Is(err, ErrBadLength) {
		t.Fatalf("negative frame: %v", err)
	}
}

func FuzzDecodeMulti(f *testing.F) {
	e := &Encoder{}
	e.Int(OpSetData)
	e.Bool(false)
	e.Int(-1)
	e.String("/x")
	e.Buffer([]byte("d"))
	e.Int(3)
	e.Int(-1)
	e.Bool(true)
	e.Int(-1)
	f.Add(e.B)
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDecoder(b)
		DecodeMulti(d)
	})
}

func FuzzDecodeConnectRequest(f *testing.F) {
	f.Add(make([]byte, 28))
	f.Fuzz(func(t *testing.T, b []byte) {
		DecodeConnectRequest(b)
	})
}
