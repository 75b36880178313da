package replica

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Snapshot files.
//
// A snapshot this member writes itself (off the raft loop, snapshots.go)
// goes to a file of its own, streamed as it is encoded, and the store's
// snapshot key ("s") holds a reference to it instead of the bytes:
//
//	"MRDNSNPF", uvarint len(head), head, uvarint len(name), name,
//	uvarint size, 4 bytes big-endian CRC32C of the file
//
// The snapshot's bytes are head followed by the file's: head is the book
// (wrapSnapshot's header) and the state machine's envelope header, which
// gives the length of what follows and so is known only once the file is
// written. Files live in DataDir/snap, named snap-GROUP-INDEX (hex), one
// per group once the reference to it is stored (older ones are removed
// then, and a leader's snapshot, stored whole as before, removes them
// all). Load and raftStorage.Snapshot put the bytes back together, so the
// rest of the replica, the peers and the state machine see the same
// snapshot bytes as when they were stored whole; a store written before
// files existed loads as before. A binary from before files cannot read a
// store holding a reference (it fails at start, naming a corrupt
// snapshot): downgrading needs the data copied from a member that has not
// snapshotted since the upgrade, or a restore from a backup.

var snapRefMagic = []byte("MRDNSNPF")

// maxSnapFile bounds a snapshot file read back (and its head).
const maxSnapFile = 1 << 40

// snapRef is a reference to a snapshot file.
type snapRef struct {
	head []byte
	file string // base name under DataDir/snap
	size uint64
	crc  uint32
}

func encodeSnapRef(r snapRef) []byte {
	b := append([]byte(nil), snapRefMagic...)
	b = binary.AppendUvarint(b, uint64(len(r.head)))
	b = append(b, r.head...)
	b = binary.AppendUvarint(b, uint64(len(r.file)))
	b = append(b, r.file...)
	b = binary.AppendUvarint(b, r.size)
	return binary.BigEndian.AppendUint32(b, r.crc)
}

// decodeSnapRef decodes a reference; ok is false for snapshot bytes
// stored whole.
func decodeSnapRef(data []byte) (r snapRef, ok bool, err error) {
	if !bytes.HasPrefix(data, snapRefMagic) {
		return snapRef{}, false, nil
	}
	b := data[len(snapRefMagic):]
	field := func() []byte {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil
		}
		out := b[k : k+int(n)]
		b = b[k+int(n):]
		return out
	}
	r.head = field()
	name := field()
	size, k := binary.Uvarint(b)
	if r.head == nil || len(name) == 0 || k <= 0 || len(b)-k != 4 || size > maxSnapFile || !validSnapName(string(name)) {
		return snapRef{}, true, fmt.Errorf("%w: snapshot file reference", ErrCorrupt)
	}
	r.file, r.size, r.crc = string(name), size, binary.BigEndian.Uint32(b[k:])
	return r, true, nil
}

func validSnapName(name string) bool {
	return strings.HasPrefix(name, "snap-") && !strings.ContainsAny(name, "/\\") && name != "." && name != ".."
}

func (d *disk) snapDir() string { return filepath.Join(d.dir, "snap") }

// snapPrefix starts the names of this group's snapshot files.
func (d *disk) snapPrefix() string { return fmt.Sprintf("snap-%x-", d.groupID) }

// snapshot reads the stored snapshot, putting a referenced file's bytes
// back behind its head.
func (d *disk) snapshot() (*pb.Snapshot, error) {
	snap, err := d.storedSnapshot()
	if err != nil {
		return nil, err
	}
	data, err := d.resolveSnap(snap.GetData())
	if err != nil {
		return nil, err
	}
	snap.Data = data
	return snap, nil
}

// storedSnapshot reads the stored snapshot as stored: its data may be a
// reference to a file (a member's own snapshot, or one a leader streamed).
func (d *disk) storedSnapshot() (*pb.Snapshot, error) {
	snap := &pb.Snapshot{}
	if err := d.get(d.key(keySnapshot), snap); err != nil {
		return nil, err
	}
	return snap, nil
}

