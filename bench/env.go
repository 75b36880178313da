package bench

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meridian-coord/meridian/internal/netem"
	"github.com/meridian-coord/meridian/internal/testutil"
)

// Env is one system's run: its processes, its links and its directory.
// Close stops everything it started.
type Env struct {
	Topo *Topology
	Dir  string
	Seed uint64

	mu      sync.Mutex
	links   []*netem.Link
	procs   []*proc
	cleanup []func()
}

type proc struct {
	name string
	argv []string
	cmd  *exec.Cmd
	done chan struct{}
}

// NewEnv makes a run directory under dir.
func NewEnv(topo *Topology, dir string, seed uint64) (*Env, error) {
	d, err := os.MkdirTemp(dir, "run-")
	if err != nil {
		return nil, err
	}
	return &Env{Topo: topo, Dir: d, Seed: seed}, nil
}

// Link starts an emulated link with the round trip between two regions,
// listening on listen ("" for a free loopback port).
func (e *Env) Link(from, to, target, listen string) (string, error) {
	return e.linkRTT(e.Topo.RTT(from, to), target, listen)
}

func (e *Env) linkRTT(rtt time.Duration, target, listen string) (string, error) {
	e.mu.Lock()
	e.Seed++
	seed := e.Seed
	e.mu.Unlock()
	oneWay := rtt / 2
	l, err := netem.Listen(netem.Config{Listen: listen, Target: target, Delay: oneWay,
		Jitter: time.Duration(float64(oneWay) * e.Topo.JitterPct / 100), Dist: netem.Normal, Seed: seed})
	if err != nil {
		return "", err
	}
	e.mu.Lock()
	e.links = append(e.links, l)
	e.mu.Unlock()
	return l.Addr(), nil
}

// Ports returns n free loopback ports.
func (e *Env) Ports(n int) ([]int, error) { return testutil.PickPorts(n) }

// Start runs a process with its output in Dir/name.log; Close kills it.
func (e *Env) Start(name string, argv ...string) error {
	logf, err := os.OpenFile(filepath.Join(e.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	p := &proc{name: name, argv: argv, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); logf.Close(); close(p.done) }()
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	return nil
}

// CPU is the CPU time (user and system) the processes started so far have
// used, from /proc (zero where it cannot be read: not Linux, or exited).
// Clock ticks are taken as 100 Hz, Linux's USER_HZ on every architecture.
func (e *Env) CPU() time.Duration {
	e.mu.Lock()
	procs := slices.Clone(e.procs)
	e.mu.Unlock()
	var total time.Duration
	for _, p := range procs {
		if p.cmd.Process == nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
		if err != nil {
			continue
		}
		total += statCPU(string(b))
	}
	return total
}

// pid is the process id of the process started as name (0: none).
func (e *Env) pid(name string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.procs {
		if p.name == name && p.cmd.Process != nil {
			return p.cmd.Process.Pid
		}
	}
	return 0
}

// ProcCPU returns the CPU time (user and system) each named process has
// used so far, from /proc/PID/stat (0 for one that cannot be read).
func (e *Env) ProcCPU(names []string) []time.Duration {
	out := make([]time.Duration, len(names))
	for i, n := range names {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", e.pid(n))); err == nil {
			out[i] = statCPU(string(b))
		}
	}
	return out
}

// RSS returns the resident memory of the named processes in MiB (0 for
// one that cannot be read), from /proc/PID/status.
func (e *Env) RSS(names []string) []float64 {
	out := make([]float64, len(names))
	for i, n := range names {
		out[i] = statusMiB(e.pid(n), "VmRSS:")[0]
	}
	return out
}

// procMem is the named process's peak and current resident memory in MiB
// (VmHWM, VmRSS; 0 where unreadable).
func (e *Env) procMem(name string) (peak, rss float64) {
	v := statusMiB(e.pid(name), "VmHWM:", "VmRSS:")
	return v[0], v[1]
}

// statusMiB reads the given fields (in kB) of /proc/PID/status, in MiB
// (0 for a field or a process that cannot be read).
func statusMiB(pid int, fields ...string) []float64 {
	out := make([]float64, len(fields))
	if pid == 0 {
		return out
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		for i, f := range fields {
			if v, ok := strings.CutPrefix(l, f); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				out[i] = kb / 1024
			}
		}
	}
	return out
}

// statCPU reads utime and stime (fields 14 and 15) from a /proc/PID/stat
// line; the command name (field 2) may hold spaces, so fields count from
// its closing parenthesis.
func statCPU(stat string) time.Duration {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(u+s) * 10 * time.Millisecond
}

