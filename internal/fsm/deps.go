package fsm

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/meridian-coord/meridian/internal/errs"
)

// Dependencies between groups: what makes a read of a keyspace local.
//
// A zxid comparison orders everything: a client that saw zxid Z reads a
// group only once the group has applied a zxid of at least Z. With one
// group that is free. With several it is not: a keyspace nobody writes
// keeps an old last zxid, so a client that has just written its own
// region's keyspace (a new, high zxid) would wait for a round trip to the
// idle keyspace's home before every read of it, although nothing it saw
// depends on anything there.
//
// So an entry may carry, besides its clock, the group indexes its
// session has seen: its dependencies, "group g up to index i" (causal
// consistency as in COPS, "Don't Settle for Eventual"). Apply merges them
// into the group's Deps, which are part of the replicated state: on every
// member, a group at index j depends on each other group up to the
// largest index any entry up to j named. A member serving a client then
// keeps, per client, the index of every group the client observed (its
// own reads, its writes and the Deps of the groups it observed, at the
// member's applied index), and reads group g locally as soon as it has
// applied the client's index of g: a wait only when the client saw
// something, directly or through another group, that this member's copy
// of g has not applied yet. Write then flag holds: the flag's entry
// names the config's group and index, and whoever sees the flag waits
// for that index of the config's group before reading it.
//
// A group's own index is never among its Deps (Apply ignores it). Group
// ids are the root's log index of the keyspace's creation (0: the root),
// so a dependency on group g also says that the root is at index g or
// beyond (the keyspace exists there).
//
// Envelope format (DepsTag, then uvarints), a clock envelope that also
// carries dependencies:
//
//	byte DepsTag, uvarint physicalMs, uvarint minZxid,
//	uvarint n, n × (uvarint group, uvarint index), inner entry
//
// with groups strictly increasing and indexes above 0; the stamp means
// what ClockTag's does. An envelope with more than MaxDeps dependencies,
// groups out of order, a zero index or a nested envelope is malformed:
// skipped on every member.

// DepsTag is the first byte of a clock envelope with dependencies.
const DepsTag byte = 0xC4

// Dependency markers: from where a group's dependencies are complete.
//
// A binary from before dependencies (apply version 4) writes entries
// without them, in clock envelopes (ClockTag). While such a member is in
// the cluster every proposer does the same (server: the cluster version),
// and a group's Deps miss what those entries depended on. Once every
// member writes dependencies, the group's leader asks every other group
// for its commit index (a ReadIndex round, so at or past anything an
// earlier entry of this group can have depended on) and proposes a
// marker: a DepsTag envelope naming those indexes around the one byte
// DepsMarkerTag. Applying it merges them like any dependencies and
// records its index (DepsFrom): from it on the group's Deps are complete,
// for its earlier entries too. After it the group refuses, with
// errs.ErrClusterVersion and without applying, a command in a clock
// envelope without dependencies: a proposer that had not yet seen the
// cluster version rise proposed it, and proposes it again with
// dependencies. A marker outside a DepsTag envelope is skipped; a second
// one changes nothing but the dependencies it names.
const DepsMarkerTag byte = 0xC5

// DepsMarker is the entry a marker wraps (WrapDeps with the indexes).
func DepsMarker() []byte { return []byte{DepsMarkerTag} }

// applyMarker applies a dependency marker (its dependencies are merged).
func (f *FSM) applyMarker(r *Result, inner []byte) {
	if len(inner) != 1 || f.stamp.tag != DepsTag {
		r.Skipped = fmt.Errorf("%w: dependency marker outside a dependency envelope", errs.ErrMarshalling)
		return
	}
	if f.depsFrom == 0 {
		f.depsFrom = r.Index
	}
}

// undepended is errs.ErrClusterVersion for a command in a clock envelope
// without dependencies applied after the group's marker, nil otherwise.
func (f *FSM) undepended() error {
	if f.depsFrom != 0 && f.stamp.tag == ClockTag {
		return fmt.Errorf("%w: an entry without dependencies after this group's dependency marker", errs.ErrClusterVersion)
	}
	return nil
}

// DepsFrom is the index of the group's dependency marker, 0 when none is
// applied: from it on Deps are complete. Call it under RLock.
func (f *FSM) DepsFrom() uint64 { return f.depsFrom }

// MaxDeps bounds the dependencies one entry carries and one group keeps:
// every group a member can run (1,000 keyspaces and the root) twice over,
// for ids of keyspaces removed meanwhile. A group holding MaxDeps forgets
// its dependency on the lowest keyspace id (never the root's) to take a
// new one: the oldest keyspace, in practice one removed long ago.
const MaxDeps = 2048

// Deps are a group's dependencies on other groups: group id to index.
type Deps map[uint64]uint64

// Merge raises d to at least o, group by group.
func (d Deps) Merge(o Deps) {
	for g, i := range o {
		if i > d[g] {
			d[g] = i
		}
	}
}

// Dep is one dependency: group Group up to index Index.
type Dep struct {
	Group, Index uint64
}

// Sorted returns d's dependencies by group.
func (d Deps) Sorted() []Dep {
	out := make([]Dep, 0, len(d))
	for _, g := range slices.Sorted(maps.Keys(d)) {
		out = append(out, Dep{g, d[g]})
	}
	return out
}

// WrapClockDeps is WrapClock with dependencies (sorted by group, at most
// MaxDeps, indexes above 0); with none it is WrapClock.
func WrapClockDeps(physicalMs, minZxid uint64, deps []Dep, inner []byte) ([]byte, error) {
	if len(deps) == 0 {
		return WrapClock(physicalMs, minZxid, inner)
	}
	return WrapDeps(physicalMs, minZxid, deps, inner)
}

