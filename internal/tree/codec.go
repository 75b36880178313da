package tree

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/meridian-coord/meridian/internal/errs"
)

// Command wire format, version 2 (all integers varints unless noted):
//
//	byte version=2
//	uvarint ID, varint TimeMs, varint Session
//	ids  Auth       (uvarint count, then scheme string, id string each)
//	op   Op
//	uvarint count, op each: Ops
//	varint TimeoutMs, bytes Password, uvarint count + varint each: Sessions
//
//	op:     byte Type, string Path, nullable Data, acl ACL, varint Mode,
//	        varint TTLMs, varint Version
//	acl:    uvarint count, then varint Perms, string scheme, string id each
//	string/bytes: uvarint length, then the bytes
//	nullable: uvarint 0 for null, else length+1, then the bytes
//
// ZooKeeper tells null data from empty data (getData answers null for a node
// created with null), so the data field keeps the difference. Version 1 had
// plain bytes there; it is still decoded, empty meaning null as it then did.
//
// The decoder checks every length against both its limit and the bytes
// left, so a lying prefix cannot make it allocate more than the input size
// (times a small constant) or read out of bounds.
const (
	codecVersion   = 2
	codecVersionV1 = 1 // plain bytes for op data
)

// Limits on strings the codec accepts besides those in types.go.
const (
	maxIDBytes       = 1024 // an ACL or auth scheme or id
	maxPasswordBytes = 64   // Apply wants exactly 16
)

// EncodeCommand serializes c for the raft log. It refuses what DecodeCommand
// would refuse, so that nothing undecodable is ever proposed.
func EncodeCommand(c *Command) ([]byte, error) {
	if c == nil {
		return nil, errs.ErrBadArguments
	}
	if err := checkCommand(c); err != nil {
		return nil, err
	}
	// Payload bytes alone, to refuse huge commands before building them.
	payload := len(c.Op.Path) + len(c.Op.Data)
	for i := range c.Ops {
		payload += len(c.Ops[i].Path) + len(c.Ops[i].Data)
	}
	if payload > MaxCommandBytes {
		return nil, errs.ErrRequestTooLarge
	}
	b := make([]byte, 0, payload+64)
	b = append(b, codecVersion)
	b = binary.AppendUvarint(b, c.ID)
	b = binary.AppendVarint(b, c.TimeMs)
	b = binary.AppendVarint(b, c.Session)
	b = binary.AppendUvarint(b, uint64(len(c.Auth)))
	for _, id := range c.Auth {
		b = appendString(b, id.Scheme)
		b = appendString(b, id.ID)
	}
	b = appendOp(b, &c.Op)
	b = binary.AppendUvarint(b, uint64(len(c.Ops)))
	for i := range c.Ops {
		b = appendOp(b, &c.Ops[i])
	}
	b = binary.AppendVarint(b, int64(c.TimeoutMs))
	b = appendString(b, string(c.Password))
	b = binary.AppendUvarint(b, uint64(len(c.Sessions)))
	for _, s := range c.Sessions {
		b = binary.AppendVarint(b, s)
	}
	if len(b) > MaxCommandBytes {
		return nil, errs.ErrRequestTooLarge
	}
	return b, nil
}

// checkCommand applies the decoder's limits, with the error a client should see.
func checkCommand(c *Command) error {
	if len(c.Auth) > MaxAuthIDs || len(c.Ops) > MaxMultiOps ||
		len(c.Sessions) > MaxExpireBatch || len(c.Password) > maxPasswordBytes {
		return errs.ErrBadArguments
	}
	for _, id := range c.Auth {
		if len(id.Scheme) > maxIDBytes || len(id.ID) > maxIDBytes {
			return errs.ErrBadArguments
		}
	}
	if err := checkOp(&c.Op); err != nil {
		return err
	}
	for i := range c.Ops {
		if err := checkOp(&c.Ops[i]); err != nil {
			return err
		}
	}
	return nil
}

