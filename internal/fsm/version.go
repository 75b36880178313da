package fsm

import (
	"errors"
	"fmt"

	"github.com/meridian-coord/meridian/internal/coord"
)

// Entries of later formats.
//
// A binary skips an entry it cannot decode, the same way on every member;
// but an entry a later binary wrote on purpose, of a kind or format this
// one does not know, must not be skipped: the members that apply it would
// hold a different state from this one. So the bytes later formats may
// use are reserved now, and Apply refuses an entry that uses them
// (Result.Refused, ErrNewerEntry): nothing changes, not even Applied, and
// the member must stop applying (the replica fails and the process exits)
// until it runs a binary that knows the entry. Reserved: an entry (or a
// fenced write's inner command) starting with 0x03-0x0F (later tree
// codecs) or 0xC6-0xCF (later entry kinds and envelopes), coordination
// operations and extension block versions above the last known
// (coord.ErrNewerFormat), keyspace codec versions 2-15. A later format
// must use those values, never change what existing bytes mean.
//
// ApplyVersion names what this binary applies, for operators and for the
// cluster version a later binary will gate new kinds on: 1 trees, locks,
// counters; 2 queues and barriers; 3 local-first locks and cluster
// settings; 4 clock envelopes and regional keyspaces; 5 clock envelopes
// with dependencies and dependency markers (deps.go) and snapshot
// version 4; 6 no new entry format, but snapshots streamed between
// members (the peer protocol: replica's snapstream.go), which the cluster
// version gates as it gates entries.
const ApplyVersion = 6

// UnadvertisedVersion is the apply version a member counts as until it
// advertises its own (server: the cluster version): 4, the last binary
// that did not advertise. Upgrading from a binary older than that means
// upgrading to one of apply version 4 first.
const UnadvertisedVersion = 4

// DepsVersion is the apply version clock envelopes with dependencies
// (DepsTag) need.
const DepsVersion = 5

// EntryVersion is the lowest apply version a binary needs to apply data,
// an entry as proposed. Every kind a binary that does not advertise
// applies counts as UnadvertisedVersion: the cluster version never falls
// below it, so only kinds of later versions are named here.
func EntryVersion(data []byte) int {
	if len(data) > 0 && data[0] == ClockTag {
		if inner, _, err := unwrapClock(data); err == nil {
			data = inner
		}
	}
	if len(data) > 0 && (data[0] == DepsTag || data[0] == DepsMarkerTag) {
		return DepsVersion
	}
	return UnadvertisedVersion
}

const (
	futureTreeMin     byte = 0x03
	futureTreeMax     byte = 0x0F
	futureKindMin     byte = 0xC6
	futureKindMax     byte = 0xCF
	futureKeyspaceMax byte = 15
)

// ErrNewerEntry is why Apply refuses an entry (Result.Refused).
var ErrNewerEntry = errors.New("fsm: log entry of a kind or format newer than this binary applies; run a newer binary")

// newerFirstByte: b starts an entry of a later tree codec or kind.
func newerFirstByte(b byte) bool {
	return b >= futureTreeMin && b <= futureTreeMax || b >= futureKindMin && b <= futureKindMax
}

// newerEntry is ErrNewerEntry (wrapped, saying what) when inner, an
// unwrapped entry, is of a later kind or format; nil otherwise (also when
// it is merely malformed: Apply skips that).
func newerEntry(inner []byte) error {
	if len(inner) == 0 {
		return nil
	}
	switch b := inner[0]; {
	case newerFirstByte(b):
		return fmt.Errorf("%w: entry starts with 0x%02x", ErrNewerEntry, b)
	case b == coord.Tag:
		c, err := coord.Decode(inner)
		if errors.Is(err, coord.ErrNewerFormat) {
			return fmt.Errorf("%w: %v", ErrNewerEntry, err)
		}
		if err == nil && c.Op == coord.OpFenced && len(c.Inner) > 0 && newerFirstByte(c.Inner[0]) {
			return fmt.Errorf("%w: fenced entry starts with 0x%02x", ErrNewerEntry, c.Inner[0])
		}
	case b == KeyspaceTag:
		if len(inner) >= 2 && inner[1] > keyspaceVersion && inner[1] <= futureKeyspaceMax {
			return fmt.Errorf("%w: keyspace codec version %d", ErrNewerEntry, inner[1])
		}
	}
	return nil
}
