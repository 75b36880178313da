package tree

import (
	"bytes"
	"testing"
)

// checkInvariants verifies every relation the tree maintains incrementally
// against a recomputation from the nodes alone.
func checkInvariants(t testing.TB, tr *Tree) {
	t.Helper()
	if tr.nodes["/"] == nil {
		t.Fatal("root missing")
	}
	ephemerals := 0
	for p, n := range tr.nodes {
		if n.path != p {
			t.Fatalf("node %q stored under %q", n.path, p)
		}
		if err := ValidatePath(p, false); err != nil {
			t.Fatalf("invalid path %q in tree", p)
		}
		if int(n.stat.NumChildren) != len(n.children) {
			t.Fatalf("%s: numChildren %d, %d children", p, n.stat.NumChildren, len(n.children))
		}
		if int(n.stat.DataLength) != len(n.data) {
			t.Fatalf("%s: dataLength %d, %d bytes", p, n.stat.DataLength, len(n.data))
		}
		for name := range n.children {
			c := tr.nodes[joinPath(p, name)]
			if c == nil {
				t.Fatalf("%s: child %q missing", p, name)
			}
		}
		if p != "/" {
			parent := tr.nodes[parentOf(p)]
			if parent == nil {
				t.Fatalf("%s: no parent", p)
			}
			if _, ok := parent.children[baseName(p)]; !ok {
				t.Fatalf("%s: not in parent's children", p)
			}
		}
		if n.mode.ephemeral() {
			ephemerals++
			if len(n.children) > 0 {
				t.Fatalf("%s: ephemeral with children", p)
			}
			s := tr.sessions[n.stat.EphemeralOwner]
			if s == nil {
				t.Fatalf("%s: owner %d not a session", p, n.stat.EphemeralOwner)
			}
			if _, ok := s.ephemerals[p]; !ok {
				t.Fatalf("%s: not in its session's set", p)
			}
		} else if n.stat.EphemeralOwner != 0 {
			t.Fatalf("%s: owner set on a non-ephemeral", p)
		}
		wantTTL := n.mode.isTTL() && len(n.children) == 0
		if n.mode.isTTL() != (n.expiry != nil) {
			t.Fatalf("%s: TTL state %v for mode %d", p, n.expiry, n.mode)
		}
		if wantTTL != n.inHeap() {
			t.Fatalf("%s: ttl index membership %v, want %v", p, n.inHeap(), wantTTL)
		}
		if wantTTL && (tr.ttl[n.expiry.heapIdx] != n || n.expiry.deadline != ttlDeadline(n.stat.Mtime, n.expiry.ms)) {
			t.Fatalf("%s: ttl index entry wrong", p)
		}
		_, inC := tr.containers[n]
		if want := n.mode == ModeContainer && len(n.children) == 0 && n.stat.Cversion > 0; want != inC {
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
			if n := tr.nodes[p]; n == nil || n.stat.EphemeralOwner != id {
				t.Fatalf("session %d lists %s", id, p)
			}
		}
	}
	for i, n := range tr.ttl {
		if n.expiry.heapIdx != i || tr.nodes[n.path] != n {
			t.Fatalf("ttl heap entry %d (%s) stale", i, n.path)
		}
		if i > 0 && tr.ttl.Less(i, (i-1)/2) {
			t.Fatalf("ttl heap order broken at %d", i)
		}
	}
	for n := range tr.containers {
		if tr.nodes[n.path] != n {
			t.Fatalf("container index holds removed %s", n.path)
		}
	}
}

func joinPath(parent, name string) string {
	if parent == "/" {
		return "/" + name
	}
	return parent + "/" + name
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