// resolveSnap returns a snapshot's bytes: data itself, or, when data is a
// reference, the head followed by the file's bytes (read once, checked).
func (d *disk) resolveSnap(data []byte) ([]byte, error) {
	ref, ok, err := decodeSnapRef(data)
	if err != nil || !ok {
		return data, err
	}
	return readSnapRef(d.fs, d.snapDir(), ref)
}

func readSnapRef(fs vfs.FS, dir string, ref snapRef) ([]byte, error) {
	f, err := fs.Open(filepath.Join(dir, ref.file))
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot file: %v", ErrCorrupt, err)
	}
	defer f.Close()
	data := make([]byte, len(ref.head)+int(ref.size))
	copy(data, ref.head)
	if _, err := io.ReadFull(f, data[len(ref.head):]); err != nil {
		return nil, fmt.Errorf("%w: snapshot file %s: %v", ErrCorrupt, ref.file, err)
	}
	if crc32.Checksum(data[len(ref.head):], crcTable) != ref.crc {
		return nil, fmt.Errorf("%w: snapshot file %s: checksum mismatch", ErrCorrupt, ref.file)
	}
	return data, nil
}

// removeSnapFiles removes this group's snapshot files of index at most
// index, but keep; files still being written (.tmp) are their writers'.
// A later one stays: a snapshot streamed from the leader (snapstream.go)
// is a file before raft installs it, and another snapshot may be stored
// meanwhile.
func (d *disk) removeSnapFiles(index uint64, keep string) error {
	names, err := d.fs.List(d.snapDir())
	if err != nil {
		return nil // no directory: no files
	}
	for _, n := range names {
		if !strings.HasPrefix(n, d.snapPrefix()) || strings.HasSuffix(n, ".tmp") || n == keep {
			continue
		}
		if i, ok := snapFileIndex(n[len(d.snapPrefix()):]); ok && i > index {
			continue
		}
		if err := d.fs.Remove(filepath.Join(d.snapDir(), n)); err != nil {
			return err
		}
	}
	return nil
}

// snapFileIndex reads the index a snapshot file's name gives after the
// group's prefix: 16 hex digits, alone or followed by "-from-ID".
func snapFileIndex(rest string) (uint64, bool) {
	if len(rest) < 16 || (len(rest) > 16 && rest[16] != '-') {
		return 0, false
	}
	i, err := strconv.ParseUint(rest[:16], 16, 64)
	return i, err == nil
}

// removeSnapTemps removes this group's unfinished snapshot files (at start,
// before any writer runs).
func (d *disk) removeSnapTemps() error {
	names, err := d.fs.List(d.snapDir())
	if err != nil {
		return nil
	}
	for _, n := range names {
		if strings.HasPrefix(n, d.snapPrefix()) && strings.HasSuffix(n, ".tmp") {
			if err := d.fs.Remove(filepath.Join(d.snapDir(), n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeSnapFile writes a snapshot to a file of its own, dir/name (written
// as dir/tmp, synced, then renamed into place), and returns the reference
// to store: the file holds what write writes, head (what write returns)
// goes before it. It runs off the raft loop and touches the file system
// only.
func writeSnapFile(fs vfs.FS, dir, name, tmp string, write func(io.Writer) ([]byte, error)) (snapRef, error) {
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return snapRef{}, err
	}
	tmp = filepath.Join(dir, tmp)
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return snapRef{}, err
	}
	crc := crc32.New(crcTable)
	cw := &countWriter{w: io.MultiWriter(f, crc)}
	bw := bufio.NewWriterSize(cw, 1<<20)
	head, err := write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		fs.Remove(tmp)
		return snapRef{}, err
	}
	dirf, err := fs.OpenDir(dir)
	if err != nil {
		return snapRef{}, err
	}
	err = dirf.Sync()
	if cerr := dirf.Close(); err == nil {
		err = cerr
	}
	return snapRef{head: head, file: name, size: uint64(cw.n), crc: crc.Sum32()}, err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	k, err := c.w.Write(p)
	c.n += int64(k)
	return k, err
}
