package watch

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
)

type sink struct {
	mu  sync.Mutex
	evs []tree.Event
}

func (s *sink) Notify(ev tree.Event) {
	s.mu.Lock()
	s.evs = append(s.evs, ev)
	s.mu.Unlock()
}

func (s *sink) got() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := ""
	for _, e := range s.evs {
		out += fmt.Sprintf("%d:%s ", e.Type, e.Path)
	}
	s.evs = nil
	return out
}

var (
	created  = func(p string) tree.Event { return tree.Event{Type: tree.EventNodeCreated, Path: p, Zxid: 1} }
	deleted  = func(p string) tree.Event { return tree.Event{Type: tree.EventNodeDeleted, Path: p, Zxid: 1} }
	changed  = func(p string) tree.Event { return tree.Event{Type: tree.EventNodeDataChanged, Path: p, Zxid: 1} }
	children = func(p string) tree.Event { return tree.Event{Type: tree.EventNodeChildrenChanged, Path: p, Zxid: 1} }
)

func TestTriggerRules(t *testing.T) {
	cases := []struct {
		name   string
		kind   Kind
		path   string
		events []tree.Event
		want   string
	}{
		{"data fires on change once", KindData, "/a", []tree.Event{changed("/a"), changed("/a")}, "3:/a "},
		{"data fires on delete", KindData, "/a", []tree.Event{deleted("/a")}, "2:/a "},
		{"data ignores child changes", KindData, "/a", []tree.Event{children("/a")}, ""},
		{"exist fires on create", KindExist, "/a", []tree.Event{created("/a")}, "1:/a "},
		{"exist ignores other paths", KindExist, "/a", []tree.Event{created("/b"), created("/a/b")}, ""},
		{"child fires on child change once", KindChild, "/a", []tree.Event{children("/a"), children("/a")}, "4:/a "},
		{"child fires on delete", KindChild, "/a", []tree.Event{deleted("/a")}, "2:/a "},
		{"child ignores data change", KindChild, "/a", []tree.Event{changed("/a")}, ""},
		{"persistent stays and sees child changes", KindPersistent, "/a",
			[]tree.Event{changed("/a"), children("/a"), changed("/a"), created("/a/b")}, "3:/a 4:/a 3:/a "},
		{"recursive sees subtree but not child changes", KindPersistentRecursive, "/a",
			[]tree.Event{created("/a/b"), children("/a"), changed("/a/b/c"), deleted("/a"), changed("/ab")}, "1:/a/b 3:/a/b/c 2:/a "},
		{"recursive on root sees everything", KindPersistentRecursive, "/",
			[]tree.Event{created("/x"), changed("/x/y")}, "1:/x 3:/x/y "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := NewManager(100)
			s := &sink{}
			if err := m.Add(s, c.path, c.kind); err != nil {
				t.Fatal(err)
			}
			for _, ev := range c.events {
				m.Trigger(ev)
			}
			if got := s.got(); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestOneNotificationPerWatcherPerEvent(t *testing.T) {
	m := NewManager(100)
	s := &sink{}
	m.Add(s, "/a", KindData)
	m.Add(s, "/a", KindChild)
	m.Add(s, "/a", KindPersistent)
	m.Add(s, "/", KindPersistentRecursive)
	m.Trigger(deleted("/a"))
	if got := s.got(); got != "2:/a " {
		t.Fatalf("got %q", got)
	}
	// One-shots are gone, persistent ones remain.
	if m.Has(s, "/a", KindChild) != true { // persistent /a still covers child
		t.Fatal("persistent watch should remain")
	}
	if err := m.Remove(s, "/a", KindPersistent); err != nil {
		t.Fatal(err)
	}
	m.Trigger(children("/a"))
	if got := s.got(); got != "" {
		t.Fatalf("after removal got %q", got)
	}
	if m.Count() != 1 {
		t.Fatalf("count %d, want 1 (the recursive one)", m.Count())
	}
}

func TestRemoveAndLimits(t *testing.T) {
	m := NewManager(2)
	s := &sink{}
	if err := m.Remove(s, "/a", KindAny); !errors.Is(err, errs.ErrNoWatcher) {
		t.Fatalf("remove nothing: %v", err)
	}
	m.Add(s, "/a", KindData)
	m.Add(s, "/b", KindChild)
	if err := m.Add(s, "/a", KindData); err != nil {
		t.Fatalf("re-adding an existing watch must not count: %v", err)
	}
	if err := m.Add(s, "/c", KindData); !errors.Is(err, errs.ErrTooManyWatches) {
		t.Fatalf("limit: %v", err)
	}
	if err := m.Remove(s, "/a", KindFromWatcherType(1)); !errors.Is(err, errs.ErrNoWatcher) {
		t.Fatalf("children removal of a data watch: %v", err)
	}
	if err := m.Remove(s, "/a", KindFromWatcherType(2)); err != nil {
		t.Fatal(err)
	}
	m.RemoveAll(s)
	if m.Count() != 0 {
		t.Fatalf("count %d after RemoveAll", m.Count())
	}
	m.Trigger(children("/b"))
	if got := s.got(); got != "" {
		t.Fatalf("got %q after RemoveAll", got)
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
	ft := fakeTree{"/fresh": {Mzxid: 5, Pzxid: 5}, "/stale": {Mzxid: 12, Pzxid: 15}, "/made": {}}
	m.SetWatches(s, 10, ft,
		[]string{"/fresh", "/stale", "/gone"}, // data
		[]string{"/made", "/notyet"},          // exist
		[]string{"/fresh", "/stale", "/gone"}, // child
		[]string{"/p"}, []string{"/r"})
	if got := s.got(); got != "3:/stale 2:/gone 1:/made 4:/stale 2:/gone " {
		t.Fatalf("immediate notifications %q", got)
	}
	// Registered: data /fresh, exist /notyet, child /fresh, /p, /r.
	if m.Count() != 5 {
		t.Fatalf("count %d", m.Count())
	}
	m.Trigger(created("/notyet"))
	m.Trigger(changed("/fresh"))
	if got := s.got(); got != "1:/notyet 3:/fresh " {
		t.Fatalf("got %q", got)
	}
}

func TestConcurrent(t *testing.T) {
	m := NewManager(1000)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			s := &sink{}
			for i := 0; i < 500; i++ {
				p := fmt.Sprintf("/n%d", i%20)
				m.Add(s, p, Kind(i%5))
				m.Trigger(changed(p))
				if i%50 == 0 {
					m.RemoveAll(s)
				}
			}
			m.RemoveAll(s)
		}(g)
	}
	wg.Wait()
	if m.Count() != 0 {
		t.Fatalf("count %d after all removed", m.Count())
	}
}
