package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// The scale experiment: how a system holds up as its tree grows. Clients
// fill a fresh 3-server cluster with N znodes through the ZooKeeper port
// (keys of the same names and sizes, for etcd) and the run records, per slice of the fill, the create rate and each
// server's resident memory (and Go heap, for Meridian); at the end, the
// disk each server uses, the snapshots it took (count, time, size, from
// its log), a heap profile (Meridian, with ScaleParams.Profiles) and the
// time from restarting every server to the first write; then, with
// ScaleParams.Catchup, one follower's catch-up from an empty data
// directory (catchup.go), after the restart so as to leave the figures
// before it as they were.

// ScaleParams shapes the scale experiment.
type ScaleParams struct {
	Znodes  int // znodes to create, at most 10,000,000
	Clients int // concurrent ZooKeeper-protocol clients, each with its own session
	Value   int // bytes of data per znode
	Slice   int // znodes per measured slice of the fill
	// Profiles: write each Meridian server's heap profile into this
	// directory after the fill ("": none).
	Profiles string
	// Timeout bounds one create (a create that takes longer counts as failed).
	Timeout time.Duration
	// Catchup: after the restart, one follower catches up from an empty
	// data directory (runCatchup); Meridian's cluster needs
	// MeridianOptions.SuperDigest = AdminSuperDigest() for it.
	Catchup bool
}

// ScaleSlice is one slice of the fill.
type ScaleSlice struct {
	Nodes     int       // znodes acknowledged at the end of the slice
	Sec       float64   // duration of the slice
	OpsPerSec float64   // creates per second in the slice
	RSSMiB    []float64 // per server, at the end of the slice
	HeapMiB   []float64 `json:",omitempty"` // per server: Go heap in use (Meridian)
}

// ScaleSnapshots sums one server's snapshots as its log reports them.
type ScaleSnapshots struct {
	Count     int
	TotalSec  float64
	MaxSec    float64
	LastBytes int64
}

// ScaleResult is one system's scale run.
type ScaleResult struct {
	System        string
	Znodes        int // attempted
	Created       int // acknowledged
	Errors        int
	FirstError    string `json:",omitempty"`
	Clients       int
	Value         int
	FillSec       float64
	FillOpsPerSec float64
	Slices        []ScaleSlice
	// At the end of the fill, per server.
	RSSMiB  []float64
	HeapMiB []float64 `json:",omitempty"`
	DiskMiB []float64
	// RSSPerZnodeB: the servers' mean resident memory after the fill, less
	// their mean before it, per znode created.
	RSSPerZnodeB float64
	Snapshots    []ScaleSnapshots `json:",omitempty"`
	// RestartSec: every server killed and started again, until a create
	// through the ZooKeeper port succeeds; RestartRSSMiB then, per server.
	RestartSec    float64
	RestartRSSMiB []float64
	// Catchup: after the restart, a follower's catch-up from scratch.
	Catchup *ScaleCatchup `json:",omitempty"`
}

