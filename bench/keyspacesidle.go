package bench

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-coord/meridian/client"
)

// The idle-keyspaces experiment: what a quiet regional keyspace costs a
// server. It starts the topology's servers (real Meridian processes,
// every link emulated, as the keyspaces workload does), measures each
// server's CPU and memory over a window, creates N keyspaces (zone
// survival, homes round-robin across the regions), waits until every
// server knows a leader for every keyspace and the groups have had time
// to quiesce, and measures again over the same window; then, with
// KeyspacesIdleParams.Load, once more while every keyspace takes one
// write a second. CPU is utime+stime from /proc/PID/stat, memory VmRSS
// from /proc/PID/status (its mean over the window) and the Go heap in
// use from each server's /metrics. The links run in the benchmark's own
// process, so none of their CPU is in the servers' figures.

// KeyspacesIdleParams shapes the experiment.
type KeyspacesIdleParams struct {
	Keyspaces int           // N, at most 1000 (the cluster's limit)
	Window    time.Duration // each measurement
	// Settle: after the servers start, and again after every keyspace
	// has a leader, before measuring (the groups quiesce after three
	// idle ticks of at most 1 s each).
	Settle time.Duration
	// Load adds the third measurement: one write a second to each
	// keyspace, from a client in its home region.
	Load bool
	Keep bool
	// Pprof serves Go's profiles on the servers' HTTP ports (printed).
	Pprof bool
}

// IdleWindow is one measurement, per server.
type IdleWindow struct {
	Label      string
	Sec        float64   // wall-clock length of the window
	CPUMsPerS  []float64 // ms of CPU (user+system) per second
	RSSMiB     []float64 // mean VmRSS over the window
	HeapMiB    []float64 `json:",omitempty"` // Go heap in use at its end
	LoadAvg1   float64   // the machine's 1-minute load average at its end
	Writes     int       `json:",omitempty"` // acknowledged writes in it (the load window)
	WriteError int       `json:",omitempty"`
	FirstError string    `json:",omitempty"`
}

// KeyspacesIdleResult is one run of the experiment.
type KeyspacesIdleResult struct {
	Topology  string
	Servers   []string // region/zone, in server order
	Keyspaces int      // N asked for
	Created   int      // created
	Homes     []string // the regions homes go round
	// CreateSec: the N creates, one after another from one admin client
	// (server 1's region); LeadersSec: from the first create until every
	// server knew a leader for every keyspace.
	CreateSec  float64
	LeadersSec float64
	SettleSec  float64
	LoadAvg1   float64 // at the start
	// Led: how many keyspaces each server led at the end of the idle
	// window, as server 1 saw it.
	Led    []int
	Before IdleWindow
	After  IdleWindow
	Load   *IdleWindow `json:",omitempty"`
}

// keyspaceIdleName is the i-th keyspace's prefix (0-based): /ks001...
func keyspaceIdleName(i int) string { return fmt.Sprintf("/ks%03d", i+1) }

// keyspaceIdleHomes is the home region of each of n keyspaces, round-robin.
func keyspaceIdleHomes(n int, regions []string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = regions[i%len(regions)]
	}
	return out
}

