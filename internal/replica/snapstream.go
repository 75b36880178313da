package replica

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Snapshots streamed from file to file.
//
// A member's own snapshots are files (snapfile.go). A leader that must
// send one to a follower too far behind for its log used to read the file
// into memory and send it as one frame of at most maxSnapFrame (256 MiB);
// the follower read that frame into memory, decoded it (a second copy)
// and stored it whole in Pebble (a third, and the write-ahead log). A
// state larger than the frame could not reach a follower at all.
//
// Now, once every member's binary reads them (SnapshotStreams: the cluster
// version), the leader streams the file: one kindSnapStream frame whose
// body is the stream's metadata (the group, the file's size and CRC32C,
// the MsgSnap with the snapshot's head as its data), followed by the
// file's bytes, copied from the file to the connection in buffered
// pieces. The follower copies them to a file of its own in DataDir/snap
// (synced, checked, renamed), and hands raft the MsgSnap with a reference
// to that file as its data. The Ready that installs it stores the
// reference, and the state machine reads the file once. Neither side
// holds the snapshot twice; its size is bounded by maxSnapFile, not by
// a frame. Until the cluster version allows streams, the leader reads
// the file and sends the old frame.
//
// A stream occupies the peer's connection while it is written (as the
// single frame did); the frame's write deadline grows by a second a MiB.
// A stream cut short is discarded on the follower (its temporary file
// removed) and reported failed on the leader, and raft sends it again.

const (
	// kindSnapStream: a snapshot streamed from its file (root or group).
	kindSnapStream byte = 14
	// snapStreamMeta is the fixed part of a stream's body before the
	// MsgSnap: group id, file size, file CRC32C.
	snapStreamMeta = groupIDBytes + 8 + 4
)

// snapSource is where a stream's bytes come from: a member's snapshot file.
type snapSource struct {
	fs   vfs.FS
	path string
	size uint64
}

// snapStore is a transport's access to the member's snapshot files.
type snapStore struct {
	fs  vfs.FS
	dir string
	// streams reports whether every member reads kindSnapStream (nil: no).
	streams func() bool
	seq     atomic.Uint64 // distinguishes temporary files of concurrent streams
}

// encodeSnap turns a MsgSnap into its frame. Its data is the stored
// snapshot: whole bytes (sent as before), or a reference to a file, then
// streamed when peers read streams and read whole when they do not.
func (t *transport) encodeSnap(m outMsg, prefix []byte) (frame, error) {
	f := frame{kind: kindSnap, group: m.group}
	if m.group != 0 {
		f.kind = kindGroupSnap
	}
	ref, isRef, err := decodeSnapRef(m.msg.GetSnapshot().GetData())
	if err != nil {
		return f, err
	}
	msg := m.msg
	if isRef {
		if t.snap.fs == nil {
			return f, errors.New("a snapshot file reference without snapshot files")
		}
		if t.snap.streams != nil && t.snap.streams() {
			return t.encodeStream(m, ref)
		}
		data, err := readSnapRef(t.snap.fs, t.snap.dir, ref)
		if err != nil {
			return f, err
		}
		msg = proto.Clone(m.msg).(*pb.Message)
		msg.Snapshot.Data = data
	}
	b, err := (proto.MarshalOptions{}).MarshalAppend(prefix, msg)
	if err == nil && len(b)-len(prefix)+frameHeader > maxSnapFrame {
		err = fmt.Errorf("%d bytes exceed the %d byte frame limit (peers will read streamed snapshots once every member runs a binary that does)", len(b)-len(prefix), maxSnapFrame)
	}
	f.payload = b
	return f, err
}

