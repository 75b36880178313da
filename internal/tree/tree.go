package tree

import (
	"container/heap"
	"crypto/subtle"
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

// node is one znode. Nodes live in Tree.nodes, keyed by their full path;
// a parent's children set holds the child nodes themselves.
//
// A server holds millions of these, so the struct is laid out to fit Go's
// 96-byte size class (it was 160) and takes one allocation besides: the
// path and the data share one string (one object for the collector to mark
// instead of two, and one size-class rounding), the ACL is a pointer to a
// shared, never modified list, the stat leaves out what follows from
// elsewhere (DataLength is len(data), EphemeralOwner is in ext) and what
// only some nodes need is in ext.
type node struct {
	// key is the path followed by the data: never modified in place,
	// replaced on setData. A substring of it (the path) is not kept past
	// the node's own life: it would keep the data too.
	key  string
	acl  *[]ACL // never modified in place: replaced on setACL; shared (intern)
	stat nodeStat
	// gen is the Tree.gen the node was created or copied in: a node of an
	// older one may be shared with a View and is copied before it changes
	// (own).
	gen  uint32
	plen uint16 // len of the path (at most MaxPathBytes)
	mode uint8  // a CreateMode
	null bool   // data is ZooKeeper's null, not empty
	ext  *nodeExt
}

func (n *node) path() string { return n.key[:n.plen] }

func (n *node) data() string { return n.key[n.plen:] }

// setPathData stores path and a copy of data (nil: null data).
func (n *node) setPathData(path string, data []byte) {
	n.key, n.plen, n.null = joinKey(path, data), uint16(len(path)), data == nil
}

// joinKey is path+string(data) in one allocation (the compiler's
// concatenation copies data into a temporary string first).
func joinKey(path string, data []byte) string {
	var b strings.Builder
	b.Grow(len(path) + len(data))
	b.WriteString(path)
	b.Write(data)
	return b.String()
}

// joinKeyBytes is joinKey of a path in bytes (Restore's).
func joinKeyBytes(path, data []byte) string {
	var b strings.Builder
	b.Grow(len(path) + len(data))
	b.Write(path)
	b.Write(data)
	return b.String()
}

// nodeStat is the part of Stat every node stores, field for field with
// Stat's names. What only concerns children (Pzxid, Cversion, NumChildren)
// lives in nodeExt, made when a node first gets a child: a node that never
// had one has Pzxid = Czxid and Cversion = NumChildren = 0, which is most
// nodes of a large tree, and 16 bytes less makes a node 80 bytes, not 96.
type nodeStat struct {
	Czxid    int64
	Mzxid    int64
	Ctime    int64
	Mtime    int64
	Version  int32
	Aversion int32
}

// nodeExt is what only some nodes need: parents (and former parents)
// their children and child stats, ephemeral nodes their owner, TTL nodes
// their TTL. A copy made by own gets its own copy of it, so that the
// View's original keeps its child stats (NumChildren is the set's count);
// the two share the set's table, which a View never reads.
type nodeExt struct {
	children nodeSet
	owner    int64    // session id of an ephemeral node
	ttl      ttlState // TTL modes only
	pzxid    int64    // Stat.Pzxid
	cversion int32    // Stat.Cversion
}

// ttlState is a TTL node's TTL and its place in Tree.ttl.
type ttlState struct {
	ms       int64 // the TTL
	heapIdx  int   // index in Tree.ttl, -1 when absent
	deadline int64 // TTL expiry while in Tree.ttl
}

func (n *node) createMode() CreateMode { return CreateMode(n.mode) }

// dataBytes is a copy of the data, nil for null data.
func (n *node) dataBytes() []byte {
	if n.null {
		return nil
	}
	return []byte(n.data())
}

// setData stores a copy of b (nil: null data).
func (n *node) setData(b []byte) { n.setPathData(n.path(), b) }

func (n *node) acls() []ACL { return *n.acl }

// Stat is the node's ZooKeeper Stat.
func (n *node) Stat() Stat {
	s := &n.stat
	return Stat{Czxid: s.Czxid, Mzxid: s.Mzxid, Ctime: s.Ctime, Mtime: s.Mtime, Version: s.Version,
		Cversion: n.cversion(), Aversion: s.Aversion, EphemeralOwner: n.owner(), DataLength: int32(len(n.key)) - int32(n.plen),
		NumChildren: int32(n.numKids()), Pzxid: n.pzxid()}
}

// pzxid is Stat.Pzxid: the zxid of the last change to the children, the
// node's own creation when there was none.
func (n *node) pzxid() int64 {
	if n.ext == nil {
		return n.stat.Czxid
	}
	return n.ext.pzxid
}

// cversion is Stat.Cversion: the number of changes to the children.
func (n *node) cversion() int32 {
	if n.ext == nil {
		return 0
	}
	return n.ext.cversion
}

// setFamily sets the child stats (a child created or deleted, an undo, a
// restore); a node that never had a child keeps no ext for them.
func (n *node) setFamily(pzxid int64, cversion int32) {
	if n.ext == nil && pzxid == n.stat.Czxid && cversion == 0 {
		return
	}
	e := n.extend()
	e.pzxid, e.cversion = pzxid, cversion
}

// owner is the ephemeral owner, 0 for other nodes.
func (n *node) owner() int64 {
	if n.ext == nil {
		return 0
	}
	return n.ext.owner
}

// kids is the children set, nil when there are none.
func (n *node) kids() *nodeSet {
	if n.ext == nil || n.ext.children.n == 0 {
		return nil
	}
	return &n.ext.children
}

// numKids is the size of the children set.
func (n *node) numKids() int {
	if n.ext == nil {
		return 0
	}
	return n.ext.children.n
}

// expiry is the TTL state of a node of a TTL mode, nil otherwise.
func (n *node) expiry() *ttlState {
	if n.ext == nil || !n.createMode().isTTL() {
		return nil
	}
	return &n.ext.ttl
}

// extend returns n's ext, allocating it if needed.
func (n *node) extend() *nodeExt {
	if n.ext == nil {
		n.ext = &nodeExt{ttl: ttlState{heapIdx: -1}, pzxid: n.stat.Czxid}
	}
	return n.ext
}

// ttlMs is the node's TTL, 0 for a node of a mode without one.
func (n *node) ttlMs() int64 {
	if e := n.expiry(); e != nil {
		return e.ms
	}
	return 0
}

// inHeap reports whether n is in Tree.ttl.
func (n *node) inHeap() bool { e := n.expiry(); return e != nil && e.heapIdx >= 0 }

type session struct {
	info       SessionInfo
	ephemerals map[string]struct{} // full paths
}

// Tree is the data tree plus the session table. See the package doc.
type Tree struct {
	nodes     nodeSet
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
// ACL) and what a View never reads (the child set's table); the View keeps
// the original, unchanged. Every change to a node's Stat, data or ACL goes
// through here (txn.saveStat); link and unlink change a parent that has.
func (t *Tree) own(n *node) *node {
	gen := t.gen.Load()
	if n.gen == gen {
		return n
	}
	c := *n
	c.gen = gen
	if n.ext != nil {
		e := *n.ext
		c.ext = &e
	}
	t.nodes.put(&c)
	if c.path() != "/" {
		// The parent's set holds the node itself: the copy takes its place.
		t.nodes.get(parentOf(c.path())).ext.children.replace(n, &c)
	}
	if e := c.expiry(); e != nil && e.heapIdx >= 0 {
		t.ttl[e.heapIdx] = &c
	}
	if _, ok := t.containers[n]; ok {
		delete(t.containers, n)
		t.containers[&c] = struct{}{}
	}
	return &c
}

func newEmpty() *Tree {
	return &Tree{
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
		n := &node{acl: &openACL}
		n.setPathData(p, nil)
		t.nodes.put(n)
		if p != "/" {
			t.link(t.nodes.get(parentOf(p)), n)
		}
	}
	return t
}

// link attaches a node already in t.nodes to its parent's child set and to
// its session's ephemeral set. Stats are the caller's business.
func (t *Tree) link(parent, n *node) {
	kids := &parent.extend().children
	kids.put(n)
	if n.createMode().ephemeral() {
		if s := t.sessions[n.owner()]; s != nil {
			if s.ephemerals == nil {
				s.ephemerals = make(map[string]struct{})
			}
			// A copy: n's path would keep its data alive (node.key).
			s.ephemerals[strings.Clone(n.path())] = struct{}{}
			t.ephemeral++
		}
	}
}

// unlink is the inverse of link. The parent keeps its ext: its child
// stats are no longer those of a node that never had a child.
func (t *Tree) unlink(parent, n *node) {
	if e := parent.ext; e != nil {
		e.children.del(n.path())
	}
	if n.createMode().ephemeral() {
		if s := t.sessions[n.owner()]; s != nil {
			if _, ok := s.ephemerals[n.path()]; ok {
				delete(s.ephemerals, n.path())
				t.ephemeral--
			}
		}
	}
}

// reindex brings the reap indexes up to date for n after any change to n
// (including its removal from the tree).
func (t *Tree) reindex(n *node) {
	live := t.nodes.has(n)
	empty := n.numKids() == 0
	if live && empty && n.createMode().isTTL() {
		e := n.expiry()
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
		heap.Remove(&t.ttl, n.expiry().heapIdx)
	}
	// ZooKeeper's ContainerManager: cversion > 0 means it once had a child.
	if live && empty && n.createMode() == ModeContainer && n.cversion() > 0 {
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
	if h[i].expiry().deadline != h[j].expiry().deadline {
		return h[i].expiry().deadline < h[j].expiry().deadline
	}
	return h[i].path() < h[j].path()
}
func (h ttlHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].expiry().heapIdx = i
	h[j].expiry().heapIdx = j
}
func (h *ttlHeap) Push(x any) {
	n := x.(*node)
	n.expiry().heapIdx = len(*h)
	*h = append(*h, n)
}
func (h *ttlHeap) Pop() any {
	old := *h
	n := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	n.expiry().heapIdx = -1
	return n
}

// expired appends the heap entries with deadline <= now, pruning subtrees
// whose root is later (heap order), so the cost is proportional to the result.
func (h ttlHeap) expired(now int64, out []*node) []*node {
	stack := []int{0}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if i >= len(h) || h[i].expiry().deadline > now {
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
	sort.Slice(out, func(i, j int) bool { return out[i].path() < out[j].path() })
	return out
}

// ---- reads ----

func (t *Tree) lookup(path string) (*node, error) {
	if err := ValidatePath(path, false); err != nil {
		return nil, err
	}
	n := t.nodes.get(path)
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
	return n.dataBytes(), n.Stat(), nil
}

// Exists returns the node's stat.
func (t *Tree) Exists(path string) (Stat, error) {
	n, err := t.lookup(path)
	if err != nil {
		return Stat{}, err
	}
	return n.Stat(), nil
}

// Children returns the sorted child names and the node's stat.
func (t *Tree) Children(path string) ([]string, Stat, error) {
	n, err := t.lookup(path)
	if err != nil {
		return nil, Stat{}, err
	}
	names := make([]string, 0, n.numKids())
	if kids := n.kids(); kids != nil {
		for c := range kids.all() {
			names = append(names, baseName(c.path()))
		}
	}
	sort.Strings(names)
	return names, n.Stat(), nil
}

// GetACL returns a copy of the node's ACL and its stat.
func (t *Tree) GetACL(path string) ([]ACL, Stat, error) {
	n, err := t.lookup(path)
	if err != nil {
		return nil, Stat{}, err
	}
	return append([]ACL(nil), n.acls()...), n.Stat(), nil
}

// CheckACL reports whether identities auth hold perm on path, for reads
// served outside Apply.
func (t *Tree) CheckACL(path string, perm int32, auth []ID) error {
	n, err := t.lookup(path)
	if err != nil {
		return err
	}
	return checkPerm(n.acls(), perm, auth)
}

// AllChildrenNumber returns the number of descendants of path.
func (t *Tree) AllChildrenNumber(path string) (int, error) {
	n, err := t.lookup(path)
	if err != nil {
		return 0, err
	}
	if path == "/" {
		return t.nodes.len() - 1, nil
	}
	count := 0
	stack := []*node{n}
	for len(stack) > 0 {
		cur := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if kids := cur.kids(); kids != nil {
			for c := range kids.all() {
				count++
				if c.numKids() > 0 {
					stack = append(stack, c)
				}
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

// SessionPasswordMatches reports, in constant time, whether password is
// the password of live session id. A session without one (adopted from
// another group) matches none.
func (t *Tree) SessionPasswordMatches(id int64, password []byte) bool {
	s := t.sessions[id]
	return s != nil && len(s.info.Password) > 0 && subtle.ConstantTimeCompare(s.info.Password, password) == 1
}

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
func (t *Tree) NodeCount() int { return t.nodes.len() }

// EphemeralCount returns the number of ephemeral nodes.
func (t *Tree) EphemeralCount() int { return t.ephemeral }

// NeedsReap reports whether an OpReap at nowMs would delete something.
func (t *Tree) NeedsReap(nowMs int64) bool {
	return len(t.containers) > 0 || (len(t.ttl) > 0 && t.ttl[0].expiry().deadline <= nowMs)
}
