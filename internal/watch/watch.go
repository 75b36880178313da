// Package watch owns the per-server watch registry: which session (Watcher)
// waits for which change, and ZooKeeper's rules for which change fires which
// watch. Watches are not replicated; each server keeps those of the clients
// connected to it.
//
// The manager calls Watcher.Notify while holding its lock, so notifications
// reach each watcher in the order Trigger was called (zxid order). Notify must
// therefore never block: the watcher queues and enforces its own bound.
package watch

import (
	"sort"
	"strings"
	"sync"

	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
)

// Watcher receives notifications; one per session (or connection).
type Watcher interface {
	// Notify queues one notification. It must not block.
	Notify(ev tree.Event)
}

// Kind is a kind of watch registration.
type Kind int

const (
	// KindData is getData's watch; KindExist is exists' (on a missing or an
	// existing node). Like ZooKeeper they share one table: both fire on the
	// node's creation, data change and deletion.
	KindData Kind = iota
	KindExist
	KindChild
	KindPersistent
	KindPersistentRecursive
	// KindAny matches every kind, for Remove.
	KindAny
)

// KindFromWatcherType maps ZooKeeper's WatcherType (removeWatches,
// checkWatches: 1 children, 2 data, 3 any) to a Kind.
func KindFromWatcherType(t int32) Kind {
	switch t {
	case 1:
		return KindChild
	case 2:
		return KindData
	default:
		return KindAny
	}
}

// table kinds: data and exist registrations share the data table.
type table int

const (
	tData table = iota
	tChild
	tPersistent
	tRecursive
	nTables
)

func tableOf(k Kind) table {
	switch k {
	case KindData, KindExist:
		return tData
	case KindChild:
		return tChild
	case KindPersistent:
		return tPersistent
	default:
		return tRecursive
	}
}

type reg struct {
	path string
	t    table
}

// Manager is the registry. It is safe for concurrent use.
type Manager struct {
	maxPerWatcher int

	mu       sync.Mutex
	byPath   [nTables]map[string]map[Watcher]struct{}
	byWatch  map[Watcher]map[reg]struct{}
	total    int
	recCount int // recursive registrations: skip ancestor walks when zero
}

// NewManager returns a registry allowing at most maxPerWatcher registrations
// per watcher (further ones fail with errs.ErrTooManyWatches).
func NewManager(maxPerWatcher int) *Manager {
	m := &Manager{maxPerWatcher: maxPerWatcher, byWatch: map[Watcher]map[reg]struct{}{}}
	for i := range m.byPath {
		m.byPath[i] = map[string]map[Watcher]struct{}{}
	}
	return m
}

