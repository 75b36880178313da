package server

import (
	"testing"

	"github.com/meridian-coord/meridian/internal/coord"
)

// TestRegrantAfterSnapshot: requests waiting on this server whose grant was
// in a log range skipped by a snapshot install are answered from the new
// state; those still waiting are not.
func TestRegrantAfterSnapshot(t *testing.T) {
	st := coord.New()
	live := func(int64) bool { return true }
	idx := uint64(0)
	apply := func(c coord.Command) coord.Result {
		idx++
		if c.ID == 0 {
			c.ID = idx
		}
		r, _, _ := st.Apply(idx, &c, live)
		return r
	}
	apply(coord.Command{Op: coord.OpAcquire, Name: "l", Session: 1})
	apply(coord.Command{Op: coord.OpAcquire, Name: "l", Session: 2, Wait: true})
	apply(coord.Command{Op: coord.OpRelease, Name: "l", Session: 1}) // granted to 2
	apply(coord.Command{Op: coord.OpAcquire, Name: "l", Session: 3, Wait: true})
	apply(coord.Command{ID: 500, Op: coord.OpPop, Name: "q", Session: 4, Wait: true})
	apply(coord.Command{ID: 501, Op: coord.OpPop, Name: "q", Session: 5, Wait: true})
	apply(coord.Command{Op: coord.OpPush, Name: "q", Value: []byte("x")}) // to pop 500
	for _, s := range []int64{6, 7} {
		apply(coord.Command{Op: coord.OpEnter, Name: "b", Session: s, Parties: 2})
	}
	apply(coord.Command{Op: coord.OpEnter, Name: "c", Session: 8, Parties: 2})
	apply(coord.Command{Op: coord.OpEnter, Name: "d", Session: 9, Parties: 2})
	apply(coord.Command{Op: coord.OpEnter, Name: "d", Session: 10, Parties: 2}) // opens d
	apply(coord.Command{Op: coord.OpLeave, Name: "b", Session: 6})
	apply(coord.Command{Op: coord.OpLeave, Name: "b", Session: 7}) // releases 6
	restored, err := coord.Restore(st.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{}
	s.grants.m = map[grantKey]chan coord.Grant{}
	reg := func(k grantKey) chan coord.Grant { ch, _ := s.grants.add(k); return ch }
	want := map[string]chan coord.Grant{
		"lock granted":   reg(grantKey{kind: coord.GrantLock, lock: "l", session: 2}),
		"pop answered":   reg(grantKey{kind: coord.GrantItem, lock: "q", session: 4, waiter: 500}),
		"leave released": reg(grantKey{kind: coord.GrantLeave, lock: "b", session: 6}),
		"enter opened":   reg(grantKey{kind: coord.GrantEnter, lock: "d", session: 9}),
	}
	wantNot := map[string]chan coord.Grant{
		"lock still queued":  reg(grantKey{kind: coord.GrantLock, lock: "l", session: 3}),
		"pop still waiting":  reg(grantKey{kind: coord.GrantItem, lock: "q", session: 5, waiter: 501}),
		"enter still closed": reg(grantKey{kind: coord.GrantEnter, lock: "c", session: 8}),
		"leave still inside": reg(grantKey{kind: coord.GrantLeave, lock: "d", session: 10}),
		// Another group's barrier (a keyspace's): absent from this state,
		// which must not be taken for its removal.
		"leave in another group": reg(grantKey{kind: coord.GrantLeave, lock: "eu/b", session: 11}),
	}
	s.regrant(restored, func(name string) bool { return name != "eu/b" })
	for what, ch := range want {
		select {
		case g := <-ch:
			if what == "pop answered" && (g.Item == nil || string(g.Item.Data) != "x") {
				t.Fatalf("%s: %+v", what, g)
			}
		default:
			t.Errorf("%s: not answered", what)
		}
	}
	for what, ch := range wantNot {
		select {
		case g := <-ch:
			t.Errorf("%s: answered %+v", what, g)
		default:
		}
	}
}
