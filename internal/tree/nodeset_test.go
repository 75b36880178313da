package tree

import (
	"fmt"
	"math/rand"
	"testing"
)

// TestNodeSetAgainstMap runs random puts, replaces and deletes against a
// map, checking after each that the set holds the same nodes and that
// every one is reachable from its home slot (backward-shift deletion keeps
// probe runs unbroken), through growth and shrinking.
func TestNodeSetAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var s nodeSet
	ref := map[string]*node{}
	for step := 0; step < 40000; step++ {
		// Grow to a few thousand, then drain, then grow again.
		keys := 3000
		if step/10000%2 == 1 {
			keys = 30
		}
		p := fmt.Sprintf("/k%d", rng.Intn(keys))
		switch op := rng.Intn(3); {
		case op == 0 && step/10000%2 == 1, op == 2:
			if got, want := s.del(p), ref[p] != nil; got != want {
				t.Fatalf("step %d: del(%s) %v, want %v", step, p, got, want)
			}
			delete(ref, p)
		default:
			n := &node{}
			n.setPathData(p, nil)
			if old := ref[p]; old != nil && rng.Intn(2) == 0 {
				s.replace(old, n)
			} else {
				s.put(n)
			}
			ref[p] = n
		}
		if s.len() != len(ref) {
			t.Fatalf("step %d: len %d, want %d", step, s.len(), len(ref))
		}
		if step%97 == 0 {
			checkSet(t, "set", &s)
			for k, n := range ref {
				if s.get(k) != n {
					t.Fatalf("step %d: get(%s) wrong", step, k)
				}
			}
			seen := 0
			for n := range s.all() {
				if ref[n.path()] != n {
					t.Fatalf("step %d: %s not in the map", step, n.path())
				}
				seen++
			}
			if seen != len(ref) {
				t.Fatalf("step %d: all yields %d, want %d", step, seen, len(ref))
			}
		}
	}
	for k := range ref {
		s.del(k)
	}
	if s.len() != 0 || s.slots != nil {
		t.Fatalf("emptied set: len %d, %d slots", s.len(), len(s.slots))
	}
}
