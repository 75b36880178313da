package watch

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
)

// sink is a Watcher that records what it was told.
type sink struct {
	mu  sync.Mutex
	evs []tree.Event
}

func (s *sink) Notify(ev tree.Event) {
	s.mu.Lock()
	s.evs = append(s.evs, ev)
	s.mu.Unlock()
}

// got returns and clears the notifications as "type:path" words.
func (s *sink) got() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.evs {
		out = append(out, fmt.Sprintf("%d:%s", e.Type, e.Path))
	}
	s.evs = nil
	return strings.Join(out, " ")
}

func ev(t tree.EventType, p string) tree.Event { return tree.Event{Type: t, Path: p, Zxid: 7} }

var (
	created  = func(p string) tree.Event { return ev(tree.EventNodeCreated, p) }
	deleted  = func(p string) tree.Event { return ev(tree.EventNodeDeleted, p) }
	changed  = func(p string) tree.Event { return ev(tree.EventNodeDataChanged, p) }
	children = func(p string) tree.Event { return ev(tree.EventNodeChildrenChanged, p) }
)

type regSpec struct {
	w    int // watcher index
	path string
	k    Kind
}

func TestTriggerRules(t *testing.T) {
	cases := []struct {
		name   string
		regs   []regSpec
		events []tree.Event
		want   []string // per watcher
		left   int      // registrations remaining
	}{
		// One-shot data / exist.
		{"data fires on change, once", []regSpec{{0, "/a", KindData}},
			[]tree.Event{changed("/a"), changed("/a")}, []string{"3:/a"}, 0},
		{"data fires on delete", []regSpec{{0, "/a", KindData}},
			[]tree.Event{deleted("/a")}, []string{"2:/a"}, 0},
		{"data fires on create", []regSpec{{0, "/a", KindData}},
			[]tree.Event{created("/a")}, []string{"1:/a"}, 0},
		{"data ignores child changes", []regSpec{{0, "/a", KindData}},
			[]tree.Event{children("/a")}, []string{""}, 1},
		{"exist fires on create, once", []regSpec{{0, "/a", KindExist}},
			[]tree.Event{created("/a"), deleted("/a")}, []string{"1:/a"}, 0},
		{"exist on existing node fires on change", []regSpec{{0, "/a", KindExist}},
			[]tree.Event{changed("/a")}, []string{"3:/a"}, 0},
		{"exist on existing node fires on delete", []regSpec{{0, "/a", KindExist}},
			[]tree.Event{deleted("/a")}, []string{"2:/a"}, 0},
		{"data and exist are one registration", []regSpec{{0, "/a", KindExist}, {0, "/a", KindData}},
			[]tree.Event{changed("/a"), changed("/a")}, []string{"3:/a"}, 0},
		{"one-shot ignores other paths", []regSpec{{0, "/a", KindExist}, {0, "/a", KindChild}},
			[]tree.Event{created("/b"), created("/a/b"), changed("/ab"), children("/"), deleted("/a/b")}, []string{""}, 2},
		// One-shot child.
		{"child fires on child change, once", []regSpec{{0, "/a", KindChild}},
			[]tree.Event{children("/a"), children("/a")}, []string{"4:/a"}, 0},
		{"child fires on delete", []regSpec{{0, "/a", KindChild}},
			[]tree.Event{deleted("/a")}, []string{"2:/a"}, 0},
		{"child ignores data change and create", []regSpec{{0, "/a", KindChild}},
			[]tree.Event{changed("/a"), created("/a")}, []string{""}, 1},
		{"delete with data and child watches notifies once, removes both",
			[]regSpec{{0, "/a", KindData}, {0, "/a", KindChild}},
			[]tree.Event{deleted("/a"), created("/a"), children("/a")}, []string{"2:/a"}, 0},
		{"delete notifies every watcher once",
			[]regSpec{{0, "/a", KindData}, {0, "/a", KindChild}, {1, "/a", KindChild}, {2, "/a", KindExist}},
			[]tree.Event{deleted("/a")}, []string{"2:/a", "2:/a", "2:/a"}, 0},
		// Persistent.
		{"persistent stays and sees every kind on its path", []regSpec{{0, "/a", KindPersistent}},
			[]tree.Event{created("/a"), changed("/a"), children("/a"), changed("/a"), deleted("/a"), created("/a/b"), changed("/a/b")},
			[]string{"1:/a 3:/a 4:/a 3:/a 2:/a"}, 1},
		{"persistent and one-shot on one path: one notification, one-shot gone",
			[]regSpec{{0, "/a", KindPersistent}, {0, "/a", KindData}, {0, "/a", KindChild}},
			[]tree.Event{deleted("/a"), created("/a")}, []string{"2:/a 1:/a"}, 1},
		// Persistent recursive.
		{"recursive sees subtree but not child-list changes", []regSpec{{0, "/a", KindPersistentRecursive}},
			[]tree.Event{created("/a/b"), children("/a"), changed("/a/b/c"), children("/a/b"), deleted("/a"), changed("/ab"), created("/")},
			[]string{"1:/a/b 3:/a/b/c 2:/a"}, 1},
		{"recursive on root sees everything but child changes", []regSpec{{0, "/", KindPersistentRecursive}},
			[]tree.Event{created("/x"), changed("/x/y"), deleted("/x/y/z"), children("/"), changed("/")},
			[]string{"1:/x 3:/x/y 2:/x/y/z 3:/"}, 1},
		{"recursive at several ancestors: one notification",
			[]regSpec{{0, "/", KindPersistentRecursive}, {0, "/a", KindPersistentRecursive}, {0, "/a/b", KindPersistentRecursive}, {0, "/a/b", KindData}},
			[]tree.Event{changed("/a/b")}, []string{"3:/a/b"}, 3},
		{"recursive and persistent for different watchers",
			[]regSpec{{0, "/a", KindPersistentRecursive}, {1, "/a/b", KindPersistent}, {2, "/a/b", KindExist}},
			[]tree.Event{created("/a/b"), children("/a/b"), changed("/a/b")},
			[]string{"1:/a/b 3:/a/b", "1:/a/b 4:/a/b 3:/a/b", "1:/a/b"}, 2},
		{"unknown event type fires nothing", []regSpec{{0, "/a", KindPersistent}, {0, "/", KindPersistentRecursive}},
			[]tree.Event{ev(99, "/a")}, []string{""}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := NewManager(100)
			sinks := make([]*sink, len(c.want))
			for i := range sinks {
				sinks[i] = &sink{}
			}
			for _, r := range c.regs {
				if err := m.Add(sinks[r.w], r.path, r.k); err != nil {
					t.Fatal(err)
				}
			}
			for _, e := range c.events {
				m.Trigger(e)
			}
			for i, s := range sinks {
				if got := s.got(); got != c.want[i] {
					t.Errorf("watcher %d got %q, want %q", i, got, c.want[i])
				}
			}
			if n := m.Count(); n != c.left {
				t.Errorf("%d registrations left, want %d", n, c.left)
			}
			checkIndexes(t, m)
		})
	}
}

