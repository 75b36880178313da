package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// disk is the durable copy of one raft group's state in Pebble. Layout:
//
//	"h"                 HardState
//	"s"                 latest Snapshot (metadata + tree data)
//	"e" + BE64(index)   Entry
//	"c"                 cluster id (CRC32C, then BE64; see ClusterID)
//
// The root group's keys are exactly these; every other group on the member
// shares the same Pebble store under its own prefix, "g" + BE64(group),
// followed by the same "h", "s" and "e" keys ('g' sorts after every root
// key, so the root's entry range never reaches a group's keys). One store
// per member means one write-ahead log: Pebble's commit pipeline folds the
// synced batches of groups that write at the same time into one fsync.
//
// Every value is a CRC32C (4 bytes, big-endian) followed by the protobuf
// encoding, so a corrupt value is reported at open and never applied.
type disk struct {
	db *pebble.DB
	// fs and dir hold the snapshot files (snapfile.go) beside the store.
	fs  vfs.FS
	dir string
	// groupID is this group's id (0: the root).
	groupID uint64
	// prefix is empty for the root group and "g" + BE64(group) for others.
	prefix []byte
	// shared: the store belongs to the root group's disk, which closes it.
	shared bool
	// last is the highest entry index stored (or the snapshot index when the
	// log is empty). Only the raft loop touches it.
	last uint64
	// scratch is Save's buffer for entry keys and values (raft loop only).
	scratch []byte
}

// groupPrefix is the key prefix of group's state (group > 0).
func groupPrefix(group uint64) []byte {
	k := make([]byte, 9)
	k[0] = 'g'
	binary.BigEndian.PutUint64(k[1:], group)
	return k
}

// group returns the disk of another group in the same store.
func (d *disk) group(group uint64) *disk {
	return &disk{db: d.db, fs: d.fs, dir: d.dir, groupID: group, prefix: groupPrefix(group), shared: true}
}

// key is k under this group's prefix.
func (d *disk) key(k []byte) []byte {
	if len(d.prefix) == 0 {
		return k
	}
	return append(append(make([]byte, 0, len(d.prefix)+len(k)), d.prefix...), k...)
}

func (d *disk) entryKey(i uint64) []byte { return d.key(entryKey(i)) }
func (d *disk) entriesEnd() []byte       { return d.key(entriesEnd) }

var (
	keyClusterID = []byte("c")
	keyHardState = []byte("h")
	keySnapshot  = []byte("s")
)

