// Package backup is the format of a Meridian backup file: what `meridian
// snapshot save` writes from a running cluster and `meridian snapshot
// inspect` reads (and, later, what a new cluster is seeded from).
//
// A backup is every raft group's state machine snapshot (fsm's snapshot
// envelope, the on-disk and peer format: the root group's, with the
// keyspace table, then each regional keyspace's), each taken after a
// linearizable barrier on its group, with a manifest saying where each
// came from:
//
//	"MRDBAK1\n"
//	uvarint len(manifest), manifest (JSON, Manifest)
//	each group's snapshot, in the manifest's order, of the sizes it says
//	32 bytes: SHA-256 of everything before
//
// Each group's snapshot is consistent (one index of its log); the groups
// are taken one after another, so a write in one keyspace that depends on
// one in another may be in the backup without it only if it was made
// while the backup ran (as with any backup of several databases).
package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/meridian-coord/meridian/internal/fsm"
)

// Magic starts every backup file.
var Magic = []byte("MRDBAK1\n")

// Limits of what Read accepts: a manifest's size, the groups (the root
// and at most 1,000 keyspaces), and a file's total size.
const (
	MaxManifestBytes = 4 << 20
	MaxGroups        = 1001
	MaxFileBytes     = 64 << 30
)

// ErrCorrupt is why Read refuses a file that is not a whole, intact
// backup.
var ErrCorrupt = errors.New("backup: not a Meridian backup, or damaged")

// Manifest says what a backup holds.
type Manifest struct {
	Version   int      `json:"version"` // 1
	ClusterID string   `json:"cluster_id"`
	CreatedMs int64    `json:"created_ms"` // the saving member's clock
	Member    uint64   `json:"member"`     // the member that saved it
	Members   []Member `json:"members"`
	Groups    []Group  `json:"groups"`
}

// Member is a member of the saved cluster, as its membership recorded it.
type Member struct {
	ID     uint64 `json:"id"`
	Role   string `json:"role"` // voter or learner
	Region string `json:"region,omitempty"`
	Zone   string `json:"zone,omitempty"`
	Peer   string `json:"peer,omitempty"`
	GRPC   string `json:"grpc,omitempty"`
	ZK     string `json:"zk,omitempty"`
	HTTP   string `json:"http,omitempty"`
}

// Group is one raft group's snapshot in the file.
type Group struct {
	Group    uint64 `json:"group"`            // 0: the root
	Prefix   string `json:"prefix,omitempty"` // a keyspace's
	Index    uint64 `json:"index"`            // the log index the snapshot is at
	LastZxid int64  `json:"last_zxid"`
	Bytes    int64  `json:"bytes"`
	SHA256   string `json:"sha256"` // of the snapshot's bytes
}

// Write encodes a backup of m's groups, whose snapshots are snaps in m's
// order; it fills in each group's Bytes and SHA256.
func Write(m Manifest, snaps [][]byte) ([]byte, error) {
	if len(snaps) != len(m.Groups) || len(snaps) == 0 || len(snaps) > MaxGroups {
		return nil, fmt.Errorf("backup: %d snapshots for %d groups", len(snaps), len(m.Groups))
	}
	m.Version = 1
	m.Groups = append([]Group(nil), m.Groups...)
	for i, s := range snaps {
		sum := sha256.Sum256(s)
		m.Groups[i].Bytes, m.Groups[i].SHA256 = int64(len(s)), hex.EncodeToString(sum[:])
	}
	js, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.Write(Magic)
	b.Write(binary.AppendUvarint(nil, uint64(len(js))))
	b.Write(js)
	for _, s := range snaps {
		b.Write(s)
	}
	sum := sha256.Sum256(b.Bytes())
	b.Write(sum[:])
	return b.Bytes(), nil
}