// RunScale fills the running cluster c (started in e; its processes are
// servers named system1..3, and for Meridian c.HTTP lists their metrics
// endpoints) and restarts it.
func RunScale(e *Env, c *Cluster, p ScaleParams, progress func(string)) (ScaleResult, error) {
	if p.Znodes <= 0 || p.Znodes > 10_000_000 || p.Clients <= 0 || p.Clients > 4096 || p.Slice <= 0 {
		return ScaleResult{}, fmt.Errorf("scale: bad parameters %+v", p)
	}
	if p.Timeout <= 0 {
		p.Timeout = 30 * time.Second
	}
	res := ScaleResult{System: c.System, Znodes: p.Znodes, Clients: p.Clients, Value: p.Value}
	names, dirs := scaleProcesses(e, c.System)
	if names == nil {
		return res, fmt.Errorf("scale: system %s is not supported", c.System)
	}
	region := clientRegions(e.Topo)[0]
	newKV, servers := zkKV, len(c.ZK[region])
	if c.System == "etcd" {
		newKV, servers = etcdKV, len(c.Etcd[region])
	}
	conns := make([]KV, p.Clients)
	defer func() {
		for _, z := range conns {
			if z != nil {
				z.Close()
			}
		}
	}()
	for i := range conns {
		z, err := newKV(c, region, i%servers)
		if err != nil {
			return res, err
		}
		conns[i] = z
	}
	if err := createWithin(conns[0], "/scale", nil, p.Timeout); err != nil {
		return res, fmt.Errorf("scale: create /scale: %w", err)
	}
	base := e.RSS(names)
	value := make([]byte, p.Value)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}

	var next, done atomic.Int64
	var mu sync.Mutex
	slices := make(chan int, 64)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range conns {
		wg.Add(1)
		go func(z KV) {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(p.Znodes) {
					return
				}
				err := createWithin(z, fmt.Sprintf("/scale/n%08d", i), value, p.Timeout)
				if err != nil {
					mu.Lock()
					res.Errors++
					if res.FirstError == "" {
						res.FirstError = err.Error()
					}
					mu.Unlock()
					continue
				}
				if d := done.Add(1); d%int64(p.Slice) == 0 {
					slices <- int(d)
				}
			}
		}(conns[w])
	}
	go func() { wg.Wait(); close(slices) }()
	last, lastAt := 0, start
	record := func(n int) {
		now := time.Now()
		s := ScaleSlice{Nodes: n, Sec: now.Sub(lastAt).Seconds(), RSSMiB: e.RSS(names), HeapMiB: heapMiB(c.HTTP)}
		if s.Sec > 0 {
			s.OpsPerSec = float64(n-last) / s.Sec
		}
		res.Slices = append(res.Slices, s)
		progress(fmt.Sprintf("scale %s: %d znodes, %.0f creates/s, RSS %s MiB, heap %s MiB", c.System, n, s.OpsPerSec, fmtMiB(s.RSSMiB), fmtMiB(s.HeapMiB)))
		last, lastAt = n, now
	}
	for n := range slices {
		record(n)
	}
	res.FillSec = time.Since(start).Seconds()
	res.Created = int(done.Load())
	if res.Created != last {
		record(res.Created)
	}
	res.FillOpsPerSec = float64(res.Created) / res.FillSec
	// Let a snapshot in progress finish and the heap settle.
	time.Sleep(3 * time.Second)
	res.RSSMiB, res.HeapMiB = e.RSS(names), heapMiB(c.HTTP)
	if res.Created > 0 {
		res.RSSPerZnodeB = (mean(res.RSSMiB) - mean(base)) * (1 << 20) / float64(res.Created)
	}
	for i := range names {
		res.DiskMiB = append(res.DiskMiB, dirMiB(dirs[i]))
		if c.System == "meridian" {
			res.Snapshots = append(res.Snapshots, logSnapshots(filepath.Join(e.Dir, names[i]+".log")))
		}
	}
	if p.Profiles != "" && len(c.HTTP) > 0 {
		if err := saveHeapProfiles(c.HTTP, p.Profiles); err != nil {
			return res, err
		}
	}
	for _, z := range conns {
		z.Close()
	}
	clear(conns)

	restartAt := time.Now()
	for _, n := range names {
		if err := e.Restart(n); err != nil {
			return res, err
		}
	}
	wait := func() error { return waitZK(c.ZK[region], 10*time.Minute) }
	if c.System == "etcd" {
		wait = func() error { return waitEtcd(c.Etcd[region], 10*time.Minute) }
	}
	if err := wait(); err != nil {
		return res, fmt.Errorf("scale: after restart: %w", err)
	}
	res.RestartSec = time.Since(restartAt).Seconds()
	res.RestartRSSMiB = e.RSS(names)
	progress(fmt.Sprintf("scale %s: %d created (%d failed) at %.0f/s; RSS %s MiB (%.0f B/znode); disk %s MiB; restart to first write %.1f s",
		c.System, res.Created, res.Errors, res.FillOpsPerSec, fmtMiB(res.RSSMiB), res.RSSPerZnodeB, fmtMiB(res.DiskMiB), res.RestartSec))
	if p.Catchup {
		cu := runCatchup(e, c, region, 20*time.Minute, progress)
		res.Catchup = &cu
	}
	return res, nil
}

