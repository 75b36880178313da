package server

// The cluster version: which entry formats a member may propose.
//
// Each member advertises the apply version of its binary (fsm.ApplyVersion)
// to the root group's leader, over the side channel placement reports and
// keepalives use: at once when it learns of a new leader, then every
// advertiseEvery. (A binary from before advertising existed takes the
// message for a malformed keepalive batch, logs it and drops it.) The
// leader records the lowest version over the members of the root's
// configuration, voters and learners alike (learners apply every entry
// too), as the coordination setting cluster.version: once every member
// advertised, or an election timeout plus advertiseEvery after it became
// leader, counting a member it has not heard from as
// fsm.UnadvertisedVersion. The record only rises: a member added later
// with an older binary is a downgrade, which is not supported (such a
// binary refuses the entries it cannot apply and stops, fsm/version.go).
//
// A proposer encodes for the recorded version (none recorded: as for
// fsm.UnadvertisedVersion), and refuses (errs.ErrClusterVersion) an entry
// whose fsm.EntryVersion is above it, so no member is ever sent an entry
// its binary would skip or refuse.
//
// Dependencies (fsm.DepsVersion) are the case in point. Below it, entries
// go in plain clock envelopes, without dependencies, as an older binary
// writes them. Once it is recorded, entries go in dependency envelopes,
// and each group's leader proposes the group's dependency marker
// (markDeps, fsm/deps.go), which completes the group's dependencies for
// its earlier entries too and after which the group refuses entries
// without them (a proposer that had not seen the version rise proposes
// again: Future.Wait). A read of group g by a client that saw another
// group h is local only when this member's copy of h has applied h's
// marker (viewBarrier), a linearizable read otherwise.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/fsm"
)

// versionTag starts an apply-version advertisement on the side channel:
// versionTag, then the version as a uvarint.
const versionTag byte = 0xD2

// settingClusterVersion is the coordination setting holding the recorded
// cluster version (a decimal number).
const settingClusterVersion = "cluster.version"

// advertiseEvery is how often a member repeats its advertisement to a
// leader it already told.
const advertiseEvery = time.Second

// maxApplyVersion bounds what an advertisement may claim.
const maxApplyVersion = 1 << 16

// versionState is what the root's leader heard (versions, by member) and
// what this member last told whom.
type versionState struct {
	override atomic.Int64 // Config.ApplyVersion, setApplyVersion
	mu       sync.Mutex
	term     uint64 // the term in which this member leads and heard versions
	since    time.Time
	heard    map[uint64]int
	sentTo   uint64
	sentAt   time.Time
	lowWarn  map[uint64]int // members warned about advertising below the record
	// proposed, at proposedAt, is the version this leader last proposed
	// to record: not proposed again within an election timeout.
	proposed   int
	proposedAt time.Time
}

func encodeVersion(v int) []byte { return binary.AppendUvarint([]byte{versionTag}, uint64(v)) }

func decodeVersion(b []byte) (int, error) {
	if len(b) < 2 || b[0] != versionTag {
		return 0, errors.New("not a version advertisement")
	}
	v, n := binary.Uvarint(b[1:])
	if n <= 0 || n != len(b)-1 || v == 0 || v > maxApplyVersion {
		return 0, errors.New("malformed version advertisement")
	}
	return int(v), nil
}

// applyVersion is the apply version this member advertises: its binary's,
// unless a test set another (Config.ApplyVersion: "an older binary";
// setApplyVersion: "upgraded").
func (s *Server) applyVersion() int {
	if v := s.versions.override.Load(); v > 0 {
		return int(v)
	}
	return fsm.ApplyVersion
}

// setApplyVersion changes what this member advertises (tests).
func (s *Server) setApplyVersion(v int) { s.versions.override.Store(int64(v)) }

// advertiseVersion sends this member's apply version to the root's
// leader when the leader is new to it or advertiseEvery has passed.
func (s *Server) advertiseVersion(now time.Time, leader uint64) {
	vs := &s.versions
	vs.mu.Lock()
	due := leader != 0 && (leader != vs.sentTo || now.Sub(vs.sentAt) >= advertiseEvery)
	if due {
		vs.sentTo, vs.sentAt = leader, now
	}
	vs.mu.Unlock()
	if !due {
		return
	}
	if err := s.rep.SendToLeader(encodeVersion(s.applyVersion())); err != nil {
		s.log.Debug("apply version not advertised", "err", err)
	}
}

// onVersion records member from's advertisement (on the leader).
func (s *Server) onVersion(from uint64, payload []byte) {
	v, err := decodeVersion(payload)
	if err != nil {
		s.log.Warn("bad apply version advertisement", "from", from, "err", err)
		return
	}
	vs := &s.versions
	vs.mu.Lock()
	if vs.heard == nil {
		vs.heard = map[uint64]int{}
	}
	vs.heard[from] = v
	vs.mu.Unlock()
}