// checkIndexes verifies the two indexes agree and hold no empty sets.
func checkIndexes(t *testing.T, m *Manager) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	n, rec := 0, 0
	for tb := range m.byPath {
		for p, set := range m.byPath[tb] {
			if len(set) == 0 {
				t.Errorf("empty set left at %q", p)
			}
			for w := range set {
				if _, ok := m.byWatch[w][reg{p, table(tb)}]; !ok {
					t.Errorf("byPath has %q/%d without byWatch", p, tb)
				}
				n++
				if table(tb) == tRecursive {
					rec++
				}
			}
		}
	}
	for w, regs := range m.byWatch {
		if len(regs) == 0 {
			t.Errorf("empty registration set left for %v", w)
		}
		for r := range regs {
			if _, ok := m.byPath[r.t][r.path][w]; !ok {
				t.Errorf("byWatch has %+v without byPath", r)
			}
		}
	}
	if n != m.total || rec != m.recCount {
		t.Errorf("counted %d (%d recursive), manager says %d (%d)", n, rec, m.total, m.recCount)
	}
}

func TestZxidPassedThrough(t *testing.T) {
	m := NewManager(10)
	s := &sink{}
	m.Add(s, "/a", KindData)
	m.Trigger(tree.Event{Type: tree.EventNodeDataChanged, Path: "/a", Zxid: 42})
	if len(s.evs) != 1 || s.evs[0] != (tree.Event{Type: tree.EventNodeDataChanged, Path: "/a", Zxid: 42}) {
		t.Fatalf("got %+v", s.evs)
	}
}

