package client

import (
	"testing"
)

// A reconnect re-registers every watch, pending ones included; a read that
// then fails (getData of a missing node) leaves the server to answer its
// data watch with "deleted" (zxid -1). That notification must not fire the
// exists-watch the caller set next on the same path: a watch set on a
// missing node is owed a creation, nothing else (the chaos watch checker:
// "wn: watch on absent /chaos/kv/k2 got deleted", seed 50028, pause-follower).
func TestWatchOnMissingNodeIgnoresAnotherRegistrationsDeleted(t *testing.T) {
	r := newWatchRegistry()
	stop := make(chan struct{})
	defer close(stop)

	// The exists-watch is pending (its read in flight) when the stray
	// notification arrives, then armed by a read that found no node.
	w := r.add("/k", kindExist)
	r.dispatch(Event{Type: EventNodeDeleted, Path: "/k", Zxid: -1}, stop)
	r.arm(w, 10, false)
	select {
	case ev := <-w.ch:
		t.Fatalf("a watch set on a missing node fired with %+v", ev)
	default:
	}
	// Armed: a stray deletion is still not its; the creation is.
	r.dispatch(Event{Type: EventNodeDeleted, Path: "/k", Zxid: -1}, stop)
	r.dispatch(Event{Type: EventNodeCreated, Path: "/k", Zxid: 12}, stop)
	if ev, ok := <-w.ch; !ok || ev.Type != EventNodeCreated || ev.Zxid != 12 {
		t.Fatalf("want the creation at 12, got %+v (open %v)", ev, ok)
	}

	// A watch set on an existing node is never owed a creation, and still
	// gets the reconnect's deletion.
	d := r.add("/k", kindData)
	r.arm(d, 12, true)
	r.dispatch(Event{Type: EventNodeCreated, Path: "/k", Zxid: 13}, stop)
	r.dispatch(Event{Type: EventNodeDeleted, Path: "/k", Zxid: -1}, stop)
	if ev, ok := <-d.ch; !ok || ev.Type != EventNodeDeleted {
		t.Fatalf("want the deletion, got %+v (open %v)", ev, ok)
	}
}