// serverRegions lists the topology's server regions, each once, in order.
func serverRegions(t *Topology) []string {
	var out []string
	for _, r := range t.Servers {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// RunKeyspacesIdle runs the experiment in e (a fresh environment whose
// topology names zones) with the meridian binary bin.
func RunKeyspacesIdle(e *Env, bin string, p KeyspacesIdleParams, progress func(string)) (KeyspacesIdleResult, error) {
	t := e.Topo
	res := KeyspacesIdleResult{Topology: t.Name, Keyspaces: p.Keyspaces, LoadAvg1: loadAvg1()}
	if !t.HasZones() {
		return res, fmt.Errorf("keyspaces-idle: topology %s names no zones (servers as region/zone)", t.Name)
	}
	if p.Keyspaces <= 0 || p.Keyspaces > 1000 || p.Window <= 0 {
		return res, fmt.Errorf("keyspaces-idle: bad parameters %+v", p)
	}
	for i, s := range t.Servers {
		res.Servers = append(res.Servers, s+"/"+t.Zones[i])
	}
	res.Homes = serverRegions(t)
	sum := sha1.Sum([]byte(ksSuperUser + ":" + ksSuperPassword))
	c, err := StartMeridianWith(e, bin, MeridianOptions{Metrics: true, Pprof: p.Pprof, SuperDigest: ksSuperUser + ":" + base64.StdEncoding.EncodeToString(sum[:])})
	if err != nil {
		return res, err
	}
	var names []string
	for i := range t.Servers {
		names = append(names, fmt.Sprintf("meridian%d", i+1))
	}
	if p.Pprof {
		progress(fmt.Sprintf("keyspaces-idle: profiles at http://%s/debug/pprof/", strings.Join(c.HTTP, "/debug/pprof/, http://")))
	}
	progress(fmt.Sprintf("keyspaces-idle on %s: %d servers started; settling %v", t.Name, len(names), p.Settle))
	time.Sleep(p.Settle)
	res.Before = measureIdle(e, names, c.HTTP, p.Window, "no keyspaces")
	progress(fmt.Sprintf("keyspaces-idle: no keyspaces: CPU %s ms/s, RSS %s MiB (load average %.2f)",
		fmtFloats(res.Before.CPUMsPerS, 1), fmtMiB(res.Before.RSSMiB), res.Before.LoadAvg1))

	ctx := context.Background()
	region := t.Servers[0]
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	adm, err := client.New(cctx, client.Config{Endpoints: []string{c.Native[region][0]}, KeepEndpointOrder: true,
		SessionTimeout: 10 * time.Second, Digest: []string{ksSuperUser + ":" + ksSuperPassword}})
	cancel()
	if err != nil {
		return res, err
	}
	defer adm.Close()
	homes := keyspaceIdleHomes(p.Keyspaces, res.Homes)
	start := time.Now()
	for i, home := range homes {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := adm.CreateKeyspace(cctx, keyspaceIdleName(i), home, "zone")
		cancel()
		if err != nil {
			return res, fmt.Errorf("creating keyspace %s (home %s): %w", keyspaceIdleName(i), home, err)
		}
		res.Created++
	}
	res.CreateSec = time.Since(start).Seconds()
	progress(fmt.Sprintf("keyspaces-idle: %d keyspaces created in %.1f s", res.Created, res.CreateSec))
	deadline := time.Now().Add(5 * time.Minute)
	for {
		known := 0
		for _, h := range c.HTTP {
			known += leadersKnown(metricsKeyspaceLeaders(h))
		}
		if known == p.Keyspaces*len(c.HTTP) {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("keyspaces-idle: after 5 min, %d of %d (keyspace, server) pairs know a leader", known, p.Keyspaces*len(c.HTTP))
		}
		time.Sleep(250 * time.Millisecond)
	}
	res.LeadersSec = time.Since(start).Seconds()
	progress(fmt.Sprintf("keyspaces-idle: every server knows a leader of every keyspace %.1f s after the first create; settling %v", res.LeadersSec, p.Settle))
	time.Sleep(p.Settle)
	res.SettleSec = p.Settle.Seconds()
	res.After = measureIdle(e, names, c.HTTP, p.Window, fmt.Sprintf("%d idle keyspaces", p.Keyspaces))
	res.Led = ledPerServer(metricsKeyspaceLeaders(c.HTTP[0]), len(names))
	progress(fmt.Sprintf("keyspaces-idle: %d idle keyspaces: CPU %s ms/s, RSS %s MiB (load average %.2f)",
		p.Keyspaces, fmtFloats(res.After.CPUMsPerS, 1), fmtMiB(res.After.RSSMiB), res.After.LoadAvg1))
	if !p.Load {
		return res, nil
	}
	w, err := keyspacesIdleLoad(e, c, names, homes, p, progress)
	if err != nil {
		return res, err
	}
	res.Load = &w
	progress(fmt.Sprintf("keyspaces-idle: %d keyspaces at 1 write/s: CPU %s ms/s, RSS %s MiB, %d writes (%d failed; load average %.2f)",
		p.Keyspaces, fmtFloats(w.CPUMsPerS, 1), fmtMiB(w.RSSMiB), w.Writes, w.WriteError, w.LoadAvg1))
	return res, nil
}

// keyspacesIdleLoad measures a window in which each keyspace takes one
// write a second (100 B to PREFIX/w), from a client of its home region
// connected to that region's nearest server, after a few seconds of it.
func keyspacesIdleLoad(e *Env, c *Cluster, names, homes []string, p KeyspacesIdleParams, progress func(string)) (IdleWindow, error) {
	t := e.Topo
	kvs := map[string]KV{}
	defer func() {
		for _, kv := range kvs {
			kv.Close()
		}
	}()
	for _, r := range serverRegions(t) {
		kv, err := nativeKV(c, r, t.NearestServer(r))
		if err != nil {
			return IdleWindow{}, err
		}
		kvs[r] = kv
	}
	var measuring atomic.Bool
	var writes, failed atomic.Int64
	var mu sync.Mutex
	firstErr := ""
	stop := make(chan struct{})
	var wg sync.WaitGroup
	val := make([]byte, 100)
	for i, home := range homes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := keyspaceIdleName(i) + "/w"
			// Spread the keyspaces' writes over the second.
			select {
			case <-time.After(time.Duration(i) * time.Second / time.Duration(len(homes))):
			case <-stop:
				return
			}
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			created := false
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				var err error
				if created {
					err = kvs[home].Put(ctx, key, val)
				} else if err = kvs[home].Create(ctx, key, val); err == nil {
					created = true
				}
				cancel()
				if measuring.Load() {
					if err != nil {
						failed.Add(1)
						mu.Lock()
						if firstErr == "" {
							firstErr = err.Error()
						}
						mu.Unlock()
					} else {
						writes.Add(1)
					}
				}
				select {
				case <-tick.C:
				case <-stop:
					return
				}
			}
		}()
	}
	warm := min(5*time.Second, p.Settle)
	progress(fmt.Sprintf("keyspaces-idle: one write a second to each keyspace; measuring after %v", warm))
	time.Sleep(warm)
	measuring.Store(true)
	w := measureIdle(e, names, c.HTTP, p.Window, fmt.Sprintf("%d keyspaces, 1 write/s each", len(homes)))
	measuring.Store(false)
	close(stop)
	wg.Wait()
	w.Writes, w.WriteError, w.FirstError = int(writes.Load()), int(failed.Load()), firstErr
	return w, nil
}