// recordedVersion is the cluster version the root's state records (0:
// none yet).
func (s *Server) recordedVersion() int {
	s.mu.RLock()
	v := s.mu.coord.Setting(settingClusterVersion)
	s.mu.RUnlock()
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// clusterVersion is the recorded cluster version, never below
// fsm.UnadvertisedVersion, and whether one is recorded.
func (s *Server) clusterVersion() (int, bool) {
	v := s.recordedVersion()
	return max(v, fsm.UnadvertisedVersion), v > 0
}

// streamsVersion is the apply version from which a binary reads snapshots
// streamed from file to file (replica.Config.SnapshotStreams).
const streamsVersion = 6

// snapshotStreams: every member's binary reads streamed snapshots. Called
// from the peer transport's goroutines.
func (s *Server) snapshotStreams() bool {
	v, _ := s.clusterVersion()
	return v >= streamsVersion
}

// depsTrusted: every member's binary writes the dependencies of what it
// proposes (view.go), so a group's recorded dependencies are complete.
func (s *Server) depsTrusted() bool {
	v, _ := s.clusterVersion()
	return v >= fsm.DepsVersion
}

// recordVersion, on the root's leader (term), records the cluster version
// once it knows it and it is above the record.
func (s *Server) recordVersion(now time.Time, term uint64, electionTimeout time.Duration) {
	members := s.rep.Members()
	vs := &s.versions
	vs.mu.Lock()
	if vs.term != term {
		// A new term: what an earlier term heard may be stale (members
		// restarted meanwhile with other binaries). Keep listening.
		vs.term, vs.since, vs.heard = term, now, map[uint64]int{}
	}
	vs.heard[s.cfg.ID] = s.applyVersion()
	lowest, all := maxApplyVersion, true
	for _, p := range members {
		v, ok := vs.heard[p.ID]
		if !ok {
			all, v = false, fsm.UnadvertisedVersion
		}
		lowest = min(lowest, v)
	}
	waited := now.Sub(vs.since) >= electionTimeout+advertiseEvery
	vs.mu.Unlock()
	if !all && !waited {
		return
	}
	recorded := s.recordedVersion()
	if lowest < recorded {
		s.warnLowVersions(recorded)
		return
	}
	if recorded > 0 && lowest == recorded {
		return
	}
	vs.mu.Lock()
	if vs.proposed == lowest && now.Sub(vs.proposedAt) < electionTimeout {
		vs.mu.Unlock()
		return // proposed a moment ago, not applied here yet
	}
	vs.proposed, vs.proposedAt = lowest, now
	vs.mu.Unlock()
	s.log.Info("recording the cluster version", "version", lowest, "was", recorded, "every_member_advertised", all)
	c := &coord.Command{Op: coord.OpSetting, Name: settingClusterVersion, Value: []byte(strconv.Itoa(lowest))}
	if _, err := s.Submit(context.Background(), leaderDuty(coordCommand(c))).Wait(); err != nil {
		s.log.Warn("propose cluster version", "err", err)
	}
}

// warnLowVersions logs, once per member and version, a member advertising
// a version below the recorded one.
func (s *Server) warnLowVersions(recorded int) {
	vs := &s.versions
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if vs.lowWarn == nil {
		vs.lowWarn = map[uint64]int{}
	}
	for id, v := range vs.heard {
		if v < recorded && vs.lowWarn[id] != v {
			vs.lowWarn[id] = v
			s.log.Error("a member runs a binary older than the cluster version; it stops at the first entry it cannot apply",
				"member", id, "apply_version", v, "cluster_version", recorded)
		}
	}
}

// checkVersion refuses data, an entry about to be proposed, when its
// format is above the cluster version.
func (s *Server) checkVersion(data []byte) error {
	need := fsm.EntryVersion(data)
	if need <= fsm.UnadvertisedVersion {
		return nil // every member applies it: no need to look
	}
	if have, _ := s.clusterVersion(); need > have {
		return fmt.Errorf("%w: the entry needs apply version %d; the cluster version is %d", errs.ErrClusterVersion, need, have)
	}
	return nil
}

// markDeps, on the leader of group g, proposes g's dependency marker
// (fsm/deps.go) once every member writes dependencies and g has none:
// a ReadIndex round at every other group, then a dependency envelope
// naming their commit indexes around the marker. In its own goroutine
// (the rounds may cross regions); again an election timeout later until
// this member sees it applied.
func (s *Server) markDeps(g *group, now time.Time, electionTimeout time.Duration) {
	if !s.depsTrusted() || !s.clocked() {
		return
	}
	g.fsm.RLock()
	from := g.fsm.DepsFrom()
	g.fsm.RUnlock()
	if from != 0 || now.Sub(g.markedAt) < electionTimeout {
		return
	}
	g.markedAt = now
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := s.withTimeout(context.Background())
		defer cancel()
		// The rounds run side by side: one round trip, however many groups.
		v := newView(0)
		var wg sync.WaitGroup
		var failed atomic.Bool
		for _, h := range append([]*group{s.root}, s.keyspaceGroups.all()...) {
			if h.id == g.id {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				index, err := h.rep.ReadIndex(ctx)
				if err != nil {
					failed.Store(true)
					s.log.Debug("dependency marker: no commit index", "group", g.id, "of_group", h.id, "err", err)
					return
				}
				if index > 0 {
					v.observe(h.id, index)
				}
			}()
		}
		if wg.Wait(); failed.Load() {
			return
		}
		if _, err := s.Submit(withView(ctx, v), leaderDuty(inGroup{depsMarker{}, g})).Wait(); err != nil {
			s.log.Debug("dependency marker not proposed", "group", g.id, "err", err)
			return
		}
		s.log.Info("proposed the dependency marker", "group", g.id, "deps", v.groups())
	}()
}

// depsMarker is the proposal of a dependency marker (with inGroup).
type depsMarker struct{}

func (depsMarker) encode(*Server, int64) (uint64, []byte, error) { return 0, fsm.DepsMarker(), nil }
func (depsMarker) route(*Server) (*group, error)                 { return nil, errs.ErrBadArguments }