// Read decodes and checks a backup: magic, the file's checksum, the
// manifest, each snapshot's size and checksum. It returns the manifest and
// the snapshots, in the manifest's order.
func Read(b []byte) (Manifest, [][]byte, error) {
	var m Manifest
	bad := func(what string) (Manifest, [][]byte, error) {
		return Manifest{}, nil, fmt.Errorf("%w: %s", ErrCorrupt, what)
	}
	if !bytes.HasPrefix(b, Magic) {
		return bad("no backup magic")
	}
	if len(b) > MaxFileBytes || len(b) < len(Magic)+sha256.Size+1 {
		return bad("size")
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if want := sha256.Sum256(body); !bytes.Equal(want[:], sum) {
		return bad("the file's checksum does not match (truncated or changed)")
	}
	rest := body[len(Magic):]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > MaxManifestBytes || n > uint64(len(rest)-k) {
		return bad("manifest length")
	}
	if err := json.Unmarshal(rest[k:k+int(n)], &m); err != nil {
		return bad("manifest: " + err.Error())
	}
	rest = rest[k+int(n):]
	if m.Version != 1 {
		return bad(fmt.Sprintf("version %d (this binary reads 1)", m.Version))
	}
	if len(m.Groups) == 0 || len(m.Groups) > MaxGroups || m.Groups[0].Group != 0 {
		return bad("groups: the root's first, at most 1,001")
	}
	snaps := make([][]byte, len(m.Groups))
	for i, g := range m.Groups {
		if g.Bytes < 0 || g.Bytes > int64(len(rest)) {
			return bad(fmt.Sprintf("group %d: %d bytes", g.Group, g.Bytes))
		}
		snaps[i], rest = rest[:g.Bytes], rest[g.Bytes:]
		if s := sha256.Sum256(snaps[i]); hex.EncodeToString(s[:]) != g.SHA256 {
			return bad(fmt.Sprintf("group %d: checksum", g.Group))
		}
	}
	if len(rest) != 0 {
		return bad("bytes after the last snapshot")
	}
	return m, snaps, nil
}

// Summary is what inspect shows of one group.
type Summary struct {
	Group      uint64 `json:"group"`
	Prefix     string `json:"prefix,omitempty"`
	Index      uint64 `json:"index"`
	LastZxid   int64  `json:"last_zxid"`
	Bytes      int64  `json:"bytes"`
	SHA256     string `json:"sha256"`
	Znodes     int    `json:"znodes"` // beyond a new group's (a keyspace's root is the root group's)
	Ephemerals int    `json:"ephemerals"`
	Sessions   int    `json:"sessions"` // the root's live sessions (a keyspace's: those acting in it)
	Locks      int    `json:"locks"`
	Keyspaces  int    `json:"keyspaces"` // the root's table
}

// Inspect restores every group's snapshot into a state machine (so a
// snapshot that would not restore is an error) and counts what it holds.
func Inspect(m Manifest, snaps [][]byte) ([]Summary, error) {
	out := make([]Summary, len(snaps))
	var table []fsm.Keyspace
	for i, g := range m.Groups {
		f := fsm.New(fsm.Hooks{})
		base := 0
		if g.Group != 0 {
			ks, err := keyspaceOf(table, g.Group)
			if err != nil {
				return nil, err
			}
			f = fsm.NewKeyspace(fsm.Hooks{}, ks)
			base = f.Tree().NodeCount()
		}
		if err := f.Restore(g.Index, snaps[i]); err != nil {
			return nil, fmt.Errorf("group %d: %w", g.Group, err)
		}
		f.RLock()
		s := Summary{Group: g.Group, Prefix: g.Prefix, Index: g.Index, LastZxid: f.LastZxid(), Bytes: g.Bytes, SHA256: g.SHA256,
			Znodes: f.Tree().NodeCount() - base, Ephemerals: f.Tree().EphemeralCount(), Sessions: f.Tree().SessionCount(),
			Locks: f.Coord().Len(), Keyspaces: f.Keyspaces().Len()}
		if g.Group == 0 {
			table = f.Keyspaces().List()
		}
		f.RUnlock()
		out[i] = s
	}
	return out, nil
}

// keyspaceOf is group's keyspace in the root's table.
func keyspaceOf(table []fsm.Keyspace, group uint64) (fsm.Keyspace, error) {
	for _, k := range table {
		if k.Group == group {
			return k, nil
		}
	}
	return fsm.Keyspace{}, fmt.Errorf("%w: group %d is not in the root's keyspace table", ErrCorrupt, group)
}
