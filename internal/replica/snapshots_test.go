package replica

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// viewKV is a kv that hands out snapshot views, as the server's state
// machine does: a running replica then writes its snapshots off the loop.
type viewKV struct {
	*kv
	gate *viewGate
}

// viewGate holds every view's WriteTo until it is opened.
type viewGate struct {
	open    chan struct{}
	writing atomic.Int32 // views waiting at the gate or being written
}

func newViewGate() *viewGate { return &viewGate{open: make(chan struct{})} }

type kvView struct {
	m    map[string]string
	gate *viewGate
}

func (s viewKV) SnapshotView() (SnapshotView, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return kvView{m: maps.Clone(s.m), gate: s.gate}, nil
}

// WriteSnapshot writes what kv.Snapshot returns but its first line, and
// returns that line as the head.
func (v kvView) WriteSnapshot(w io.Writer) ([]byte, error) {
	v.gate.writing.Add(1)
	defer v.gate.writing.Add(-1)
	<-v.gate.open
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(v.m)) {
		lines = append(lines, k+"="+v.m[k]+"\n")
	}
	if len(lines) == 0 {
		return nil, nil
	}
	_, err := io.WriteString(w, strings.Join(lines[1:], ""))
	return []byte(lines[0]), err
}

// A running replica writes its snapshot off the raft loop: while the
// snapshot is held up, writes still commit and apply everywhere, and the
// snapshot is stored (and the log compacted) once it is written. Followers
// then catch up from it, and a restarted cluster restores from it.
func TestSnapshotWrittenOffTheLoop(t *testing.T) {
	gate := newViewGate()
	c := startCluster(t, 3, &cluster{t: t, views: gate, tweak: func(cfg *Config) { cfg.SnapshotEntries = 20; cfg.CatchUpEntries = 5 }})
	lead := c.leader()
	for i := 0; i < 60; i++ {
		c.put(lead, fmt.Sprintf("k%03d", i), fmt.Sprint(i))
	}
	waitFor(t, func() bool { return gate.writing.Load() == 3 })
	for i, r := range c.reps {
		if st := r.Status(); st.SnapshotIndex != 0 || st.Applied < 60 {
			t.Fatalf("replica %d while its snapshot is held: %+v", i+1, st)
		}
	}
	close(gate.open)
	for _, r := range c.reps {
		waitFor(t, func() bool { st := r.Status(); return st.SnapshotIndex >= 20 && st.FirstIndex > 1 })
	}
	// Each member keeps the file of its latest snapshot only.
	for i := range c.reps {
		waitFor(t, func() bool { return len(snapFiles(t, c.dirs[i])) == 1 })
	}
	f := (lead + 1) % 3
	c.stop(f)
	for i := 60; i < 200; i++ {
		c.put(lead, fmt.Sprintf("k%03d", i), fmt.Sprint(i))
	}
	waitFor(t, func() bool { return c.reps[lead].Status().FirstIndex > 100 })
	c.start(f)
	c.waitAll(func(s *kv) bool { return s.len() == 200 })
	if r := c.sms[f].restored(); len(r) == 0 || r[len(r)-1] == 0 {
		t.Fatalf("follower did not restore from the leader's snapshot: %v", r)
	}
	want := c.sms[lead].state()
	for i := range c.reps {
		c.stop(i)
	}
	for i := range c.reps {
		c.start(i)
	}
	c.waitAll(func(s *kv) bool { return s.len() == 200 })
	for i, s := range c.sms {
		if r := s.restored(); len(r) == 0 || r[0] == 0 {
			t.Fatalf("replica %d: not rebuilt from its snapshot: %v", i+1, r)
		}
		if !maps.Equal(s.state(), want) {
			t.Fatalf("replica %d: state differs after restart", i+1)
		}
	}
	c.put(c.leader(), "after", "restart")
}

// A snapshot file that does not match its reference (a flipped byte) is
// refused at start as corrupt, not restored.
func TestSnapshotFileCorruptRefused(t *testing.T) {
	c := startCluster(t, 3, &cluster{t: t, views: newViewGate(), tweak: func(cfg *Config) { cfg.SnapshotEntries = 10; cfg.CatchUpEntries = 2 }})
	close(c.views.open)
	lead := c.leader()
	for i := 0; i < 30; i++ {
		c.put(lead, fmt.Sprintf("k%03d", i), fmt.Sprint(i))
	}
	f := (lead + 1) % 3
	waitFor(t, func() bool { return c.reps[f].Status().SnapshotIndex >= 10 && len(snapFiles(t, c.dirs[f])) == 1 })
	cfg := c.config(f)
	c.stop(f)
	path := snapFiles(t, c.dirs[f])[0]
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := Open(cfg, viewKV{newKV(), c.views}); !errors.Is(err, ErrCorrupt) {
		if r != nil {
			r.Close()
		}
		t.Fatalf("open with a corrupt snapshot file: %v", err)
	}
}

// snapFiles lists the finished snapshot files under a data directory.
func snapFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "snap", "snap-*"))
	var out []string
	for _, n := range names {
		if !strings.HasSuffix(n, ".tmp") {
			out = append(out, n)
		}
	}
	return out
}