func entryKey(i uint64) []byte {
	k := make([]byte, 9)
	k[0] = 'e'
	binary.BigEndian.PutUint64(k[1:], i)
	return k
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt reports a stored value that fails its checksum or does not decode.
var ErrCorrupt = errors.New("replica: corrupt raft storage")

func seal(m proto.Message) ([]byte, error) { return sealAppend(nil, m) }

// sealAppend appends m's sealed value (seal) to b.
func sealAppend(b []byte, m proto.Message) ([]byte, error) {
	at := len(b)
	b, err := proto.MarshalOptions{}.MarshalAppend(append(b, 0, 0, 0, 0), m)
	if err != nil {
		return b[:at], err
	}
	binary.BigEndian.PutUint32(b[at:], crc32.Checksum(b[at+4:], crcTable))
	return b, nil
}

func unseal(v []byte, m proto.Message) error {
	if len(v) < 4 || binary.BigEndian.Uint32(v) != crc32.Checksum(v[4:], crcTable) {
		return ErrCorrupt
	}
	if err := proto.Unmarshal(v[4:], m); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return nil
}

// pebbleLogger sends Pebble's chatter to debug and its errors to error.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(f string, a ...any)  { p.l.Debug(fmt.Sprintf(f, a...)) }
func (p pebbleLogger) Errorf(f string, a ...any) { p.l.Error(fmt.Sprintf(f, a...)) }
func (p pebbleLogger) Fatalf(f string, a ...any) {
	p.l.Error(fmt.Sprintf(f, a...))
	panic(fmt.Sprintf(f, a...)) // Pebble requires Fatalf not to return
}

// openDisk opens the store in dir, on fs (nil: the operating system's).
func openDisk(dir string, fs vfs.FS, log *slog.Logger) (*disk, error) {
	if fs == nil {
		fs = vfs.Default
	}
	db, err := pebble.Open(dir, &pebble.Options{FS: fs, Logger: pebbleLogger{log.With("component", "pebble")}})
	if err != nil {
		return nil, err
	}
	return &disk{db: db, fs: fs, dir: dir}, nil
}

// close closes the store (the root group's disk only: the groups sharing
// it are closed first by their owner).
func (d *disk) close() error {
	if d.shared {
		return nil
	}
	return d.db.Close()
}

// drop deletes everything this group stored (a group's disk only).
func (d *disk) drop() error {
	if len(d.prefix) == 0 {
		return errors.New("replica: the root group's storage cannot be dropped")
	}
	end := []byte{'g' + 1}
	if g := binary.BigEndian.Uint64(d.prefix[1:]); g < math.MaxUint64 {
		end = groupPrefix(g + 1)
	}
	if err := d.db.DeleteRange(d.prefix, end, pebble.Sync); err != nil {
		return err
	}
	return d.removeSnapFiles(math.MaxUint64, "")
}

// entriesEnd is the exclusive upper bound of the entry key space.
var entriesEnd = []byte{'e' + 1}

// Load returns everything stored: the hard state, the latest snapshot, and
// the entries after the snapshot, in order.
func (d *disk) Load() (*pb.HardState, *pb.Snapshot, []*pb.Entry, error) {
	hs := &pb.HardState{}
	if err := d.get(d.key(keyHardState), hs); err != nil {
		return nil, nil, nil, fmt.Errorf("hard state: %w", err)
	}
	snap, err := d.snapshot()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("snapshot: %w", err)
	}
	// Entries kept behind the snapshot for slow followers are not loaded:
	// MemoryStorage starts at the snapshot, so after a restart a follower
	// that needs them gets the snapshot instead.
	first := snap.GetMetadata().GetIndex() + 1
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: d.entryKey(first), UpperBound: d.entriesEnd()})
	if err != nil {
		return nil, nil, nil, err
	}
	defer it.Close()
	var ents []*pb.Entry
	want := first
	prevTerm := snap.GetMetadata().GetTerm()
	for it.First(); it.Valid(); it.Next() {
		e := &pb.Entry{}
		if err := unseal(it.Value(), e); err != nil {
			return nil, nil, nil, fmt.Errorf("entry %x: %w", it.Key(), err)
		}
		k := it.Key()[len(d.prefix):]
		if len(k) != 9 || e.GetIndex() != want || binary.BigEndian.Uint64(k[1:]) != want {
			return nil, nil, nil, fmt.Errorf("%w: log gap or misplaced entry at index %d (want %d)", ErrCorrupt, e.GetIndex(), want)
		}
		if e.GetTerm() < prevTerm || (hs.GetTerm() != 0 && e.GetTerm() > hs.GetTerm()) {
			return nil, nil, nil, fmt.Errorf("%w: entry %d has term %d (previous %d, hard state %d)", ErrCorrupt, want, e.GetTerm(), prevTerm, hs.GetTerm())
		}
		prevTerm = e.GetTerm()
		want++
		ents = append(ents, e)
	}
	if err := it.Error(); err != nil {
		return nil, nil, nil, err
	}
	// raft panics on a commit index outside the log; refuse it here instead.
	last := want - 1
	if c := hs.GetCommit(); c != 0 && (c < snap.GetMetadata().GetIndex() || c > last) {
		return nil, nil, nil, fmt.Errorf("%w: hard state commit %d outside the log [%d, %d]", ErrCorrupt, c, snap.GetMetadata().GetIndex(), last)
	}
	d.last = last
	return hs, snap, ents, nil
}

func (d *disk) get(key []byte, m proto.Message) error {
	v, closer, err := d.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer closer.Close()
	return unseal(v, m)
}

// Save persists one Ready's worth of state in a single batch: the snapshot
// (if any), the new entries (dropping any conflicting suffix left from an
// older leader), and the hard state. This is the group commit: one fsync
// however many proposals the Ready carries. sync is false when the write
// need not be durable yet (a learner's deferred sync; the commit index
// stored ahead of a snapshot, whose own write syncs it).
func (d *disk) Save(hs *pb.HardState, ents []*pb.Entry, snap *pb.Snapshot, sync bool) error {
	b := d.db.NewBatch()
	defer b.Close()
	last := d.last
	if snap != nil {
		v, err := seal(snap)
		if err != nil {
			return err
		}
		if err := b.Set(d.key(keySnapshot), v, nil); err != nil {
			return err
		}
		// raft only installs a snapshot whose index it does not have a matching
		// entry for, so every stored entry is either covered by it or belongs
		// to a stale, conflicting suffix: drop them all (MemoryStorage does too).
		if err := b.DeleteRange(d.entryKey(0), d.entriesEnd(), nil); err != nil {
			return err
		}
		last = snap.GetMetadata().GetIndex()
	}
	// One buffer for every entry's key and value: Set copies both into the
	// batch, and an entry per proposal made two allocations and a copy each.
	buf := d.scratch[:0]
	for _, e := range ents {
		buf = binary.BigEndian.AppendUint64(append(append(buf[:0], d.prefix...), 'e'), e.GetIndex())
		k := len(buf)
		var err error
		if buf, err = sealAppend(buf, e); err != nil {
			return err
		}
		if err := b.Set(buf[:k], buf[k:], nil); err != nil {
			return err
		}
	}
	if cap(buf) <= 1<<20 { // a rare large entry's buffer is not kept
		d.scratch = buf[:0]
	}
	if n := len(ents); n > 0 {
		// A new leader overwrote a suffix: remove whatever lies beyond the new
		// last entry. Only then, so the common append adds no range tombstone.
		newLast := ents[n-1].GetIndex()
		if newLast < last {
			if err := b.DeleteRange(d.entryKey(newLast+1), d.entriesEnd(), nil); err != nil {
				return err
			}
		}
		last = newLast
	}
	if hs != nil {
		v, err := seal(hs)
		if err != nil {
			return err
		}
		if err := b.Set(d.key(keyHardState), v, nil); err != nil {
			return err
		}
	}
	if b.Empty() {
		return nil
	}
	opt := pebble.Sync
	if !sync {
		opt = pebble.NoSync
	}
	if err := b.Commit(opt); err != nil {
		return err
	}
	d.last = last
	if snap != nil {
		// A snapshot from the leader, stored whole or as a reference to
		// the file it was streamed into: the files of this member's own
		// snapshots are older.
		keep := ""
		if ref, ok, _ := decodeSnapRef(snap.GetData()); ok {
			keep = ref.file
		}
		return d.removeSnapFiles(snap.GetMetadata().GetIndex(), keep)
	}
	return nil
}

