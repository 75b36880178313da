package fsm

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
)

// The keyspace table.
//
// A regional keyspace is a prefix of the tree (/eu) whose znodes live in a
// raft group of their own, homed in one region. The table of keyspaces is
// replicated in the root group (the group that keeps everything else); a
// keyspace's own group applies its tree with a state machine of its own,
// which this one never sees.
//
// Keyspace commands are fsm-level commands with their own tag rather than
// coordination commands: creating or removing a keyspace changes the table
// and the root tree (the mount znode at the prefix) in one apply, and coord
// does not see the tree. Like every entry they may come in a clock
// envelope.
//
// Create validates what the proposer computed (the placement: voters and
// learners from the cluster membership) and refuses a prefix that is
// taken, overlaps a keyspace or already holds a znode in the root tree
// (its data would have to move; refusing is the documented choice). It
// creates the mount znode (persistent, empty data, world ACL, ACL checks
// of "/" bypassed: the server authorizes keyspace commands as an
// operator's), so getChildren("/") lists keyspace roots and the watches of
// "/" fire. The group id is the log index of the create: unique.
//
// Remove takes the keyspace out of the table and deletes its mount znode.
// The root group cannot see the keyspace's tree, so apply checks only what
// it can (the keyspace exists, its mount znode has no children in the root
// tree); the server issues a remove only after the keyspace's own group
// showed that it holds nothing but its root (ErrKeyspaceNotEmpty
// otherwise), and stops routing writes to it first.

// KeyspaceTag is the first byte of a keyspace command in the raft log.
const KeyspaceTag byte = 0xC3

// Limits of the keyspace table; Apply refuses beyond them with a clear
// error.
const (
	MaxKeyspaces       = 1000 // ErrTooManyKeyspaces
	MaxKeyspaceMembers = 1000 // voters plus learners of one keyspace's group; ErrInvalidKeyspace
	// MaxKeyspaceDepth is how many path components a prefix has: one, for
	// now (/eu, not /eu/fr). ErrInvalidKeyspacePrefix beyond.
	MaxKeyspaceDepth = 1
)

// Survival is what a keyspace's group is placed to survive.
type Survival uint8

const (
	SurvivalZone   Survival = 1 // the loss of one zone of the home region
	SurvivalRegion Survival = 2 // the loss of a whole region
)

func (s Survival) String() string {
	switch s {
	case SurvivalZone:
		return "zone"
	case SurvivalRegion:
		return "region"
	}
	return "unknown"
}

// Keyspace is one entry of the table. Voters and Learners are sorted and
// shared: read them, never change them.
type Keyspace struct {
	Prefix   string // "/eu": owns /eu and every path below it
	Region   string // the home region
	Survival Survival
	Group    uint64   // the group id: the log index of the create command
	Voters   []uint64 // the group's initial voters (member ids)
	Learners []uint64 // and learners
	Created  int64    // the create command's clock (ms): its root znode's ctime
}

// KeyspaceOp names a keyspace command.
type KeyspaceOp uint8

const (
	KeyspaceCreate KeyspaceOp = 1 // every field
	KeyspaceRemove KeyspaceOp = 2 // Prefix; the other fields are ignored
)

// KeyspaceCommand is a keyspace command in the raft log.
type KeyspaceCommand struct {
	ID       uint64 // proposal id, not interpreted
	TimeMs   int64  // proposer's clock: the mount znode's ctime and mtime
	Op       KeyspaceOp
	Prefix   string
	Region   string
	Survival Survival
	Voters   []uint64
	Learners []uint64
}

// KeyspaceResult is what a keyspace command did: the keyspace created or
// removed, or why not.
type KeyspaceResult struct {
	Err      error
	Keyspace Keyspace
}

// keyspaceVersion is the codec's version byte, after KeyspaceTag:
//
//	byte KeyspaceTag, byte version=1, byte Op, uvarint ID, varint TimeMs,
//	string Prefix, string Region, byte Survival,
//	uvarint count + uvarint each: Voters, then Learners
//	string: uvarint length, then the bytes
const keyspaceVersion byte = 1

