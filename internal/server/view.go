package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/fsm"
	"github.com/meridian-coord/meridian/internal/wire"
)

// A view is what one client has seen, group by group: the log index of
// every group's state it observed through this member (reads, writes,
// watch events) and, through those groups' dependencies, what that state
// depended on in other groups (fsm/deps.go). A read of group g is served
// from this member's copy as soon as it has applied the view's index of g
// — no round trip to g's leader however far away, unless the client saw
// something g's copy here has not applied yet — and a write carries the
// view as its dependencies, so that whoever later sees the write waits
// for what the writer had seen. Write then flag across keyspaces holds:
// the flag's entry names the config's group and index.
//
// floor is the zxid every group must reach before it serves the client
// (readBarrier, a ReadIndex round when a group is behind): what a
// ZooKeeper client said it had seen when it resumed its session here, or
// what a native call says without a groups token. It is the coarse form of
// the same guarantee, for a client whose view this member does not know.
//
// A ZooKeeper connection keeps one view for its life; a native call
// carries its client's view in SeenGroupsHeader both ways.
//
// A native call's view lives for the call, inside its callInfo: the
// root's index is a field and the maps are made when first written (nil
// until then), so a call in a cluster without keyspaces allocates nothing
// for it.
type view struct {
	mu    sync.Mutex
	floor int64
	// root is the root group's index (0: none), at every other group's:
	// the whole view is at with root added (sortedLocked).
	root uint64
	at   fsm.Deps
	// fresh are the groups observed since their dependencies were last
	// merged (each once; a request observes a few), events the paths of
	// the watch events delivered since then (settle): merging is left to
	// the next use, because events are delivered under their group's
	// write lock, and a view's lock is never held while a group's is
	// taken.
	fresh    []uint64
	freshBuf [2]uint64 // fresh's first array
	events   []string
	// met are the groups known to have reached floor here; complete
	// those whose dependencies in at are known complete (depsComplete).
	met        map[uint64]bool
	complete   map[uint64]bool
	eventsFull bool // more than maxViewEvents: every group counts as observed
	// grown: at rose since parseView made it, so it no longer encodes as
	// the header it came in (a native call's reply then carries it).
	grown bool
}

// maxViewEvents bounds the event paths a view keeps between two requests;
// beyond it the next request counts every group as observed at what this
// member has applied (more waiting for the client's later readers
// elsewhere, never less).
const maxViewEvents = 256

func newView(floor int64) *view {
	return &view{floor: max(floor, 0)}
}

// raise sets g's index (root's or in at) to index if that is higher.
// Caller holds v.mu.
func (v *view) raise(g, index uint64) {
	if g == 0 {
		if index > v.root {
			v.root, v.grown = index, true
		}
		return
	}
	if index > v.at[g] {
		if v.at == nil {
			v.at = fsm.Deps{}
		}
		v.at[g] = index
		v.grown = true
	}
}

// markFresh adds g to fresh. Caller holds v.mu.
func (v *view) markFresh(g uint64) {
	if v.fresh == nil {
		v.fresh = v.freshBuf[:0]
	}
	if !slices.Contains(v.fresh, g) {
		v.fresh = append(v.fresh, g)
	}
}

// setFlag sets (*m)[g], making the map when it is nil.
func setFlag(m *map[uint64]bool, g uint64) {
	if *m == nil {
		*m = map[uint64]bool{}
	}
	(*m)[g] = true
}

// observe records that the client saw group g's state at index.
func (v *view) observe(g, index uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.raise(g, index)
	v.markFresh(g)
}

// event records that the client was told of a change to path (a watch
// event): it saw the state of path's group that has the change.
func (v *view) event(path string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.events) < maxViewEvents {
		v.events = append(v.events, path)
	} else {
		v.eventsFull = true
	}
}