// Add registers w for path.
func (m *Manager) Add(w Watcher, path string, k Kind) error {
	if k == KindAny {
		return errs.ErrBadArguments
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addLocked(w, path, tableOf(k))
}

func (m *Manager) addLocked(w Watcher, path string, t table) error {
	r := reg{path, t}
	regs := m.byWatch[w]
	if _, ok := regs[r]; ok {
		return nil
	}
	if len(regs) >= m.maxPerWatcher {
		return errs.ErrTooManyWatches
	}
	if regs == nil {
		regs = map[reg]struct{}{}
		m.byWatch[w] = regs
	}
	regs[r] = struct{}{}
	set := m.byPath[t][path]
	if set == nil {
		set = map[Watcher]struct{}{}
		m.byPath[t][path] = set
	}
	set[w] = struct{}{}
	m.total++
	if t == tRecursive {
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
// removeWatches). KindData removes the data/exist and persistent ones,
// KindChild the child and persistent ones, KindAny all. It fails with
// errs.ErrNoWatcher when nothing matched.
func (m *Manager) Remove(w Watcher, path string, k Kind) error {
	var tables []table
	switch k {
	case KindData, KindExist:
		tables = []table{tData, tPersistent, tRecursive}
	case KindChild:
		tables = []table{tChild, tPersistent, tRecursive}
	case KindPersistent:
		tables = []table{tPersistent}
	case KindPersistentRecursive:
		tables = []table{tRecursive}
	default:
		tables = []table{tData, tChild, tPersistent, tRecursive}
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

// RemoveAll drops every registration of w (its session ended or its
// connection closed).
func (m *Manager) RemoveAll(w Watcher) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for r := range m.byWatch[w] {
		m.removeLocked(w, r)
	}
}

// Has reports whether w has a registration of kind k at path (checkWatches).
func (m *Manager) Has(w Watcher, path string, k Kind) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	regs := m.byWatch[w]
	has := func(t table) bool { _, ok := regs[reg{path, t}]; return ok }
	switch k {
	case KindAny:
		return has(tData) || has(tChild) || has(tPersistent) || has(tRecursive)
	case KindData, KindExist:
		return has(tData) || has(tPersistent) || has(tRecursive)
	case KindChild:
		return has(tChild) || has(tPersistent) || has(tRecursive)
	}
	return has(tableOf(k))
}

// Count returns the number of registrations.
func (m *Manager) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.total
}

// Trigger fires the watches ev matches, each watcher at most once, and removes
// the one-shot registrations that fired.
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
		set := m.byPath[t][ev.Path]
		for w := range set {
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
	}
	for w := range m.byPath[tPersistent][ev.Path] {
		fire(w)
	}
	// Recursive watches see every change in their subtree except child-list
	// changes (ZooKeeper 3.6 semantics).
	if m.recCount > 0 && ev.Type != tree.EventNodeChildrenChanged {
		for p := ev.Path; ; p = parent(p) {
			for w := range m.byPath[tRecursive][p] {
				fire(w)
			}
			if p == "/" {
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
	Exists(path string) (tree.Stat, error)
}

// SetWatches re-registers a reconnecting client's watches (ZooKeeper
// setWatches/setWatches2). Watches whose node changed after relZxid fire at
// once (with Zxid -1) instead of being registered. The caller holds the
// tree's read lock so no change slips between the check and the registration.
// Registrations beyond the watcher's limit are dropped silently, as a full
// queue would be; the client learns of it through a missing notification only
// if it registered more than the limit, which Add already refuses.
func (m *Manager) SetWatches(w Watcher, relZxid int64, r NodeReader, data, exist, child, persistent, persistentRecursive []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	notify := func(t tree.EventType, p string) { w.Notify(tree.Event{Type: t, Path: p, Zxid: -1}) }
	for _, p := range data {
		st, err := r.Exists(p)
		switch {
		case err != nil:
			notify(tree.EventNodeDeleted, p)
		case st.Mzxid > relZxid:
			notify(tree.EventNodeDataChanged, p)
		default:
			m.addLocked(w, p, tData)
		}
	}
	for _, p := range exist {
		if _, err := r.Exists(p); err == nil {
			notify(tree.EventNodeCreated, p)
		} else {
			m.addLocked(w, p, tData)
		}
	}
	for _, p := range child {
		st, err := r.Exists(p)
		switch {
		case err != nil:
			notify(tree.EventNodeDeleted, p)
		case st.Pzxid > relZxid:
			notify(tree.EventNodeChildrenChanged, p)
		default:
			m.addLocked(w, p, tChild)
		}
	}
	for _, p := range persistent {
		m.addLocked(w, p, tPersistent)
	}
	for _, p := range persistentRecursive {
		m.addLocked(w, p, tRecursive)
	}
}

// Snapshot lists w's registrations by kind, sorted (for re-registration and
// the wchc four-letter word).
func (m *Manager) Snapshot(w Watcher) (data, exist, child, persistent, persistentRecursive []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for r := range m.byWatch[w] {
		switch r.t {
		case tData:
			data = append(data, r.path)
		case tChild:
			child = append(child, r.path)
		case tPersistent:
			persistent = append(persistent, r.path)
		case tRecursive:
			persistentRecursive = append(persistentRecursive, r.path)
		}
	}
	for _, s := range [][]string{data, child, persistent, persistentRecursive} {
		sort.Strings(s)
	}
	return data, exist, child, persistent, persistentRecursive
}