// WrapDeps is WrapClockDeps always in a DepsTag envelope, also with no
// dependencies: what a proposer writes once every member writes
// dependencies (a group past its marker refuses ClockTag envelopes).
func WrapDeps(physicalMs, minZxid uint64, deps []Dep, inner []byte) ([]byte, error) {
	if len(inner) == 0 || inner[0] == ClockTag || inner[0] == DepsTag || physicalMs > MaxPhysicalMs ||
		minZxid >= MaxZxid || len(deps) > MaxDeps {
		return nil, errs.ErrBadArguments
	}
	b := make([]byte, 0, MaxClockEnvelopeBytes+binary.MaxVarintLen16+len(deps)*2*binary.MaxVarintLen64+len(inner))
	b = append(b, DepsTag)
	b = binary.AppendUvarint(b, physicalMs)
	b = binary.AppendUvarint(b, minZxid)
	b = binary.AppendUvarint(b, uint64(len(deps)))
	for i, d := range deps {
		if d.Index == 0 || (i > 0 && d.Group <= deps[i-1].Group) {
			return nil, errs.ErrBadArguments
		}
		b = binary.AppendUvarint(b, d.Group)
		b = binary.AppendUvarint(b, d.Index)
	}
	return append(b, inner...), nil
}

// decodeDeps reads n then n dependencies from b; it returns them and the
// rest of b.
func decodeDeps(b []byte) ([]Dep, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > MaxDeps || n > uint64(len(b)) {
		return nil, nil, fmt.Errorf("%w: bad dependency count", errs.ErrMarshalling)
	}
	b = b[k:]
	deps := make([]Dep, n)
	for i := range deps {
		g, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, nil, fmt.Errorf("%w: truncated dependency", errs.ErrMarshalling)
		}
		b = b[k:]
		idx, k := binary.Uvarint(b)
		if k <= 0 || idx == 0 || (i > 0 && g <= deps[i-1].Group) {
			return nil, nil, fmt.Errorf("%w: bad dependency", errs.ErrMarshalling)
		}
		b = b[k:]
		deps[i] = Dep{g, idx}
	}
	return deps, b, nil
}

// mergeDeps adds an entry's dependencies to the group's (Apply, under the
// write lock), leaving out the group's own id, and keeps at most MaxDeps.
func (f *FSM) mergeDeps(deps []Dep) {
	self := f.groupID()
	for _, d := range deps {
		if d.Group == self || d.Index <= f.deps[d.Group] {
			continue
		}
		if f.deps == nil {
			f.deps = Deps{}
		}
		if _, ok := f.deps[d.Group]; !ok && len(f.deps) >= MaxDeps {
			oldest := uint64(0)
			for g := range f.deps {
				if g != 0 && (oldest == 0 || g < oldest) {
					oldest = g
				}
			}
			if oldest == 0 || oldest > d.Group {
				continue // the new one is the oldest keyspace itself
			}
			delete(f.deps, oldest)
		}
		f.deps[d.Group] = d.Index
		f.hasDeps.Store(true)
	}
}

// groupID is this state machine's group id: its keyspace's, 0 for the
// root's.
func (f *FSM) groupID() uint64 {
	if f.owner == nil {
		return 0
	}
	return f.owner.Group
}

// Deps is a copy of the group's dependencies on other groups as of
// Applied (see the top of this file). Call it under RLock (or from the
// goroutine that applies).
func (f *FSM) Deps() Deps {
	return maps.Clone(f.deps)
}

// HasDeps reports whether the group depends on any other. Call it under
// RLock.
func (f *FSM) HasDeps() bool { return len(f.deps) > 0 }

// MayHaveDeps is HasDeps without the lock: false when the group depended
// on no other as of the last entry applied before the call (a group's
// dependencies only grow, so a state observed before it has none either).
// A reader of a group that never had dependencies, a group of a cluster
// without keyspaces, need not wait for the lock behind an Apply.
func (f *FSM) MayHaveDeps() bool { return f.hasDeps.Load() }

// DepsInto merges the group's dependencies into d. Call it under RLock.
func (f *FSM) DepsInto(d Deps) {
	d.Merge(f.deps)
}

// encodeDeps is the snapshot form of a group's dependencies: uvarint n,
// then n × (uvarint group, uvarint index) by group, then, once the group
// applied its marker, uvarint DepsFrom (absent before).
func encodeDeps(d Deps, from uint64) []byte {
	sorted := d.Sorted()
	b := binary.AppendUvarint(nil, uint64(len(sorted)))
	for _, dep := range sorted {
		b = binary.AppendUvarint(b, dep.Group)
		b = binary.AppendUvarint(b, dep.Index)
	}
	if from > 0 {
		b = binary.AppendUvarint(b, from)
	}
	return b
}

// restoreDeps decodes encodeDeps' form; false when it is malformed.
func restoreDeps(b []byte) (Deps, uint64, bool) {
	if len(b) == 0 {
		return nil, 0, true
	}
	deps, rest, err := decodeDeps(b)
	if err != nil {
		return nil, 0, false
	}
	var from uint64
	if len(rest) > 0 {
		var k int
		if from, k = binary.Uvarint(rest); k != len(rest) || from == 0 {
			return nil, 0, false
		}
	}
	d := make(Deps, len(deps))
	for _, dep := range deps {
		d[dep.Group] = dep.Index
	}
	return d, from, true
}
