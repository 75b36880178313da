package zkproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Decoding and encoding errors. Decoders wrap them with the byte offset;
// test with errors.Is.
var (
	// ErrShortBuffer: the packet ended inside a field.
	ErrShortBuffer = errors.New("zkproto: packet too short")
	// ErrBadLength: a length or count prefix is negative (other than the
	// -1 null marker) or larger than the bytes left in the packet.
	ErrBadLength = errors.New("zkproto: bad length prefix")
	// ErrFrameTooLarge: a frame's length prefix exceeds the limit or is
	// negative; the body was not read.
	ErrFrameTooLarge = errors.New("zkproto: frame length out of range")
	// ErrUnknownOpcode: the request header decoded but its type is not a
	// request this codec knows; the server should answer CodeUnimplemented.
	ErrUnknownOpcode = errors.New("zkproto: unknown opcode")
	// ErrBadMultiOp: a multi carries an op type that is not allowed there
	// (e.g. a read in multi, a write in multiRead, or an unknown type).
	ErrBadMultiOp = errors.New("zkproto: bad op in multi")
	// ErrBadMultiResult: a multi response carries an unknown result type.
	ErrBadMultiResult = errors.New("zkproto: bad result in multi response")
	// ErrTrailingBytes: Finish found unread bytes.
	ErrTrailingBytes = errors.New("zkproto: trailing bytes")
	// ErrEncode: a value cannot be represented (a length beyond int32, a
	// nil record in a multi, an unknown multi result type).
	ErrEncode = errors.New("zkproto: cannot encode")
)

// Record is a jute record. Encode cannot fail on valid values; invalid ones
// set the Encoder's sticky error. Decode returns the Decoder's first error.
type Record interface {
	Encode(e *Encoder)
	Decode(d *Decoder) error
}

// Decoder reads jute primitives from one packet. The first error is sticky:
// afterwards every read returns a zero value, so record decoders can read
// all fields and check Err once.
type Decoder struct {
	b   []byte
	off int
	err error
}

// NewDecoder decodes b. Decoded byte slices are copies, so b may be reused.
func NewDecoder(b []byte) *Decoder { return &Decoder{b: b} }

// Err is the first error met, or nil.
func (d *Decoder) Err() error { return d.err }

// Remaining is the number of unread bytes.
func (d *Decoder) Remaining() int { return len(d.b) - d.off }

// Offset is the number of bytes consumed.
func (d *Decoder) Offset() int { return d.off }

// Finish returns the first error, or ErrTrailingBytes if bytes are left.
// ZooKeeper ignores trailing bytes, so request decoding does not call it.
func (d *Decoder) Finish() error {
	if d.err == nil && d.Remaining() != 0 {
		d.fail(ErrTrailingBytes)
	}
	return d.err
}

func (d *Decoder) fail(err error) { d.failAt(err, d.off) }

func (d *Decoder) failAt(err error, off int) {
	if d.err == nil {
		d.err = fmt.Errorf("%w (offset %d)", err, off)
	}
}

func (d *Decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > d.Remaining() {
		d.fail(ErrShortBuffer)
		return nil
	}
	v := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return v
}

// Int reads a jute int: 4 bytes big-endian.
func (d *Decoder) Int() int32 {
	if v := d.take(4); v != nil {
		return int32(binary.BigEndian.Uint32(v))
	}
	return 0
}