// scaleProcesses names the servers' processes and data directories as
// StartMeridian, StartZooKeeper and StartEtcd make them (nil: another
// system).
func scaleProcesses(e *Env, system string) (names, dirs []string) {
	for i := 1; i <= 3; i++ {
		switch system {
		case "meridian":
			names, dirs = append(names, fmt.Sprintf("meridian%d", i)), append(dirs, filepath.Join(e.Dir, strconv.Itoa(i)))
		case "zookeeper":
			names, dirs = append(names, fmt.Sprintf("zk%d", i)), append(dirs, filepath.Join(e.Dir, strconv.Itoa(i)))
		case "etcd":
			names, dirs = append(names, fmt.Sprintf("etcd%d", i)), append(dirs, filepath.Join(e.Dir, fmt.Sprintf("etcd%d", i)))
		default:
			return nil, nil
		}
	}
	return names, dirs
}

// createWithin creates a persistent znode (etcd: puts a key), giving up
// after timeout (the ZooKeeper client's calls take no context).
func createWithin(z KV, path string, data []byte, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- z.Create(ctx, path, data) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return fmt.Errorf("create %s: no answer in %v", path, timeout)
	}
}

// heapMiB reads go_memstats_heap_inuse_bytes from each server's /metrics.
func heapMiB(addrs []string) []float64 {
	var out []float64
	for _, h := range addrs {
		out = append(out, metricValue(h, "go_memstats_heap_inuse_bytes")/(1<<20))
	}
	return out
}