// Restart kills the process started as name (SIGKILL, a crash) and starts
// it again with the same arguments; its log continues in the same file.
func (e *Env) Restart(name string) error {
	argv, err := e.Stop(name)
	if err != nil {
		return err
	}
	return e.Start(name, argv...)
}

// Stop kills the process started as name (SIGKILL) and forgets it; it
// returns the arguments it was started with.
func (e *Env) Stop(name string) ([]string, error) {
	e.mu.Lock()
	i := slices.IndexFunc(e.procs, func(p *proc) bool { return p.name == name })
	if i < 0 {
		e.mu.Unlock()
		return nil, fmt.Errorf("no process %q", name)
	}
	p := e.procs[i]
	e.procs = slices.Delete(e.procs, i, i+1)
	e.mu.Unlock()
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		return nil, fmt.Errorf("%s did not exit after SIGKILL", name)
	}
	return p.argv, nil
}

// Exited returns the names of started processes that have exited.
func (e *Env) Exited() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, p := range e.procs {
		select {
		case <-p.done:
			out = append(out, p.name)
		default:
		}
	}
	return out
}

// Finish closes the environment after a run and reports what went wrong
// in it: the processes that exited during the run, as a failure that
// names the run (what); their directory (logs, data) is then kept, and
// named, whatever keep says, so that the exit can be diagnosed. "" when
// every process ran to the end.
func (e *Env) Finish(keep bool, what string) string {
	ex := e.Exited()
	e.Close(keep || len(ex) > 0)
	if len(ex) == 0 {
		return ""
	}
	return fmt.Sprintf("%s: processes exited during the run: %v (logs kept in %s)", what, ex, e.Dir)
}

// OnClose registers cleanup run by Close (last registered, first run).
func (e *Env) OnClose(f func()) {
	e.mu.Lock()
	e.cleanup = append(e.cleanup, f)
	e.mu.Unlock()
}

// Close kills the processes, closes the links and runs the cleanups. The
// directory stays (logs) unless keep is false.
func (e *Env) Close(keep bool) {
	e.mu.Lock()
	procs, links, cleanup := e.procs, e.links, e.cleanup
	e.procs, e.links, e.cleanup = nil, nil, nil
	e.mu.Unlock()
	for _, p := range procs {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
		}
	}
	for _, l := range links {
		l.Close()
	}
	for i := len(cleanup) - 1; i >= 0; i-- {
		cleanup[i]()
	}
	if !keep {
		os.RemoveAll(e.Dir)
	}
}

// LinkCheck is one region pair's emulated round trip as measured.
type LinkCheck struct {
	From, To      string
	Configured    time.Duration
	Min, P50, P99 time.Duration
	Max           time.Duration
	Samples       int
	JitterPct     float64
}

// VerifyLinks measures, for every distinct pair of regions in the
// topology, the round trip of a link configured exactly like the
// benchmark's (same delay, jitter and proxy code) to a local echo server:
// the proxies' own overhead is included.
func VerifyLinks(topo *Topology, samples int) ([]LinkCheck, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	regions := map[string]bool{}
	for _, r := range append(slices.Clone(topo.Servers), topo.Clients...) {
		regions[r] = true
	}
	var names []string
	for r := range regions {
		names = append(names, r)
	}
	sort.Strings(names)
	var out []LinkCheck
	env := &Env{Topo: topo, Seed: 99}
	defer env.Close(true)
	for i, a := range names {
		for _, b := range names[i:] {
			addr, err := env.Link(a, b, ln.Addr().String(), "")
			if err != nil {
				return nil, err
			}
			lc, err := pingLink(addr, samples)
			if err != nil {
				return nil, err
			}
			lc.From, lc.To, lc.Configured, lc.JitterPct = a, b, topo.RTT(a, b), topo.JitterPct
			out = append(out, lc)
		}
	}
	// Two zones of each region, where the servers name zones: the
	// intra-region quorum's round trip (From and To are region/zone).
	if topo.HasZones() {
		seen := map[string]bool{}
		for _, r := range topo.Servers {
			in := topo.RegionServers(r)
			if seen[r] || len(in) < 2 {
				continue
			}
			seen[r] = true
			i, j := in[0], in[1]
			addr, err := env.linkRTT(topo.ServerRTT(i, j), ln.Addr().String(), "")
			if err != nil {
				return nil, err
			}
			lc, err := pingLink(addr, samples)
			if err != nil {
				return nil, err
			}
			lc.From, lc.To, lc.Configured, lc.JitterPct = r+"/"+topo.Zones[i], r+"/"+topo.Zones[j], topo.ServerRTT(i, j), topo.JitterPct
			out = append(out, lc)
		}
	}
	return out, nil
}