// settle brings v up to date with what was observed since the last
// settle: an event's group at what this member has applied of it, and
// the dependencies of every group observed, as applied here (at or past
// what the client observed, so possibly more than it needs, never less).
func (s *Server) settle(v *view) {
	v.mu.Lock()
	if len(v.fresh) == 0 && len(v.events) == 0 && !v.eventsFull {
		v.mu.Unlock()
		return
	}
	var local [4]uint64
	fresh, events, full := append(local[:0], v.fresh...), v.events, v.eventsFull // fresh's array is reused
	v.fresh, v.events, v.eventsFull = nil, nil, false
	v.mu.Unlock()
	var seen fsm.Deps // made when something is to be merged
	var groups []*group
	if full {
		groups = append([]*group{s.root}, s.keyspaceGroups.all()...)
	} else {
		for _, p := range events {
			groups = append(groups, s.groupFor(p))
		}
	}
	for _, g := range groups {
		if seen == nil {
			seen = fsm.Deps{}
		}
		g.fsm.RLock()
		seen[g.id] = max(seen[g.id], g.fsm.Applied())
		g.fsm.RUnlock()
		if !slices.Contains(fresh, g.id) {
			fresh = append(fresh, g.id)
		}
	}
	for _, id := range fresh {
		// A group without dependencies (every group of a cluster without
		// keyspaces) has none to merge: its lock, which an Apply holds
		// often under load, is not waited for.
		if g := s.groupByID(id); g != nil && g.fsm.MayHaveDeps() {
			g.fsm.RLock()
			if g.fsm.HasDeps() {
				if seen == nil {
					seen = fsm.Deps{}
				}
				g.fsm.DepsInto(seen)
			}
			g.fsm.RUnlock()
		}
	}
	if len(seen) == 0 {
		return
	}
	v.mu.Lock()
	for g, index := range seen {
		v.raise(g, index)
	}
	v.mu.Unlock()
}

// need is the index of group g the client has seen (0: nothing).
func (v *view) need(g uint64) uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	if g == 0 {
		return v.root
	}
	return v.at[g]
}

// sortedLocked is the whole view by group (the root first). Caller
// holds v.mu.
func (v *view) sortedLocked() []fsm.Dep {
	out := make([]fsm.Dep, 0, len(v.at)+1)
	if v.root > 0 {
		out = append(out, fsm.Dep{Group: 0, Index: v.root})
	}
	return append(out, v.at.Sorted()...)
}

// groups is how many groups the view names.
func (v *view) groups() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := len(v.at)
	if v.root > 0 {
		n++
	}
	return n
}

// newestGroup is the highest keyspace group id in the view: the root has
// applied that index before any group in the view is routed to here.
func (v *view) newestGroup() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	var n uint64
	for g := range v.at {
		n = max(n, g)
	}
	return n
}

