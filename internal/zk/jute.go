// Package zk is the ZooKeeper wire format (jute): framing, primitives and
// the request/response records Meridian's ZooKeeper listener speaks.
//
// It is a pure codec: no sockets, no server state. Decoding checks every
// length against the bytes left before allocating and never panics on
// network bytes; errors are values.
package zk

import (
	"encoding/binary"
	"errors"
	"io"
)

// DefaultMaxPacket is ZooKeeper's jute.maxbuffer default less one.
const DefaultMaxPacket = 1048575

// Framing slack: a packet carries a header and a path besides the data.
const frameSlack = 64 << 10

var (
	ErrShort         = errors.New("zk: packet too short")
	ErrBadLength     = errors.New("zk: bad length prefix")
	ErrFrameTooLarge = errors.New("zk: packet exceeds the size limit")
	ErrTrailing      = errors.New("zk: trailing bytes in packet")
)

// ReadFrame reads one 4-byte big-endian length-prefixed packet. A length
// beyond maxData+slack fails with ErrFrameTooLarge before the body is read.
func ReadFrame(r io.Reader, maxData int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(hdr[:]))
	if n < 0 {
		return nil, ErrBadLength
	}
	if int(n) > maxData+frameSlack {
		return nil, ErrFrameTooLarge
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// Decoder reads jute primitives from a packet.
type Decoder struct {
	b   []byte
	err error
}

func NewDecoder(b []byte) *Decoder { return &Decoder{b: b} }

// Err is the first error met; after it every read returns zero values.
func (d *Decoder) Err() error { return d.err }

// Remaining is the number of unread bytes.
func (d *Decoder) Remaining() int { return len(d.b) }

// Finish reports an error if anything is left unread.
func (d *Decoder) Finish() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = ErrTrailing
	}
	return d.err
}

func (d *Decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.err = ErrShort
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *Decoder) Int() int32 {
	v := d.take(4)
	if v == nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(v))
}

func (d *Decoder) Long() int64 {
	v := d.take(8)
	if v == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

func (d *Decoder) Bool() bool {
	v := d.take(1)
	return v != nil && v[0] != 0
}

// Buffer reads a length-prefixed byte string; -1 is null.
func (d *Decoder) Buffer() []byte {
	n := d.Int()
	if d.err != nil || n == -1 {
		return nil
	}
	if n < -1 || int(n) > len(d.b) {
		d.err = ErrBadLength
		return nil
	}
	return append([]byte(nil), d.take(int(n))...)
}

// Ustring reads a length-prefixed UTF-8 string.
func (d *Decoder) Ustring() string { return string(d.Buffer()) }

// count reads a vector length, bounded by the bytes left (each element takes
// at least minElem bytes), so a lying count cannot make us allocate.
func (d *Decoder) count(minElem int) int {
	n := d.Int()
	if d.err != nil || n == -1 {
		return 0
	}
	if n < -1 || int(n)*minElem > len(d.b) {
		d.err = ErrBadLength
		return 0
	}
	return int(n)
}

func (d *Decoder) Strings() []string {
	n := d.count(4)
	out := make([]string, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, d.Ustring())
	}
	return out
}

// Encoder appends jute primitives.
type Encoder struct{ B []byte }

func (e *Encoder) Int(v int32)  { e.B = binary.BigEndian.AppendUint32(e.B, uint32(v)) }
func (e *Encoder) Long(v int64) { e.B = binary.BigEndian.AppendUint64(e.B, uint64(v)) }
func (e *Encoder) Bool(v bool) {
	if v {
		e.B = append(e.B, 1)
	} else {
		e.B = append(e.B, 0)
	}
}
func (e *Encoder) Buffer(b []byte) {
	if b == nil {
		e.Int(-1)
		return
	}
	e.Int(int32(len(b)))
	e.B = append(e.B, b...)
}
func (e *Encoder) String(s string) {
	e.Int(int32(len(s)))
	e.B = append(e.B, s...)
}
func (e *Encoder) Strings(ss []string) {
	e.Int(int32(len(ss)))
	for _, s := range ss {
		e.String(s)
	}
}

// Frame returns the encoded bytes with their 4-byte length prefix.
func Frame(body []byte) []byte {
	out := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(out, uint32(len(body)))
	return append(out, body...)
}