// Snapshots follow the bytes applied as well as the entries, and the tail
// kept for slow followers is bounded in bytes too.
func TestSnapshotOnBytes(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotEntries, cfg.SnapshotBytes, cfg.CatchUpEntries = 1_000_000, 8<<10, 1_000
	})
	lead := c.leader()
	value := strings.Repeat("v", 500)
	for i := 0; i < 60; i++ { // about 30 KiB
		c.put(lead, fmt.Sprintf("k%03d", i), value)
	}
	for i, r := range c.reps {
		st := r.Status()
		if st.SnapshotIndex == 0 {
			t.Fatalf("replica %d: no snapshot after 30 KiB with SnapshotBytes 8 KiB: %+v", i+1, st)
		}
		// 4 KiB behind the snapshot is 8 entries; a batch applied at once
		// may keep a few more.
		if behind := st.SnapshotIndex - st.FirstIndex; behind > 20 {
			t.Fatalf("replica %d: %d entries kept behind the snapshot, want about 8: %+v", i+1, behind, st)
		}
	}
}

// A snapshot written off the loop that a newer, installed one overtook is
// dropped with its file, and also when installing that one removed the
// file already (the writer renamed it just before): the drop is no
// failure. (It was one: the replica stopped, and the process with it.)
func TestDroppedSnapshotFileGoneAlready(t *testing.T) {
	d, err := openDisk(t.TempDir(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	cfg := soloConfig()
	n, err := NewNode(cfg, newKV(), d, discardNet{}, NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := n.r
	r.snaps.disk, r.snapIndex = d, 900
	ref, err := writeSnapFile(d.fs, d.snapDir(), d.snapPrefix()+"00000000000001f1", d.snapPrefix()+"00000000000001f1.tmp", func(w io.Writer) ([]byte, error) {
		_, err := w.Write([]byte("state"))
		return nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	dropped := snapResult{index: 497, data: encodeSnapRef(ref)}
	if err := r.finishSnapshot(dropped); err != nil {
		t.Fatalf("dropping an overtaken snapshot: %v", err)
	}
	if names, _ := d.fs.List(d.snapDir()); len(names) != 0 {
		t.Fatalf("the dropped snapshot's file is left: %v", names)
	}
	if err := r.finishSnapshot(dropped); err != nil {
		t.Fatalf("dropping an overtaken snapshot whose file is gone already: %v", err)
	}
}

// Once every member reads streams, a follower too far behind for the log
// gets the leader's snapshot file streamed into a file of its own (no
// frame limit, not held whole on either side); it restores from it then,
// and again after a restart.
func TestSnapshotStreamed(t *testing.T) {
	var streams atomic.Bool
	streams.Store(true)
	c := startCluster(t, 3, &cluster{t: t, views: newViewGate(), tweak: func(cfg *Config) {
		cfg.SnapshotEntries = 20
		cfg.CatchUpEntries = 5
		cfg.SnapshotStreams = streams.Load
	}})
	close(c.views.open)
	lead := c.leader()
	f := (lead + 1) % 3
	c.stop(f)
	for i := 0; i < 200; i++ {
		c.put(lead, fmt.Sprintf("k%03d", i), strings.Repeat("v", i))
	}
	waitFor(t, func() bool { return c.reps[lead].Status().FirstIndex > 100 })
	c.start(f)
	c.waitAll(func(s *kv) bool { return s.len() == 200 })
	if r := c.sms[f].restored(); len(r) == 0 || r[len(r)-1] == 0 {
		t.Fatalf("follower did not restore from the leader's snapshot: %v", r)
	}
	streamed := func() []string {
		var out []string
		for _, n := range snapFiles(t, c.dirs[f]) {
			if strings.Contains(filepath.Base(n), "-from-") {
				out = append(out, n)
			}
		}
		return out
	}
	if got := streamed(); len(got) != 1 {
		t.Fatalf("follower's snapshot files after catching up: %v (want one streamed from the leader)", snapFiles(t, c.dirs[f]))
	}
	want := c.sms[lead].state()
	if !maps.Equal(c.sms[f].state(), want) {
		t.Fatal("follower's state differs from the leader's after the stream")
	}
	// Restart: the follower restores from the streamed file.
	c.stop(f)
	c.start(f)
	c.waitAll(func(s *kv) bool { return s.len() == 200 })
	if r := c.sms[f].restored(); len(r) == 0 || r[0] == 0 {
		t.Fatalf("follower not rebuilt from the streamed snapshot at restart: %v", r)
	}
	if !maps.Equal(c.sms[f].state(), want) {
		t.Fatal("follower's state differs after its restart")
	}
	// Without streams (a member's binary does not read them) the same
	// catch-up goes as one frame, read from the leader's file.
	streams.Store(false)
	f2 := (lead + 2) % 3
	c.stop(f2)
	for i := 200; i < 400; i++ {
		c.put(lead, fmt.Sprintf("k%03d", i), "w")
	}
	waitFor(t, func() bool { return c.reps[lead].Status().FirstIndex > 300 })
	c.start(f2)
	c.waitAll(func(s *kv) bool { return s.len() == 400 })
	for _, n := range snapFiles(t, c.dirs[f2]) {
		if strings.Contains(filepath.Base(n), "-from-") {
			t.Fatalf("a snapshot was streamed while streams were off: %s", n)
		}
	}
}