// EncodeKeyspaceCommand serializes c for the raft log. It refuses what
// DecodeKeyspaceCommand refuses (errs.ErrBadArguments), so nothing
// undecodable is proposed; what the command means is checked in Apply.
func EncodeKeyspaceCommand(c *KeyspaceCommand) ([]byte, error) {
	if c == nil || len(c.Prefix) > tree.MaxPathBytes || len(c.Region) > coord.MaxRegionBytes ||
		len(c.Voters) > MaxKeyspaceMembers || len(c.Learners) > MaxKeyspaceMembers {
		return nil, errs.ErrBadArguments
	}
	b := make([]byte, 0, 32+len(c.Prefix)+len(c.Region)+5*(len(c.Voters)+len(c.Learners)))
	b = append(b, KeyspaceTag, keyspaceVersion, byte(c.Op))
	b = binary.AppendUvarint(b, c.ID)
	b = binary.AppendVarint(b, c.TimeMs)
	b = appendString(b, c.Prefix)
	b = appendString(b, c.Region)
	b = append(b, byte(c.Survival))
	b = appendIDs(b, c.Voters)
	return appendIDs(b, c.Learners), nil
}

// DecodeKeyspaceCommand parses what EncodeKeyspaceCommand wrote; it is
// strict and never panics.
func DecodeKeyspaceCommand(b []byte) (*KeyspaceCommand, error) {
	if len(b) < 3 || b[0] != KeyspaceTag || b[1] != keyspaceVersion {
		return nil, errs.ErrMarshalling
	}
	c := &KeyspaceCommand{Op: KeyspaceOp(b[2])}
	d := decoder{b: b[3:]}
	c.ID = d.uvarint()
	c.TimeMs = d.varint()
	c.Prefix = d.string(tree.MaxPathBytes)
	c.Region = d.string(coord.MaxRegionBytes)
	c.Survival = Survival(d.byte())
	c.Voters = d.ids()
	c.Learners = d.ids()
	if d.bad || len(d.b) != 0 {
		return nil, errs.ErrMarshalling
	}
	return c, nil
}

// KeyspaceTable is the table of keyspaces, ordered by prefix. Not safe for
// concurrent use: read it under the FSM's RLock.
type KeyspaceTable struct {
	byPrefix map[string]*Keyspace
	sorted   []*Keyspace // by prefix
}

func newKeyspaceTable() *KeyspaceTable {
	return &KeyspaceTable{byPrefix: map[string]*Keyspace{}}
}

// Len is the number of keyspaces.
func (t *KeyspaceTable) Len() int { return len(t.sorted) }

// List returns the keyspaces sorted by prefix.
func (t *KeyspaceTable) List() []Keyspace {
	out := make([]Keyspace, len(t.sorted))
	for i, k := range t.sorted {
		out[i] = *k
	}
	return out
}

// For returns the keyspace that owns path: the one with the longest prefix
// that is path or an ancestor of it (/eu owns /eu and /eu/x, not /europe).
// false: the root group owns path.
func (t *KeyspaceTable) For(path string) (Keyspace, bool) {
	if len(t.sorted) == 0 {
		return Keyspace{}, false
	}
	for end := len(path); end > 0; end = strings.LastIndexByte(path[:end], '/') {
		if k := t.byPrefix[path[:end]]; k != nil {
			return *k, true
		}
	}
	return Keyspace{}, false
}

// ForName returns the keyspace that owns a coordination object (lock,
// semaphore, election, counter, queue, barrier) by its name: the name
// "eu/jobs" (and "eu") belongs to keyspace /eu, as the path /eu/jobs
// would. Names are matched without a leading slash: "/eu/jobs" belongs to
// the root group.
func (t *KeyspaceTable) ForName(name string) (Keyspace, bool) {
	if len(t.sorted) == 0 || name == "" {
		return Keyspace{}, false
	}
	return t.For("/" + name)
}

// overlaps returns a keyspace whose prefix is prefix, an ancestor of it or
// below it.
func (t *KeyspaceTable) overlaps(prefix string) *Keyspace {
	for _, k := range t.sorted {
		if k.Prefix == prefix || strings.HasPrefix(prefix, k.Prefix+"/") || strings.HasPrefix(k.Prefix, prefix+"/") {
			return k
		}
	}
	return nil
}

func (t *KeyspaceTable) insert(k *Keyspace) {
	t.byPrefix[k.Prefix] = k
	i := sort.Search(len(t.sorted), func(i int) bool { return t.sorted[i].Prefix >= k.Prefix })
	t.sorted = slices.Insert(t.sorted, i, k)
}

func (t *KeyspaceTable) remove(prefix string) {
	delete(t.byPrefix, prefix)
	i := sort.Search(len(t.sorted), func(i int) bool { return t.sorted[i].Prefix >= prefix })
	if i < len(t.sorted) && t.sorted[i].Prefix == prefix {
		t.sorted = slices.Delete(t.sorted, i, i+1)
	}
}

// KeyspaceFor is the keyspace that owns path (KeyspaceTable.For). Call it
// under RLock.
func (f *FSM) KeyspaceFor(path string) (Keyspace, bool) { return f.keyspaces.For(path) }

