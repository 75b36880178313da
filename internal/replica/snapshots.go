package replica

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Snapshots off the raft loop.
//
// A snapshot's cost grows with the state, not with the write rate: writing
// a million znodes takes seconds. Taken on the raft loop, between two
// Readies, it would stop every write and read of the group for that long.
// So a running replica (Open, OpenGroup) whose state machine is a
// SnapshotViewer asks it for a view (a point-in-time copy that does not
// change as Apply goes on: a pass over the state under its lock, no
// encoding), and a goroutine of its own streams the view into a file
// (snapfile.go) while the loop goes on; the loop then stores a reference
// to the file and compacts the log as before (saveSnapshot). Neither the
// encoded snapshot nor a copy of it is ever held in memory, and raft's
// memory keeps a snapshot's metadata only (its bytes are read back when a
// follower needs them). The goroutine only reads the view: the state
// machine stays single-threaded and deterministic. A Node (the simulation,
// the scripted tests) has no goroutines and snapshots on its caller's
// call, as before.
//
// At most one snapshot is in progress. One that finishes after a newer
// snapshot was installed (a leader's, or one taken at a membership change)
// is dropped.

// snapshots is the raft loop's snapshot bookkeeping.
type snapshots struct {
	// disk, when the store is Pebble: raft's memory keeps a snapshot's
	// metadata only and reads its bytes back from disk when a follower
	// needs them.
	disk *disk
	// async receives the snapshots written off the loop; nil in a Node.
	async   chan snapResult
	running bool
	// appliedBytes counts the data of the entries applied so far (since
	// this process started); bytesAtSnap its value at the last snapshot.
	appliedBytes, bytesAtSnap uint64
	// marks are (index, appliedBytes) after batches applied since the
	// compaction point, one per markBytes at most, so the tail kept for
	// slow followers can be bounded in bytes (compactIndex).
	marks     []byteMark
	markBytes uint64
	// forMember is the index of the last membership change that added a
	// member: raft must not send a snapshot from before it (the new member
	// refuses one whose configuration lacks it) until one at or after it is
	// stored (snapshotForMember).
	forMember uint64
}

type byteMark struct{ index, bytes uint64 }

// snapResult is a snapshot written, on or off the loop.
type snapResult struct {
	index        uint64
	conf         *pb.ConfState
	data         []byte // the book and the state machine's snapshot (wrapSnapshot), or a reference to its file (snapfile.go)
	size         uint64 // the snapshot's bytes, when data is a reference
	appliedBytes uint64 // snapshots.appliedBytes at index
	err          error
	start        time.Time     // when the snapshot was asked for
	paused       time.Duration // how long the raft loop spent taking the view
}

// mark records that entries up to index have been applied: a mark once
// markBytes more were (so a few hundred between two snapshots).
func (s *snapshots) mark(index uint64) {
	if n := len(s.marks); n > 0 && s.appliedBytes-s.marks[n-1].bytes < s.markBytes {
		return
	}
	s.marks = append(s.marks, byteMark{index, s.appliedBytes})
}

// forget drops the marks of compacted entries.
func (s *snapshots) forget(compact uint64) {
	i := 0
	for i < len(s.marks) && s.marks[i].index < compact {
		i++
	}
	s.marks = append(s.marks[:0], s.marks[i:]...)
}

// inMemory is what raft's memory storage keeps of a snapshot: with a disk,
// its metadata only.
func (s *snapshots) inMemory(snap *pb.Snapshot) *pb.Snapshot {
	if s.disk == nil {
		return snap
	}
	return &pb.Snapshot{Metadata: snap.GetMetadata()}
}

