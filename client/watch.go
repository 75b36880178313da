package client

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/errs"
)

func zkError(code int32) error { return errs.FromZKCode(code) }

// EventType says what happened; node events use ZooKeeper's codes.
type EventType int32

const (
	EventNodeCreated         EventType = 1
	EventNodeDeleted         EventType = 2
	EventNodeDataChanged     EventType = 3
	EventNodeChildrenChanged EventType = 4
	// EventSessionExpired: the session is gone; no more events will come.
	EventSessionExpired EventType = -112
	// EventSessionClosed: the client was closed.
	EventSessionClosed EventType = -1000
)

func (t EventType) String() string {
	switch t {
	case EventNodeCreated:
		return "NodeCreated"
	case EventNodeDeleted:
		return "NodeDeleted"
	case EventNodeDataChanged:
		return "NodeDataChanged"
	case EventNodeChildrenChanged:
		return "NodeChildrenChanged"
	case EventSessionExpired:
		return "SessionExpired"
	case EventSessionClosed:
		return "SessionClosed"
	}
	return "Unknown"
}

// Event is a watch notification. Zxid is the change's zxid, or -1 when the
// event was synthesized on re-registration after a reconnect.
type Event struct {
	Type EventType
	Path string
	Zxid int64
}

type watchKind int

const (
	kindData watchKind = iota
	kindExist
	kindChild
	kindPersistent
	kindRecursive
)

type watchReg struct {
	path string
	kind watchKind
	ch   chan Event
	// A one-shot watch is registered here before the read that sets it on
	// the server is sent, and stays pending until that read returns: an
	// event arriving meanwhile may be for a change the read then shows (it
	// came from another registration on the path, a persistent watch say)
	// and must not fire the watch. Held events are sorted out by arm.
	// Guarded by the registry's mu.
	pending bool
	held    []Event
	seen    int64 // zxid of the state the read showed; events at or below it are old news
	// absent: the read found no node. A one-shot watch set on a missing
	// node fires only on its creation, one set on an existing node never
	// on a creation: events of the other kind come from another
	// registration on the path (a reconnect's re-registration of a read
	// that failed, say) and are not this watch's.
	absent bool
	// last is the highest zxid a persistent watch delivered: a reconnect's
	// notification of a change it already delivered is not repeated.
	last int64
	// The channel is closed exactly once, by shut, never while a send to
	// it is under way: done aborts a send blocked on a slow consumer, smu
	// orders sends and the close.
	done     chan struct{}
	shutOnce sync.Once
	smu      sync.Mutex
	closed   bool
}

// shut ends the watch: a send blocked on it gives up, final (if any) is
// delivered when there is room, and the channel is closed.
func (w *watchReg) shut(final *Event) {
	w.shutOnce.Do(func() {
		close(w.done)
		w.smu.Lock()
		defer w.smu.Unlock()
		if final != nil {
			select {
			case w.ch <- *final:
			default:
			}
		}
		w.closed = true
		close(w.ch)
	})
}

// send delivers ev to a persistent watch, waiting for room (backpressure)
// unless the watch is shut or the client stops; false when the client stops.
func (w *watchReg) send(ev Event, stop <-chan struct{}) bool {
	w.smu.Lock()
	defer w.smu.Unlock()
	if w.closed {
		return true
	}
	select {
	case w.ch <- ev:
	case <-w.done:
	case <-stop:
		return false
	}
	return true
}

// maxHeld bounds the events a pending watch keeps (the newest are kept: the
// oldest are the likeliest to be old news).
const maxHeld = 16

// watchRegistry maps the client's watches to their channels. One-shot
// watches get a channel that receives one event and is closed; persistent
// ones a buffered channel that stays open until removed or the session ends.
type watchRegistry struct {
	mu   sync.Mutex
	regs map[*watchReg]struct{}
}

func newWatchRegistry() *watchRegistry { return &watchRegistry{regs: map[*watchReg]struct{}{}} }

func (r *watchRegistry) add(path string, k watchKind) *watchReg {
	size := 1
	if k >= kindPersistent {
		size = 1024
	}
	w := &watchReg{path: path, kind: k, ch: make(chan Event, size), pending: k < kindPersistent, done: make(chan struct{})}
	r.mu.Lock()
	r.regs[w] = struct{}{}
	r.mu.Unlock()
	return w
}

func (r *watchRegistry) cancel(w *watchReg) {
	if w == nil {
		return
	}
	r.mu.Lock()
	_, ok := r.regs[w]
	delete(r.regs, w)
	r.mu.Unlock()
	if ok {
		w.shut(nil)
	}
}

