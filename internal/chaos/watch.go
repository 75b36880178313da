package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/errs"
)

// The watch workload: watchers hold one-shot data watches on every register
// key, through the native API and through the ZooKeeper protocol
// (go-zookeeper), and re-set each watch when it fires, as ZooKeeper
// recipes do. A native watcher also holds a persistent recursive watch on
// the keys' parent. What is checked is what ZooKeeper promises a watcher:
//
//   - an event names the watched path and a change the registered state
//     could undergo (data changed or deleted if the node existed, created
//     if not);
//   - it is for a change after the state the watch was set on (native
//     events carry the change's zxid: above the registered mzxid), and a
//     key's events come in increasing zxid order, each once; the recursive
//     watch's events too, across all keys (except the notifications a
//     reconnect sends, zxid -1, for nodes changed while away);
//   - a read after the event never shows older data than the event (the
//     re-set watch's state is at least the event's zxid; for go-zookeeper,
//     which gives no zxid, newer than the state before the event);
//   - no change is missed: after healing, every watch still set on a state
//     older than the final one must fire (reconnects re-register watches
//     relative to the last zxid seen, so changes made while disconnected
//     fire at once), unless the session ended, which the watcher is told
//     (native EventSessionExpired, go-zookeeper EventNotWatching).

// nodeState is what a read showed of a node.
type nodeState struct {
	Exists bool
	Mzxid  int64
}

func (s nodeState) String() string {
	if !s.Exists {
		return "absent"
	}
	return fmt.Sprintf("mzxid %d", s.Mzxid)
}

type watchKey struct{ watcher, key string }

// watchTracker holds the state every outstanding watch was set on and the
// watchers' findings.
type watchTracker struct {
	ks         string // the keyspace holding every other register key ("" none)
	mu         sync.Mutex
	registered map[watchKey]nodeState // outstanding watches
	events     int
	lost       int // watches ended by the end of a session (the watcher was told)
	violations []string
}

func newWatchTracker(ks string) *watchTracker {
	return &watchTracker{ks: ks, registered: map[watchKey]nodeState{}}
}

func (t *watchTracker) set(k watchKey, s nodeState) {
	t.mu.Lock()
	t.registered[k] = s
	t.mu.Unlock()
}

func (t *watchTracker) unset(k watchKey) {
	t.mu.Lock()
	delete(t.registered, k)
	t.mu.Unlock()
}

func (t *watchTracker) violate(format string, args ...any) {
	t.mu.Lock()
	if len(t.violations) < 50 {
		t.violations = append(t.violations, "watch: "+fmt.Sprintf(format, args...))
	}
	t.mu.Unlock()
}

func (t *watchTracker) count(events, lost int) {
	t.mu.Lock()
	t.events += events
	t.lost += lost
	t.mu.Unlock()
}

// checkEvent checks a fired one-shot watch against the state it was set on.
// zxid is the event's zxid: 0 when the API does not give it, -1 for a
// notification sent when the watch was set again after a reconnect.
func (t *watchTracker) checkEvent(who, key string, reg nodeState, typ, path string, zxid, lastZxid int64) {
	if path != key {
		t.violate("%s: watch on %s got an event for %s", who, key, path)
	}
	switch {
	case reg.Exists && typ != "changed" && typ != "deleted":
		t.violate("%s: watch on existing %s (%v) got %s", who, key, reg, typ)
	case !reg.Exists && typ != "created":
		t.violate("%s: watch on absent %s got %s", who, key, typ)
	}
	// zxid -1: a reconnect's notification that the node changed while the
	// watcher was away (ZooKeeper's SetWatches); it names no change.
	if zxid > 0 {
		if zxid <= reg.Mzxid {
			t.violate("%s: %s event on %s has zxid %d, not after the state the watch was set on (%v)", who, typ, key, zxid, reg)
		}
		if zxid <= lastZxid {
			t.violate("%s: %s event on %s has zxid %d after an event with zxid %d (out of order or repeated)", who, typ, key, zxid, lastZxid)
		}
	}
}

// checkAfter checks the state read when the watch was set again after an
// event (zxid 0 when unknown) on a watch set on reg.
func (t *watchTracker) checkAfter(who, key string, reg, now nodeState, typ string, zxid int64) {
	if !now.Exists {
		return // deleted by then: nothing to compare
	}
	if zxid > 0 && now.Mzxid < zxid {
		t.violate("%s: read after a %s event (zxid %d) on %s shows older data (%v)", who, typ, zxid, key, now)
	}
	if reg.Exists && now.Mzxid <= reg.Mzxid {
		t.violate("%s: read after a %s event on %s shows no newer data (%v, watch set on %v)", who, typ, key, now, reg)
	}
}

