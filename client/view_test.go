package client

import (
	"encoding/binary"
	"slices"
	"strconv"
	"testing"

	"google.golang.org/grpc/metadata"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
)

// The view a reply returns is merged from its Header and from its header
// metadata (a reply without a Header, an error, an older server), and
// sent with the next call.
func TestMergeReplyTakesTheViewFromEitherPlace(t *testing.T) {
	c := &Client{}
	c.mergeReply(nil, &pb.SetDataResponse{Header: &pb.Header{View: "1:7"}})
	c.mergeReply(metadata.Pairs(SeenGroupsHeader, "2:3"), &pb.DeleteResponse{})
	c.mergeReply(nil, &pb.SetDataResponse{Header: &pb.Header{View: "1:5"}}) // older: kept at 7
	c.mergeReply(nil, nil)
	c.mu.Lock()
	h, ok := c.viewHeaderLocked(func(b []byte) string { return string(b) }, nil)
	c.mu.Unlock()
	if !ok || h != "1:7,2:3" {
		t.Fatalf("view %q (%v); want 1:7,2:3", h, ok)
	}
}

// What every call carries: the credentials, the session's password, the
// zxid seen and the view, the same slice while none of them changes, and
// built again (in one allocation) when the zxid or the view does.
func TestSentPairs(t *testing.T) {
	c := &Client{auth: []string{pb.MetadataAuth, "digest u:p"}}
	c.mu.password = []byte("pw")
	c.mu.lastZxid = 41
	c.mergeView("1:7")
	want := []string{pb.MetadataAuth, "digest u:p", pb.MetadataSessionPassword, "pw", SeenZxidHeader, "41", SeenGroupsHeader, "1:7"}
	got := c.sentLocked()
	if !slices.Equal(got, want) {
		t.Fatalf("sent %q, want %q", got, want)
	}
	if again := c.sentLocked(); &again[0] != &got[0] {
		t.Error("nothing changed, yet the pairs were built again")
	}
	c.observe(&pb.Header{Zxid: 42})
	c.mergeView("1:9,2:3")
	want[5], want[7] = "42", "1:9,2:3"
	if got = c.sentLocked(); !slices.Equal(got, want) {
		t.Fatalf("after a write: sent %q, want %q", got, want)
	}
	zxid := int64(100)
	if n := testing.AllocsPerRun(100, func() { zxid++; c.mu.lastZxid = zxid; c.sentLocked() }); n != 1 {
		t.Errorf("%.1f allocations to build the pairs again, want 1", n)
	}
	views := make([]string, 0, 200) // what a write's replies return
	for i := range cap(views) {
		views = append(views, "0:"+strconv.Itoa(1000+i))
	}
	if n := testing.AllocsPerRun(100, func() {
		zxid++
		c.mu.lastZxid = zxid
		c.mergeView(views[0])
		views = views[1:]
		c.sentLocked()
	}); n != 1 {
		t.Errorf("%.1f allocations to merge a write's view and build the pairs again, want 1", n)
	}
	if n := testing.AllocsPerRun(100, func() { c.sentLocked() }); n != 0 {
		t.Errorf("%.1f allocations to send them again, want 0", n)
	}
}

// A view is raised group by group: an older index, a malformed pair, an
// index of 0 or nothing leave it as it was; a second group joins it.
func TestMergeViewRaisesOnly(t *testing.T) {
	c := &Client{}
	view := func() string {
		c.mu.Lock()
		defer c.mu.Unlock()
		h, ok := c.viewHeaderLocked(func(b []byte) string { return string(b) }, nil)
		if !ok {
			t.Fatal("view not sendable")
		}
		return h
	}
	for _, s := range []string{"1:7", "1:9"} {
		c.mergeView(s)
		if h := view(); h != s {
			t.Fatalf("after %q: view %q", s, h)
		}
	}
	for _, s := range []string{"1:8", "1:x", "1:0", ""} {
		c.mergeView(s)
		if h := view(); h != "1:9" {
			t.Fatalf("after %q: view %q, want 1:9", s, h)
		}
	}
	c.mergeView("2:3")
	c.mergeView("2:4")
	c.mergeView("1:10")
	if h := view(); h != "1:10,2:4" {
		t.Fatalf("two groups: view %q, want 1:10,2:4", h)
	}
}

// decodePairs reads the metadata pairs a lean call's frame carries, in the
// transport's encoding (a 2-byte key length, the key, a 4-byte value
// length, the value).
func decodePairs(t *testing.T, b []byte) []string {
	t.Helper()
	var kv []string
	for len(b) > 0 {
		if len(b) < 2 || len(b) < 2+int(binary.BigEndian.Uint16(b)) {
			t.Fatalf("truncated key in %q", b)
		}
		k := int(binary.BigEndian.Uint16(b))
		kv, b = append(kv, string(b[2:2+k])), b[2+k:]
		if len(b) < 4 || len(b) < 4+int(binary.BigEndian.Uint32(b)) {
			t.Fatalf("truncated value in %q", b)
		}
		v := int(binary.BigEndian.Uint32(b))
		kv, b = append(kv, string(b[4:4+v])), b[4+v:]
	}
	return kv
}

// TestCallPairs: a lean call appends the very pairs carry sends (the
// credentials, the session's password, the zxid seen and the view: none
// yet, one group, several sorted, too many to send), no more than the
// frame has room for, without an allocation when the view has one group.
func TestCallPairs(t *testing.T) {
	c := &Client{auth: []string{pb.MetadataAuth, "digest u:p"}}
	c.mu.password = []byte("pw")
	c.mu.lastZxid = 41
	check := func(what string) {
		t.Helper()
		b, n := (*callPairs)(c).AppendPairs([]byte("head"), 64)
		if string(b[:4]) != "head" {
			t.Fatalf("%s: the frame before the pairs changed: %q", what, b[:4])
		}
		got := decodePairs(t, b[4:])
		c.mu.Lock()
		want := c.sentLocked()
		c.mu.Unlock()
		if !slices.Equal(got, want) || n != len(want)/2 {
			t.Fatalf("%s: appended %d pairs %q, want carry's %q", what, n, got, want)
		}
	}
	check("no view yet")
	c.mergeView("1:7")
	check("one group")
	c.observe(&pb.Header{Zxid: 42})
	c.mergeView("3:9,2:3")
	check("three groups")
	for g := range maxSeenGroups {
		c.mergeView(strconv.Itoa(10+g) + ":1")
	}
	check("more groups than are sent")
	for max := range 4 {
		b, n := (*callPairs)(c).AppendPairs(nil, max)
		if got := decodePairs(t, b); n != max || len(got) != 2*max {
			t.Errorf("room for %d pairs: appended %d (%q)", max, n, got)
		}
	}
	one := &Client{}
	one.mergeView("1:7")
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() {
		one.mu.lastZxid++
		(*callPairs)(one).AppendPairs(buf, 64)
	}); n != 0 {
		t.Errorf("%.1f allocations to append a one-group client's pairs, want 0", n)
	}
}