func TestOrderFollowsTriggerCalls(t *testing.T) {
	m := NewManager(10)
	s := &sink{}
	m.Add(s, "/", KindPersistentRecursive)
	var want []string
	for i := range 50 {
		p := fmt.Sprintf("/n%d", i)
		m.Trigger(created(p))
		want = append(want, "1:"+p)
	}
	if got := s.got(); got != strings.Join(want, " ") {
		t.Fatalf("out of order: %s", got)
	}
}

func TestRemoveAndHas(t *testing.T) {
	m := NewManager(100)
	s := &sink{}
	all := func() {
		for _, k := range []Kind{KindData, KindChild, KindPersistent, KindPersistentRecursive} {
			if err := m.Add(s, "/a", k); err != nil {
				t.Fatal(err)
			}
		}
	}
	all()
	if m.Count() != 4 {
		t.Fatalf("count %d", m.Count())
	}
	// Each typed removal removes exactly its kind (ZooKeeper 3.7+).
	for _, c := range []struct {
		typ  int32
		left int
	}{{1, 3}, {2, 2}, {4, 1}, {5, 0}} {
		k := KindFromWatcherType(c.typ)
		if !m.Has(s, "/a", k) || !m.Has(s, "/a", KindAny) {
			t.Fatalf("type %d: Has false before removal", c.typ)
		}
		if err := m.Remove(s, "/a", k); err != nil {
			t.Fatalf("type %d: %v", c.typ, err)
		}
		if m.Has(s, "/a", k) {
			t.Fatalf("type %d: Has true after removal", c.typ)
		}
		if err := m.Remove(s, "/a", k); !errors.Is(err, errs.ErrNoWatcher) {
			t.Fatalf("type %d: second removal %v", c.typ, err)
		}
		if m.Count() != c.left {
			t.Fatalf("type %d: count %d, want %d", c.typ, m.Count(), c.left)
		}
	}
	if m.Has(s, "/a", KindAny) {
		t.Fatal("Has(Any) after everything removed")
	}
	if err := m.Remove(s, "/a", KindAny); !errors.Is(err, errs.ErrNoWatcher) {
		t.Fatalf("remove any of nothing: %v", err)
	}
	// Any removes every kind at the path and nothing elsewhere.
	all()
	m.Add(s, "/b", KindData)
	if err := m.Remove(s, "/a", KindFromWatcherType(3)); err != nil {
		t.Fatal(err)
	}
	if m.Count() != 1 || !m.Has(s, "/b", KindData) {
		t.Fatalf("count %d after remove any", m.Count())
	}
	// Exist and data name the same registration.
	if !m.Has(s, "/b", KindExist) || m.Remove(s, "/b", KindExist) != nil || m.Count() != 0 {
		t.Fatal("exist/data share a registration")
	}
	// Another watcher's registration does not match.
	other := &sink{}
	m.Add(other, "/c", KindData)
	if m.Has(s, "/c", KindData) || !errors.Is(m.Remove(s, "/c", KindAny), errs.ErrNoWatcher) {
		t.Fatal("matched another watcher's registration")
	}
	checkIndexes(t, m)
}

func TestInvalidKinds(t *testing.T) {
	m := NewManager(100)
	s := &sink{}
	for _, k := range []Kind{KindAny, Kind(-1), Kind(99)} {
		if err := m.Add(s, "/a", k); !errors.Is(err, errs.ErrBadArguments) {
			t.Errorf("Add kind %d: %v", k, err)
		}
	}
	for _, typ := range []int32{0, 6, -1, 1 << 20} {
		k := KindFromWatcherType(typ)
		if err := m.Remove(s, "/a", k); !errors.Is(err, errs.ErrBadArguments) {
			t.Errorf("Remove type %d: %v", typ, err)
		}
		if m.Has(s, "/a", k) {
			t.Errorf("Has type %d", typ)
		}
	}
	if m.Count() != 0 {
		t.Fatal("invalid kinds registered something")
	}
}

