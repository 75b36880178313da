package zkproto

import (
	"bytes"
	"encoding/binary"
	"io"
	"runtime"
	"testing"
	"testing/iotest"
)

// A header declaring the largest frame, followed by nothing, costs the
// reader one 64 KiB chunk, not the declared length: connections that send
// only headers cannot make the server allocate what they declare.
func TestReadFrameAllocatesAsBytesArrive(t *testing.T) {
	hdr := binary.BigEndian.AppendUint32(nil, DefaultMaxFrame)
	const runs = 50
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		if _, err := ReadFrame(bytes.NewReader(hdr), 0); err != io.ErrUnexpectedEOF {
			t.Fatalf("header alone: %v, want io.ErrUnexpectedEOF", err)
		}
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / runs
	if per > 2*frameChunk {
		t.Fatalf("a header declaring %d bytes followed by nothing allocated %d bytes; want at most %d", DefaultMaxFrame, per, 2*frameChunk)
	}

	// Half the body: the buffer has grown only to what arrived (within
	// one doubling).
	half := append(hdr, make([]byte, DefaultMaxFrame/4)...)
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		if _, err := ReadFrame(bytes.NewReader(half), 0); err != io.ErrUnexpectedEOF {
			t.Fatalf("quarter body: %v", err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > uint64(DefaultMaxFrame) {
		t.Fatalf("a quarter of a %d-byte body allocated %d bytes; want less than the declared length", DefaultMaxFrame, per)
	}
}

// Frames of every size around the growth steps read back exactly, also
// when the reader returns a few bytes at a time.
func TestReadFrameGrowingBody(t *testing.T) {
	for _, n := range []int{0, 1, frameChunk - 1, frameChunk, frameChunk + 1, 3 * frameChunk, DefaultMaxFrame} {
		body := make([]byte, n)
		for i := range body {
			body[i] = byte(i * 7)
		}
		stream := AppendFrame(nil, body)
		for name, r := range map[string]io.Reader{
			"whole": bytes.NewReader(stream),
			"half":  iotest.HalfReader(bytes.NewReader(stream)),
		} {
			got, err := ReadFrame(r, 0)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("%s, %d bytes: err %v, equal %v", name, n, err, bytes.Equal(got, body))
			}
		}
	}
}