// encodeStream is the kindSnapStream frame of a snapshot in file ref.
func (t *transport) encodeStream(m outMsg, ref snapRef) (frame, error) {
	f := frame{kind: kindSnapStream, group: m.group}
	msg := proto.Clone(m.msg).(*pb.Message)
	msg.Snapshot.Data = ref.head
	b := make([]byte, snapStreamMeta, snapStreamMeta+proto.Size(msg))
	binary.BigEndian.PutUint64(b, m.group)
	binary.BigEndian.PutUint64(b[groupIDBytes:], ref.size)
	binary.BigEndian.PutUint32(b[groupIDBytes+8:], ref.crc)
	b, err := (proto.MarshalOptions{}).MarshalAppend(b, msg)
	if err != nil {
		return f, err
	}
	if len(b)+frameHeader > t.maxMsgFrame+snapStreamMeta {
		return f, fmt.Errorf("snapshot head of %d bytes exceeds the frame limit", len(ref.head))
	}
	f.payload = b
	f.stream = &snapSource{fs: t.snap.fs, path: filepath.Join(t.snap.dir, ref.file), size: ref.size}
	return f, nil
}

// writeStream copies a stream's file after its frame. The file may have
// been replaced by a newer snapshot meanwhile (then it is gone, or
// shorter): the stream fails and raft sends the newer one.
func writeStream(w *bufio.Writer, src *snapSource) error {
	f, err := src.fs.Open(src.path)
	if err != nil {
		return fmt.Errorf("snapshot stream: %w", err)
	}
	defer f.Close()
	n, err := io.Copy(w, io.LimitReader(f, int64(src.size)))
	if err == nil && uint64(n) != src.size {
		err = fmt.Errorf("snapshot stream: file %s has %d of %d bytes", src.path, n, src.size)
	}
	return err
}

// receiveStream reads a stream's body after its header (n bytes of
// metadata and message, then the file's bytes) into a snapshot file of
// group's and returns the MsgSnap to hand raft, its data a reference to
// that file. A group this member does not run gets its bytes read and
// dropped (nil message). Any error leaves the connection unusable.
// extend is given the file's size before its bytes are read (the read
// deadline grows with it).
func (t *transport) receiveStream(r io.Reader, n int64, from uint64, extend func(size uint64)) (*pb.Message, uint64, error) {
	body, err := readBody(r, n)
	if err != nil {
		return nil, 0, err
	}
	if len(body) < snapStreamMeta {
		return nil, 0, errors.New("snapshot stream without its metadata")
	}
	group := binary.BigEndian.Uint64(body)
	size := binary.BigEndian.Uint64(body[groupIDBytes:])
	crc := binary.BigEndian.Uint32(body[groupIDBytes+8:])
	if size > maxSnapFile {
		return nil, 0, fmt.Errorf("snapshot stream of %d bytes exceeds %d", size, uint64(maxSnapFile))
	}
	m := &pb.Message{}
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body[snapStreamMeta:], m); err != nil {
		return nil, 0, fmt.Errorf("undecodable raft message: %w", err)
	}
	extend(size)
	if m.GetType() != pb.MsgSnap {
		return nil, 0, fmt.Errorf("snapshot stream carrying %s", m.GetType())
	}
	if err := t.validate(m, from, true); err != nil {
		return nil, 0, err
	}
	if _, isRef, _ := decodeSnapRef(m.GetSnapshot().GetData()); isRef {
		return nil, 0, errors.New("snapshot stream whose head is a file reference")
	}
	if t.events(group) == nil || t.snap.fs == nil {
		_, err := io.CopyN(io.Discard, r, int64(size))
		return nil, group, err
	}
	idx := m.GetSnapshot().GetMetadata().GetIndex()
	name := fmt.Sprintf("snap-%x-%016x-from-%x", group, idx, from)
	tmp := fmt.Sprintf("%s.%d.tmp", name, t.snap.seq.Add(1))
	ref, err := writeSnapFile(t.snap.fs, t.snap.dir, name, tmp, func(w io.Writer) ([]byte, error) {
		_, err := io.CopyN(w, r, int64(size))
		return m.GetSnapshot().GetData(), err
	})
	if err != nil {
		return nil, group, err
	}
	if ref.size != size || ref.crc != crc {
		t.snap.fs.Remove(filepath.Join(t.snap.dir, name))
		return nil, group, fmt.Errorf("snapshot stream of group %d at %d: checksum mismatch", group, idx)
	}
	m.Snapshot.Data = encodeSnapRef(ref)
	return m, group, nil
}
