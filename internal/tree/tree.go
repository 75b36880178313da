package tree

import (
	"container/heap"
	"math"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/meridian-coord/meridian/internal/errs"
)

// maxTTLMs is ZooKeeper's largest TTL (EphemeralType.TTL max value, 2^40-1 ms).
const maxTTLMs = 1<<40 - 1

func (m CreateMode) valid() bool { return m >= ModePersistent && m <= ModePersistentSeqTTL }

func (m CreateMode) sequential() bool {
	return m == ModePersistentSequential || m == ModeEphemeralSequential || m == ModePersistentSeqTTL
}

func (m CreateMode) ephemeral() bool { return m == ModeEphemeral || m == ModeEphemeralSequential }

func (m CreateMode) isTTL() bool { return m == ModePersistentTTL || m == ModePersistentSeqTTL }

// node is one znode. Nodes live in Tree.nodes under their full path; the
// children set holds names only, so Children is a sort of one small map.
type node struct {
	path string
	data []byte // never modified in place: replaced on setData
	acl  []ACL  // never modified in place: replaced on setACL
	stat Stat   // NumChildren is kept equal to len(children)
	mode CreateMode
	// gen is the Tree.gen the node was created or copied in: a node of an
	// older one may be shared with a View and is copied before it changes
	// (own).
	gen      uint32
	children map[string]struct{}
	expiry   *ttlState // TTL modes only (nil otherwise): a node's size matters at millions of them
}

// ttlState is a TTL node's TTL and its place in Tree.ttl.
type ttlState struct {
	ms       int64 // the TTL
	heapIdx  int   // index in Tree.ttl, -1 when absent
	deadline int64 // TTL expiry while in Tree.ttl
}

// ttlMs is the node's TTL, 0 for a node of a mode without one.
func (n *node) ttlMs() int64 {
	if n.expiry == nil {
		return 0
	}
	return n.expiry.ms
}

// inHeap reports whether n is in Tree.ttl.
func (n *node) inHeap() bool { return n.expiry != nil && n.expiry.heapIdx >= 0 }

type session struct {
	info       SessionInfo
	ephemerals map[string]struct{} // full paths
}

// Tree is the data tree plus the session table. See the package doc.
type Tree struct {
	nodes     map[string]*node
	sessions  map[int64]*session
	ephemeral int // number of ephemeral nodes

	// Reap indexes, maintained by reindex on every change so that NeedsReap
	// (a read under a shared lock) is O(1) and mutates nothing.
	ttl        ttlHeap            // childless TTL nodes by deadline
	containers map[*node]struct{} // containers that are empty and have had a child

	// gen counts the views taken (View): nodes of an older generation may
	// be shared with one. Atomic: views are taken by readers (under a
	// shared lock), possibly two at once.
	gen atomic.Uint32
}

// own returns n ready to be changed: n itself, or, when n may be shared
// with a View (an older generation), a copy that takes n's place in the
// tree and its indexes. The copy shares what never changes in place (data,
// ACL, TTL) and what a View never reads (the child set, the TTL's heap
// place); the View keeps the original, unchanged. Every change to a
// node's Stat, data or ACL goes through here (txn.saveStat); link and
// unlink change a parent that has.
func (t *Tree) own(n *node) *node {
	gen := t.gen.Load()
	if n.gen == gen {
		return n
	}
	c := *n
	c.gen = gen
	t.nodes[c.path] = &c
	if c.expiry != nil && c.expiry.heapIdx >= 0 {
		t.ttl[c.expiry.heapIdx] = &c
	}
	if _, ok := t.containers[n]; ok {
		delete(t.containers, n)
		t.containers[&c] = struct{}{}
	}
	return &c
}

func newEmpty() *Tree {
	return &Tree{
		nodes:      make(map[string]*node),
		sessions:   make(map[int64]*session),
		containers: make(map[*node]struct{}),
	}
}

// New returns a tree holding the root and ZooKeeper's "/zookeeper" and
// "/zookeeper/quota" nodes (open ACL, zxid 0), so that `ls /` looks the same
// as on ZooKeeper.
func New() *Tree {
	t := newEmpty()
	for _, p := range []string{"/", "/zookeeper", "/zookeeper/quota"} {
		n := &node{path: p, acl: openACL}
		t.nodes[p] = n
		if p != "/" {
			t.link(t.nodes[parentOf(p)], n)
		}
	}
	return t
}

