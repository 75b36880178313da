package bench

import (
	"os"
	"strings"
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

// A run whose process exited keeps its directory (the logs) and says so;
// one whose processes ran to the end removes it unless asked to keep it.
func TestEnvFinishKeepsAnExitedRun(t *testing.T) {
	for _, exits := range []bool{true, false} {
		e, err := NewEnv(&Topology{}, t.TempDir(), 1)
		if err != nil {
			t.Fatal(err)
		}
		script := "sleep 60"
		if exits {
			script = "exit 3"
		}
		if err := e.Start("srv", "sh", "-c", script); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); exits && len(e.Exited()) == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the process never exited")
			}
		}
		f := e.Finish(false, "w on t")
		_, statErr := os.Stat(e.Dir)
		switch {
		case exits && (!strings.Contains(f, "w on t: processes exited during the run: [srv] (logs kept in "+e.Dir+")") || statErr != nil):
			t.Errorf("an exit: %q, directory %v", f, statErr)
		case !exits && (f != "" || !os.IsNotExist(statErr)):
			t.Errorf("no exit: %q, directory %v", f, statErr)
		}
		os.RemoveAll(e.Dir)
	}
}
