package tree

import (
	"bytes"
	"sort"
	"testing"
)

// checkInvariants verifies every relation the tree maintains incrementally
// against a recomputation from the nodes alone.
func checkInvariants(t testing.TB, tr *Tree) {
	t.Helper()
	if tr.nodes.get("/") == nil {
		t.Fatal("root missing")
	}
	checkSet(t, "nodes", &tr.nodes)
	ephemerals := 0
	for n := range tr.nodes.all() {
		p := n.path()
		if err := ValidatePath(p, false); err != nil {
			t.Fatalf("invalid path %q in tree", p)
		}
		if st := n.Stat(); int(st.DataLength) != len(n.data()) || n.null && n.data() != "" {
			t.Fatalf("%s: dataLength %d, %d bytes, null %v", p, st.DataLength, len(n.data()), n.null)
		}
		if kids := n.kids(); kids != nil {
			checkSet(t, p, kids)
			for c := range kids.all() {
				if parentOf(c.path()) != p || tr.nodes.get(c.path()) != c {
					t.Fatalf("%s: child %q not the tree's node", p, c.path())
				}
			}
		}
		if p != "/" {
			parent := tr.nodes.get(parentOf(p))
			if parent == nil {
				t.Fatalf("%s: no parent", p)
			}
			if kids := parent.kids(); kids == nil || kids.get(p) != n {
				t.Fatalf("%s: not in parent's children", p)
			}
		}
		if n.createMode().ephemeral() {
			ephemerals++
			if n.numKids() > 0 {
				t.Fatalf("%s: ephemeral with children", p)
			}
			s := tr.sessions[n.owner()]
			if s == nil {
				t.Fatalf("%s: owner %d not a session", p, n.owner())
			}
			if _, ok := s.ephemerals[p]; !ok {
				t.Fatalf("%s: not in its session's set", p)
			}
		} else if n.owner() != 0 {
			t.Fatalf("%s: owner set on a non-ephemeral", p)
		}
		wantTTL := n.createMode().isTTL() && n.numKids() == 0
		if n.createMode().isTTL() != (n.ext != nil && n.ext.ttl.ms > 0) {
			t.Fatalf("%s: TTL state %v for mode %d", p, n.ext, n.mode)
		}
		if wantTTL != n.inHeap() {
			t.Fatalf("%s: ttl index membership %v, want %v", p, n.inHeap(), wantTTL)
		}
		if wantTTL && (tr.ttl[n.expiry().heapIdx] != n || n.expiry().deadline != ttlDeadline(n.stat.Mtime, n.expiry().ms)) {
			t.Fatalf("%s: ttl index entry wrong", p)
		}
		_, inC := tr.containers[n]
		if want := n.createMode() == ModeContainer && n.numKids() == 0 && n.cversion() > 0; want != inC {
			t.Fatalf("%s: container index membership %v, want %v", p, inC, want)
		}
	}
	if ephemerals != tr.ephemeral {
		t.Fatalf("ephemeral count %d, want %d", tr.ephemeral, ephemerals)
	}
	for id, s := range tr.sessions {
		if s.info.ID != id {
			t.Fatalf("session %d stored under %d", s.info.ID, id)
		}
		for p := range s.ephemerals {
			if n := tr.nodes.get(p); n == nil || n.owner() != id {
				t.Fatalf("session %d lists %s", id, p)
			}
		}
	}
	for i, n := range tr.ttl {
		if n.expiry().heapIdx != i || tr.nodes.get(n.path()) != n {
			t.Fatalf("ttl heap entry %d (%s) stale", i, n.path())
		}
		if i > 0 && tr.ttl.Less(i, (i-1)/2) {
			t.Fatalf("ttl heap order broken at %d", i)
		}
	}
	for n := range tr.containers {
		if tr.nodes.get(n.path()) != n {
			t.Fatalf("container index holds removed %s", n.path())
		}
	}
}

// checkSet verifies a nodeSet's count and that every node is found from
// its home slot without crossing an empty one (what get relies on).
func checkSet(t testing.TB, name string, s *nodeSet) {
	t.Helper()
	count := 0
	for i, e := range s.slots {
		if e == nil {
			continue
		}
		count++
		mask := uint64(len(s.slots) - 1)
		for j := hashPath(e.path()) & mask; j != uint64(i); j = (j + 1) & mask {
			if s.slots[j] == nil {
				t.Fatalf("%s: %s unreachable from its home slot", name, e.path())
			}
		}
	}
	if count != s.n || s.n > 0 && s.n*4 > len(s.slots)*3 {
		t.Fatalf("%s: count %d, %d counted in %d slots", name, s.n, count, len(s.slots))
	}
}

// checkRoundTrip snapshots tr, restores it and compares digests and bytes.
func checkRoundTrip(t testing.TB, tr *Tree) *Tree {
	t.Helper()
	var buf bytes.Buffer
	if err := tr.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	snap := append([]byte(nil), buf.Bytes()...)
	r, err := Restore(&buf)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	checkInvariants(t, r)
	if r.Digest() != tr.Digest() {
		t.Fatal("digest changed by snapshot/restore")
	}
	var again bytes.Buffer
	if err := r.Snapshot(&again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap, again.Bytes()) {
		t.Fatal("snapshot of restored tree differs")
	}
	return r
}

// sortedPaths is every node's path, sorted.
func (t *Tree) sortedPaths() []string {
	paths := make([]string, 0, t.nodes.len())
	for n := range t.nodes.all() {
		paths = append(paths, n.path())
	}
	sort.Strings(paths)
	return paths
}
