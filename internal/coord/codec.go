package coord

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/meridian-coord/meridian/internal/errs"
)

// Tag is the first byte of every coordination command in the raft log; tree
// commands start with their own version byte (1), so the two never collide.
const Tag byte = 0xC1

// MaxInnerBytes bounds the tree command carried by a fenced write.
const MaxInnerBytes = 4 << 20

// extVersion starts the optional extension block after Value: the fields
// queues and barriers added. It is written only when one of them is set, so
// every command an older binary could write encodes byte for byte as before
// and an older binary still decodes them during a rolling upgrade.
//
// Version 2 appends the local-first lock fields (Region, LocalFirst); it is
// written only when one of those is set, so commands without them still
// encode as version 1 (or with no block at all).
const (
	extVersion  byte = 1
	extVersion2 byte = 2
)

// Format levels and newer formats.
//
// A binary applies the coordination commands of the levels it knows; the
// level of a command is what a member must understand to apply it (see
// Level). Bytes reserved for what later binaries may add (an operation
// above the last known one, up to maxFutureOp; an extension block version
// above the last known one, up to maxFutureExt) make Decode return
// ErrNewerFormat: the command is well framed but of a format this binary
// does not know, which its caller must not skip as garbage (skipping would
// make this member's state diverge from the members that apply it). Other
// bytes that do not decode are ErrMarshalling, as before.
const (
	// LevelBase: locks, counters, fencing, proclaim (OpAcquire to OpAdd),
	// with no extension block.
	LevelBase = 1
	// LevelQueues: queues and barriers (OpPush to OpCancelEnter) and the
	// extension block version 1.
	LevelQueues = 2
	// LevelLocalFirst: local-first locks (extension block version 2) and
	// cluster settings (OpSetting).
	LevelLocalFirst = 3

	lastOp       = OpSetting
	maxFutureOp  = 63
	maxFutureExt = 15
)

// ErrNewerFormat is what Decode returns for a command of a newer format
// than this binary knows (see LevelBase).
var ErrNewerFormat = errors.New("coord: command of a newer format than this binary knows")

// Level is the format level of c: what a member must understand to apply
// it.
func (c *Command) Level() int {
	switch {
	case c.Op == OpSetting || c.hasExt2():
		return LevelLocalFirst
	case c.Op >= OpPush && c.Op <= OpCancelEnter || c.hasExt():
		return LevelQueues
	}
	return LevelBase
}

func (c *Command) hasExt() bool {
	return c.VisibilityMs != 0 || c.Detach || c.Item != 0 || c.Attempt != 0 || c.Waiter != 0 || c.Parties != 0 || c.hasExt2()
}

func (c *Command) hasExt2() bool { return c.Region != "" || c.LocalFirst != 0 }