// depsFor is what a write to group g carries: every other group's index
// in the view that g's state, as applied here, does not already depend
// on (Apply only raises a group's dependencies, and g applies the write
// after what it has applied here). An index this member has not applied
// yet is waited for first (a native client's view is its own claim, and
// only applied indexes may enter the log: a dependency nobody can reach
// would stall every reader of g); a group that does not run here (a
// removed keyspace) is left out.
func (s *Server) depsFor(ctx context.Context, v *view, g *group) ([]fsm.Dep, error) {
	if err := s.viewRoute(ctx, v); err != nil {
		return nil, err
	}
	s.settle(v)
	v.mu.Lock()
	want := v.sortedLocked()
	v.mu.Unlock()
	g.fsm.RLock()
	have := g.fsm.Deps()
	g.fsm.RUnlock()
	var out []fsm.Dep
	for _, d := range want {
		if d.Group == g.id || d.Index <= have[d.Group] {
			continue
		}
		h := s.groupByID(d.Group)
		if h == nil {
			continue
		}
		if err := s.waitApplied(ctx, h, d.Index); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// groupByID is the group with id running here (0: the root), or nil.
func (s *Server) groupByID(id uint64) *group {
	if id == 0 {
		return s.root
	}
	return s.keyspaceGroups.get(id)
}

// waitApplied waits, within the request timeout, until this member has
// applied index of group g.
func (s *Server) waitApplied(ctx context.Context, g *group, index uint64) error {
	if index <= g.rep.AppliedIndex() {
		return nil
	}
	s.metrics.readWaits.WithLabelValues("apply").Inc()
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	wire.Waits(ctx) // a wait: the connection reads on
	err := g.rep.WaitApplied(ctx, index)
	if errors.Is(err, context.DeadlineExceeded) {
		return errs.ErrTimeout
	}
	return err
}

// viewBarrier makes a read of group g as fresh as v requires: this
// member's copy has applied the client's index of g (a local wait, for an
// entry already committed) and the view's floor (readBarrier), or a
// linearizable barrier when linear.
func (s *Server) viewBarrier(ctx context.Context, g *group, linear bool, v *view) error {
	s.settle(v)
	if err := s.waitApplied(ctx, g, v.need(g.id)); err != nil {
		return err
	}
	if !linear && !s.depsComplete(v, g.id) {
		// What the client saw in another group may depend on entries of
		// g that its dependencies do not name (version.go): g's leader
		// is asked.
		return s.readBarrier(ctx, g, true, v.floor)
	}
	v.mu.Lock()
	met := v.floor == 0 || v.met[g.id]
	v.mu.Unlock()
	if !linear && met {
		return nil
	}
	// Once a group reached the floor here it stays past it: a ReadIndex
	// round for an idle group once per connection, not per read.
	if err := s.readBarrier(ctx, g, linear, v.floor); err != nil {
		return err
	}
	v.mu.Lock()
	setFlag(&v.met, g.id)
	v.mu.Unlock()
	return nil
}

// depsComplete reports whether the dependencies v holds of every group
// it observed other than g are complete: this member's copy of each has
// applied its dependency marker (fsm/deps.go), and v took them from a
// copy past it. A group observed before its marker has its dependencies
// merged again from this member's copy. A group that does not run here
// (a removed keyspace) is left out.
func (s *Server) depsComplete(v *view, g uint64) bool {
	v.mu.Lock()
	var check []fsm.Dep
	if g != 0 && v.root > 0 && !v.complete[0] {
		check = append(check, fsm.Dep{Group: 0, Index: v.root})
	}
	for h, index := range v.at {
		if h != g && !v.complete[h] {
			check = append(check, fsm.Dep{Group: h, Index: index})
		}
	}
	v.mu.Unlock()
	if len(check) == 0 {
		return true
	}
	ok, again := true, false
	for _, d := range check {
		h := s.groupByID(d.Group)
		if h == nil {
			continue
		}
		h.fsm.RLock()
		from := h.fsm.DepsFrom()
		h.fsm.RUnlock()
		switch {
		case from == 0:
			ok = false
		case d.Index < from:
			// The copy here is past the marker (it applied it), so its
			// dependencies, merged now, cover what the client observed.
			v.mu.Lock()
			v.markFresh(d.Group)
			setFlag(&v.complete, d.Group)
			v.mu.Unlock()
			again = true
		default:
			v.mu.Lock()
			setFlag(&v.complete, d.Group)
			v.mu.Unlock()
		}
	}
	if again {
		s.settle(v)
	}
	return ok
}

// viewRoute waits until the root has applied the creation of every
// keyspace in v, so that the routing table this member uses next knows
// them (a group's id is the root index that created it).
func (s *Server) viewRoute(ctx context.Context, v *view) error {
	return s.waitApplied(ctx, s.root, v.newestGroup())
}

// viewKey carries a request's view.
type viewKey struct{}

// withView returns ctx carrying v (nil: none).
func withView(ctx context.Context, v *view) context.Context {
	if v == nil {
		return ctx
	}
	return context.WithValue(ctx, viewKey{}, v)
}

func viewOf(ctx context.Context) *view {
	if ctx == nil {
		return nil
	}
	if v, ok := ctx.Value(viewKey{}).(*view); ok {
		return v
	}
	if ci := callOf(ctx); ci != nil { // a native call's
		return ci.view
	}
	return nil
}

// seenGroupsHeader is the gRPC metadata key of a native client's view,
// both ways (client.SeenGroupsHeader): "group:index" pairs joined by
// commas, at most fsm.MaxDeps of them, or "-" for the empty view. A call that carries it reads by
// it, and its min_zxid is not a floor (the view is the precise form);
// the reply carries the view with what the call observed.
const seenGroupsHeader = "meridian-seen-groups"

// encodeView is v in seenGroupsHeader's form (call settle first).
func encodeView(v *view) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var buf [64]byte
	b := buf[:0]
	switch {
	case len(v.at) == 0 && v.root == 0:
		return "-"
	case len(v.at) == 0: // the root alone: no sorting
		return string(pb.AppendViewPair(b, 0, v.root))
	}
	for i, d := range v.sortedLocked() {
		if i > 0 {
			b = append(b, ',')
		}
		b = pb.AppendViewPair(b, d.Group, d.Index)
	}
	return string(b)
}

// grownSinceParse reports whether v no longer encodes as the header
// parseView made it of (call settle first).
func (v *view) grownSinceParse() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.grown
}

// parseView reads seenGroupsHeader's form into v, a view nobody else
// holds yet; false when it is malformed or longer than fsm.MaxDeps pairs
// (the call then has no view: coarse min_zxid reads).
func parseView(s string, v *view) bool {
	if s == "-" {
		return true
	}
	if strings.Count(s, ",") >= fsm.MaxDeps {
		return false
	}
	for pair := range strings.SplitSeq(s, ",") {
		g, i, ok := pb.ParseViewPair(pair)
		if !ok {
			return false
		}
		v.raise(g, i)
	}
	v.grown = false
	return true
}
