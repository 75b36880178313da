package replica

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

func ents(from, to, term uint64) []*pb.Entry {
	var out []*pb.Entry
	for i := from; i <= to; i++ {
		out = append(out, &pb.Entry{Index: new(i), Term: new(term), Data: []byte{byte(i)}})
	}
	return out
}

func hardState(term, commit uint64) *pb.HardState {
	return &pb.HardState{Term: new(term), Commit: new(commit)}
}

func loadIndexes(t *testing.T, d *disk) (uint64, []uint64) {
	t.Helper()
	_, snap, es, err := d.Load()
	if err != nil {
		t.Fatal(err)
	}
	var idx []uint64
	for _, e := range es {
		idx = append(idx, e.GetIndex())
	}
	return snap.GetMetadata().GetIndex(), idx
}

// TestDiskLog checks the two ways raft rewrites the log: a new leader
// overwriting a suffix, and an installed snapshot replacing everything.
func TestDiskLog(t *testing.T) {
	dir := t.TempDir()
	d, err := openDisk(dir, nil, logger())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Save(hardState(1, 3), ents(1, 10, 1), nil, true); err != nil {
		t.Fatal(err)
	}
	// A new leader in term 2 replaces 5.. with two entries.
	if err := d.Save(hardState(2, 3), ents(5, 6, 2), nil, false); err != nil {
		t.Fatal(err)
	}
	if s, idx := loadIndexes(t, d); s != 0 || len(idx) != 6 || idx[5] != 6 {
		t.Fatalf("after overwrite: snapshot %d entries %v", s, idx)
	}
	// A leader's snapshot at 20 supersedes every stored entry, including the
	// uncommitted 5..6 that conflict with it.
	snap := &pb.Snapshot{Data: []byte("state"), Metadata: &pb.SnapshotMetadata{Index: new(uint64(20)), Term: new(uint64(3)),
		ConfState: &pb.ConfState{Voters: []uint64{1}}}}
	if err := d.Save(hardState(3, 20), ents(21, 22, 3), snap, true); err != nil {
		t.Fatal(err)
	}
	d.close()
	if d, err = openDisk(dir, nil, logger()); err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if s, idx := loadIndexes(t, d); s != 20 || len(idx) != 2 || idx[0] != 21 || d.last != 22 {
		t.Fatalf("after snapshot: snapshot %d entries %v last %d", s, idx, d.last)
	}
	// A local snapshot keeps entries after the compaction point.
	if err := d.Save(hardState(3, 30), ents(23, 30, 3), nil, true); err != nil {
		t.Fatal(err)
	}
	snap.Metadata.Index = new(uint64(28))
	if err := d.SaveSnapshot(snap, 25); err != nil {
		t.Fatal(err)
	}
	if s, idx := loadIndexes(t, d); s != 28 || len(idx) != 2 || idx[0] != 29 {
		t.Fatalf("after compaction: snapshot %d entries %v", s, idx)
	}
	// A commit index beyond the log is refused rather than handed to raft.
	if err := d.Save(hardState(3, 99), nil, nil, true); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := d.Load(); err == nil {
		t.Fatal("load accepted a commit index beyond the log")
	}
}
