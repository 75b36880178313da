package testutil

import "testing"

// TestPickPortsNotTwice: ports a process picked are not picked again while
// recent, though they are free (nobody bound them).
func TestPickPortsNotTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		for _, p := range FreePorts(t, 10) {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
}
