package meridianpb

// Encoding and decoding without reflection for the messages of the calls
// the native API makes most (reads and writes of one znode), not
// generated. The lean transport (internal/wire) uses AppendWire and
// UnmarshalWire when a message has them and proto.Marshal/Unmarshal
// otherwise.
//
// They are the protobuf encoding, not a variant of it: AppendWire writes
// the bytes proto.Marshal writes (fields in number order, proto3 zero
// values left out); UnmarshalWire decodes what it knows exactly as
// proto.Unmarshal does, and reports false on anything else (an unknown
// field, a wire type it does not expect, a submessage sent twice, a
// string that is not UTF-8, a truncated field): the caller then decodes
// with proto.Unmarshal, which keeps unknown fields or returns the error.
// AppendWire reports false for a message it cannot encode so (unknown
// fields kept from a decode, a string that is not UTF-8). TestFastCodec
// checks both against the protobuf library on random messages.

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendStringField(b []byte, num protowire.Number, v string) ([]byte, bool) {
	if v == "" {
		return b, true
	}
	if !utf8.ValidString(v) {
		return b, false
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v), true
}

// appendMessageField appends a submessage field: its tag, its length and
// what enc appends, the length's varint grown in place when the message
// turns out longer than 127 bytes.
func appendMessageField(b []byte, num protowire.Number, enc func([]byte) ([]byte, bool)) ([]byte, bool) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	at := len(b)
	b = append(b, 0)
	b, ok := enc(b)
	if !ok {
		return b, false
	}
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b, true
	}
	size := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, size-1)...)
	copy(b[at+size:], b[at+1:at+1+n])
	protowire.AppendVarint(b[at:at], uint64(n))
	return b, true
}

// reader decodes one message's fields.
type reader struct {
	b   []byte
	bad bool
}

// next returns the next field's number and type; false at the end or on
// a malformed tag.
func (r *reader) next() (protowire.Number, protowire.Type, bool) {
	if len(r.b) == 0 || r.bad {
		return 0, 0, false
	}
	num, typ, n := protowire.ConsumeTag(r.b)
	if n < 0 {
		r.bad = true
		return 0, 0, false
	}
	r.b = r.b[n:]
	return num, typ, true
}