// KeyspaceForName is the keyspace that owns a coordination object's name
// (KeyspaceTable.ForName). Call it under RLock.
func (f *FSM) KeyspaceForName(name string) (Keyspace, bool) { return f.keyspaces.ForName(name) }

// Keyspaces is the keyspace table. Call it under RLock (or from the
// goroutine that applies); a Restore replaces it.
func (f *FSM) Keyspaces() *KeyspaceTable { return f.keyspaces }

// ValidKeyspacePrefix checks a prefix: a valid znode path of
// MaxKeyspaceDepth components below the root (ErrInvalidPath when it is
// not a valid path), not the root, /zookeeper or /meridian
// (ErrInvalidKeyspacePrefix).
func ValidKeyspacePrefix(prefix string) error {
	if err := tree.ValidatePath(prefix, false); err != nil {
		return errs.ErrInvalidPath
	}
	if prefix == "/" || strings.Count(prefix, "/") > MaxKeyspaceDepth {
		return errs.ErrInvalidKeyspacePrefix
	}
	first := prefix
	if i := strings.IndexByte(prefix[1:], '/'); i >= 0 {
		first = prefix[:i+1]
	}
	if first == "/zookeeper" || first == tree.ReservedRoot {
		return errs.ErrInvalidKeyspacePrefix
	}
	return nil
}

// validKeyspace checks the fields of a keyspace other than its prefix and
// returns its member lists sorted (copies).
func validKeyspace(region string, survival Survival, voters, learners []uint64) ([]uint64, []uint64, error) {
	bad := errs.ErrInvalidKeyspace
	if survival != SurvivalZone && survival != SurvivalRegion || coord.ValidName(region) != nil ||
		len(region) > coord.MaxRegionBytes || len(voters) == 0 || len(voters)+len(learners) > MaxKeyspaceMembers {
		return nil, nil, bad
	}
	v, l := slices.Clone(voters), slices.Clone(learners)
	slices.Sort(v)
	slices.Sort(l)
	all := slices.Concat(v, l)
	slices.Sort(all)
	for i, id := range all {
		if id == 0 || i > 0 && all[i-1] == id {
			return nil, nil, bad // a zero id, or an id twice (in one list or both)
		}
	}
	if len(l) == 0 {
		l = nil
	}
	return v, l, nil
}

// superAuth lets the mount znode's create and delete bypass the ACL of
// "/": the server authorized the keyspace command as an operator's.
var superAuth = []tree.ID{{Scheme: "super", ID: "keyspace"}}

// applyKeyspace applies a keyspace command.
func (f *FSM) applyKeyspace(r *Result, data []byte) {
	c, err := DecodeKeyspaceCommand(data)
	if err != nil {
		r.Skipped = fmt.Errorf("keyspace entry: %w", err)
		return
	}
	r.ID, r.KeyspaceCommand = c.ID, c
	if err := f.undepended(); err != nil {
		r.KeyspaceResult = KeyspaceResult{Err: err}
		return
	}
	switch c.Op {
	case KeyspaceCreate:
		r.KeyspaceResult = f.createKeyspace(r, c)
	case KeyspaceRemove:
		r.KeyspaceResult = f.removeKeyspace(r, c)
	default:
		r.KeyspaceResult = KeyspaceResult{Err: errs.ErrUnimplemented}
	}
}

func (f *FSM) createKeyspace(r *Result, c *KeyspaceCommand) KeyspaceResult {
	fail := func(err error) KeyspaceResult { return KeyspaceResult{Err: err} }
	if err := ValidKeyspacePrefix(c.Prefix); err != nil {
		return fail(err)
	}
	voters, learners, err := validKeyspace(c.Region, c.Survival, c.Voters, c.Learners)
	if err != nil {
		return fail(err)
	}
	t := f.keyspaces
	switch k := t.overlaps(c.Prefix); {
	case k != nil && k.Prefix == c.Prefix:
		return fail(errs.ErrKeyspaceExists)
	case k != nil:
		return fail(errs.ErrKeyspaceOverlap)
	case t.Len() >= MaxKeyspaces:
		return fail(errs.ErrTooManyKeyspaces)
	}
	if _, _, err := f.tree.Get(c.Prefix); err == nil {
		return fail(errs.ErrKeyspaceHasData)
	}
	res, events := f.tree.Apply(r.Zxid, &tree.Command{ID: c.ID, TimeMs: c.TimeMs, Auth: superAuth,
		Op: tree.Op{Type: tree.OpCreate, Path: c.Prefix, Data: []byte{}, ACL: tree.OpenACL, Mode: tree.ModePersistent}})
	if res.Err != nil {
		return fail(res.Err) // the parent of a deeper prefix is missing
	}
	r.Events = events
	k := &Keyspace{Prefix: c.Prefix, Region: c.Region, Survival: c.Survival, Group: r.Index, Voters: voters, Learners: learners, Created: c.TimeMs}
	t.insert(k)
	return KeyspaceResult{Keyspace: *k}
}