// link attaches a node already in t.nodes to its parent's child set and to
// its session's ephemeral set. Stats are the caller's business.
func (t *Tree) link(parent, n *node) {
	if parent.children == nil {
		parent.children = make(map[string]struct{}, 1)
	}
	parent.children[baseName(n.path)] = struct{}{}
	parent.stat.NumChildren = int32(len(parent.children))
	if n.mode.ephemeral() {
		if s := t.sessions[n.stat.EphemeralOwner]; s != nil {
			if s.ephemerals == nil {
				s.ephemerals = make(map[string]struct{})
			}
			s.ephemerals[n.path] = struct{}{}
			t.ephemeral++
		}
	}
}

// unlink is the inverse of link.
func (t *Tree) unlink(parent, n *node) {
	delete(parent.children, baseName(n.path))
	if len(parent.children) == 0 {
		parent.children = nil
	}
	parent.stat.NumChildren = int32(len(parent.children))
	if n.mode.ephemeral() {
		if s := t.sessions[n.stat.EphemeralOwner]; s != nil {
			if _, ok := s.ephemerals[n.path]; ok {
				delete(s.ephemerals, n.path)
				t.ephemeral--
			}
		}
	}
}

// reindex brings the reap indexes up to date for n after any change to n
// (including its removal from the tree).
func (t *Tree) reindex(n *node) {
	live := t.nodes[n.path] == n
	empty := len(n.children) == 0
	if live && empty && n.mode.isTTL() {
		e := n.expiry
		d := ttlDeadline(n.stat.Mtime, e.ms)
		switch {
		case e.heapIdx < 0:
			e.deadline = d
			heap.Push(&t.ttl, n)
		case e.deadline != d:
			e.deadline = d
			heap.Fix(&t.ttl, e.heapIdx)
		}
	} else if n.inHeap() {
		heap.Remove(&t.ttl, n.expiry.heapIdx)
	}
	// ZooKeeper's ContainerManager: cversion > 0 means it once had a child.
	if live && empty && n.mode == ModeContainer && n.stat.Cversion > 0 {
		t.containers[n] = struct{}{}
	} else {
		delete(t.containers, n)
	}
}

// ttlDeadline is mtime+ttl, saturating instead of overflowing.
func ttlDeadline(mtime, ttl int64) int64 {
	if mtime > 0 && ttl > math.MaxInt64-mtime {
		return math.MaxInt64
	}
	return mtime + ttl
}

// ttlHeap is a min-heap of TTL nodes (expiry set) by (deadline, path).
type ttlHeap []*node

func (h ttlHeap) Len() int { return len(h) }
func (h ttlHeap) Less(i, j int) bool {
	if h[i].expiry.deadline != h[j].expiry.deadline {
		return h[i].expiry.deadline < h[j].expiry.deadline
	}
	return h[i].path < h[j].path
}
func (h ttlHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].expiry.heapIdx = i
	h[j].expiry.heapIdx = j
}
func (h *ttlHeap) Push(x any) {
	n := x.(*node)
	n.expiry.heapIdx = len(*h)
	*h = append(*h, n)
}
func (h *ttlHeap) Pop() any {
	old := *h
	n := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	n.expiry.heapIdx = -1
	return n
}

// expired appends the heap entries with deadline <= now, pruning subtrees
// whose root is later (heap order), so the cost is proportional to the result.
func (h ttlHeap) expired(now int64, out []*node) []*node {
	stack := []int{0}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if i >= len(h) || h[i].expiry.deadline > now {
			continue
		}
		out = append(out, h[i])
		stack = append(stack, 2*i+1, 2*i+2)
	}
	return out
}

