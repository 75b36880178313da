package replica

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

func stampEntries(first, last uint64) []*pb.Entry {
	var out []*pb.Entry
	for i := first; i <= last; i++ {
		out = append(out, &pb.Entry{Index: new(i)})
	}
	return out
}

// Entries are reported once, when first committed, with the time since
// they first entered the log; a replaced suffix is stamped anew.
func TestStampsCommitStage(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var st stamps
	var got []time.Duration
	observe := func(stage string, d time.Duration) {
		if stage != StageCommit {
			t.Fatalf("stage %q, want %q", stage, StageCommit)
		}
		got = append(got, d)
	}
	st.appended(stampEntries(1, 3), t0)
	st.appended(stampEntries(3, 4), t0.Add(time.Millisecond)) // 3 replaced
	if n := st.committed(2, t0.Add(5*time.Millisecond), observe); n != 2 {
		t.Fatalf("reported %d entries up to 2, want 2", n)
	}
	if n := st.committed(2, t0.Add(6*time.Millisecond), observe); n != 0 {
		t.Fatalf("reported %d entries again, want 0", n)
	}
	st.committed(4, t0.Add(7*time.Millisecond), observe)
	want := []time.Duration{5 * time.Millisecond, 5 * time.Millisecond, 6 * time.Millisecond, 6 * time.Millisecond}
	if len(got) != len(want) {
		t.Fatalf("observed %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("observed %v, want %v", got, want)
		}
	}
	st.appended(stampEntries(5, 5+maxStamps), t0)
	if len(st.s) != maxStamps {
		t.Fatalf("%d stamps kept, want the bound %d", len(st.s), maxStamps)
	}
	st.reset()
	if st.committed(1<<20, t0, observe) != 0 {
		t.Fatal("stamps survived a reset")
	}
}

// syncCounter counts a store's synced and unsynced writes.
type syncCounter struct {
	Storage
	synced, unsynced int
}

func (s *syncCounter) Save(hs *pb.HardState, ents []*pb.Entry, snap *pb.Snapshot, sync bool) error {
	if sync {
		s.synced++
	} else {
		s.unsynced++
	}
	return s.Storage.Save(hs, ents, snap, sync)
}

type discardNet struct{}

func (discardNet) Send(*pb.Message)            {}
func (discardNet) SendStepDown(_, _, _ uint64) {}

// ObserveFsync sees synced writes only: a Ready that only advances the
// commit index is written without a sync and is not an fsync.
func TestObserveFsyncSyncedWritesOnly(t *testing.T) {
	d, err := openDisk(t.TempDir(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	store := &syncCounter{Storage: d}
	observed := 0
	cfg := Config{ID: 1, Peers: []Peer{{ID: 1, Addr: "127.0.0.1:1"}}, Logger: slog.New(slog.DiscardHandler),
		ObserveFsync: func(time.Duration) { observed++ }}
	n, err := NewNode(cfg, newKV(), store, discardNet{}, NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	settle := func() {
		for {
			ok, err := n.HandleReady()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return
			}
		}
	}
	for range 100 { // an election timeout
		n.Tick()
		settle()
	}
	if st := n.BasicStatus(); st.Lead != 1 {
		t.Fatalf("the one member does not lead: %+v", st)
	}
	for i := range 5 {
		if err := n.Propose(fmt.Appendf(nil, "k=%d", i)); err != nil {
			t.Fatal(err)
		}
		settle()
	}
	if store.unsynced == 0 {
		t.Fatal("no unsynced write: the test does not test anything")
	}
	if observed != store.synced {
		t.Fatalf("ObserveFsync saw %d writes, %d were synced (%d unsynced)", observed, store.synced, store.unsynced)
	}
}
