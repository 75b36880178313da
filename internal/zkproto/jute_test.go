package zkproto

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
)

func TestPrimitives(t *testing.T) {
	e := NewEncoder(nil)
	e.Int(-2)
	e.Long(1 << 40)
	e.Bool(true)
	e.Bool(false)
	e.Buffer(nil)
	e.Buffer([]byte{})
	e.Buffer([]byte{7})
	e.Ustring("é")
	e.Strings(nil)
	want := hx(t, "fffffffe", "0000010000000000", "01", "00", "ffffffff", "00000000", "00000001 07", "00000002 c3a9", "00000000")
	if !bytes.Equal(e.Bytes(), want) {
		t.Fatalf("got %x", e.Bytes())
	}
	d := NewDecoder(want)
	if d.Int() != -2 || d.Long() != 1<<40 || !d.Bool() || d.Bool() {
		t.Fatal("numbers")
	}
	if b := d.Buffer(); b != nil {
		t.Fatal("null buffer not nil")
	}
	if b := d.Buffer(); b == nil || len(b) != 0 {
		t.Fatal("empty buffer must be non-nil")
	}
	if b := d.Buffer(); !bytes.Equal(b, []byte{7}) || d.Ustring() != "é" {
		t.Fatal("buffer/string")
	}
	if s := d.Strings(); s == nil || len(s) != 0 {
		t.Fatal("empty vector")
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	// Null string and vector decode as "" and nil.
	d = NewDecoder(hx(t, "ffffffff ffffffff"))
	if d.Ustring() != "" || d.Strings() != nil || d.Finish() != nil {
		t.Fatal("nulls")
	}
	// Decoded buffers do not alias the packet.
	pkt := hx(t, "00000001 41")
	b := NewDecoder(pkt).Buffer()
	pkt[4] = 'B'
	if b[0] != 'A' {
		t.Fatal("buffer aliases packet")
	}
	// Any non-zero byte is true, like Java's readBoolean.
	if !NewDecoder([]byte{0x80}).Bool() {
		t.Fatal("bool")
	}
}

func TestHostileLengths(t *testing.T) {
	cases := map[string][]byte{
		"buffer beyond packet":  hx(t, "7fffffff 00"),
		"buffer -2":             hx(t, "fffffffe"),
		"buffer min int":        hx(t, "80000000"),
		"string beyond packet":  hx(t, "00000010 616263"),
		"vector count huge":     hx(t, "7fffffff 00000000"),
		"vector count -5":       hx(t, "fffffffb"),
		"vector count 3, 2 els": hx(t, "00000003 00000000 00000000"),
	}
	for name, b := range cases {
		d := NewDecoder(b)
		if strings.HasPrefix(name, "vector") {
			d.Strings()
		} else {
			d.Buffer()
		}
		if !isErr(d.Err(), ErrBadLength) && !isErr(d.Err(), ErrShortBuffer) {
			t.Errorf("%s: %v", name, d.Err())
		}
	}
	// An ACL vector whose count fits 4-byte strings but not 12-byte ACLs.
	d := NewDecoder(hx(t, "00000002", strings.Repeat("00", 12)))
	if decodeACLs(d); !isErr(d.Err(), ErrBadLength) {
		t.Errorf("acl count: %v", d.Err())
	}
	// Sticky error: later reads are zero and the first error is kept.
	d = NewDecoder([]byte{1})
	d.Int()
	first := d.Err()
	if d.Long() != 0 || d.Ustring() != "" || d.Err() != first {
		t.Error("not sticky")
	}
}

// TestHostileAllocation decodes requests whose length prefixes lie and
// checks the decoder allocates on the order of the packet, not the claim.
func TestHostileAllocation(t *testing.T) {
	pkts := [][]byte{
		hx(t, "00000001 00000001", "7ffffff0", "2f"),                                              // create, path length 2 GiB
		hx(t, "00000001 00000001", "00000001 2f", "7ffffff0"),                                     // data length
		hx(t, "00000001 00000001", "00000001 2f", "00000000", "7ffffff0"),                         // ACL count
		hx(t, "fffffff8 00000065", "0000000000000000", "3fffffff", "00000000"),                    // setWatches count
		hx(t, "00000001 0000000e", "00000001 00 ffffffff", "00000001 2f", "00000000", "10000000"), // ACL count in a multi
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 100 {
		for _, p := range pkts {
			if _, _, err := DecodeRequest(p); err == nil {
				t.Fatalf("%x decoded", p)
			}
		}
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("hostile packets allocated %d bytes", got)
	}
}

func TestReadFrame(t *testing.T) {
	var stream []byte
	stream = AppendFrame(stream, []byte("hello"))
	stream = AppendFrame(stream, nil)
	r := bytes.NewReader(stream)
	if b, err := ReadFrame(r, 16); err != nil || string(b) != "hello" {
		t.Fatal(b, err)
	}
	if b, err := ReadFrame(r, 16); err != nil || len(b) != 0 {
		t.Fatal(b, err)
	}
	if _, err := ReadFrame(r, 16); err != io.EOF {
		t.Fatal(err)
	}

	// Too large or negative: rejected without consuming the body.
	for _, hdr := range []string{"00000011", "ffffffff", "80000000", "72756f6b" /* "ruok" */} {
		r := &countingReader{r: bytes.NewReader(hx(t, hdr, strings.Repeat("00", 32)))}
		if _, err := ReadFrame(r, 16); !errors.Is(err, ErrFrameTooLarge) || r.n != 4 {
			t.Errorf("%s: %v, read %d", hdr, err, r.n)
		}
	}
	// The default limit: 1048575 + 1024 = 0x1003ff.
	if n, err := FrameLength([4]byte{0, 0x10, 0x03, 0xff}, 0); err != nil || n != 0x1003ff {
		t.Errorf("max frame: %d %v", n, err)
	}
	if _, err := FrameLength([4]byte{0, 0x10, 0x04, 0x00}, 0); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("over default limit: %v", err)
	}
	// Truncated body.
	if _, err := ReadFrame(bytes.NewReader(hx(t, "00000005 6869")), 16); err != io.ErrUnexpectedEOF {
		t.Errorf("truncated body: %v", err)
	}
	if _, err := ReadFrame(bytes.NewReader(hx(t, "0000")), 16); err != io.ErrUnexpectedEOF {
		t.Errorf("truncated header: %v", err)
	}
	if _, err := ReadFrame(bytes.NewReader(hx(t, "00000005")), 16); err != io.ErrUnexpectedEOF {
		t.Errorf("missing body: %v", err)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestCreateMode(t *testing.T) {
	for m := CreateMode(-1); m <= 7; m++ {
		valid := m >= 0 && m <= 6
		if m.Valid() != valid {
			t.Errorf("%d valid", m)
		}
	}
	if !ModeEphemeralSequential.IsEphemeral() || !ModeEphemeralSequential.IsSequential() ||
		ModePersistentWithTTL.IsEphemeral() || !ModePersistentWithTTL.IsTTL() ||
		!ModePersistentSequentialWithTTL.IsSequential() || !ModeContainer.IsContainer() || ModeContainer.IsSequential() {
		t.Error("mode predicates")
	}
	if OpName(OpWhoAmI) != "whoAmI" || OpName(55) != "op(55)" || CodeName(CodeNoNode) != "NONODE" || CodeName(-999) != "code(-999)" {
		t.Error("names")
	}
}