func checkOp(op *Op) error {
	switch {
	case len(op.Path) > MaxPathBytes:
		return errs.ErrInvalidPath
	case len(op.Data) > MaxDataBytes:
		return errs.ErrDataTooLarge
	case len(op.ACL) > MaxACLEntries:
		return errs.ErrInvalidACL
	}
	for _, a := range op.ACL {
		if len(a.ID.Scheme) > maxIDBytes || len(a.ID.ID) > maxIDBytes {
			return errs.ErrInvalidACL
		}
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendACL(b []byte, acl []ACL) []byte {
	b = binary.AppendUvarint(b, uint64(len(acl)))
	for _, a := range acl {
		b = binary.AppendVarint(b, int64(a.Perms))
		b = appendString(b, a.ID.Scheme)
		b = appendString(b, a.ID.ID)
	}
	return b
}

// appendNullable writes b keeping nil apart from empty.
func appendNullable(dst, b []byte) []byte {
	if b == nil {
		return append(dst, 0)
	}
	dst = binary.AppendUvarint(dst, uint64(len(b))+1)
	return append(dst, b...)
}

func appendOp(b []byte, op *Op) []byte {
	b = append(b, byte(op.Type))
	b = appendString(b, op.Path)
	b = appendNullable(b, op.Data)
	b = appendACL(b, op.ACL)
	b = binary.AppendVarint(b, int64(op.Mode))
	b = binary.AppendVarint(b, op.TTLMs)
	b = binary.AppendVarint(b, int64(op.Version))
	return b
}

// DecodeCommand parses a command encoded by EncodeCommand. Malformed input
// yields an error wrapping errs.ErrMarshalling (or errs.ErrRequestTooLarge).
// The ops' Data share b's bytes: b must not change while the command is
// used.
func DecodeCommand(b []byte) (*Command, error) {
	c := &Command{}
	if err := DecodeCommandInto(c, b); err != nil {
		return nil, err
	}
	return c, nil
}

// DecodeCommandInto is DecodeCommand into c, which it overwrites whole
// (its slices are not reused: what a command held stays as it was), for
// a caller that decodes command after command into one Command.
func DecodeCommandInto(c *Command, b []byte) error {
	*c = Command{}
	if len(b) > MaxCommandBytes {
		return fmt.Errorf("%w: command of %d bytes", errs.ErrRequestTooLarge, len(b))
	}
	if len(b) == 0 || (b[0] != codecVersion && b[0] != codecVersionV1) {
		return fmt.Errorf("%w: unknown command encoding", errs.ErrMarshalling)
	}
	d := decoder{b: b[1:], base: errs.ErrMarshalling, v1: b[0] == codecVersionV1}
	c.ID = d.uvarint()
	c.TimeMs = d.varint()
	c.Session = d.varint()
	if n := d.count(MaxAuthIDs); n > 0 {
		c.Auth = make([]ID, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			c.Auth = append(c.Auth, ID{Scheme: d.idStr(maxIDBytes), ID: d.idStr(maxIDBytes)})
		}
	}
	d.op(&c.Op)
	if n := d.count(MaxMultiOps); n > 0 {
		// Grow as ops actually decode rather than trusting the count.
		for i := 0; i < n && d.err == nil; i++ {
			var op Op
			d.op(&op)
			c.Ops = append(c.Ops, op)
		}
	}
	c.TimeoutMs = d.int32()
	c.Password = d.bytes(maxPasswordBytes)
	if n := d.count(MaxExpireBatch); n > 0 {
		c.Sessions = make([]int64, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			c.Sessions = append(c.Sessions, d.varint())
		}
	}
	d.end()
	if d.err != nil {
		*c = Command{}
		return d.err
	}
	return nil
}

// decoder reads the varint format above with sticky errors: after the first
// failure every read returns a zero value.
type decoder struct {
	b    []byte
	base error // what every error wraps
	err  error
	v1   bool // version 1 input: data is plain bytes
}

func (d *decoder) fail(msg string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", d.base, msg)
	}
	d.b = nil
}

func (d *decoder) end() {
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int32() int32 {
	v := d.varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail("int32 out of range")
		return 0
	}
	return int32(v)
}

// count reads an element count: at most max, and at most the bytes left
// (every element takes at least one byte).
func (d *decoder) count(max int) int {
	v := d.uvarint()
	if v > uint64(max) || v > uint64(len(d.b)) {
		d.fail("count out of range")
		return 0
	}
	return int(v)
}

// raw returns the next length-prefixed field without copying.
func (d *decoder) raw(max int) []byte {
	v := d.uvarint()
	if v > uint64(max) || v > uint64(len(d.b)) {
		d.fail("length out of range")
		return nil
	}
	out := d.b[:v:v]
	d.b = d.b[v:]
	return out
}

func (d *decoder) bytes(max int) []byte { return cloneBytes(d.raw(max)) }

// nullableRaw reads what appendNullable wrote (plain bytes in version 1,
// where empty data was stored as null), without a copy: the bytes are
// d's; null reports a null value.
func (d *decoder) nullableRaw(max int) (b []byte, null bool) {
	if d.v1 {
		if b := d.raw(max); len(b) > 0 {
			return b, false
		}
		return nil, true
	}
	v := d.uvarint()
	if v == 0 {
		return nil, true
	}
	if v-1 > uint64(max) || v-1 > uint64(len(d.b)) {
		d.fail("length out of range")
		return nil, true
	}
	out := d.b[: v-1 : v-1]
	d.b = d.b[v-1:]
	return out, false
}

func (d *decoder) str(max int) string { return string(d.raw(max)) }

// idStr is str for the parts of an identity: the schemes and world's one
// id come back as constants, not allocated for every ACL and every
// requester of every write on every member.
func (d *decoder) idStr(max int) string {
	b := d.raw(max)
	switch string(b) { // no allocation: compared in place
	case "world":
		return "world"
	case "anyone":
		return "anyone"
	case "ip":
		return "ip"
	case "digest":
		return "digest"
	case "auth":
		return "auth"
	case "sasl":
		return "sasl"
	case "x509":
		return "x509"
	}
	return string(b)
}

func (d *decoder) acl() []ACL {
	n := d.count(MaxACLEntries)
	if n == 0 {
		return nil
	}
	acl := make([]ACL, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		perms := d.int32()
		acl = append(acl, ACL{Perms: perms, ID: ID{Scheme: d.idStr(maxIDBytes), ID: d.idStr(maxIDBytes)}})
	}
	return acl
}

func (d *decoder) op(op *Op) {
	op.Type = OpType(d.byte())
	op.Path = d.str(MaxPathBytes)
	// Not copied: Apply copies the data it stores (setPathData), and the
	// command is decoded on every member for every write.
	if b, null := d.nullableRaw(MaxDataBytes); !null {
		op.Data = b
	}
	op.ACL = d.acl()
	op.Mode = CreateMode(d.int32())
	op.TTLMs = d.varint()
	op.Version = d.int32()
}