// pingLink sends samples one-byte pings through the link at addr to an
// echo server and returns their round trips.
func pingLink(addr string, samples int) (LinkCheck, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return LinkCheck{}, err
	}
	defer c.Close()
	var rtts []time.Duration
	buf := []byte{0}
	for k := 0; k < samples; k++ {
		start := time.Now()
		if _, err := c.Write(buf); err != nil {
			return LinkCheck{}, err
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, buf); err != nil {
			return LinkCheck{}, err
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	return LinkCheck{Min: rtts[0], P50: rtts[len(rtts)/2], P99: rtts[(len(rtts)*99)/100], Max: rtts[len(rtts)-1], Samples: len(rtts)}, nil
}

// Network namespaces, for systems that advertise one peer address to all
// members (etcd): each member runs in its own namespace, reachable from the
// host at 10.201.i.2 over a veth pair. Inside member i's namespace every
// other member's advertised address 10.200.j.2 is a local address on lo,
// where a link created in that namespace listens and forwards (from the
// host) to 10.201.j.2 with pair (i,j)'s delay. So every ordered pair gets
// its own delay with no iptables.

// netnsName is member i's namespace.
func (e *Env) netnsName(i int) string { return fmt.Sprintf("mbench%d-%d", os.Getpid()%10000, i) }

// AdvertisedAddr and HostAddr are member i's addresses (see above).
func AdvertisedAddr(i int) string { return fmt.Sprintf("10.200.%d.2", i+1) }
func HostAddr(i int) string       { return fmt.Sprintf("10.201.%d.2", i+1) }

// SetupNetns creates n namespaces wired as described above.
func (e *Env) SetupNetns(n int) error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root")
	}
	for i := 0; i < n; i++ {
		ns := e.netnsName(i)
		host, peer := fmt.Sprintf("mbh%d", i), fmt.Sprintf("mbn%d", i)
		// A leftover from a killed run would make the first command fail.
		exec.Command("ip", "link", "del", host).Run()
		cmds := [][]string{
			{"netns", "add", ns},
			{"link", "add", host, "type", "veth", "peer", "name", peer, "netns", ns},
			{"addr", "add", fmt.Sprintf("10.201.%d.1/24", i+1), "dev", host},
			{"link", "set", host, "up"},
			{"-n", ns, "addr", "add", HostAddr(i) + "/24", "dev", peer},
			{"-n", ns, "link", "set", peer, "up"},
			{"-n", ns, "link", "set", "lo", "up"},
		}
		for j := 0; j < n; j++ {
			cmds = append(cmds, []string{"-n", ns, "addr", "add", AdvertisedAddr(j) + "/32", "dev", "lo"})
		}
		e.OnClose(func() {
			exec.Command("ip", "netns", "del", ns).Run()
			exec.Command("ip", "link", "del", host).Run()
		})
		for _, c := range cmds {
			if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
				return fmt.Errorf("ip %v: %v: %s", c, err, out)
			}
		}
	}
	return nil
}

// NetnsExec returns argv run inside member i's namespace.
func (e *Env) NetnsExec(i int, argv ...string) []string {
	return append([]string{"ip", "netns", "exec", e.netnsName(i)}, argv...)
}

// LinkInNetns starts a link listening on listen inside member i's
// namespace (the listening socket is created there; connections to the
// target are made from the host).
func (e *Env) LinkInNetns(i int, rtt time.Duration, target, listen string) error {
	errc := make(chan error, 1)
	go func() {
		// The thread enters the namespace and is never unlocked, so it exits
		// with this goroutine instead of returning to the pool in the wrong
		// namespace (the runtime starts new threads from a clean template).
		runtime.LockOSThread()
		f, err := os.Open("/var/run/netns/" + e.netnsName(i))
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := setns(int(f.Fd())); err != nil {
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		_, err = e.linkRTT(rtt, target, listen)
		errc <- err
	}()
	return <-errc
}

func setns(fd int) error { return unix.Setns(fd, unix.CLONE_NEWNET) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// MeasureFsync returns the median time of n appends of 4 KiB to a file in
// dir, each followed by fdatasync: what one durable log write costs on this
// disk (Meridian, ZooKeeper and etcd all sync their logs per batch).
func MeasureFsync(dir string, n int) (time.Duration, error) {
	f, err := os.CreateTemp(dir, "fsync-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	var ts []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := f.Write(buf); err != nil {
			return 0, err
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return 0, err
		}
		ts = append(ts, time.Since(start))
	}
	slices.Sort(ts)
	return ts[len(ts)/2], nil
}