// Encode serializes c: Tag, then varints and length-prefixed strings, then
// the extension block if any of its fields is set.
func Encode(c *Command) ([]byte, error) {
	if len(c.Name) > MaxLockNameBytes || len(c.Inner) > MaxInnerBytes || len(c.Value) > MaxValueBytes {
		return nil, errs.ErrRequestTooLarge
	}
	// Refuse here what Decode refuses, so a proposal is never committed only
	// to be skipped by every replica (its caller would wait for nothing).
	if c.Permits < 0 || c.Permits > MaxPermits || c.Parties < 0 || c.Parties > MaxParties ||
		len(c.Region) > MaxRegionBytes || c.LocalFirst < 0 || c.LocalFirst > MaxLocalFirst ||
		(c.Op > lastOp && c.Op <= maxFutureOp) {
		return nil, errs.ErrBadArguments
	}
	b := make([]byte, 0, 48+len(c.Name)+len(c.Inner))
	b = append(b, Tag, byte(c.Op), byte(c.Mode))
	if c.Wait {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, c.ID)
	b = binary.AppendVarint(b, c.TimeMs)
	b = binary.AppendVarint(b, c.Session)
	b = binary.AppendVarint(b, c.DelayMs)
	b = binary.AppendVarint(b, c.Target)
	b = binary.AppendUvarint(b, c.Token)
	b = binary.AppendVarint(b, int64(c.Permits))
	b = binary.AppendVarint(b, c.Delta)
	b = binary.AppendUvarint(b, uint64(len(c.Name)))
	b = append(b, c.Name...)
	b = binary.AppendUvarint(b, uint64(len(c.Inner)))
	b = append(b, c.Inner...)
	b = binary.AppendUvarint(b, uint64(len(c.Value)))
	b = append(b, c.Value...)
	if c.hasExt() {
		if c.hasExt2() {
			b = append(b, extVersion2)
		} else {
			b = append(b, extVersion)
		}
		b = binary.AppendVarint(b, c.VisibilityMs)
		if c.Detach {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = binary.AppendUvarint(b, c.Item)
		b = binary.AppendUvarint(b, uint64(c.Attempt))
		b = binary.AppendUvarint(b, c.Waiter)
		b = binary.AppendVarint(b, int64(c.Parties))
		if c.hasExt2() {
			b = binary.AppendUvarint(b, uint64(len(c.Region)))
			b = append(b, c.Region...)
			b = binary.AppendVarint(b, int64(c.LocalFirst))
		}
	}
	return b, nil
}

// Decode parses what Encode wrote; it is strict and never panics.
func Decode(b []byte) (*Command, error) {
	bad := errs.ErrMarshalling
	if len(b) < 4 || b[0] != Tag || b[3] > 1 {
		return nil, bad
	}
	if op := OpType(b[1]); op > lastOp && op <= maxFutureOp {
		return nil, ErrNewerFormat
	}
	c := &Command{Op: OpType(b[1]), Mode: Mode(b[2]), Wait: b[3] == 1}
	b = b[4:]
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	sv := func() (int64, bool) {
		v, n := binary.Varint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	bytesField := func(max int) ([]byte, bool) {
		n, ok := uv()
		if !ok || n > uint64(max) || n > uint64(len(b)) {
			return nil, false
		}
		out := append([]byte(nil), b[:n]...)
		b = b[n:]
		return out, true
	}
	var ok bool
	if c.ID, ok = uv(); !ok {
		return nil, bad
	}
	for _, p := range []*int64{&c.TimeMs, &c.Session, &c.DelayMs, &c.Target} {
		if *p, ok = sv(); !ok {
			return nil, bad
		}
	}
	if c.Token, ok = uv(); !ok {
		return nil, bad
	}
	permits, ok := sv()
	if !ok || permits < 0 || permits > MaxPermits {
		return nil, bad
	}
	c.Permits = int32(permits)
	if c.Delta, ok = sv(); !ok {
		return nil, bad
	}
	lock, ok := bytesField(MaxLockNameBytes)
	if !ok {
		return nil, bad
	}
	c.Name = string(lock)
	if c.Inner, ok = bytesField(MaxInnerBytes); !ok {
		return nil, bad
	}
	if c.Value, ok = bytesField(MaxValueBytes); !ok {
		return nil, bad
	}
	if len(b) > 0 {
		ver := b[0]
		if ver > extVersion2 && ver <= maxFutureExt {
			return nil, ErrNewerFormat
		}
		if ver != extVersion && ver != extVersion2 {
			return nil, bad
		}
		b = b[1:]
		if c.VisibilityMs, ok = sv(); !ok || len(b) == 0 || b[0] > 1 {
			return nil, bad
		}
		c.Detach = b[0] == 1
		b = b[1:]
		if c.Item, ok = uv(); !ok {
			return nil, bad
		}
		attempt, ok := uv()
		if !ok || attempt > math.MaxUint32 {
			return nil, bad
		}
		c.Attempt = uint32(attempt)
		if c.Waiter, ok = uv(); !ok {
			return nil, bad
		}
		parties, ok := sv()
		if !ok || parties < 0 || parties > MaxParties {
			return nil, bad
		}
		c.Parties = int32(parties)
		if ver == extVersion2 {
			region, ok := bytesField(MaxRegionBytes)
			if !ok {
				return nil, bad
			}
			c.Region = string(region)
			k, ok := sv()
			if !ok || k < 0 || k > MaxLocalFirst {
				return nil, bad
			}
			c.LocalFirst = int32(k)
		}
	}
	if len(b) != 0 {
		return nil, bad
	}
	if len(c.Inner) == 0 {
		c.Inner = nil
	}
	if len(c.Value) == 0 {
		c.Value = nil
	}
	return c, nil
}