func (r *reader) varint(typ protowire.Type) uint64 {
	if typ != protowire.VarintType {
		r.bad = true
		return 0
	}
	v, n := protowire.ConsumeVarint(r.b)
	if n < 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

// bytes returns a length-delimited field's bytes, aliasing the input.
func (r *reader) bytes(typ protowire.Type) []byte {
	if typ != protowire.BytesType {
		r.bad = true
		return nil
	}
	v, n := protowire.ConsumeBytes(r.b)
	if n < 0 {
		r.bad = true
		return nil
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) str(typ protowire.Type) string {
	v := r.bytes(typ)
	if !utf8.Valid(v) {
		r.bad = true
		return ""
	}
	return string(v)
}

// sub decodes a submessage field into a new message at *dst; false when
// the field came before (proto.Unmarshal merges the two) or does not
// decode here.
func sub[T any, P interface {
	*T
	UnmarshalWire([]byte) bool
}](r *reader, typ protowire.Type, dst *P) bool {
	if *dst != nil {
		return false
	}
	return subInto(r, typ, dst, P(new(T)))
}

// subInto is sub decoding into m, a message the caller allocated.
func subInto[T any, P interface {
	*T
	UnmarshalWire([]byte) bool
}](r *reader, typ protowire.Type, dst *P, m P) bool {
	if *dst != nil {
		return false
	}
	*dst = m
	v := r.bytes(typ)
	return r.bad || m.UnmarshalWire(v)
}

// headerStat is a reply's Header and Stat in one allocation (a reply to a
// read or a write of one znode has both).
type headerStat struct {
	h Header
	s Stat
}

// headerStatIn is *p, made by the first of the two fields decoded.
func headerStatIn(p **headerStat) *headerStat {
	if *p == nil {
		*p = new(headerStat)
	}
	return *p
}

// copyBytes is a bytes field's value as proto.Unmarshal makes it: a copy,
// empty (not nil) when the field was sent empty.
func copyBytes(v []byte) []byte { return append([]byte{}, v...) }

// AppendWire appends h's encoding.
func (h *Header) AppendWire(b []byte) ([]byte, bool) {
	if len(h.unknownFields) > 0 {
		return b, false
	}
	b = appendVarintField(b, 1, uint64(h.Zxid))
	b = appendVarintField(b, 2, h.MemberId)
	b = appendVarintField(b, 3, h.LeaderId)
	b = appendVarintField(b, 4, h.Term)
	b = appendVarintField(b, 5, uint64(h.NotifiedZxid))
	return appendStringField(b, 6, h.View)
}

// UnmarshalWire decodes b into h (reset first); false: use proto.Unmarshal.
func (h *Header) UnmarshalWire(b []byte) bool {
	h.Reset()
	r := reader{b: b}
	for {
		num, typ, ok := r.next()
		if !ok {
			break
		}
		switch num {
		case 1:
			h.Zxid = int64(r.varint(typ))
		case 2:
			h.MemberId = r.varint(typ)
		case 3:
			h.LeaderId = r.varint(typ)
		case 4:
			h.Term = r.varint(typ)
		case 5:
			h.NotifiedZxid = int64(r.varint(typ))
		case 6:
			h.View = r.str(typ)
		default:
			return false
		}
	}
	return !r.bad
}

// AppendWire appends s's encoding.
func (s *Stat) AppendWire(b []byte) ([]byte, bool) {
	if len(s.unknownFields) > 0 {
		return b, false
	}
	b = appendVarintField(b, 1, uint64(s.Czxid))
	b = appendVarintField(b, 2, uint64(s.Mzxid))
	b = appendVarintField(b, 3, uint64(s.Ctime))
	b = appendVarintField(b, 4, uint64(s.Mtime))
	b = appendVarintField(b, 5, uint64(int64(s.Version)))
	b = appendVarintField(b, 6, uint64(int64(s.Cversion)))
	b = appendVarintField(b, 7, uint64(int64(s.Aversion)))
	b = appendVarintField(b, 8, uint64(s.EphemeralOwner))
	b = appendVarintField(b, 9, uint64(int64(s.DataLength)))
	b = appendVarintField(b, 10, uint64(int64(s.NumChildren)))
	b = appendVarintField(b, 11, uint64(s.Pzxid))
	return b, true
}

// UnmarshalWire decodes b into s (reset first); false: use proto.Unmarshal.
func (s *Stat) UnmarshalWire(b []byte) bool {
	s.Reset()
	r := reader{b: b}
	for {
		num, typ, ok := r.next()
		if !ok {
			break
		}
		switch num {
		case 1:
			s.Czxid = int64(r.varint(typ))
		case 2:
			s.Mzxid = int64(r.varint(typ))
		case 3:
			s.Ctime = int64(r.varint(typ))
		case 4:
			s.Mtime = int64(r.varint(typ))
		case 5:
			s.Version = int32(r.varint(typ))
		case 6:
			s.Cversion = int32(r.varint(typ))
		case 7:
			s.Aversion = int32(r.varint(typ))
		case 8:
			s.EphemeralOwner = int64(r.varint(typ))
		case 9:
			s.DataLength = int32(r.varint(typ))
		case 10:
			s.NumChildren = int32(r.varint(typ))
		case 11:
			s.Pzxid = int64(r.varint(typ))
		default:
			return false
		}
	}
	return !r.bad
}

// AppendWire appends f's encoding.
func (f *Fence) AppendWire(b []byte) ([]byte, bool) {
	if len(f.unknownFields) > 0 {
		return b, false
	}
	b, ok := appendStringField(b, 1, f.Lock)
	b = appendVarintField(b, 2, f.Token)
	return b, ok
}

// UnmarshalWire decodes b into f (reset first); false: use proto.Unmarshal.
func (f *Fence) UnmarshalWire(b []byte) bool {
	f.Reset()
	r := reader{b: b}
	for {
		num, typ, ok := r.next()
		if !ok {
			break
		}
		switch num {
		case 1:
			f.Lock = r.str(typ)
		case 2:
			f.Token = r.varint(typ)
		default:
			return false
		}
	}
	return !r.bad
}

// AppendWire appends r's encoding.
func (x *ReadRequest) AppendWire(b []byte) ([]byte, bool) {
	if len(x.unknownFields) > 0 {
		return b, false
	}
	b = appendVarintField(b, 1, uint64(x.SessionId))
	b, ok := appendStringField(b, 2, x.Path)
	if x.Watch {
		b = appendVarintField(b, 3, 1)
	}
	b = appendVarintField(b, 4, uint64(int64(x.Consistency)))
	b = appendVarintField(b, 5, uint64(x.MinZxid))
	return b, ok
}

// UnmarshalWire decodes b into x (reset first); false: use proto.Unmarshal.
func (x *ReadRequest) UnmarshalWire(b []byte) bool {
	x.Reset()
	r := reader{b: b}
	for {
		num, typ, ok := r.next()
		if !ok {
			break
		}
		switch num {
		case 1:
			x.SessionId = int64(r.varint(typ))
		case 2:
			x.Path = r.str(typ)
		case 3:
			x.Watch = r.varint(typ) != 0
		case 4:
			x.Consistency = Consistency(int32(r.varint(typ)))
		case 5:
			x.MinZxid = int64(r.varint(typ))
		default:
			return false
		}
	}
	return !r.bad
}

// AppendWire appends x's encoding.
func (x *GetDataResponse) AppendWire(b []byte) ([]byte, bool) {
	if len(x.unknownFields) > 0 {
		return b, false
	}
	ok := true
	if x.Header != nil {
		b, ok = appendMessageField(b, 1, x.Header.AppendWire)
	}
	b = appendBytesField(b, 2, x.Data)
	if x.Stat != nil && ok {
		b, ok = appendMessageField(b, 3, x.Stat.AppendWire)
	}
	return b, ok
}

// UnmarshalWire decodes b into x (reset first); false: use proto.Unmarshal.
func (x *GetDataResponse) UnmarshalWire(b []byte) bool { return x.unmarshalWire(b, nil) }

// unmarshalWire is UnmarshalWire, the Header and Stat decoded into hs
// (nil: allocated here).
func (x *GetDataResponse) unmarshalWire(b []byte, hs *headerStat) bool {
	x.Reset()
	r := reader{b: b}
	for {
		num, typ, ok := r.next()
		if !ok {
			break
		}
		switch num {
		case 1:
			if !subInto(&r, typ, &x.Header, &headerStatIn(&hs).h) {
				return false
			}
		case 2:
			x.Data = copyBytes(r.bytes(typ))
		case 3:
			if !subInto(&r, typ, &x.Stat, &headerStatIn(&hs).s) {
				return false
			}
		default:
			return false
		}
	}
	return !r.bad
}

// AppendWire appends x's encoding.
func (x *SetDataRequest) AppendWire(b []byte) ([]byte, bool) {
	if len(x.unknownFields) > 0 {
		return b, false
	}
	b = appendVarintField(b, 1, uint64(x.SessionId))
	b, ok := appendStringField(b, 2, x.Path)
	b = appendBytesField(b, 3, x.Data)
	if x.Version != nil {
		b = protowire.AppendTag(b, 4, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(*x.Version)))
	}
	if x.Fence != nil && ok {
		b, ok = appendMessageField(b, 5, x.Fence.AppendWire)
	}
	return b, ok
}

// UnmarshalWire decodes b into x (reset first); false: use proto.Unmarshal.
func (x *SetDataRequest) UnmarshalWire(b []byte) bool {
	x.Reset()
	r := reader{b: b}
	for {
		num, typ, ok := r.next()
		if !ok {
			break
		}
		switch num {
		case 1:
			x.SessionId = int64(r.varint(typ))
		case 2:
			x.Path = r.str(typ)
		case 3:
			x.Data = copyBytes(r.bytes(typ))
		case 4:
			v := int32(r.varint(typ))
			x.Version = &v
		case 5:
			if !sub(&r, typ, &x.Fence) {
				return false
			}
		default:
			return false
		}
	}
	return !r.bad
}

// AppendWire appends x's encoding.
func (x *SetDataResponse) AppendWire(b []byte) ([]byte, bool) {
	if len(x.unknownFields) > 0 {
		return b, false
	}
	ok := true
	if x.Header != nil {
		b, ok = appendMessageField(b, 1, x.Header.AppendWire)
	}
	if x.Stat != nil && ok {
		b, ok = appendMessageField(b, 2, x.Stat.AppendWire)
	}
	return b, ok
}

// UnmarshalWire decodes b into x (reset first); false: use proto.Unmarshal.
func (x *SetDataResponse) UnmarshalWire(b []byte) bool { return x.unmarshalWire(b, nil) }

// unmarshalWire is UnmarshalWire, the Header and Stat decoded into hs
// (nil: allocated here).
func (x *SetDataResponse) unmarshalWire(b []byte, hs *headerStat) bool {
	x.Reset()
	r := reader{b: b}
	for {
		num, typ, ok := r.next()
		if !ok {
			break
		}
		switch num {
		case 1:
			if !subInto(&r, typ, &x.Header, &headerStatIn(&hs).h) {
				return false
			}
		case 2:
			if !subInto(&r, typ, &x.Stat, &headerStatIn(&hs).s) {
				return false
			}
		default:
			return false
		}
	}
	return !r.bad
}

// SetDataReply is a SetDataResponse allocated with its Header and Stat:
// one allocation for a reply that has both, where decoding makes them
// apart. The response is &x.SetDataResponse.
type SetDataReply struct {
	SetDataResponse
	hs headerStat
}

// UnmarshalWire decodes b into x's response (reset first), its Header and
// Stat into x; false: use proto.Unmarshal.
func (x *SetDataReply) UnmarshalWire(b []byte) bool {
	x.hs = headerStat{}
	return x.SetDataResponse.unmarshalWire(b, &x.hs)
}

// GetDataReply is a GetDataResponse allocated with its Header and Stat,
// as SetDataReply.
type GetDataReply struct {
	GetDataResponse
	hs headerStat
}

// UnmarshalWire decodes b into x's response (reset first), its Header and
// Stat into x; false: use proto.Unmarshal.
func (x *GetDataReply) UnmarshalWire(b []byte) bool {
	x.hs = headerStat{}
	return x.GetDataResponse.unmarshalWire(b, &x.hs)
}