// metricValue is one unlabelled metric of a server's /metrics (0 if absent).
func metricValue(addr, name string) float64 {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// saveHeapProfiles writes each server's /debug/pprof/heap into dir.
func saveHeapProfiles(addrs []string, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cl := http.Client{Timeout: time.Minute}
	for i, a := range addrs {
		resp, err := cl.Get("http://" + a + "/debug/pprof/heap")
		if err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("heap%d.pb.gz", i+1)))
		if err == nil {
			_, err = io.Copy(f, io.LimitReader(resp.Body, 1<<30))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		resp.Body.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// dirMiB is the size of the files under dir.
func dirMiB(dir string) float64 {
	var total int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return float64(total) / (1 << 20)
}

// snapshotLine matches Meridian's "snapshot taken" log line (slog text).
var snapshotLine = regexp.MustCompile(`msg="snapshot taken".* bytes=(\d+).* took=(\S+)`)

// logSnapshots sums the snapshots a Meridian server's log reports.
func logSnapshots(path string) ScaleSnapshots {
	var s ScaleSnapshots
	f, err := os.Open(path)
	if err != nil {
		return s
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		m := snapshotLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		d, err := time.ParseDuration(m[2])
		if err != nil {
			continue
		}
		s.Count++
		s.TotalSec += d.Seconds()
		s.MaxSec = max(s.MaxSec, d.Seconds())
		s.LastBytes, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return s
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func fmtMiB(xs []float64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf("%.0f", x))
	}
	return strings.Join(parts, "/")
}

// ScaleMarkdown is the results of a scale run as a Markdown section.
func ScaleMarkdown(results []ScaleResult, plotFile string) string {
	var b strings.Builder
	b.WriteString("| system | created (failed) | fill creates/s | first slice /s | last slice /s | RSS per server MiB | Go heap MiB | RSS B/znode | disk MiB | server 1 snapshots (longest s, last MiB) | restart to first write s | RSS after restart MiB | catch-up s (listening s) | catch-up peak RSS MiB | RSS caught up MiB | snapshot received MiB |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		first, lastRate := 0.0, 0.0
		if n := len(r.Slices); n > 0 {
			first, lastRate = r.Slices[0].OpsPerSec, r.Slices[n-1].OpsPerSec
			if n > 1 && r.Slices[n-1].Nodes%max(1, r.Slices[0].Nodes) != 0 {
				lastRate = r.Slices[n-2].OpsPerSec // the last slice is a remainder
			}
		}
		snaps := "—"
		if len(r.Snapshots) > 0 {
			s := r.Snapshots[0]
			snaps = fmt.Sprintf("%d (%.2f s, %.1f MiB)", s.Count, s.MaxSec, float64(s.LastBytes)/(1<<20))
		}
		heap := "—"
		if len(r.HeapMiB) > 0 {
			heap = fmtMiB(r.HeapMiB)
		}
		cu := "— | — | — | —"
		if c := r.Catchup; c != nil && c.Error != "" {
			cu = "not measured | — | — | —"
		} else if c != nil {
			snap := fmt.Sprintf("%.1f", c.SnapshotMiB)
			if c.SnapshotMiB == 0 && c.LeaderSnapshotMiB > 0 {
				snap = fmt.Sprintf("%.1f (leader's)", c.LeaderSnapshotMiB)
			}
			cu = fmt.Sprintf("%.1f (%.1f) | %.0f | %.0f | %s", c.Sec, c.ListenSec, c.PeakRSSMiB, c.RSSMiB, snap)
		}
		fmt.Fprintf(&b, "| %s | %d (%d) | %.0f | %.0f | %.0f | %s | %s | %.0f | %s | %s | %.1f | %s | %s |\n",
			r.System, r.Created, r.Errors, r.FillOpsPerSec, first, lastRate, fmtMiB(r.RSSMiB), heap, r.RSSPerZnodeB,
			fmtMiB(r.DiskMiB), snaps, r.RestartSec, fmtMiB(r.RestartRSSMiB), cu)
	}
	var notes []string
	for _, r := range results {
		c := r.Catchup
		if c == nil {
			continue
		}
		n := fmt.Sprintf("- %s, server %d: %s", r.System, c.Server, c.Procedure)
		if c.LeaderSnapshotMiB > 0 {
			n += fmt.Sprintf("; the leader's last snapshot (its log) %.1f MiB", c.LeaderSnapshotMiB)
		}
		if c.Error != "" {
			n += "; not measured: " + c.Error
		}
		notes = append(notes, n+".")
	}
	if len(notes) > 0 {
		b.WriteString("\nCatch-up: one follower (not the leader) from an empty data directory, after the restart; seconds from its process start until a read through a client of that server only (no sync; etcd: serializable) returns a marker written while it was gone (in parentheses: until its client port listened); peak RSS is its VmHWM then:\n\n")
		b.WriteString(strings.Join(notes, "\n") + "\n")
	}
	b.WriteString("\nPer slice (znodes acknowledged: creates/s, RSS of the three servers MiB, Go heap MiB):\n\n")
	for _, r := range results {
		fmt.Fprintf(&b, "- %s:", r.System)
		for _, s := range r.Slices {
			fmt.Fprintf(&b, " %d: %.0f/s, %s", s.Nodes, s.OpsPerSec, fmtMiB(s.RSSMiB))
			if len(s.HeapMiB) > 0 {
				fmt.Fprintf(&b, " (%s)", fmtMiB(s.HeapMiB))
			}
			b.WriteString(";")
		}
		b.WriteString("\n")
	}
	if plotFile != "" {
		fmt.Fprintf(&b, "\n![fill rate against tree size](%s)\n", plotFile)
	}
	return b.String()
}

// WriteScale writes the results as JSON and the plot of fill rate against
// tree size into dir.
func WriteScale(results []ScaleResult, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "scale.json"), js, 0o644); err != nil {
		return err
	}
	p := plot.New()
	p.Title.Text = "fill rate against tree size"
	p.X.Label.Text = "znodes in the tree"
	p.Y.Label.Text = "creates/s"
	var lines []any
	for _, r := range results {
		var xy plotter.XYs
		for _, s := range r.Slices {
			xy = append(xy, plotter.XY{X: float64(s.Nodes), Y: s.OpsPerSec})
		}
		lines = append(lines, r.System, xy)
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return err
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, "scale-fill-rate.png"))
}