// notMine: an event an armed one-shot watch cannot be owed (see absent).
func (w *watchReg) notMine(ev Event) bool {
	if w.kind != kindData && w.kind != kindExist {
		return false
	}
	if w.absent {
		return ev.Type != EventNodeCreated
	}
	return ev.Type == EventNodeCreated
}

func matches(w *watchReg, ev Event) bool {
	switch w.kind {
	case kindData, kindExist:
		return w.path == ev.Path && ev.Type != EventNodeChildrenChanged
	case kindChild:
		return w.path == ev.Path && (ev.Type == EventNodeChildrenChanged || ev.Type == EventNodeDeleted)
	case kindPersistent:
		return w.path == ev.Path
	case kindRecursive:
		return ev.Type != EventNodeChildrenChanged && (w.path == ev.Path || w.path == "/" ||
			strings.HasPrefix(ev.Path, w.path+"/"))
	}
	return false
}

// arm ends a one-shot watch's pending state once the read that set it
// returned the state at zxid (exists: whether it found the node): the first
// held event for a later change (or a reconnect's immediate notification,
// zxid -1) fires it now.
func (r *watchRegistry) arm(w *watchReg, zxid int64, exists bool) {
	r.mu.Lock()
	if _, ok := r.regs[w]; !ok || !w.pending {
		r.mu.Unlock()
		return
	}
	w.pending, w.seen, w.absent = false, zxid, !exists
	held := w.held
	w.held = nil
	for _, ev := range held {
		if w.notMine(ev) {
			continue
		}
		if ev.Zxid < 0 || ev.Zxid > zxid {
			delete(r.regs, w)
			r.mu.Unlock()
			w.shut(&ev)
			return
		}
	}
	r.mu.Unlock()
}

// dispatch delivers ev to every matching watch. Persistent watch channels
// apply backpressure: a consumer that stops reading stalls event delivery.
func (r *watchRegistry) dispatch(ev Event, stop <-chan struct{}) {
	r.mu.Lock()
	var fire []*watchReg
	for w := range r.regs {
		if !matches(w, ev) {
			continue
		}
		if w.kind < kindPersistent {
			switch {
			case w.pending:
				if len(w.held) == maxHeld {
					w.held = w.held[1:]
				}
				w.held = append(w.held, ev)
				continue
			case ev.Zxid >= 0 && ev.Zxid <= w.seen:
				continue // a change the read that set the watch already showed
			case w.notMine(ev):
				continue
			}
			delete(r.regs, w)
		} else if ev.Zxid > 0 {
			if ev.Zxid <= w.last {
				continue // delivered already (a reconnect's notification)
			}
			w.last = ev.Zxid
		}
		fire = append(fire, w)
	}
	r.mu.Unlock()
	for _, w := range fire {
		if w.kind < kindPersistent {
			w.shut(&ev)
			continue
		}
		if !w.send(ev, stop) {
			return
		}
	}
}

// lists returns the paths to re-register, per kind.
func (r *watchRegistry) lists() (data, exist, child, persistent, recursive []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.regs {
		switch w.kind {
		case kindData:
			data = append(data, w.path)
		case kindExist:
			exist = append(exist, w.path)
		case kindChild:
			child = append(child, w.path)
		case kindPersistent:
			persistent = append(persistent, w.path)
		case kindRecursive:
			recursive = append(recursive, w.path)
		}
	}
	return
}

func (r *watchRegistry) closeAll(t EventType) {
	r.mu.Lock()
	regs := r.regs
	r.regs = map[*watchReg]struct{}{}
	r.mu.Unlock()
	for w := range regs {
		w.shut(&Event{Type: t})
	}
}

// AddWatch adds a persistent watch on path (recursive: on its whole subtree,
// without child-list events, as ZooKeeper 3.6's addWatch). Events arrive on
// the returned channel until remove is called or the session ends.
func (c *Client) AddWatch(ctx context.Context, path string, recursive bool) (<-chan Event, func(), error) {
	k, mode := kindPersistent, pb.WatchMode_PERSISTENT_WATCH
	if recursive {
		k, mode = kindRecursive, pb.WatchMode_PERSISTENT_RECURSIVE_WATCH
	}
	w := c.watches.add(path, k)
	err := c.call(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
		r, err := api.AddWatch(ctx, &pb.AddWatchRequest{SessionId: sid, Path: path, Mode: mode})
		return r.GetHeader(), err
	})
	if err != nil {
		c.watches.cancel(w)
		return nil, nil, err
	}
	remove := func() {
		c.watches.cancel(w)
		// Tell the server only when no other local watch still needs the path.
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
		defer cancel()
		_ = c.call(ctx, false, func(ctx context.Context, api pb.MeridianClient, sid int64) (*pb.Header, error) {
			if c.watches.has(path, k) {
				return nil, nil
			}
			r, err := api.RemoveWatches(ctx, &pb.RemoveWatchesRequest{SessionId: sid, Path: path, Type: pb.WatcherType_WATCHER_ANY})
			if errors.Is(errs.FromGRPC(err), errs.ErrNoWatcher) {
				err = nil
			}
			return r.GetHeader(), err
		})
	}
	return w.ch, remove, nil
}

