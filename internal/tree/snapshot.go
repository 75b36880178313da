package tree

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io"
	"math"
	"sort"

	"github.com/meridian-coord/meridian/internal/errs"
)

// Snapshot format, version 2 (version 1 had plain bytes for data, empty
// meaning null; it is still read):
//
//	"MTRE" byte version=2
//	uvarint count, session each: varint ID, varint TimeoutMs, bytes Password
//	    (TimeoutMs 0 and no password: an adopted session, see AdoptSession)
//	uvarint count, node each in increasing path order:
//	    string path, nullable data (see codec.go), acl ACL, 11 varint Stat fields (in the
//	    order of the Stat struct), varint mode, varint ttl
//	4 bytes little-endian CRC32C of everything before
//
// Sorted output makes the bytes a function of the state alone, and lets
// Restore see every parent before its children.
var snapshotMagic = [4]byte{'M', 'T', 'R', 'E'}

const (
	snapshotVersion   = 2
	snapshotVersionV1 = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// View is the state as of one moment, for a snapshot: it may be written
// (WriteTo) on another goroutine while the tree goes on changing, once the
// tree's lock is released. Taking one copies the list of nodes (their
// pointers: 8 bytes a node) and the sessions, not the nodes: the tree
// copies a node before it first changes it after the view was taken (own),
// and the view keeps the original.
type View struct {
	sessions []SessionInfo // sorted by ID
	nodes    []*node       // sorted by path once WriteTo has run
	sorted   bool
}

// View returns the state as of now for a snapshot.
func (t *Tree) View() *View {
	v := &View{sessions: make([]SessionInfo, 0, len(t.sessions)), nodes: t.nodes.list()}
	for _, id := range t.sortedSessionIDs() {
		v.sessions = append(v.sessions, t.sessions[id].info) // Password is never modified in place
	}
	t.gen.Add(1)
	return v
}

func appendSessionInfo(b []byte, s *SessionInfo) []byte {
	b = binary.AppendVarint(b, s.ID)
	b = binary.AppendVarint(b, int64(s.TimeoutMs))
	return appendString(b, string(s.Password))
}

func appendSession(b []byte, s *session) []byte { return appendSessionInfo(b, &s.info) }

func appendNode(b []byte, n *node) []byte {
	st := n.Stat()
	return appendNodeStat(b, n, &st)
}

// appendNodeStat is appendNode with the Stat given (tests give a wrong one).
func appendNodeStat(b []byte, n *node, s *Stat) []byte {
	b = appendString(b, n.path())
	if n.null {
		b = binary.AppendUvarint(b, 0)
	} else {
		b = binary.AppendUvarint(b, uint64(len(n.data()))+1)
		b = append(b, n.data()...)
	}
	b = appendACL(b, n.acls())
	for _, v := range [...]int64{s.Czxid, s.Mzxid, s.Ctime, s.Mtime, int64(s.Version),
		int64(s.Cversion), int64(s.Aversion), s.EphemeralOwner, int64(s.DataLength),
		int64(s.NumChildren), s.Pzxid} {
		b = binary.AppendVarint(b, v)
	}
	b = binary.AppendVarint(b, int64(n.mode))
	return binary.AppendVarint(b, n.ttlMs())
}

func (t *Tree) sortedSessionIDs() []int64 {
	ids := make([]int64, 0, len(t.sessions))
	for id := range t.sessions {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// Snapshot writes the whole state (nodes and sessions) to w.
func (t *Tree) Snapshot(w io.Writer) error {
	_, err := t.View().WriteTo(w)
	return err
}

// WriteTo writes the view in the snapshot format (the bytes Snapshot
// writes for the tree it was taken from) and returns how many. The first
// call sorts the view; it is not safe for concurrent use.
func (v *View) WriteTo(w io.Writer) (int64, error) {
	if !v.sorted {
		sortByPath(v.nodes)
		v.sorted = true
	}
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 1<<16)
	crc := crc32.New(castagnoli)
	out := io.MultiWriter(bw, crc)
	buf := make([]byte, 0, 1<<13)
	flush := func() error {
		_, err := out.Write(buf)
		buf = buf[:0]
		return err
	}
	buf = append(buf, snapshotMagic[:]...)
	buf = append(buf, snapshotVersion)
	buf = binary.AppendUvarint(buf, uint64(len(v.sessions)))
	for i := range v.sessions {
		buf = appendSessionInfo(buf, &v.sessions[i])
		if len(buf) >= 1<<12 {
			if err := flush(); err != nil {
				return cw.n, err
			}
		}
	}
	buf = binary.AppendUvarint(buf, uint64(len(v.nodes)))
	for _, n := range v.nodes {
		buf = appendNode(buf, n)
		if len(buf) >= 1<<12 {
			if err := flush(); err != nil {
				return cw.n, err
			}
		}
	}
	if err := flush(); err != nil {
		return cw.n, err
	}
	if _, err := bw.Write(binary.LittleEndian.AppendUint32(nil, crc.Sum32())); err != nil {
		return cw.n, err
	}
	err := bw.Flush()
	return cw.n, err
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	k, err := c.w.Write(p)
	c.n += int64(k)
	return k, err
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: snapshot: %s", errs.ErrDataInconsistency, fmt.Sprintf(format, args...))
}

// Restore reads a tree written by Snapshot. It verifies the checksum before
// parsing and every structural invariant after, so corrupt or truncated
// input yields an error wrapping errs.ErrDataInconsistency.
func Restore(r io.Reader) (*Tree, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot: read: %w", errs.ErrDataInconsistency, err)
	}
	return RestoreBytes(b)
}

// RestoreBytes is Restore of a snapshot already in memory, without
// copying it first (a million znodes snapshot to 140 MiB). The tree keeps
// nothing of b: every path and value is copied out.
func RestoreBytes(b []byte) (*Tree, error) {
	const header = len(snapshotMagic) + 1
	if len(b) < header+4 {
		return nil, corrupt("too short (%d bytes)", len(b))
	}
	body := b[:len(b)-4]
	if binary.LittleEndian.Uint32(b[len(b)-4:]) != crc32.Checksum(body, castagnoli) {
		return nil, corrupt("checksum mismatch")
	}
	if [4]byte(body[:4]) != snapshotMagic || (body[4] != snapshotVersion && body[4] != snapshotVersionV1) {
		return nil, corrupt("unknown format")
	}
	d := decoder{b: body[header:], base: errs.ErrDataInconsistency, v1: body[4] == snapshotVersionV1}
	t := newEmpty()

	for i, n := 0, d.count(math.MaxInt); i < n && d.err == nil; i++ {
		s := &session{info: SessionInfo{ID: d.varint(), TimeoutMs: d.int32(), Password: d.bytes(maxPasswordBytes)}}
		if d.err != nil {
			break
		}
		// A timeout of 0 (and no password) is an adopted session
		// (AdoptSession); the state machine that restores the tree checks
		// that it expects them.
		adopted := s.info.TimeoutMs == 0 && len(s.info.Password) == 0
		if s.info.ID <= 0 || t.sessions[s.info.ID] != nil || s.info.TimeoutMs < 0 || s.info.TimeoutMs == 0 && !adopted {
			return nil, corrupt("bad session %d", s.info.ID)
		}
		t.sessions[s.info.ID] = s
	}

	prev := ""
	kids := map[*node]int32{} // the decoded NumChildren of parents
	count := d.count(math.MaxInt)
	// Presize: a node takes at least 16 encoded bytes, so the hint stays
	// proportional to the input even if count lies.
	t.nodes.resize(tableSize(min(count, len(d.b)/16)))
	for i := 0; i < count && d.err == nil; i++ {
		n := &node{}
		path := d.raw(MaxPathBytes)
		data, null := d.nullableRaw(MaxDataBytes)
		n.key, n.plen, n.null = joinKeyBytes(path, data), uint16(len(path)), null
		n.acl = intern(d.acl())
		var s Stat
		s.Czxid, s.Mzxid, s.Ctime, s.Mtime = d.varint(), d.varint(), d.varint(), d.varint()
		s.Version, s.Cversion, s.Aversion = d.int32(), d.int32(), d.int32()
		s.EphemeralOwner, s.DataLength, s.NumChildren, s.Pzxid = d.varint(), d.int32(), d.int32(), d.varint()
		n.stat = nodeStat{Czxid: s.Czxid, Mzxid: s.Mzxid, Ctime: s.Ctime, Mtime: s.Mtime,
			Version: s.Version, Aversion: s.Aversion}
		mode := d.int32()
		ttl := d.varint()
		if d.err != nil {
			break
		}
		if mode < 0 || mode > math.MaxUint8 {
			return nil, corrupt("%s: bad mode", n.path())
		}
		n.mode = uint8(mode)
		if err := t.restoreNode(n, &s, ttl, prev, i == 0); err != nil {
			return nil, err
		}
		if s.NumChildren != 0 {
			kids[n] = s.NumChildren
		}
		prev = n.path()
	}
	d.end()
	if d.err != nil {
		return nil, d.err
	}
	if t.nodes.get("/") == nil {
		return nil, corrupt("no root")
	}
	for n := range t.nodes.all() {
		// The decoded NumChildren must agree with the children linked since.
		if int(kids[n]) != n.numKids() {
			return nil, corrupt("%s: numChildren %d, has %d", n.path(), kids[n], n.numKids())
		}
		t.reindex(n)
	}
	return t, nil
}

// restoreNode validates one decoded node and links it under its parent.
// s is the decoded Stat, of which n keeps what it stores (nodeStat).
func (t *Tree) restoreNode(n *node, s *Stat, ttl int64, prev string, first bool) error {
	p := n.path()
	if ValidatePath(p, false) != nil || (first != (p == "/")) || (!first && p <= prev) {
		return corrupt("bad or unordered path %q", p)
	}
	if len(n.acls()) == 0 {
		return corrupt("%s: empty ACL", p)
	}
	for _, a := range n.acls() {
		if !validACLEntry(a) {
			return corrupt("%s: bad ACL", p)
		}
	}
	m := n.createMode()
	switch {
	case !m.valid() || int(s.DataLength) != len(n.data()):
		return corrupt("%s: bad mode or data length", p)
	case m.isTTL() != (ttl > 0) || ttl < 0 || ttl > maxTTLMs:
		return corrupt("%s: bad ttl", p)
	case m.ephemeral() != (s.EphemeralOwner != 0):
		return corrupt("%s: bad ephemeral owner", p)
	case m.ephemeral() && t.sessions[s.EphemeralOwner] == nil:
		return corrupt("%s: ephemeral of unknown session", p)
	}
	if ttl > 0 {
		n.extend().ttl.ms = ttl
	}
	if s.EphemeralOwner != 0 {
		n.extend().owner = s.EphemeralOwner
	}
	n.setFamily(s.Pzxid, s.Cversion)
	// NumChildren is the child set's count, still being filled in: it is
	// checked once all are read.
	t.nodes.put(n)
	if !first {
		parent := t.nodes.get(parentOf(p))
		if parent == nil || parent.createMode().ephemeral() {
			return corrupt("%s: missing or ephemeral parent", p)
		}
		t.link(parent, n)
	}
	return nil
}

// Digest returns a deterministic 64-bit hash of the whole state: every node
// (path, data, ACL, stat, mode, TTL) and every session. It is a sum of
// per-item hashes, so it needs no sorting and does not depend on map order.
func (t *Tree) Digest() uint64 {
	var sum uint64
	buf := make([]byte, 0, 256)
	h := fnv.New64a()
	add := func(tag byte, b []byte) {
		h.Reset()
		h.Write([]byte{tag})
		h.Write(b)
		sum += mix64(h.Sum64())
	}
	for n := range t.nodes.all() {
		buf = appendNode(buf[:0], n)
		add('n', buf)
	}
	for _, s := range t.sessions {
		buf = appendSession(buf[:0], s)
		add('s', buf)
	}
	return sum
}

// mix64 is the splitmix64 finalizer; it spreads FNV's weak high bits so the
// sum does not cancel structure.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