// Long reads a jute long: 8 bytes big-endian.
func (d *Decoder) Long() int64 {
	if v := d.take(8); v != nil {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

// Bool reads a jute boolean: one byte, non-zero is true (as Java's
// DataInput.readBoolean).
func (d *Decoder) Bool() bool {
	v := d.take(1)
	return v != nil && v[0] != 0
}

// length reads a length/count prefix. It returns -1 for null, otherwise a
// value n with n*minElem <= Remaining, checked before the caller allocates.
func (d *Decoder) length(minElem int) int {
	n := d.Int()
	if d.err != nil {
		return -1
	}
	if n == -1 {
		return -1
	}
	if n < 0 || int64(n)*int64(minElem) > int64(d.Remaining()) {
		d.failAt(ErrBadLength, d.off-4)
		return -1
	}
	return int(n)
}

// Buffer reads a jute buffer. A null buffer (-1) is nil; an empty one is a
// non-nil empty slice, so re-encoding is byte-exact.
func (d *Decoder) Buffer() []byte {
	n := d.length(1)
	if n < 0 {
		return nil
	}
	return append(make([]byte, 0, n), d.take(n)...)
}

// Ustring reads a jute ustring. Null (-1) reads as "". The bytes are kept
// as sent; ZooKeeper does not reject invalid UTF-8 either.
func (d *Decoder) Ustring() string {
	n := d.length(1)
	if n < 0 {
		return ""
	}
	return string(d.take(n))
}

// Strings reads a vector<ustring>; null reads as nil.
func (d *Decoder) Strings() []string {
	return decodeVector(d, 4, (*Decoder).Ustring)
}

// maxPrealloc caps what a vector preallocates from its (already bounded)
// count; beyond it the slice grows only as elements actually decode.
const maxPrealloc = 64

// decodeVector reads a jute vector whose elements occupy at least minElem
// bytes each.
func decodeVector[T any](d *Decoder, minElem int, elem func(*Decoder) T) []T {
	n := d.length(minElem)
	if n < 0 {
		return nil
	}
	out := make([]T, 0, min(n, maxPrealloc))
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, elem(d))
	}
	if d.err != nil {
		return nil
	}
	return out
}

// Encoder appends jute primitives to a byte slice.
type Encoder struct {
	b   []byte
	err error
}

// NewEncoder appends to buf (which may be nil).
func NewEncoder(buf []byte) *Encoder { return &Encoder{b: buf} }

// Bytes is the encoded output.
func (e *Encoder) Bytes() []byte { return e.b }

// Err is the first encoding error, or nil.
func (e *Encoder) Err() error { return e.err }

// Fail records err (wrapped in ErrEncode) unless an error is already set.
func (e *Encoder) Fail(err error) {
	if e.err == nil {
		e.err = fmt.Errorf("%w: %v", ErrEncode, err)
	}
}

func (e *Encoder) Int(v int32)  { e.b = binary.BigEndian.AppendUint32(e.b, uint32(v)) }
func (e *Encoder) Long(v int64) { e.b = binary.BigEndian.AppendUint64(e.b, uint64(v)) }

func (e *Encoder) Bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

func (e *Encoder) len(n int) {
	if n > math.MaxInt32 {
		e.Fail(errors.New("length exceeds int32"))
		n = 0
	}
	e.Int(int32(n))
}

// Buffer writes a jute buffer; nil is written as null (-1), exactly as
// Java's writeBuffer(null). Use []byte{} for an empty, non-null buffer.
func (e *Encoder) Buffer(b []byte) {
	if b == nil {
		e.Int(-1)
		return
	}
	e.len(len(b))
	e.b = append(e.b, b...)
}

// Ustring writes a jute ustring. Go strings are never null, so "" is
// written with length 0, as ZooKeeper writes every string it sends.
func (e *Encoder) Ustring(s string) {
	e.len(len(s))
	e.b = append(e.b, s...)
}

// Strings writes a vector<ustring>. A nil slice is written as an empty
// vector (count 0), never as null: ZooKeeper servers always send lists, and
// some clients (kazoo) fail on a null one.
func (e *Encoder) Strings(ss []string) {
	e.len(len(ss))
	for _, s := range ss {
		e.Ustring(s)
	}
}

// encodeVector writes a vector of records; nil is written as empty (see
// Strings).
func encodeVector[T any, P interface {
	*T
	Encode(*Encoder)
}](e *Encoder, v []T) {
	e.len(len(v))
	for i := range v {
		P(&v[i]).Encode(e)
	}
}