// reapable returns the nodes a reap at now deletes, sorted by path.
func (t *Tree) reapable(now int64) []*node {
	out := t.ttl.expired(now, nil)
	for n := range t.containers {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// ---- reads ----

func (t *Tree) lookup(path string) (*node, error) {
	if err := ValidatePath(path, false); err != nil {
		return nil, err
	}
	n := t.nodes[path]
	if n == nil {
		return nil, errs.ErrNoNode
	}
	return n, nil
}

// cloneBytes copies b, keeping nil (ZooKeeper's null data) apart from empty.
func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// Get returns a copy of the node's data and its stat.
func (t *Tree) Get(path string) ([]byte, Stat, error) {
	n, err := t.lookup(path)
	if err != nil {
		return nil, Stat{}, err
	}
	return cloneBytes(n.data), n.stat, nil
}

// Exists returns the node's stat.
func (t *Tree) Exists(path string) (Stat, error) {
	n, err := t.lookup(path)
	if err != nil {
		return Stat{}, err
	}
	return n.stat, nil
}

// Children returns the sorted child names and the node's stat.
func (t *Tree) Children(path string) ([]string, Stat, error) {
	n, err := t.lookup(path)
	if err != nil {
		return nil, Stat{}, err
	}
	names := make([]string, 0, len(n.children))
	for c := range n.children {
		names = append(names, c)
	}
	sort.Strings(names)
	return names, n.stat, nil
}

// GetACL returns a copy of the node's ACL and its stat.
func (t *Tree) GetACL(path string) ([]ACL, Stat, error) {
	n, err := t.lookup(path)
	if err != nil {
		return nil, Stat{}, err
	}
	return append([]ACL(nil), n.acl...), n.stat, nil
}

// CheckACL reports whether identities auth hold perm on path, for reads
// served outside Apply.
func (t *Tree) CheckACL(path string, perm int32, auth []ID) error {
	n, err := t.lookup(path)
	if err != nil {
		return err
	}
	return checkPerm(n.acl, perm, auth)
}

// AllChildrenNumber returns the number of descendants of path.
func (t *Tree) AllChildrenNumber(path string) (int, error) {
	n, err := t.lookup(path)
	if err != nil {
		return 0, err
	}
	if path == "/" {
		return len(t.nodes) - 1, nil
	}
	count := 0
	stack := []*node{n}
	for len(stack) > 0 {
		cur := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for name := range cur.children {
			count++
			if c := t.nodes[cur.path+"/"+name]; c != nil && len(c.children) > 0 {
				stack = append(stack, c)
			}
		}
	}
	return count, nil
}

// Ephemerals returns the sorted paths of the session's ephemeral nodes that
// start with prefix (a plain string prefix, as ZooKeeper's getEphemerals).
func (t *Tree) Ephemerals(sessionID int64, prefix string) []string {
	s := t.sessions[sessionID]
	if s == nil {
		return nil
	}
	var out []string
	for p := range s.ephemerals {
		if strings.HasPrefix(p, prefix) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func (s *session) copyInfo() SessionInfo {
	info := s.info
	info.Password = cloneBytes(info.Password)
	return info
}

// Sessions returns the live sessions sorted by ID.
func (t *Tree) Sessions() []SessionInfo {
	out := make([]SessionInfo, 0, len(t.sessions))
	for _, s := range t.sessions {
		out = append(out, s.copyInfo())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// SessionCount is the number of live sessions.
func (t *Tree) SessionCount() int { return len(t.sessions) }

// Session returns one live session.
func (t *Tree) Session(id int64) (SessionInfo, bool) {
	s := t.sessions[id]
	if s == nil {
		return SessionInfo{}, false
	}
	return s.copyInfo(), true
}

// AdoptSession records id as a session whose table is kept elsewhere (a
// regional keyspace's state machine adopts the sessions of the root group
// that act in it): no timeout, no password, but ephemerals may be created
// for it and ending it deletes them (OpCloseSession, OpExpire). It reports
// false, changing nothing, when id is not positive or already a session.
// The caller (internal/fsm) decides when, the same way on every member.
func (t *Tree) AdoptSession(id int64) bool {
	if id <= 0 || t.sessions[id] != nil {
		return false
	}
	t.sessions[id] = &session{info: SessionInfo{ID: id}}
	return true
}

// ForgetSession removes an adopted session that owns no ephemerals (an
// adoption whose command failed). It reports whether it did.
func (t *Tree) ForgetSession(id int64) bool {
	s := t.sessions[id]
	if s == nil || s.info.TimeoutMs != 0 || len(s.ephemerals) > 0 {
		return false
	}
	delete(t.sessions, id)
	return true
}

// NodeCount returns the number of nodes, the root and /zookeeper included.
func (t *Tree) NodeCount() int { return len(t.nodes) }

// EphemeralCount returns the number of ephemeral nodes.
func (t *Tree) EphemeralCount() int { return t.ephemeral }

// NeedsReap reports whether an OpReap at nowMs would delete something.
func (t *Tree) NeedsReap(nowMs int64) bool {
	return len(t.containers) > 0 || (len(t.ttl) > 0 && t.ttl[0].expiry.deadline <= nowMs)
}