func TestLimits(t *testing.T) {
	m := NewManager(2)
	s, other := &sink{}, &sink{}
	if err := m.Add(s, "/a", KindData); err != nil {
		t.Fatal(err)
	}
	if err := m.Add(s, "/a", KindChild); err != nil {
		t.Fatal(err)
	}
	for _, k := range []Kind{KindData, KindExist, KindChild} {
		if err := m.Add(s, "/a", k); err != nil {
			t.Fatalf("re-adding an existing watch must not count: %v", err)
		}
	}
	if err := m.Add(s, "/b", KindData); !errors.Is(err, errs.ErrTooManyWatches) {
		t.Fatalf("over the limit: %v", err)
	}
	if err := m.Add(other, "/b", KindData); err != nil {
		t.Fatalf("the limit is per watcher: %v", err)
	}
	// A fired one-shot frees its slot.
	m.Trigger(changed("/a"))
	if err := m.Add(s, "/b", KindPersistent); err != nil {
		t.Fatalf("after a one-shot fired: %v", err)
	}
	if m.Count() != 3 {
		t.Fatalf("count %d", m.Count())
	}
	m.RemoveAll(s)
	if m.Count() != 1 {
		t.Fatalf("count %d after RemoveAll", m.Count())
	}
	m.Trigger(children("/a"))
	m.Trigger(changed("/b"))
	if got := s.got(); got != "3:/a" {
		t.Fatalf("got %q", got)
	}
	m.RemoveAll(other)
	m.RemoveAll(other) // idempotent
	checkIndexes(t, m)
	if m.Count() != 0 || len(m.byWatch) != 0 {
		t.Fatal("state left after RemoveAll")
	}
}

type fakeTree map[string]tree.Stat

func (f fakeTree) Exists(p string) (tree.Stat, error) {
	if st, ok := f[p]; ok {
		return st, nil
	}
	return tree.Stat{}, errs.ErrNoNode
}

