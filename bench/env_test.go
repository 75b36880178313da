package bench

import (
	"testing"
	"time"
)

// utime and stime are read after the command name, which may hold spaces
// and parentheses.
func TestStatCPU(t *testing.T) {
	line := "4242 (java (a) b) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 37 0 0 20 0 40 0 123 0 0"
	if got, want := statCPU(line), 287*10*time.Millisecond; got != want {
		t.Errorf("statCPU = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "12 (x) S 1", "12 (x) S 1 2 3 4 5 6 7 8 9 10 u s"} {
		if got := statCPU(bad); got != 0 {
			t.Errorf("statCPU(%q) = %v, want 0", bad, got)
		}
	}
}

// Env.CPU counts the CPU a started process burns, and keeps counting
// while it runs.
func TestEnvCPU(t *testing.T) {
	e, err := NewEnv(&Topology{}, t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(false)
	if err := e.Start("spin", "sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 60"); err != nil {
		t.Fatal(err)
	}
	// The loop costs a few hundred ms of CPU; wait until /proc shows it.
	deadline := time.Now().Add(30 * time.Second)
	for e.CPU() < 100*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("CPU %v after 30 s of a busy loop", e.CPU())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
