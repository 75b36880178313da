// Package watch owns the per-server watch registry: which watcher (session or
// connection) waits for which change, and ZooKeeper's rules for which change
// fires which watch (server/watch/WatchManager and DataTree.triggerWatch).
//
// Watches are not replicated: each server keeps those of the clients connected
// to it, and a client re-registers them after reconnecting (SetWatches). This
// package never reads or changes the tree itself; it sees the tree only
// through the events it is handed and, for SetWatches, a NodeReader.
//
// The manager calls Watcher.Notify while holding its lock, so each watcher
// receives notifications in the order Trigger was called (zxid order). Notify
// must therefore never block and never call back into the Manager: the
// watcher queues the event and enforces its own bound.
package watch

import (
	"sort"
	"strings"
	"sync"

	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
)

// Watcher receives notifications; one per session (or connection). It is
// used as a map key, so it must be comparable (in practice, a pointer).
type Watcher interface {
	// Notify queues one notification. It must not block; the implementation
	// (the connection) enforces its own bound and disconnects the client
	// when full.
	Notify(ev tree.Event)
}

// Kind is a kind of watch registration.
type Kind int

const (
	// KindData is getData's one-shot watch; KindExist is exists' (on a
	// missing or an existing node). As in ZooKeeper they share one table: a
	// registration fires on the node's creation, data change or deletion,
	// and registering both at one path is one registration. The kind given
	// to Add only decides which list Snapshot reports it in; like
	// ZooKeeper's client, callers should register an exists() that found
	// the node as KindData, so that re-registering it through SetWatches
	// does not fire a spurious NodeCreated.
	KindData Kind = iota
	KindExist
	// KindChild is getChildren's one-shot watch.
	KindChild
	// KindPersistent and KindPersistentRecursive are addWatch modes 0 and 1;
	// they stay until removed.
	KindPersistent
	KindPersistentRecursive
	// KindAny matches every kind; only for Remove and Has.
	KindAny

	kindInvalid Kind = -1
)

// KindFromWatcherType maps ZooKeeper's WatcherType (removeWatches,
// checkWatches: 1 children, 2 data, 3 any, and since 3.7 4 persistent, 5
// persistent recursive) to a Kind. Any other value yields a kind that Remove
// refuses with errs.ErrBadArguments and Has reports absent.
func KindFromWatcherType(t int32) Kind {
	switch t {
	case 1:
		return KindChild
	case 2:
		return KindData
	case 3:
		return KindAny
	case 4:
		return KindPersistent
	case 5:
		return KindPersistentRecursive
	}
	return kindInvalid
}

// table is where a registration lives: data and exist share tData.
type table uint8

const (
	tData table = iota
	tChild
	tPersistent
	tRecursive
	nTables
)

// tablesOf returns the tables a Kind names, nil if it names none.
func tablesOf(k Kind) []table {
	switch k {
	case KindData, KindExist:
		return []table{tData}
	case KindChild:
		return []table{tChild}
	case KindPersistent:
		return []table{tPersistent}
	case KindPersistentRecursive:
		return []table{tRecursive}
	case KindAny:
		return []table{tData, tChild, tPersistent, tRecursive}
	}
	return nil
}

type reg struct {
	path string
	t    table
}

// Manager is the registry. It is safe for concurrent use.
type Manager struct {
	maxPerWatcher int

	mu sync.Mutex
	// Both directions are indexed so that Trigger is proportional to the
	// watchers of one path and RemoveAll to the registrations of one watcher.
	byPath [nTables]map[string]map[Watcher]struct{}
	// byWatch values record, for tData, whether the registration was made
	// only through exists (reported as exist by Snapshot).
	byWatch  map[Watcher]map[reg]bool
	total    int
	recCount int // recursive registrations: Trigger skips the ancestor walk when zero
}

// NewManager returns a registry allowing at most maxPerWatcher registrations
// per watcher; further ones fail with errs.ErrTooManyWatches.
func NewManager(maxPerWatcher int) *Manager {
	m := &Manager{maxPerWatcher: maxPerWatcher, byWatch: map[Watcher]map[reg]bool{}}
	for i := range m.byPath {
		m.byPath[i] = map[string]map[Watcher]struct{}{}
	}
	return m
}

