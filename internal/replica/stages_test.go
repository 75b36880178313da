package replica

import (
	"fmt"
	"log/slog"
	"maps"
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

// ObserveFsync sees synced writes only: the commit index a snapshot stores
// ahead of it is written without a sync and is not an fsync.
func TestObserveFsyncSyncedWritesOnly(t *testing.T) {
	d, err := openDisk(t.TempDir(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	store := &syncCounter{Storage: d}
	observed := 0
	cfg := soloConfig()
	cfg.SnapshotEntries, cfg.ObserveFsync = 3, func(time.Duration) { observed++ }
	n, _ := soloNode(t, cfg, store)
	for i := range 5 {
		n.propose(t, fmt.Sprintf("k=%d", i))
	}
	if store.unsynced == 0 {
		t.Fatal("no unsynced write: the test does not test anything")
	}
	if observed != store.synced {
		t.Fatalf("ObserveFsync saw %d writes, %d were synced (%d unsynced)", observed, store.synced, store.unsynced)
	}
}

// A Ready that only advances the commit index writes nothing (the commit
// index is volatile state), and a member restarted from such a store,
// with or without snapshots taken since, comes back with every entry: it
// loads (its stored commit index is never behind its snapshot) and learns
// the rest when it leads again.
func TestCommitIndexAloneNotStored(t *testing.T) {
	for _, snapEvery := range []uint64{0, 4} {
		t.Run(fmt.Sprintf("snapshot every %d", snapEvery), func(t *testing.T) {
			dir := t.TempDir()
			d, err := openDisk(dir, nil, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			store := &syncCounter{Storage: d}
			cfg := soloConfig()
			if snapEvery > 0 {
				cfg.SnapshotEntries, cfg.CatchUpEntries = snapEvery, 1
			}
			n, sm := soloNode(t, cfg, store)
			saves := store.synced + store.unsynced
			const writes = 10
			for i := range writes {
				n.propose(t, fmt.Sprintf("k%d=%d", i, i))
			}
			// One write each, however many Readies advanced the commit
			// index; with snapshots, one more (unsynced) for each.
			snaps := store.unsynced
			if got := store.synced + store.unsynced - saves - snaps; got != writes {
				t.Fatalf("%d writes stored %d times besides %d snapshots' commit indexes", writes, got, snaps)
			}
			if snapEvery > 0 && snaps == 0 {
				t.Fatal("no snapshot was taken: the test does not test restarting from one")
			}
			want := sm.state()
			hs, snap, _, err := d.Load()
			if err != nil {
				t.Fatal(err)
			}
			if last, _ := n.r.mem.LastIndex(); snapEvery == 0 && hs.GetCommit() >= last {
				t.Fatalf("stored commit %d: the commit index was stored with the writes", hs.GetCommit())
			}
			if c, s := hs.GetCommit(), snap.GetMetadata().GetIndex(); c < s {
				t.Fatalf("stored commit %d behind the snapshot at %d", c, s)
			}
			d.close()

			d, err = openDisk(dir, nil, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer d.close()
			_, sm = soloNode(t, cfg, d) // campaigns, and commits what it has
			if got := sm.state(); !maps.Equal(got, want) {
				t.Fatalf("after the restart: %v, want %v", got, want)
			}
		})
	}
}

func soloConfig() Config {
	return Config{ID: 1, Peers: []Peer{{ID: 1, Addr: "127.0.0.1:1"}}, Logger: slog.New(slog.DiscardHandler)}
}

// solo is a one-member Node driven by the test.
type solo struct {
	*Node
}

// soloNode starts a one-member Node on store and makes it lead.
func soloNode(t *testing.T, cfg Config, store Storage) (solo, *kv) {
	t.Helper()
	sm := newKV()
	n, err := NewNode(cfg, sm, store, discardNet{}, NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := solo{n}
	for range 100 { // an election timeout
		n.Tick()
		s.settle(t)
	}
	if st := n.BasicStatus(); st.Lead != 1 {
		t.Fatalf("the one member does not lead: %+v", st)
	}
	return s, sm
}

func (s solo) settle(t *testing.T) {
	t.Helper()
	for {
		ok, err := s.HandleReady()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return
		}
	}
}

func (s solo) propose(t *testing.T, cmd string) {
	t.Helper()
	if err := s.Propose([]byte(cmd)); err != nil {
		t.Fatal(err)
	}
	s.settle(t)
}