// compactIndex is where the log is compacted after a snapshot at index:
// CatchUpEntries entries are kept behind it for slow followers, but no
// more than SnapshotBytes/2 bytes of them (as far as the marks, one per
// applied batch, tell).
func (r *Replica) compactIndex(index, bytesAt uint64) uint64 {
	var compact uint64
	if index > r.cfg.CatchUpEntries {
		compact = index - r.cfg.CatchUpEntries
	}
	limit := r.cfg.SnapshotBytes / 2
	for _, m := range r.snaps.marks {
		if m.index > index {
			break
		}
		if m.index >= compact && bytesAt-m.bytes <= limit {
			break
		}
		if m.index > compact {
			compact = m.index
		}
	}
	return compact
}

// startSnapshot takes a view of the state at applied and writes it to a
// file on a goroutine; the loop stores the reference to it when it arrives
// (finishSnapshot).
func (r *Replica) startSnapshot(v SnapshotViewer, applied uint64) error {
	start := time.Now()
	view, err := v.SnapshotView()
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	res := snapResult{index: applied, conf: proto.Clone(r.confState).(*pb.ConfState), appliedBytes: r.snaps.appliedBytes,
		start: start, paused: time.Since(start)}
	bj, _ := json.Marshal(r.book) // plain data: cannot fail
	book := append(binary.AppendUvarint(append([]byte(nil), snapMagic...), uint64(len(bj))), bj...)
	d := r.snaps.disk
	name := fmt.Sprintf("%s%016x", d.snapPrefix(), applied)
	r.snaps.running = true
	go func(out chan<- snapResult) {
		ref, err := writeSnapFile(d.fs, d.snapDir(), name, name+".tmp", func(w io.Writer) ([]byte, error) {
			head, err := view.WriteSnapshot(w)
			return append(book, head...), err
		})
		if err != nil {
			res.err = fmt.Errorf("snapshot at %d: %w", res.index, err)
		}
		res.data, res.size = encodeSnapRef(ref), uint64(len(ref.head))+ref.size
		out <- res // buffered: the loop may have stopped
	}(r.snaps.async)
	return nil
}

// snapshotForMember snapshots after a membership change at index added a
// member: raft sends a new member the latest snapshot, and the member
// refuses one whose configuration does not include it. With views it is
// written off the loop like any other (on the loop it held up every
// request for seconds at a million znodes, and was stored whole, so sent
// whole): now, or, when another is being written, once that one is stored
// (a snapshot at any later index includes the member too). Until then
// raftStorage offers no snapshot, so a new member is not sent, again and
// again, one it refuses.
func (r *Replica) snapshotForMember(index uint64) error {
	v, ok := r.sm.(SnapshotViewer)
	if !ok || r.snaps.async == nil || r.snaps.disk == nil {
		return r.snapshotAt(index)
	}
	r.snaps.forMember = max(r.snaps.forMember, index)
	if r.snaps.running {
		return nil // finishSnapshot starts it
	}
	return r.startSnapshot(v, index)
}

// finishSnapshot stores a snapshot written off the loop, unless a newer
// one was installed meanwhile; then starts the one a member added while
// it was written needs (snapshotForMember).
func (r *Replica) finishSnapshot(res snapResult) error {
	if err := r.storeSnapshot(res); err != nil {
		return err
	}
	if r.snaps.forMember > r.snapIndex {
		if v, ok := r.sm.(SnapshotViewer); ok {
			_, applied := r.applied.get()
			return r.startSnapshot(v, applied)
		}
	}
	return nil
}

func (r *Replica) storeSnapshot(res snapResult) error {
	r.snaps.running = false
	if res.err != nil {
		return res.err
	}
	if res.index <= r.snapIndex {
		r.log.Info("snapshot dropped: a newer one was installed while it was written", "index", res.index, "installed", r.snapIndex)
		if ref, ok, _ := decodeSnapRef(res.data); ok {
			// Installing the newer one removed every finished snapshot
			// file, this one too when it was renamed in time: gone
			// already is what is wanted.
			if err := r.snaps.disk.fs.Remove(filepath.Join(r.snaps.disk.snapDir(), ref.file)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		return nil
	}
	return r.saveSnapshot(res)
}
