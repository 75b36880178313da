package replica

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestInteraction runs the scripts in testdata/*.txt against Nodes: the
// shipped Ready processing (handleReady and everything it calls) over the
// replica's Pebble disk on a file system that can crash (what was not
// synced is lost), with a network and a clock the script drives. Output
// lists, per Ready, every write, send and apply in the order the replica
// made them, so a script pins the ordering rules down. Whatever the
// script says, the harness fails the test when a member sends a message
// vouching for state its disk has not synced (an append acknowledged, a
// vote granted).
//
// Commands (ids are member ids):
//
//	add-nodes N [snapshot-entries=K] [learners=(ID...)]
//	                                   members 1..N, bootstrapped together
//	campaign ID | propose ID DATA | transfer-leader FROM TO
//	tick ID [N]                        N raft ticks (the clock moves one tick interval each)
//	process-ready ID...                one Ready each (the replica loop's afterEvent)
//	deliver-msgs [ID...] [drop]        deliver (or lose) what is in flight to them
//	stabilize [ID...]                  Readies and deliveries until nothing moves
//	crash ID | restart ID              lose memory and unsynced writes; reopen from disk
//	crash-on-next-write ID             crash in the middle of the next Ready, at its write
//	read-index ID | reads              queue a linearizable read; show every read's outcome
//	status [ID...] | log ID            raft state (a leader's with its followers' match
//	                                   index); what the disk holds, synced or not
//	applied [ID...]                    what the state machine applied, in order
func TestInteraction(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			env := &interactionEnv{t: t, now: time.Unix(1_000_000, 0)}
			defer env.close()
			datadriven.RunTest(t, path, env.run)
		})
	}
}

const scriptTick = 100 * time.Millisecond

type interactionEnv struct {
	t       *testing.T
	now     time.Time
	members []*scriptMember // member i+1
	flight  []flying        // sent, not yet delivered, in send order
	reads   []scriptRead
	out     bytes.Buffer
	// snapEntries: every member snapshots after this many applied entries
	snapEntries uint64
	// learners are the members that join as learners (add-nodes learners=)
	learners []uint64
}

type flying struct {
	m      *pb.Message
	notice *[2]uint64 // a step-down notice: term, successor
}

type scriptRead struct {
	on uint64
	pr *PendingRead
}

type scriptMember struct {
	id   uint64
	fs   *vfs.MemFS
	disk *disk
	node *Node
	sm   *scriptMachine
	up   bool
	// what the disk holds as of the last synced write, and the writes
	// since then, for the harness's own check of what a message vouches for
	synced, unsynced durableView
	crashOnWrite     bool
}

type durableView struct {
	hs   *pb.HardState
	last uint64
}

func (env *interactionEnv) close() {
	for _, m := range env.members {
		if m.disk != nil {
			m.disk.close()
		}
	}
}

func (env *interactionEnv) printf(f string, args ...any) { fmt.Fprintf(&env.out, f, args...) }

func (env *interactionEnv) run(t *testing.T, d *datadriven.TestData) string {
	env.t = t
	env.out.Reset()
	if err := env.handle(d); err != nil {
		env.printf("error: %v\n", err)
	}
	if env.out.Len() == 0 {
		return "ok\n"
	}
	return env.out.String()
}

func (env *interactionEnv) handle(d *datadriven.TestData) error {
	ids, rest, err := env.parseIDs(d)
	if err != nil {
		return err
	}
	one := func() (*scriptMember, error) {
		if len(ids) != 1 {
			return nil, fmt.Errorf("%s wants one member id", d.Cmd)
		}
		return env.live(ids[0])
	}
	switch d.Cmd {
	case "add-nodes":
		return env.addNodes(d, rest)
	case "campaign":
		m, err := one()
		if err != nil {
			return err
		}
		return m.node.Campaign()
	case "propose":
		m, err := one()
		if err != nil {
			return err
		}
		if len(rest) != 1 {
			return fmt.Errorf("propose ID DATA")
		}
		return m.node.Propose([]byte(rest[0]))
	case "transfer-leader":
		if len(ids) != 2 {
			return fmt.Errorf("transfer-leader FROM TO")
		}
		m, err := env.live(ids[0])
		if err != nil {
			return err
		}
		m.node.TransferLeader(ids[1])
		return nil
	case "tick":
		if len(ids) == 0 {
			return fmt.Errorf("tick ID [N]")
		}
		m, err := env.live(ids[0])
		if err != nil {
			return err
		}
		n := 1
		if len(ids) == 2 {
			n = int(ids[1])
		}
		for range n {
			env.now = env.now.Add(scriptTick)
			m.node.Tick()
		}
		return nil
	case "process-ready":
		for _, id := range ids {
			m, err := env.live(id)
			if err != nil {
				return err
			}
			if _, err := env.processReady(m); err != nil {
				return err
			}
		}
		return nil
	case "deliver-msgs":
		drop := slices.Contains(rest, "drop")
		for _, id := range env.orAll(ids) {
			env.deliver(id, drop)
		}
		return nil
	case "stabilize":
		return env.stabilize(env.orAll(ids))
	case "crash":
		m, err := one()
		if err != nil {
			return err
		}
		return env.crash(m)
	case "crash-on-next-write":
		m, err := one()
		if err != nil {
			return err
		}
		m.crashOnWrite = true
		return nil
	case "applied":
		for _, id := range env.orAll(ids) {
			env.printf("%d: %s\n", id, strings.Join(env.members[id-1].sm.applied, " "))
		}
		return nil
	case "restart":
		if len(ids) != 1 {
			return fmt.Errorf("restart ID")
		}
		return env.restart(env.members[ids[0]-1])
	case "read-index":
		m, err := one()
		if err != nil {
			return err
		}
		env.reads = append(env.reads, scriptRead{on: m.id, pr: m.node.ReadIndex()})
		env.printf("read %d queued on %d\n", len(env.reads), m.id)
		return nil
	case "reads":
		for i, r := range env.reads {
			idx, done, err := r.pr.Result()
			switch {
			case !done:
				env.printf("read %d on %d: waiting\n", i+1, r.on)
			case err != nil:
				env.printf("read %d on %d: %v\n", i+1, r.on, err)
			default:
				env.printf("read %d on %d: index %d (applied %d)\n", i+1, r.on, idx, env.members[r.on-1].node.r.AppliedIndex())
			}
		}
		return nil
	case "status":
		for _, id := range env.orAll(ids) {
			env.status(env.members[id-1])
		}
		return nil
	case "log":
		if len(ids) != 1 {
			return fmt.Errorf("log ID")
		}
		return env.log(env.members[ids[0]-1])
	}
	return fmt.Errorf("unknown command %q", d.Cmd)
}

// parseIDs splits the positional arguments into leading member ids and
// the rest.
func (env *interactionEnv) parseIDs(d *datadriven.TestData) ([]uint64, []string, error) {
	var ids []uint64
	var rest []string
	for _, a := range d.CmdArgs {
		if len(a.Vals) > 0 {
			if d.Cmd == "propose" { // the data may read key=value
				rest = append(rest, a.Key+"="+strings.Join(a.Vals, ","))
			}
			continue // key=value: the command reads it
		}
		id, err := strconv.ParseUint(a.Key, 10, 64)
		if err != nil || len(rest) > 0 || d.Cmd == "add-nodes" || (d.Cmd == "propose" && len(ids) == 1) {
			rest = append(rest, a.Key)
			continue
		}
		if d.Cmd != "tick" && (id == 0 || id > uint64(len(env.members))) {
			return nil, nil, fmt.Errorf("no member %d", id)
		}
		ids = append(ids, id)
	}
	return ids, rest, nil
}

func (env *interactionEnv) orAll(ids []uint64) []uint64 {
	if len(ids) > 0 {
		return ids
	}
	for _, m := range env.members {
		ids = append(ids, m.id)
	}
	return ids
}

func (env *interactionEnv) live(id uint64) (*scriptMember, error) {
	if id == 0 || id > uint64(len(env.members)) {
		return nil, fmt.Errorf("no member %d", id)
	}
	m := env.members[id-1]
	if !m.up {
		return nil, fmt.Errorf("member %d is down", id)
	}
	return m, nil
}

func (env *interactionEnv) addNodes(d *datadriven.TestData, rest []string) error {
	if len(env.members) > 0 {
		return fmt.Errorf("members exist")
	}
	if len(rest) != 1 {
		return fmt.Errorf("add-nodes N")
	}
	n, err := strconv.Atoi(rest[0])
	if err != nil {
		return err
	}
	env.snapEntries = 10000
	if d.HasArg("snapshot-entries") {
		d.ScanArgs(env.t, "snapshot-entries", &env.snapEntries)
	}
	env.learners = nil
	if d.HasArg("learners") {
		d.ScanArgs(env.t, "learners", &env.learners)
	}
	for i := 1; i <= n; i++ {
		env.members = append(env.members, &scriptMember{id: uint64(i), fs: vfs.NewCrashableMem(), sm: &scriptMachine{env: env}})
	}
	for _, m := range env.members {
		if err := env.open(m); err != nil {
			return err
		}
	}
	return nil
}

// open starts m from its disk.
func (env *interactionEnv) open(m *scriptMember) error {
	var peers []Peer
	for _, o := range env.members {
		peers = append(peers, Peer{ID: o.id, Addr: fmt.Sprintf("m%d", o.id), Learner: slices.Contains(env.learners, o.id)})
	}
	logger := slog.New(slog.DiscardHandler)
	d, err := openDisk("data", m.fs, logger)
	if err != nil {
		return err
	}
	cfg := Config{ID: m.id, Peers: peers, TickInterval: scriptTick, ElectionTicks: 10, HeartbeatTicks: 1,
		SnapshotEntries: env.snapEntries, Logger: logger}
	m.disk = d
	m.synced = durableView{hs: &pb.HardState{}}
	if hs, _, _, err := d.Load(); err == nil {
		m.synced = durableView{hs: hs, last: d.last}
	}
	m.unsynced = m.synced
	node, err := NewNode(cfg, m.sm, scriptStorage{env, m}, scriptNetwork{env, m}, NodeOptions{Clock: func() time.Time { return env.now }})
	if err != nil {
		d.close()
		m.disk = nil
		return err
	}
	node.r.readSeq = m.id << 32 // read contexts appear in messages: no randomness
	m.node, m.up = node, true
	return nil
}

func (env *interactionEnv) processReady(m *scriptMember) (bool, error) {
	mark := env.out.Len()
	env.printf("> %d handling Ready\n", m.id)
	had, err := m.node.HandleReady()
	if errors.Is(err, errScriptCrash) {
		return false, nil
	}
	if err != nil {
		return had, fmt.Errorf("member %d: %w", m.id, err)
	}
	header := len(fmt.Sprintf("> %d handling Ready\n", m.id))
	switch {
	case !had && env.out.Len() == mark+header:
		env.out.Truncate(mark)
	case !had: // a learner's deferred sync, and what it held back
		rest := env.out.String()[mark+header:]
		env.out.Truncate(mark)
		env.printf("> %d syncing\n%s", m.id, rest)
	case env.out.Len() == mark+header:
		env.printf("  (nothing to write, send or apply: read states, or soft state only)\n")
	}
	return had, nil
}

// deliver hands member id what is in flight to it, in send order.
func (env *interactionEnv) deliver(id uint64, drop bool) bool {
	var mine []flying
	rest := env.flight[:0:0]
	for _, f := range env.flight {
		if f.m.GetTo() == id {
			mine = append(mine, f)
		} else {
			rest = append(rest, f)
		}
	}
	env.flight = rest
	if len(mine) == 0 {
		return false
	}
	m := env.members[id-1]
	switch {
	case drop:
		env.printf("> %d losing messages\n", id)
	case !m.up:
		env.printf("> %d is down, messages lost\n", id)
	default:
		env.printf("> %d receiving messages\n", id)
	}
	for _, f := range mine {
		env.printf("  %s\n", describe(f))
		if drop || !m.up {
			continue
		}
		if f.notice != nil {
			m.node.SteppedDown(f.m.GetFrom(), f.notice[0], f.notice[1])
		} else {
			m.node.Step(f.m)
		}
	}
	return true
}

func describe(f flying) string {
	if f.notice != nil {
		return fmt.Sprintf("%d->%d StepDown Term:%d Successor:%d", f.m.GetFrom(), f.m.GetTo(), f.notice[0], f.notice[1])
	}
	return raft.DescribeMessage(f.m, nil)
}

func (env *interactionEnv) stabilize(ids []uint64) error {
	for {
		moved := false
		for _, id := range ids {
			m := env.members[id-1]
			for m.up {
				had, err := env.processReady(m)
				if err != nil {
					return err
				}
				if !had {
					break
				}
				moved = true
			}
		}
		for _, id := range ids {
			if env.deliver(id, false) {
				moved = true
			}
		}
		if !moved {
			return nil
		}
	}
}

// crash drops m's memory and keeps of its disk only what was synced.
func (env *interactionEnv) crash(m *scriptMember) error {
	clone := m.fs.CrashClone(vfs.CrashCloneCfg{})
	if err := m.disk.close(); err != nil {
		return err
	}
	m.fs, m.disk, m.node, m.up = clone, nil, nil, false
	env.printf("member %d crashed\n", m.id)
	return nil
}

func (env *interactionEnv) restart(m *scriptMember) error {
	if m.up {
		return fmt.Errorf("member %d is up", m.id)
	}
	m.sm.applied = nil
	if err := env.open(m); err != nil {
		return err
	}
	env.printf("member %d restarted: %s, log [%d, %d], applied %d\n", m.id, raft.DescribeHardState(m.synced.hs),
		firstIndex(m), m.disk.last, m.node.r.AppliedIndex())
	return nil
}

func firstIndex(m *scriptMember) uint64 {
	i, _ := m.node.r.mem.FirstIndex()
	return i
}

func (env *interactionEnv) status(m *scriptMember) {
	if !m.up {
		env.printf("%d: down\n", m.id)
		return
	}
	st := m.node.Status()
	env.printf("%d: %s term=%d leader=%d commit=%d applied=%d log=[%d,%d] members=%d", m.id, st.Role, st.Term, st.Leader,
		st.Commit, st.Applied, st.FirstIndex, st.LastIndex, len(st.Members))
	if st.Progress != nil {
		env.printf(" match=[")
		for i, id := range slices.Sorted(maps.Keys(st.Progress)) {
			if i > 0 {
				env.printf(" ")
			}
			env.printf("%d:%d", id, st.Progress[id])
		}
		env.printf("]")
	}
	env.printf("\n")
}

func (env *interactionEnv) log(m *scriptMember) error {
	d := m.disk
	if d == nil {
		var err error
		if d, err = openDisk("data", m.fs, slog.New(slog.DiscardHandler)); err != nil {
			return err
		}
		defer d.close()
	}
	last := d.last
	hs, snap, ents, err := d.Load()
	d.last = last
	if err != nil {
		return err
	}
	env.printf("%s\n", raft.DescribeHardState(hs))
	if !raft.IsEmptySnap(snap) {
		env.printf("snapshot index=%d term=%d\n", snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm())
	}
	for _, e := range ents {
		env.printf("%s\n", raft.DescribeEntry(e, nil))
	}
	return nil
}

// scriptStorage is m's disk as the replica sees it, printing every write.
type scriptStorage struct {
	env *interactionEnv
	m   *scriptMember
}

func (s scriptStorage) Load() (*pb.HardState, *pb.Snapshot, []*pb.Entry, error) {
	return s.m.disk.Load()
}

// errScriptCrash: the member crashed at its write (crash-on-next-write).
var errScriptCrash = errors.New("crashed at the write")

func (s scriptStorage) Save(hs *pb.HardState, ents []*pb.Entry, snap *pb.Snapshot, sync bool) error {
	if s.m.crashOnWrite {
		s.m.crashOnWrite = false
		s.env.printf("  crash before the write: ")
		if err := s.env.crash(s.m); err != nil {
			return err
		}
		return errScriptCrash
	}
	var parts []string
	if snap != nil {
		parts = append(parts, fmt.Sprintf("snapshot index=%d term=%d", snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm()))
		s.m.unsynced.last = snap.GetMetadata().GetIndex()
	}
	if len(ents) > 0 {
		var es []string
		for _, e := range ents {
			es = append(es, raft.DescribeEntry(e, nil))
		}
		parts = append(parts, "entries ["+strings.Join(es, ", ")+"]")
		s.m.unsynced.last = ents[len(ents)-1].GetIndex()
	}
	if hs != nil {
		parts = append(parts, "hard state "+raft.DescribeHardState(hs))
		s.m.unsynced.hs = proto.Clone(hs).(*pb.HardState)
	}
	how := "save"
	if !sync {
		how = "save (no sync)"
	}
	s.env.printf("  %s %s\n", how, strings.Join(parts, "; "))
	if err := s.m.disk.Save(hs, ents, snap, sync); err != nil {
		return err
	}
	if sync {
		s.m.synced = s.m.unsynced
	}
	return nil
}

func (s scriptStorage) Sync() error {
	s.env.printf("  sync\n")
	if err := s.m.disk.Sync(); err != nil {
		return err
	}
	s.m.synced = s.m.unsynced
	return nil
}

func (s scriptStorage) SaveSnapshot(snap *pb.Snapshot, compactTo uint64) error {
	s.env.printf("  snapshot taken index=%d, log compacted to %d\n", snap.GetMetadata().GetIndex(), compactTo)
	return s.m.disk.SaveSnapshot(snap, compactTo)
}

// scriptNetwork is m's outbound network: messages wait in flight until
// the script delivers them.
type scriptNetwork struct {
	env *interactionEnv
	m   *scriptMember
}

func (n scriptNetwork) Send(msg *pb.Message) {
	f := flying{m: proto.Clone(msg).(*pb.Message)}
	n.env.printf("  send %s\n", describe(f))
	if err := vouchedFor(n.m.synced, msg); err != nil {
		n.env.t.Errorf("member %d: %v", n.m.id, err)
		n.env.printf("  VIOLATION: %v\n", err)
	}
	n.env.flight = append(n.env.flight, f)
}

func (n scriptNetwork) SendStepDown(to, term, successor uint64) {
	f := flying{m: &pb.Message{From: proto.Uint64(n.m.id), To: proto.Uint64(to)}, notice: &[2]uint64{term, successor}}
	n.env.printf("  send %s\n", describe(f))
	n.env.flight = append(n.env.flight, f)
}

// vouchedFor checks a message against what its sender's disk has synced.
func vouchedFor(d durableView, m *pb.Message) error {
	switch {
	case m.GetType() == pb.MsgAppResp && !m.GetReject() && m.GetIndex() > d.last:
		return fmt.Errorf("acknowledged index %d with only %d synced", m.GetIndex(), d.last)
	case m.GetType() == pb.MsgVoteResp && !m.GetReject() && (d.hs.GetTerm() != m.GetTerm() || d.hs.GetVote() != m.GetTo()):
		return fmt.Errorf("granted a vote to %d in term %d with %s synced", m.GetTo(), m.GetTerm(), raft.DescribeHardState(d.hs))
	}
	return nil
}

// scriptMachine records what was applied; its snapshot is that record.
type scriptMachine struct {
	env     *interactionEnv
	applied []string
}

func (s *scriptMachine) Apply(index, term uint64, data []byte) error {
	s.env.printf("  apply %d/%d %q\n", term, index, data)
	s.applied = append(s.applied, string(data))
	return nil
}

func (s *scriptMachine) Snapshot() ([]byte, error) { return json.Marshal(s.applied) }

func (s *scriptMachine) Restore(index uint64, data []byte) error {
	s.applied = nil
	s.env.printf("  restore snapshot %d\n", index)
	return json.Unmarshal(data, &s.applied)
}