// Add registers w for path. Registering an existing (path, kind) again is a
// no-op and does not count against the limit.
func (m *Manager) Add(w Watcher, path string, k Kind) error {
	if k < KindData || k > KindPersistentRecursive {
		return errs.ErrBadArguments
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addLocked(w, path, k)
}

func (m *Manager) addLocked(w Watcher, path string, k Kind) error {
	r := reg{path, tablesOf(k)[0]}
	regs := m.byWatch[w]
	if existOnly, ok := regs[r]; ok {
		if existOnly && k == KindData {
			regs[r] = false
		}
		return nil
	}
	if len(regs) >= m.maxPerWatcher {
		return errs.ErrTooManyWatches
	}
	if regs == nil {
		regs = map[reg]bool{}
		m.byWatch[w] = regs
	}
	regs[r] = k == KindExist
	set := m.byPath[r.t][path]
	if set == nil {
		set = map[Watcher]struct{}{}
		m.byPath[r.t][path] = set
	}
	set[w] = struct{}{}
	m.total++
	if r.t == tRecursive {
		m.recCount++
	}
	return nil
}

func (m *Manager) removeLocked(w Watcher, r reg) bool {
	regs := m.byWatch[w]
	if _, ok := regs[r]; !ok {
		return false
	}
	delete(regs, r)
	if len(regs) == 0 {
		delete(m.byWatch, w)
	}
	set := m.byPath[r.t][r.path]
	delete(set, w)
	if len(set) == 0 {
		delete(m.byPath[r.t], r.path)
	}
	m.total--
	if r.t == tRecursive {
		m.recCount--
	}
	return true
}

// Remove removes w's registrations of kind k at path (ZooKeeper
// removeWatches, 3.7+ semantics): KindData (or KindExist) removes the
// data/exist watch, KindChild the child watch, KindPersistent and
// KindPersistentRecursive those watches, KindAny all of them. It fails with
// errs.ErrNoWatcher when nothing matched.
func (m *Manager) Remove(w Watcher, path string, k Kind) error {
	tables := tablesOf(k)
	if tables == nil {
		return errs.ErrBadArguments
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	removed := false
	for _, t := range tables {
		if m.removeLocked(w, reg{path, t}) {
			removed = true
		}
	}
	if !removed {
		return errs.ErrNoWatcher
	}
	return nil
}

// RemoveAll drops every registration of w (its connection closed or its
// session ended).
func (m *Manager) RemoveAll(w Watcher) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for r := range m.byWatch[w] {
		m.removeLocked(w, r)
	}
}

// Has reports whether w has a registration of kind k at path (checkWatches),
// with the same matching as Remove.
func (m *Manager) Has(w Watcher, path string, k Kind) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	regs := m.byWatch[w]
	for _, t := range tablesOf(k) {
		if _, ok := regs[reg{path, t}]; ok {
			return true
		}
	}
	return false
}

// Count returns the number of registrations (a path watched by one watcher
// for data and for children counts twice).
func (m *Manager) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.total
}

// Trigger fires the watches ev matches, notifying each watcher at most once
// (ZooKeeper's suppress set), and removes the one-shot registrations that
// fired. Call it for every event in apply (zxid) order.
func (m *Manager) Trigger(ev tree.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var fired map[Watcher]struct{}
	fire := func(w Watcher) {
		if _, done := fired[w]; done {
			return
		}
		if fired == nil {
			fired = map[Watcher]struct{}{}
		}
		fired[w] = struct{}{}
		w.Notify(ev)
	}
	oneShot := func(t table) {
		// Deleting from the set while ranging over it is safe in Go.
		for w := range m.byPath[t][ev.Path] {
			fire(w)
			m.removeLocked(w, reg{ev.Path, t})
		}
	}
	switch ev.Type {
	case tree.EventNodeCreated, tree.EventNodeDataChanged:
		oneShot(tData)
	case tree.EventNodeDeleted:
		oneShot(tData)
		oneShot(tChild)
	case tree.EventNodeChildrenChanged:
		oneShot(tChild)
	default:
		return
	}
	for w := range m.byPath[tPersistent][ev.Path] {
		fire(w)
	}
	// Recursive watches see every change in their subtree except child-list
	// changes (ZooKeeper 3.6: they live only in the data table).
	if m.recCount > 0 && ev.Type != tree.EventNodeChildrenChanged {
		for p := ev.Path; ; p = parent(p) {
			for w := range m.byPath[tRecursive][p] {
				fire(w)
			}
			if p == "/" || p == "" {
				break
			}
		}
	}
}