func TestSetWatches(t *testing.T) {
	m := NewManager(100)
	s := &sink{}
	// relZxid 10: /fresh unchanged since, /stale changed after (data at 12,
	// children at 15), /edge changed exactly at 10 (not after).
	ft := fakeTree{
		"/fresh": {Mzxid: 5, Pzxid: 5},
		"/stale": {Mzxid: 12, Pzxid: 15},
		"/edge":  {Mzxid: 10, Pzxid: 10},
		"/kids":  {Mzxid: 3, Pzxid: 11},
		"/made":  {},
	}
	err := m.SetWatches(s, 10, ft,
		[]string{"/fresh", "/stale", "/gone", "/edge", "/kids"}, // data
		[]string{"/made", "/notyet"},                            // exist
		[]string{"/fresh", "/stale", "/gone", "/edge", "/kids"}, // child
		[]string{"/p", "/gone"}, []string{"/r", "/gone"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range s.evs {
		if e.Zxid != -1 {
			t.Fatalf("zxid %d, want -1", e.Zxid)
		}
	}
	if got := s.got(); got != "3:/stale 2:/gone 1:/made 4:/stale 2:/gone 4:/kids" {
		t.Fatalf("immediate notifications %q", got)
	}
	data, exist, child, pers, rec := m.Snapshot(s)
	for _, c := range []struct{ got, want []string }{
		{data, []string{"/edge", "/fresh", "/kids"}},
		{exist, []string{"/notyet"}},
		{child, []string{"/edge", "/fresh"}},
		{pers, []string{"/gone", "/p"}},
		{rec, []string{"/gone", "/r"}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("snapshot %v, want %v", c.got, c.want)
		}
	}
	m.Trigger(created("/notyet"))
	m.Trigger(changed("/fresh"))
	m.Trigger(children("/fresh"))
	m.Trigger(created("/r/x"))
	if got := s.got(); got != "1:/notyet 3:/fresh 4:/fresh 1:/r/x" {
		t.Fatalf("got %q", got)
	}
	checkIndexes(t, m)
}

func TestSetWatchesEventsCarryZxidMinusOne(t *testing.T) {
	m := NewManager(10)
	s := &sink{}
	m.SetWatches(s, 0, fakeTree{}, []string{"/x"}, nil, nil, nil, nil)
	if len(s.evs) != 1 || s.evs[0] != (tree.Event{Type: tree.EventNodeDeleted, Path: "/x", Zxid: -1}) {
		t.Fatalf("got %+v", s.evs)
	}
}

func TestSetWatchesLimit(t *testing.T) {
	m := NewManager(2)
	s := &sink{}
	ft := fakeTree{"/a": {}, "/b": {}, "/c": {}}
	err := m.SetWatches(s, 0, ft, []string{"/a", "/b", "/c", "/gone"}, nil, nil, nil, nil)
	if !errors.Is(err, errs.ErrTooManyWatches) {
		t.Fatalf("err %v", err)
	}
	// Paths past the limit are still checked: the deleted one is reported.
	if got := s.got(); got != "2:/gone" {
		t.Fatalf("got %q", got)
	}
	if m.Count() != 2 {
		t.Fatalf("count %d", m.Count())
	}
}

func TestSnapshotExistVersusData(t *testing.T) {
	m := NewManager(10)
	s := &sink{}
	m.Add(s, "/e", KindExist)
	m.Add(s, "/d", KindData)
	m.Add(s, "/both", KindExist)
	m.Add(s, "/both", KindData) // a data registration wins
	m.Add(s, "/d", KindExist)   // and stays data
	data, exist, child, pers, rec := m.Snapshot(s)
	if !slices.Equal(data, []string{"/both", "/d"}) || !slices.Equal(exist, []string{"/e"}) ||
		child != nil || pers != nil || rec != nil {
		t.Fatalf("snapshot %v %v %v %v %v", data, exist, child, pers, rec)
	}
	if d, e, c, p, r := m.Snapshot(&sink{}); d != nil || e != nil || c != nil || p != nil || r != nil {
		t.Fatal("snapshot of unknown watcher not empty")
	}
}

// TestConcurrent exercises every entry point from many goroutines; run it
// with -race. Each watcher's notifications must arrive in Trigger order, which
// the ever-increasing zxid checks.
func TestConcurrent(t *testing.T) {
	m := NewManager(1000)
	var zxid struct {
		sync.Mutex
		n int64
	}
	trigger := func(e tree.Event) {
		zxid.Lock() // apply order: one Trigger at a time carries the next zxid
		zxid.n++
		e.Zxid = zxid.n
		m.Trigger(e)
		zxid.Unlock()
	}
	var wg sync.WaitGroup
	sinks := make([]*orderSink, 8)
	for g := range sinks {
		sinks[g] = &orderSink{t: t}
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			s := sinks[g]
			rng := rand.New(rand.NewSource(int64(g)))
			for i := range 2000 {
				p := fmt.Sprintf("/n%d", rng.Intn(10))
				if rng.Intn(3) == 0 {
					p += fmt.Sprintf("/c%d", rng.Intn(3))
				}
				switch rng.Intn(8) {
				case 0, 1, 2:
					m.Add(s, p, Kind(rng.Intn(5)))
				case 3:
					trigger(ev(tree.EventType(1+rng.Intn(4)), p))
				case 4:
					m.Remove(s, p, Kind(rng.Intn(6)))
				case 5:
					m.Has(s, p, Kind(rng.Intn(6)))
					m.Count()
				case 6:
					m.Snapshot(s)
					m.SetWatches(s, int64(i), fakeTree{"/n1": {Mzxid: 5}}, []string{p}, []string{p}, nil, nil, []string{"/n1"})
				case 7:
					if rng.Intn(10) == 0 {
						m.RemoveAll(s)
					}
				}
			}
			m.RemoveAll(s)
		}(g)
	}
	wg.Wait()
	if m.Count() != 0 {
		t.Fatalf("count %d after all removed", m.Count())
	}
	checkIndexes(t, m)
}

type orderSink struct {
	t    *testing.T
	mu   sync.Mutex
	last int64
}

func (s *orderSink) Notify(e tree.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Zxid == -1 {
		return // from SetWatches
	}
	if e.Zxid <= s.last {
		s.t.Errorf("zxid %d after %d", e.Zxid, s.last)
	}
	s.last = e.Zxid
}

func BenchmarkTrigger(b *testing.B) {
	m := NewManager(1 << 20)
	ws := make([]*sink, 100)
	for i := range ws {
		ws[i] = &sink{}
		m.Add(ws[i], "/", KindPersistentRecursive)
		for j := range 100 {
			m.Add(ws[i], fmt.Sprintf("/a/b/n%d", j), KindData)
		}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		m.Trigger(changed(fmt.Sprintf("/a/b/x%d", i%100)))
		if i%1000 == 0 {
			for _, w := range ws {
				w.evs = w.evs[:0]
			}
		}
	}
}