// Sync makes every earlier write to the store durable, whatever group
// made it: Pebble's write-ahead log is one file written in order, and a
// synced record syncs everything before it (a log closed at rotation is
// synced whole).
func (d *disk) Sync() error {
	return d.db.LogData(nil, pebble.Sync)
}

// SaveSnapshot stores a locally taken snapshot and drops log entries before
// compactTo (those still needed by slow followers stay).
func (d *disk) SaveSnapshot(snap *pb.Snapshot, compactTo uint64) error {
	v, err := seal(snap)
	if err != nil {
		return err
	}
	b := d.db.NewBatch()
	defer b.Close()
	if err := b.Set(d.key(keySnapshot), v, nil); err != nil {
		return err
	}
	if compactTo > 0 {
		if err := b.DeleteRange(d.entryKey(0), d.entryKey(compactTo), nil); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	keep := ""
	if ref, ok, _ := decodeSnapRef(snap.GetData()); ok {
		keep = ref.file
	}
	return d.removeSnapFiles(snap.GetMetadata().GetIndex(), keep)
}

// clusterID returns the stored cluster id, 0 when there is none.
func (d *disk) clusterID() (uint64, error) {
	v, closer, err := d.db.Get(keyClusterID)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	if len(v) != 12 || binary.BigEndian.Uint32(v) != crc32.Checksum(v[4:], crcTable) {
		return 0, fmt.Errorf("%w: cluster id", ErrCorrupt)
	}
	return binary.BigEndian.Uint64(v[4:]), nil
}

// setClusterID stores the cluster id (synced: a joiner stores the id it
// adopts before it answers the hello that carried it).
func (d *disk) setClusterID(id uint64) error {
	v := make([]byte, 12)
	binary.BigEndian.PutUint64(v[4:], id)
	binary.BigEndian.PutUint32(v, crc32.Checksum(v[4:], crcTable))
	return d.db.Set(keyClusterID, v, pebble.Sync)
}

// raftStorage is the log as raft reads it: the replica's MemoryStorage,
// except that before the first snapshot is taken it has no snapshot to offer.
//
// raft asks for a snapshot when it cannot build an append for a follower:
// the entry before the follower's Next is compacted away, or lies beyond the
// leader's own last index. The second only happens when a follower's
// acknowledgement claims entries this leader never had (a forged or confused
// MsgAppResp); MemoryStorage then hands back its empty initial snapshot and
// raft panics with "need non-empty snapshot", taking the leader down on one
// network message. ErrSnapshotTemporarilyUnavailable is raft's own answer for
// "no snapshot now": it skips that follower and tries again later.
//
// With a disk, the memory storage keeps a snapshot's metadata only
// (snapshots.inMemory) and Snapshot reads its bytes from disk: a large
// state is then not held twice, and raft asks only for a follower too far
// behind for the log.
type raftStorage struct {
	*raft.MemoryStorage
	disk  *disk      // nil: the memory storage holds the bytes
	snaps *snapshots // the replica's (raft loop only, as raft's calls)
}

func (s raftStorage) Snapshot() (*pb.Snapshot, error) {
	snap, err := s.MemoryStorage.Snapshot()
	if err == nil && raft.IsEmptySnap(snap) {
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	if err == nil && s.snaps != nil && snap.GetMetadata().GetIndex() < s.snaps.forMember {
		// A member was added after it: wait for the one being written.
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	if err != nil || s.disk == nil || len(snap.GetData()) > 0 {
		return snap, err
	}
	// As stored: a reference to a file stays one, and the transport
	// streams the file or reads it whole (snapstream.go).
	stored, err := s.disk.storedSnapshot()
	if err != nil {
		return nil, fmt.Errorf("replica: read snapshot: %w", err)
	}
	if stored.GetMetadata().GetIndex() != snap.GetMetadata().GetIndex() {
		return nil, fmt.Errorf("%w: snapshot on disk at %d, in memory at %d", ErrCorrupt, stored.GetMetadata().GetIndex(), snap.GetMetadata().GetIndex())
	}
	return stored, nil
}