// measureIdle measures the named processes over window: CPU from the
// difference of their /proc/PID/stat times, RSS as the mean of a sample
// a second, the Go heap at the end.
func measureIdle(e *Env, names, httpAddrs []string, window time.Duration, label string) IdleWindow {
	w := IdleWindow{Label: label}
	cpu0, t0 := e.ProcCPU(names), time.Now()
	rssSum := make([]float64, len(names))
	samples := 0
	for end := t0.Add(window); time.Now().Before(end); {
		time.Sleep(min(time.Second, time.Until(end)))
		for i, v := range e.RSS(names) {
			rssSum[i] += v
		}
		samples++
	}
	cpu1 := e.ProcCPU(names)
	w.Sec = time.Since(t0).Seconds()
	w.CPUMsPerS = cpuMsPerSec(cpu0, cpu1, w.Sec)
	for _, s := range rssSum {
		w.RSSMiB = append(w.RSSMiB, s/float64(max(1, samples)))
	}
	if len(httpAddrs) > 0 {
		w.HeapMiB = heapMiB(httpAddrs)
	}
	w.LoadAvg1 = loadAvg1()
	return w
}

// cpuMsPerSec is each process's CPU between two readings as ms per
// second of sec.
func cpuMsPerSec(before, after []time.Duration, sec float64) []float64 {
	out := make([]float64, len(before))
	if sec <= 0 {
		return out
	}
	for i := range before {
		if i < len(after) {
			out[i] = ms(after[i]-before[i]) / sec
		}
	}
	return out
}

// loadAvg1 is the machine's 1-minute load average (0 if unreadable).
func loadAvg1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// metricsKeyspaceLeaders reads meridian_keyspace_leader_id from a server's
// /metrics: each keyspace's leader as it sees it (0: none known).
func metricsKeyspaceLeaders(addr string) map[string]int {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "meridian_keyspace_leader_id{") {
			b.WriteString(sc.Text())
			b.WriteByte('\n')
		}
	}
	return parseKeyspaceLeaders(b.String())
}

// parseKeyspaceLeaders reads the meridian_keyspace_leader_id samples of a
// /metrics text: keyspace prefix → leader id.
func parseKeyspaceLeaders(metrics string) map[string]int {
	out := map[string]int{}
	for _, l := range strings.Split(metrics, "\n") {
		rest, ok := strings.CutPrefix(l, `meridian_keyspace_leader_id{keyspace="`)
		if !ok {
			continue
		}
		name, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		out[name] = int(v)
	}
	return out
}

