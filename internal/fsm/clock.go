package fsm

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/meridian-coord/meridian/internal/errs"
)

// Zxids across groups.
//
// With one raft group the zxid of an entry was its log index. With several
// groups (regional keyspaces) log indexes are not comparable: a client that
// saw zxid 5000 in one group would wait forever in another at index 40. So
// the proposer may wrap an entry in a clock envelope carrying its wall
// clock and the highest zxid the requesting session has seen, and Apply
// gives every entry, wrapped or not, the zxid
//
//	zxid = max(lastZxid+1, index, physicalMs<<LogicalBits, minZxid+1)
//
// where the last two terms count only for a wrapped entry. Without
// envelopes that is the log index exactly, as it always was. With them it
// is a hybrid logical clock: 48 bits of milliseconds above 16 logical bits,
// strictly increasing in a group (also when the proposer's clock goes
// back), comparable across groups up to clock skew, and above anything the
// session has seen, so a session's reads and writes never go back in time
// when it moves from one group to another.
//
// Envelope format (ClockTag, then uvarints):
//
//	byte ClockTag, uvarint physicalMs, uvarint minZxid, inner entry
//
// The inner entry is exactly the bytes that would otherwise be the entry:
// a tree command, a coordination command or a keyspace command, never
// another envelope.
//
// Overflow: physicalMs above MaxPhysicalMs (the year 6429) or minZxid of
// MaxZxid or more makes the envelope malformed: the entry is skipped on
// every member, and takes the zxid it would have had unwrapped. Within
// those bounds no single term exceeds MaxZxid; only lastZxid+1 can, once
// the group reached MaxZxid, and then every later entry is skipped (the
// group's zxids are exhausted). A proposer keeps far from that by bounding
// a session's claimed last zxid by its own clock, as ZooKeeper refuses a
// client whose last zxid is ahead of the server.

// ClockTag is the first byte of a clock envelope. Tree commands start with
// their codec version (1 or 2), coordination commands with coord.Tag
// (0xC1), keyspace commands with KeyspaceTag (0xC3).
const ClockTag byte = 0xC2

const (
	// LogicalBits is the width of the logical counter in a zxid.
	LogicalBits = 16
	// MaxPhysicalMs is the latest clock an envelope may carry, so that
	// physicalMs<<LogicalBits stays a positive int64.
	MaxPhysicalMs = 1<<(63-LogicalBits) - 1
	// MaxZxid is the largest zxid (ZooKeeper's zxid is a signed 64-bit
	// number).
	MaxZxid = math.MaxInt64
	// MaxClockEnvelopeBytes is the most WrapClock adds to an entry: the tag
	// and two uvarints. A proposer must allow that much above the inner
	// command's own limit (tree.MaxCommandBytes, coord.MaxInnerBytes).
	MaxClockEnvelopeBytes = 1 + 2*binary.MaxVarintLen64
)

// WrapClock wraps the entry inner in a clock envelope: physicalMs is the
// proposer's wall clock in milliseconds since the Unix epoch, minZxid the
// highest zxid the requesting session has seen (0 if none). It refuses
// (errs.ErrBadArguments) what Apply would skip: an empty or already
// wrapped inner entry, a clock beyond MaxPhysicalMs, a minZxid of MaxZxid
// or more.
func WrapClock(physicalMs, minZxid uint64, inner []byte) ([]byte, error) {
	if len(inner) == 0 || inner[0] == ClockTag || inner[0] == DepsTag || physicalMs > MaxPhysicalMs || minZxid >= MaxZxid {
		return nil, errs.ErrBadArguments
	}
	b := make([]byte, 0, MaxClockEnvelopeBytes+len(inner))
	b = append(b, ClockTag)
	b = binary.AppendUvarint(b, physicalMs)
	b = binary.AppendUvarint(b, minZxid)
	return append(b, inner...), nil
}

// ZxidPhysicalMs is the clock part of a zxid: the milliseconds since the
// Unix epoch it was assigned at (or later, when the logical counter
// overflowed into them). A zxid assigned from log indexes alone gives a
// time near 0.
func ZxidPhysicalMs(zxid int64) uint64 { return uint64(zxid) >> LogicalBits }

// clockStamp is what an envelope carries; the zero value is "no envelope".
type clockStamp struct {
	tag        byte // ClockTag or DepsTag; 0: no envelope
	physicalMs uint64
	minZxid    uint64
	deps       []Dep // a DepsTag envelope's dependencies (deps.go)
}

// unwrapClock returns the entry inside data's clock envelope and its
// stamp, or data itself and no stamp when data is not wrapped. A malformed
// envelope is an error (the entry is skipped).
func unwrapClock(data []byte) ([]byte, clockStamp, error) {
	if len(data) == 0 || (data[0] != ClockTag && data[0] != DepsTag) {
		return data, clockStamp{}, nil
	}
	withDeps := data[0] == DepsTag
	bad := func(what string) ([]byte, clockStamp, error) {
		return nil, clockStamp{}, fmt.Errorf("clock envelope: %w: %s", errs.ErrMarshalling, what)
	}
	b := data[1:]
	physical, n := binary.Uvarint(b)
	if n <= 0 {
		return bad("truncated physical time")
	}
	b = b[n:]
	minZxid, n := binary.Uvarint(b)
	if n <= 0 {
		return bad("truncated min zxid")
	}
	b = b[n:]
	var deps []Dep
	if withDeps {
		var err error
		if deps, b, err = decodeDeps(b); err != nil {
			return nil, clockStamp{}, fmt.Errorf("clock envelope: %w", err)
		}
	}
	switch {
	case physical > MaxPhysicalMs:
		return bad("physical time out of range")
	case minZxid >= MaxZxid:
		return bad("min zxid out of range")
	case len(b) == 0:
		return bad("no inner entry")
	case b[0] == ClockTag || b[0] == DepsTag:
		return bad("nested envelope")
	}
	return b, clockStamp{tag: data[0], physicalMs: physical, minZxid: minZxid, deps: deps}, nil
}

// nextZxid is the zxid rule (see the comment at the top of this file). It
// reports false when the zxid would pass MaxZxid.
func nextZxid(last int64, index uint64, c clockStamp) (int64, bool) {
	// last <= MaxZxid and minZxid < MaxZxid, so no term overflows uint64.
	z := max(uint64(last)+1, index, c.physicalMs<<LogicalBits, c.minZxid+1)
	if z > MaxZxid {
		return 0, false
	}
	return int64(z), true
}