// empty reports whether no watch is registered.
func (r *watchRegistry) empty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.regs) == 0
}

func (r *watchRegistry) has(path string, k watchKind) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.regs {
		if w.path == path && w.kind == k {
			return true
		}
	}
	return false
}

// watchLoop keeps one watch stream open to the current server and dispatches
// its events. After a reconnect it re-registers every watch relative to the
// last zxid seen, so changes made meanwhile fire at once.
func (c *Client) watchLoop() {
	defer c.wg.Done()
	first := true
	for attempt := 0; ; attempt++ {
		select {
		case <-c.stop:
			return
		default:
		}
		c.mu.Lock()
		api, gen, sid, expired := c.mu.api, c.mu.gen, c.mu.session, c.mu.expired
		c.mu.Unlock()
		if expired {
			return
		}
		if api == nil {
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
			c.reconnect(ctx, gen)
			cancel()
			select {
			case <-c.stop:
				return
			case <-time.After(backoff(attempt)):
			}
			continue
		}
		req := &pb.WatchRequest{SessionId: sid}
		if !first {
			req.Data, req.Exist, req.Child, req.Persistent, req.PersistentRecursive = c.watches.lists()
		}
		// Relative to what the watch streams have covered, not to the
		// session's last zxid: requests go on while no stream is up, and a
		// change made then must still be notified. A notification of a
		// change some watch's own read already showed is ignored by that
		// watch, and the server keeps it registered (SetWatchesKept).
		c.mu.Lock()
		req.RelativeZxid, req.MinZxid = c.mu.watchZxid, c.mu.lastZxid
		c.mu.Unlock()
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-c.stop:
			case <-ctx.Done():
			}
			cancel()
		}()
		stream, err := api.Watch(ctx, req)
		if err == nil {
			var up bool
			up, err = c.readStream(stream)
			if up {
				attempt = 0 // the stream was up: reconnect at once, back off only when it fails to come up
			}
		}
		cancel()
		err = errs.FromGRPC(err)
		if errors.Is(err, ErrSessionExpired) {
			c.markExpired()
			return
		}
		if errors.Is(err, ErrConnectionLoss) {
			c.dropConn(gen)
		}
		first = false
		select {
		case <-c.stop:
			return
		case <-time.After(backoff(attempt)):
		}
	}
}

// readStream dispatches a stream's events until it ends; up reports whether
// the server had registered the watches (sent Ready).
func (c *Client) readStream(stream pb.Meridian_WatchClient) (up bool, err error) {
	for {
		ev, err := stream.Recv()
		if err != nil {
			return up, err
		}
		if ev.GetSessionExpired() {
			return up, ErrSessionExpired
		}
		if ev.GetReady() {
			up = true
			c.mu.Lock()
			c.mu.watchZxid = max(c.mu.watchZxid, ev.GetZxid())
			c.mu.Unlock()
			continue
		}
		if ev.GetLockLost() != "" {
			c.leases.lose(ev.GetLockLost(), ev.GetLostToken())
			continue
		}
		e := Event{Type: EventType(ev.GetType()), Path: ev.GetPath(), Zxid: ev.GetZxid()}
		// The event's zxid counts as seen before the event is handed out:
		// a read made on receiving it must not be served by a server that
		// has not applied the change (after a reconnect, say).
		c.mu.Lock()
		if e.Zxid > c.mu.lastZxid {
			c.mu.lastZxid = e.Zxid
		}
		c.mu.Unlock()
		c.watches.dispatch(e, c.stop)
		c.mu.Lock()
		c.mu.watchZxid = max(c.mu.watchZxid, e.Zxid)
		if e.Zxid > c.mu.delivered {
			c.mu.delivered = e.Zxid
			close(c.mu.deliveredCh)
			c.mu.deliveredCh = make(chan struct{})
		}
		c.mu.Unlock()
	}
}