// leadersKnown counts the keyspaces whose leader is known (not 0).
func leadersKnown(leaders map[string]int) int {
	n := 0
	for _, id := range leaders {
		if id != 0 {
			n++
		}
	}
	return n
}

// ledPerServer counts the keyspaces each of n servers leads (ids 1..n).
func ledPerServer(leaders map[string]int, n int) []int {
	out := make([]int, n)
	for _, id := range leaders {
		if id >= 1 && id <= n {
			out[id-1]++
		}
	}
	return out
}

// IdleDelta is the difference between two windows per keyspace and
// server: CPU in ms/s, RSS and heap in KiB; Total sums the servers.
type IdleDelta struct {
	CPUMsPerS []float64
	RSSKiB    []float64
	HeapKiB   []float64
	// Sums over the servers: what one keyspace costs the cluster.
	TotalCPUMsPerS, TotalRSSKiB, TotalHeapKiB float64
}

// perKeyspace is (b − a)/n per server.
func perKeyspace(a, b IdleWindow, n int) IdleDelta {
	var d IdleDelta
	if n <= 0 {
		return d
	}
	diff := func(x, y []float64, scale float64) ([]float64, float64) {
		var out []float64
		var total float64
		for i := range x {
			if i >= len(y) {
				break
			}
			v := (y[i] - x[i]) * scale / float64(n)
			out = append(out, v)
			total += v
		}
		return out, total
	}
	d.CPUMsPerS, d.TotalCPUMsPerS = diff(a.CPUMsPerS, b.CPUMsPerS, 1)
	d.RSSKiB, d.TotalRSSKiB = diff(a.RSSMiB, b.RSSMiB, 1024)
	d.HeapKiB, d.TotalHeapKiB = diff(a.HeapMiB, b.HeapMiB, 1024)
	return d
}

func sumFloats(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

func fmtFloats(xs []float64, prec int) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, strconv.FormatFloat(x, 'f', prec, 64))
	}
	return strings.Join(parts, "/")
}

// at is xs[i], or 0 past its end.
func at(xs []float64, i int) float64 {
	if i < len(xs) {
		return xs[i]
	}
	return 0
}