func (f *FSM) removeKeyspace(r *Result, c *KeyspaceCommand) KeyspaceResult {
	k := f.keyspaces.byPrefix[c.Prefix]
	if k == nil {
		return KeyspaceResult{Err: errs.ErrNoKeyspace}
	}
	if _, st, err := f.tree.Get(k.Prefix); err == nil {
		if st.NumChildren > 0 {
			return KeyspaceResult{Err: errs.ErrKeyspaceNotEmpty}
		}
		res, events := f.tree.Apply(r.Zxid, &tree.Command{ID: c.ID, TimeMs: c.TimeMs, Auth: superAuth,
			Op: tree.Op{Type: tree.OpDelete, Path: k.Prefix, Version: -1}})
		if res.Err != nil {
			return KeyspaceResult{Err: res.Err}
		}
		r.Events = events
	}
	f.keyspaces.remove(k.Prefix)
	return KeyspaceResult{Keyspace: *k}
}

// Table section of the version 2 snapshot envelope, written only when the
// table is not empty:
//
//	byte version=1, uvarint count, then each keyspace in prefix order:
//	string Prefix, string Region, byte Survival, uvarint Group,
//	uvarint count + uvarint each: Voters, then Learners, varint Created
const tableVersion byte = 1

func (t *KeyspaceTable) snapshot() []byte {
	if t.Len() == 0 {
		return nil
	}
	b := []byte{tableVersion}
	b = binary.AppendUvarint(b, uint64(t.Len()))
	for _, k := range t.sorted {
		b = appendString(b, k.Prefix)
		b = appendString(b, k.Region)
		b = append(b, byte(k.Survival))
		b = binary.AppendUvarint(b, k.Group)
		b = appendIDs(b, k.Voters)
		b = appendIDs(b, k.Learners)
		b = binary.AppendVarint(b, k.Created)
	}
	return b
}

// restoreKeyspaceTable parses a table section; it checks everything
// Apply would have refused, so a restored table is one Apply could build.
func restoreKeyspaceTable(b []byte) (*KeyspaceTable, bool) {
	t := newKeyspaceTable()
	if len(b) == 0 {
		return t, true
	}
	if b[0] != tableVersion {
		return nil, false
	}
	d := decoder{b: b[1:]}
	n := d.uvarint()
	if d.bad || n == 0 || n > MaxKeyspaces {
		return nil, false
	}
	for range n {
		k := &Keyspace{Prefix: d.string(tree.MaxPathBytes), Region: d.string(coord.MaxRegionBytes)}
		k.Survival = Survival(d.byte())
		k.Group = d.uvarint()
		k.Voters, k.Learners = d.ids(), d.ids()
		k.Created = d.varint()
		if d.bad || k.Group == 0 || ValidKeyspacePrefix(k.Prefix) != nil ||
			t.Len() > 0 && t.sorted[t.Len()-1].Prefix >= k.Prefix || t.overlaps(k.Prefix) != nil {
			return nil, false
		}
		v, l, err := validKeyspace(k.Region, k.Survival, k.Voters, k.Learners)
		if err != nil || !slices.Equal(v, k.Voters) || !slices.Equal(l, k.Learners) {
			return nil, false // not sorted as Apply stores them
		}
		t.insert(k)
	}
	return t, len(d.b) == 0
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendIDs(b []byte, ids []uint64) []byte {
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.AppendUvarint(b, id)
	}
	return b
}

// decoder reads the keyspace encodings; bad sticks once anything fails,
// and then every read returns a zero value.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) uvarint() uint64 {
	if d.bad {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.bad {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.bad = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() byte {
	if d.bad || len(d.b) == 0 {
		d.bad = true
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) string(limit int) string {
	n := d.uvarint()
	if d.bad || n > uint64(limit) || n > uint64(len(d.b)) {
		d.bad = true
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) ids() []uint64 {
	n := d.uvarint()
	// Every id takes at least one byte: a count beyond the bytes left is a
	// lie that must not size an allocation.
	if d.bad || n > MaxKeyspaceMembers || n > uint64(len(d.b)) {
		d.bad = true
		return nil
	}
	if n == 0 {
		return nil
	}
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = d.uvarint()
	}
	return ids
}
