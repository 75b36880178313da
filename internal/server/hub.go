package server

import (
	"sync"
	"sync/atomic"

	"github.com/meridian-coord/meridian/internal/tree"
)

// hub is a session's watch sink on this server. The watch manager calls
// Notify from apply (never blocking); the session's Watch stream drains it.
// The queue is bounded: on overflow the hub drops its watches and ends the
// stream, and the client re-registers them with a relative zxid, which fires
// every watch whose node changed meanwhile (ZooKeeper's setWatches recovery).
type hub struct {
	session int64
	max     int
	// queuedZxid is the highest zxid notified so far; replies to the session
	// carry it so the client can deliver notifications before the reply.
	queuedZxid atomic.Int64

	mu       sync.Mutex
	queue    []tree.Event
	signal   chan struct{} // capacity 1: "queue changed"
	gen      uint64        // bumped when a new stream takes over
	overflow bool
	done     bool
	expired  bool
}

func newHub(session int64, max int) *hub {
	return &hub{session: session, max: max, signal: make(chan struct{}, 1)}
}

// Notify implements watch.Watcher.
func (h *hub) Notify(ev tree.Event) {
	h.mu.Lock()
	if h.done || h.overflow {
		h.mu.Unlock()
		return
	}
	if len(h.queue) >= h.max {
		h.overflow = true
		h.queue = nil
	} else {
		h.queue = append(h.queue, ev)
	}
	if ev.Zxid > h.queuedZxid.Load() && ev.Type != eventLockLost {
		h.queuedZxid.Store(ev.Zxid)
	}
	h.mu.Unlock()
	h.wake()
}

func (h *hub) wake() {
	select {
	case h.signal <- struct{}{}:
	default:
	}
}

// take returns the queued events, or why the stream must end.
func (h *hub) take(gen uint64) (evs []tree.Event, overflow, done, expired, replaced bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen != gen {
		return nil, false, false, false, true
	}
	evs, h.queue = h.queue, nil
	return evs, h.overflow, h.done, h.expired, false
}

// attach makes a new stream the hub's only reader and clears an overflow.
func (h *hub) attach() uint64 {
	h.mu.Lock()
	h.gen++
	g := h.gen
	h.overflow = false
	h.mu.Unlock()
	h.wake()
	return g
}

// reset drops the hub's queue and ends its stream like an overflow: the
// client re-registers its watches relative to its last zxid, which fires
// those whose node changed.
func (h *hub) reset() {
	h.mu.Lock()
	h.overflow = true
	h.queue = nil
	h.mu.Unlock()
	h.wake()
}

func (h *hub) end(expired bool) {
	h.mu.Lock()
	h.done = true
	h.expired = expired
	h.mu.Unlock()
	h.wake()
}

// hubs maps live sessions to their hub on this server. Looking one up
// takes no lock (every native write asks for its session's: api.headerFor);
// making and removing them are serialised by mu.
type hubs struct {
	mu sync.Mutex
	m  sync.Map // int64 → *hub
}

func (hs *hubs) get(session int64, max int) *hub {
	if h := hs.lookup(session); h != nil {
		return h
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if h := hs.lookup(session); h != nil {
		return h
	}
	h := newHub(session, max)
	hs.m.Store(session, h)
	return h
}

// lookup returns the session's hub on this server, if it has one.
func (hs *hubs) lookup(session int64) *hub {
	if v, ok := hs.m.Load(session); ok {
		return v.(*hub)
	}
	return nil
}

func (hs *hubs) remove(session int64) *hub {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if v, ok := hs.m.LoadAndDelete(session); ok {
		return v.(*hub)
	}
	return nil
}

func (hs *hubs) all() []*hub {
	var out []*hub
	hs.m.Range(func(_, v any) bool {
		out = append(out, v.(*hub))
		return true
	})
	return out
}

func (hs *hubs) closeAll() {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.m.Range(func(id, v any) bool {
		v.(*hub).end(false)
		hs.m.Delete(id)
		return true
	})
}
