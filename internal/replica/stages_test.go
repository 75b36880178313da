package replica

import (
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