// KeyspacesIdleMarkdown is the result as a Markdown section.
func KeyspacesIdleMarkdown(r KeyspacesIdleResult) string {
	var b strings.Builder
	n := r.Created
	idle := perKeyspace(r.Before, r.After, n)
	fmt.Fprintf(&b, "## Idle keyspaces on %d servers, topology %s\n\n", len(r.Servers), r.Topology)
	fmt.Fprintf(&b, "%d Meridian servers (%s), real processes, every link emulated. %d keyspaces (/ks001...), zone survival (three voters in the home region's three zones, the other six servers learners), homes round-robin over %s, created one after another by one admin client through server 1's region: %.1f s (%.0f ms each); every server knew a leader of every keyspace %.1f s after the first create, then %.0f s to settle (the groups quiesce) before measuring. Each window %.0f s. Load average (1 min) %.2f at the start, %s at the end of each window.\n\n",
		len(r.Servers), strings.Join(r.Servers, ", "), n, strings.Join(r.Homes, ", "), r.CreateSec, 1000*r.CreateSec/float64(max(1, n)),
		r.LeadersSec, r.SettleSec, r.Before.Sec, r.LoadAvg1, loadAvgs(r))
	fmt.Fprintf(&b, "CPU: utime+stime of each server process over the window, in ms of CPU per second (1000 = one core). RSS: VmRSS, the mean of one sample a second. Heap: Go heap in use at the end of the window. Δ per keyspace: (with %d keyspaces − without) / %d, per server; the total row sums the servers (what one keyspace costs the cluster).\n\n", n, n)
	windows := []IdleWindow{r.Before, r.After}
	if r.Load != nil {
		windows = append(windows, *r.Load)
	}
	b.WriteString("| server | keyspaces led |")
	for _, w := range windows {
		fmt.Fprintf(&b, " CPU ms/s, %s |", w.Label)
	}
	b.WriteString(" idle Δ CPU ms/s per keyspace |")
	if r.Load != nil {
		b.WriteString(" loaded Δ CPU ms/s per keyspace |")
	}
	for _, w := range windows[:2] {
		fmt.Fprintf(&b, " RSS MiB, %s |", w.Label)
	}
	b.WriteString(" Δ RSS KiB per keyspace | Δ heap KiB per keyspace |\n|---|")
	cols := 1 + len(windows) + 1 + 2 + 2
	if r.Load != nil {
		cols++
	}
	b.WriteString(strings.Repeat("---:|", cols) + "\n")
	var loaded IdleDelta
	if r.Load != nil {
		loaded = perKeyspace(r.Before, *r.Load, n)
	}
	row := func(name, led string, cpu []float64, idleCPU, loadCPU, rssB, rssA, dRSS, dHeap float64) {
		fmt.Fprintf(&b, "| %s | %s |", name, led)
		for _, c := range cpu {
			fmt.Fprintf(&b, " %.1f |", c)
		}
		fmt.Fprintf(&b, " %.3f |", idleCPU)
		if r.Load != nil {
			fmt.Fprintf(&b, " %.3f |", loadCPU)
		}
		fmt.Fprintf(&b, " %.1f | %.1f | %.1f |", rssB, rssA, dRSS)
		if len(r.Before.HeapMiB) > 0 {
			fmt.Fprintf(&b, " %.1f |\n", dHeap)
		} else {
			b.WriteString(" — |\n")
		}
	}
	for i, s := range r.Servers {
		var cpu []float64
		for _, w := range windows {
			cpu = append(cpu, at(w.CPUMsPerS, i))
		}
		led := "?"
		if i < len(r.Led) {
			led = strconv.Itoa(r.Led[i])
		}
		row(fmt.Sprintf("%d %s", i+1, s), led, cpu, at(idle.CPUMsPerS, i), at(loaded.CPUMsPerS, i),
			at(r.Before.RSSMiB, i), at(r.After.RSSMiB, i), at(idle.RSSKiB, i), at(idle.HeapKiB, i))
	}
	var cpu []float64
	for _, w := range windows {
		cpu = append(cpu, sumFloats(w.CPUMsPerS))
	}
	led := 0
	for _, l := range r.Led {
		led += l
	}
	row("**total**", strconv.Itoa(led), cpu, idle.TotalCPUMsPerS, loaded.TotalCPUMsPerS, sumFloats(r.Before.RSSMiB), sumFloats(r.After.RSSMiB), idle.TotalRSSKiB, idle.TotalHeapKiB)
	k := float64(max(1, len(r.Servers)))
	for i := range cpu {
		cpu[i] /= k
	}
	row("mean per server", "", cpu, idle.TotalCPUMsPerS/k, loaded.TotalCPUMsPerS/k, sumFloats(r.Before.RSSMiB)/k, sumFloats(r.After.RSSMiB)/k, idle.TotalRSSKiB/k, idle.TotalHeapKiB/k)
	fmt.Fprintf(&b, "\nIn short: a quiet keyspace costs each server %.3f ms of CPU a second (%.2f ms/s across the %d servers; %d of them: %.1f%% of one core for the cluster) and %.0f KiB of RSS (%.0f KiB of Go heap).",
		idle.TotalCPUMsPerS/k, idle.TotalCPUMsPerS, len(r.Servers), n, idle.TotalCPUMsPerS*float64(n)/10, idle.TotalRSSKiB/k, idle.TotalHeapKiB/k)
	if r.Load != nil {
		fmt.Fprintf(&b, " At one write a second each (%d writes in the window, %d failed", r.Load.Writes, r.Load.WriteError)
		if r.Load.FirstError != "" {
			fmt.Fprintf(&b, "; first: %s", r.Load.FirstError)
		}
		fmt.Fprintf(&b, "), a keyspace costs each server %.3f ms/s (%.2f across the servers).", loaded.TotalCPUMsPerS/k, loaded.TotalCPUMsPerS)
	}
	b.WriteString("\n")
	return b.String()
}

func loadAvgs(r KeyspacesIdleResult) string {
	parts := []string{fmt.Sprintf("%.2f", r.Before.LoadAvg1), fmt.Sprintf("%.2f", r.After.LoadAvg1)}
	if r.Load != nil {
		parts = append(parts, fmt.Sprintf("%.2f", r.Load.LoadAvg1))
	}
	return strings.Join(parts, ", ")
}
