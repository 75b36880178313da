package replica

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

func TestReadBody(t *testing.T) {
	payload := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i * 7)
		}
		return b
	}
	// Frames arrive in pieces; OneByteReader is the worst case.
	for _, n := range []int{0, 1, 511, 512, 4096, 64 << 10, 64<<10 + 1, 300 << 10} {
		want := payload(n)
		got, err := readBody(iotest.OneByteReader(bytes.NewReader(want)), int64(n))
		if err != nil {
			t.Fatalf("size %d: %v", n, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("size %d: body differs", n)
		}
		// Up to 64 KiB the body is one allocation of its size.
		if n <= 64<<10 && cap(got) != n {
			t.Errorf("size %d: capacity %d, want exactly %d", n, cap(got), n)
		}
	}

	// The next frame's bytes stay unread.
	r := bytes.NewReader([]byte("abcdefgh"))
	if got, err := readBody(r, 3); err != nil || string(got) != "abc" {
		t.Fatalf("readBody = %q, %v; want abc", got, err)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "defgh" {
		t.Fatalf("left %q unread, want defgh", rest)
	}

	// A truncated frame is an error, and a bogus length never makes the
	// buffer more than twice what was really sent.
	sent := 200 << 10
	rec := &capRecorder{r: bytes.NewReader(payload(sent))}
	if _, err := readBody(rec, 256<<20); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated frame: err = %v, want io.ErrUnexpectedEOF", err)
	}
	if rec.maxBuf > 2*sent {
		t.Fatalf("bogus 256 MiB length after %d bytes: buffer grew to %d bytes", sent, rec.maxBuf)
	}
}

// TestReadBodyInto: a raft message's body is read into the connection's
// buffer, which grows to fit (never past maxReusedBody) and is reused, and
// the next frame's bytes stay unread.
func TestReadBodyInto(t *testing.T) {
	var buf []byte
	for _, n := range []int{10, 100, 5000, 3, 20 << 10, maxReusedBody} {
		want := bytes.Repeat([]byte{byte(n)}, n)
		r := bytes.NewReader(append(want, "next"...))
		got, err := readBodyInto(iotest.OneByteReader(r), buf, int64(n))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("size %d: %v, body equal %v", n, err, bytes.Equal(got, want))
		}
		if rest, _ := io.ReadAll(r); string(rest) != "next" {
			t.Fatalf("size %d: left %q unread, want next", n, rest)
		}
		if cap(got) > maxReusedBody {
			t.Fatalf("size %d: buffer of %d bytes", n, cap(got))
		}
		if n <= cap(buf) && &got[0] != &buf[:1][0] {
			t.Fatalf("size %d: a buffer of %d bytes was not reused", n, cap(buf))
		}
		buf = got[:0]
	}
	if _, err := readBodyInto(bytes.NewReader([]byte("ab")), buf, 3); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated frame: err = %v, want io.ErrUnexpectedEOF", err)
	}
}

// capRecorder records the largest buffer readBody read into: the bytes it
// had already read plus the room it offered to Read.
type capRecorder struct {
	r      io.Reader
	read   int
	maxBuf int
}

func (c *capRecorder) Read(p []byte) (int, error) {
	c.maxBuf = max(c.maxBuf, c.read+cap(p))
	n, err := c.r.Read(p)
	c.read += n
	return n, err
}