// awaitFinal waits until every watcher's watch on every key is set on the
// final state, or the bound passes: a watch left on an older state missed
// a change.
func (t *watchTracker) awaitFinal(watchers []string, keys int, final map[string]nodeState, bound time.Duration) {
	deadline := time.Now().Add(bound)
	for {
		var stuck []string
		t.mu.Lock()
		for _, w := range watchers {
			for k := 0; k < keys; k++ {
				key := keyPath(t.ks, k)
				reg, ok := t.registered[watchKey{w, key}]
				switch {
				case !ok:
					stuck = append(stuck, fmt.Sprintf("%s has no watch on %s", w, key))
				case reg.Exists != final[key].Exists || (reg.Exists && reg.Mzxid != final[key].Mzxid):
					stuck = append(stuck, fmt.Sprintf("%s's watch on %s was set on %v and has not fired; final state %v", w, key, reg, final[key]))
				}
			}
		}
		t.mu.Unlock()
		if len(stuck) == 0 {
			return
		}
		if time.Now().After(deadline) {
			sort.Strings(stuck)
			t.violate("%d watches missed a change or could not be set %v after healing: %s", len(stuck), bound, strings.Join(stuck, "; "))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nativeWatchLoop watches every key through the native client until stop.
func (w *worker) nativeWatchLoop(ctx context.Context, stop <-chan struct{}, keys int, tr *watchTracker) {
	type fired struct {
		key, gen int
		ev       client.Event
	}
	evc := make(chan fired, keys+1)
	gen := 0
	regs := make([]nodeState, keys)
	have := make([]bool, keys)
	last := make([]int64, keys)
	after := make([]*client.Event, keys) // the event to check the next state against
	var rec <-chan client.Event          // the recursive watch
	var recLast int64
	newSession := func() {
		if w.c != nil {
			w.c.Close()
			w.c = nil
		}
		gen++
		rec, recLast = nil, 0
		for k := range have {
			have[k], last[k], after[k] = false, 0, nil
			tr.unset(watchKey{w.name, keyPath(w.ks, k)})
		}
	}
	defer func() {
		if w.c != nil {
			w.c.Close()
		}
	}()
	register := func(k int) {
		key := keyPath(w.ks, k)
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		var st nodeState
		_, stat, ch, err := w.c.GetW(octx, key)
		if errors.Is(err, errs.ErrNoNode) {
			var ok bool
			ok, stat, ch, err = w.c.ExistsW(octx, key)
			st.Exists = ok
		} else {
			st.Exists = err == nil
		}
		if err != nil {
			if needsNewSession(err) {
				tr.count(0, 1)
				newSession()
			}
			return
		}
		if st.Exists {
			st.Mzxid = stat.GetMzxid()
		}
		if ev := after[k]; ev != nil {
			tr.checkAfter(w.name, key, regs[k], st, nativeType(ev.Type), ev.Zxid)
			after[k] = nil
		}
		regs[k], have[k] = st, true
		tr.set(watchKey{w.name, key}, st)
		g := gen
		go func() {
			ev, ok := <-ch
			if !ok {
				ev = client.Event{Type: client.EventSessionClosed}
			}
			select {
			case evc <- fired{k, g, ev}:
			case <-stop:
			}
		}()
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case f := <-evc:
			if f.gen != gen {
				continue // from a session already replaced
			}
			if f.ev.Type == client.EventSessionExpired || f.ev.Type == client.EventSessionClosed {
				tr.count(0, 1)
				newSession()
				continue
			}
			key := keyPath(w.ks, f.key)
			have[f.key] = false
			tr.unset(watchKey{w.name, key})
			tr.count(1, 0)
			tr.checkEvent(w.name, key, regs[f.key], nativeType(f.ev.Type), f.ev.Path, f.ev.Zxid, last[f.key])
			last[f.key] = max(last[f.key], f.ev.Zxid)
			ev := f.ev
			after[f.key] = &ev
			register(f.key)
		case ev, ok := <-rec:
			if !ok || ev.Type == client.EventSessionExpired || ev.Type == client.EventSessionClosed {
				rec = nil
				if ev.Type == client.EventSessionExpired {
					tr.count(0, 1)
					newSession()
				}
				continue
			}
			if !strings.HasPrefix(ev.Path, kvRoot+"/") {
				tr.violate("%s: recursive watch on %s got an event for %s", w.name, kvRoot, ev.Path)
			}
			if ev.Zxid > 0 && ev.Zxid <= recLast {
				tr.violate("%s: recursive watch event %s %s zxid %d after zxid %d (out of order or repeated)", w.name, nativeType(ev.Type), ev.Path, ev.Zxid, recLast)
			}
			recLast = max(recLast, ev.Zxid)
		case <-tick.C:
			if w.c == nil {
				if err := w.connect(ctx); err != nil {
					continue
				}
			}
			if rec == nil {
				octx, cancel := context.WithTimeout(ctx, opTimeout)
				ch, _, err := w.c.AddWatch(octx, kvRoot, true)
				cancel()
				if err == nil {
					rec = ch
				} else if needsNewSession(err) {
					tr.count(0, 1)
					newSession()
					continue
				}
			}
			for k := range have {
				if !have[k] && w.c != nil {
					register(k)
				}
			}
		}
	}
}

func nativeType(t client.EventType) string {
	switch t {
	case client.EventNodeCreated:
		return "created"
	case client.EventNodeDeleted:
		return "deleted"
	case client.EventNodeDataChanged:
		return "changed"
	}
	return t.String()
}

func zkType(t gozk.EventType) string {
	switch t {
	case gozk.EventNodeCreated:
		return "created"
	case gozk.EventNodeDeleted:
		return "deleted"
	case gozk.EventNodeDataChanged:
		return "changed"
	}
	return t.String()
}

type quietZKLogger struct{}

func (quietZKLogger) Printf(string, ...any) {}

// zkWatchLoop watches every key through go-zookeeper until stop.
// go-zookeeper reconnects by itself, re-sets its watches relative to the
// last zxid it saw, and starts a new session when one expires (ending every
// watch with EventNotWatching).
func (w *worker) zkWatchLoop(ctx context.Context, stop <-chan struct{}, servers []string, keys int, tr *watchTracker) {
	conn, settled, err := zkConnect(servers)
	if err != nil {
		tr.violate("%s: connect: %v", w.name, err)
		return
	}
	defer conn.Close()
	type fired struct {
		key int
		ev  gozk.Event
	}
	evc := make(chan fired, keys)
	regs := make([]nodeState, keys)
	have := make([]bool, keys)
	after := make([]string, keys) // type of the event to check the next state against
	register := func(k int) {
		if !settled() {
			return // retried on the next tick (see zkSettle)
		}
		key := keyPath(w.ks, k)
		var st nodeState
		_, stat, ch, err := conn.GetW(key)
		if errors.Is(err, gozk.ErrNoNode) {
			var ok bool
			ok, stat, ch, err = conn.ExistsW(key)
			st.Exists = ok
		} else {
			st.Exists = err == nil
		}
		if err != nil {
			return // connection lost or session expired: go-zookeeper recovers, we retry
		}
		if st.Exists {
			st.Mzxid = stat.Mzxid
		}
		if typ := after[k]; typ != "" {
			tr.checkAfter(w.name, key, regs[k], st, typ, 0)
			after[k] = ""
		}
		regs[k], have[k] = st, true
		tr.set(watchKey{w.name, key}, st)
		go func() {
			ev := <-ch
			select {
			case evc <- fired{k, ev}:
			case <-stop:
			}
		}()
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case f := <-evc:
			key := keyPath(w.ks, f.key)
			have[f.key] = false
			tr.unset(watchKey{w.name, key})
			if f.ev.Type == gozk.EventNotWatching {
				tr.count(0, 1) // the session ended and we were told
				continue
			}
			tr.count(1, 0)
			tr.checkEvent(w.name, key, regs[f.key], zkType(f.ev.Type), f.ev.Path, 0, 0)
			after[f.key] = zkType(f.ev.Type)
			register(f.key)
		case <-tick.C:
			for k := range have {
				if !have[k] {
					register(k)
				}
			}
		}
	}
}

// runWatchers starts one native and one ZooKeeper-protocol watcher (on
// different servers) and returns their names and a function that stops them.
func runWatchers(ctx context.Context, cl *Cluster, keys, first int, tr *watchTracker) ([]string, func()) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	n := len(cl.Nodes)
	nw := &worker{id: first, name: "wn", eps: cl.Endpoints(first % n), tls: cl.ClientTLS(), ks: tr.ks}
	wg.Add(2)
	go func() { defer wg.Done(); nw.nativeWatchLoop(ctx, stop, keys, tr) }()
	go func() {
		defer wg.Done()
		(&worker{name: "wz", ks: tr.ks}).zkWatchLoop(ctx, stop, cl.ZKServers((first+1)%n), keys, tr)
	}()
	var once sync.Once
	return []string{"wn", "wz"}, func() {
		once.Do(func() { close(stop) })
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
	}
}