func parent(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// NodeReader is what SetWatches needs to know about the tree.
type NodeReader interface {
	// Exists returns the node's stat, or errs.ErrNoNode if it is missing.
	Exists(path string) (tree.Stat, error)
}

// SetWatches re-registers a reconnecting client's watches (ZooKeeper
// setWatches/setWatches2). A watch whose node changed after relZxid fires at
// once, with Zxid -1, instead of being registered:
//
//   - data: missing -> NodeDeleted; Mzxid > relZxid -> NodeDataChanged.
//   - exist: present -> NodeCreated.
//   - child: missing -> NodeDeleted; Pzxid > relZxid -> NodeChildrenChanged.
//   - persistent, persistentRecursive: always registered.
//
// Any error from r counts as a missing node, as in ZooKeeper. The caller
// holds the tree's read lock so no change slips between the check and the
// registration.
//
// Registrations beyond the watcher's limit are not made; SetWatches then
// still processes every path and returns errs.ErrTooManyWatches, so the
// caller can tell the client its watches are incomplete.
func (m *Manager) SetWatches(w Watcher, relZxid int64, r NodeReader, data, exist, child, persistent, persistentRecursive []string) error {
	return m.setWatches(w, relZxid, r, false, data, exist, child, persistent, persistentRecursive)
}

// SetWatchesKept is SetWatches for clients that may find a notification
// stale (their own read of the node was newer than relZxid, which covers
// the whole batch) and then keep their watch: a watch whose node still
// exists stays registered even when it is notified at once, so the next
// change fires it again. A client that took the notification has no watch
// left for that second event and drops it. The native API's client does
// this; ZooKeeper's protocol keeps ZooKeeper's rule (notify or register).
func (m *Manager) SetWatchesKept(w Watcher, relZxid int64, r NodeReader, data, exist, child, persistent, persistentRecursive []string) error {
	return m.setWatches(w, relZxid, r, true, data, exist, child, persistent, persistentRecursive)
}

func (m *Manager) setWatches(w Watcher, relZxid int64, r NodeReader, keep bool, data, exist, child, persistent, persistentRecursive []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var err error
	add := func(p string, k Kind) {
		if e := m.addLocked(w, p, k); e != nil {
			err = e
		}
	}
	notify := func(t tree.EventType, p string, changed int64) {
		w.Notify(tree.Event{Type: t, Path: p, Zxid: -1, Changed: changed})
	}
	// A node found missing was deleted at some zxid no later than the state
	// judged: a reader that says which (At) lets the deletion carry that
	// bound, so a client that counts it as seen never reads the node back
	// from a server behind the deletion.
	var gone int64
	if a, ok := r.(interface{ At() int64 }); ok {
		gone = a.At()
	}
	for _, p := range data {
		st, e := r.Exists(p)
		switch {
		case e != nil:
			notify(tree.EventNodeDeleted, p, gone)
		case st.Mzxid > relZxid:
			notify(tree.EventNodeDataChanged, p, st.Mzxid)
			if keep {
				add(p, KindData)
			}
		default:
			add(p, KindData)
		}
	}
	for _, p := range exist {
		if st, e := r.Exists(p); e == nil {
			notify(tree.EventNodeCreated, p, st.Mzxid)
			if keep {
				add(p, KindData)
			}
		} else {
			add(p, KindExist)
		}
	}
	for _, p := range child {
		st, e := r.Exists(p)
		switch {
		case e != nil:
			notify(tree.EventNodeDeleted, p, gone)
		case st.Pzxid > relZxid:
			notify(tree.EventNodeChildrenChanged, p, st.Pzxid)
			if keep {
				add(p, KindChild)
			}
		default:
			add(p, KindChild)
		}
	}
	for _, p := range persistent {
		add(p, KindPersistent)
	}
	for _, p := range persistentRecursive {
		add(p, KindPersistentRecursive)
	}
	return err
}

// Snapshot lists w's registrations by kind, each sorted: the arguments
// SetWatches takes, and the paths the wchc four-letter word prints. A
// data/exist registration is listed under exist only if it was made only
// with KindExist.
func (m *Manager) Snapshot(w Watcher) (data, exist, child, persistent, persistentRecursive []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for r, existOnly := range m.byWatch[w] {
		switch {
		case r.t == tData && existOnly:
			exist = append(exist, r.path)
		case r.t == tData:
			data = append(data, r.path)
		case r.t == tChild:
			child = append(child, r.path)
		case r.t == tPersistent:
			persistent = append(persistent, r.path)
		case r.t == tRecursive:
			persistentRecursive = append(persistentRecursive, r.path)
		}
	}
	for _, s := range [][]string{data, exist, child, persistent, persistentRecursive} {
		sort.Strings(s)
	}
	return data, exist, child, persistent, persistentRecursive
}
