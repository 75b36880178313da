package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/pki"
	"github.com/meridian-coord/meridian/internal/server"
	"github.com/meridian-coord/meridian/internal/testutil"
)

// These tests run the real binary as separate processes, as a user would.

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "meridian-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "meridian")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freePorts(t testing.TB, n int) []int { return testutil.FreePorts(t, n) }

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startMember secures cfg with the dev certificates under dir/tls, writes
// it as dir/n<ID>.yaml and starts a server process on it (log
// dir/n<ID>.log); it returns the process and the config file.
func startMember(t *testing.T, dir string, cfg server.Config, extra ...string) (*proc, string) {
	t.Helper()
	if err := cfg.UseDevTLS(filepath.Join(dir, "tls")); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, fmt.Sprintf("n%d.yaml", cfg.ID))
	if err := cfg.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	return startServer(t, p, filepath.Join(dir, fmt.Sprintf("n%d.log", cfg.ID)), extra...), p
}

func startServer(t *testing.T, cfgPath, logPath string, extra ...string) *proc {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, append([]string{"server", "--config", cfgPath}, extra...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); logf.Close(); close(p.done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
	})
	return p
}

func leaderOf(t *testing.T, c *client.Client) uint64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := c.Status(ctx)
		cancel()
		if err == nil && st.GetLeaderId() != 0 {
			return st.GetLeaderId()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no leader")
	return 0
}

// TestKillLeaderProcess is the README promise: a 3-process cluster, the
// leader SIGKILLed mid-stream, work continues, nothing acknowledged is lost,
// and the killed server catches up after a restart.
func TestKillLeaderProcess(t *testing.T) {
	dir := t.TempDir()
	ports := freePorts(t, 6)
	var members []server.Member
	for i := 0; i < 3; i++ {
		members = append(members, server.Member{ID: uint64(i + 1), Region: "local", Zone: "z",
			Peer: fmt.Sprintf("127.0.0.1:%d", ports[2*i]), GRPC: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])})
	}
	var cfgPaths, eps []string
	procs := make([]*proc, 3)
	for i := 0; i < 3; i++ {
		cfg := server.Config{ID: uint64(i + 1), DataDir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)), Members: members,
			TickMs: 50, ElectionTicks: 10, SessionTickMs: 500, SnapshotEntries: 200}
		var p string
		procs[i], p = startMember(t, dir, cfg)
		cfgPaths = append(cfgPaths, p)
		eps = append(eps, members[i].GRPC)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: eps, SessionTimeout: 5 * time.Second, RequestTimeout: 10 * time.Second, TLS: devTLS(t, dir)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lead := leaderOf(t, c)
	if _, _, err := c.Create(ctx, "/k", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var acked []string
	for i := 0; i < 300; i++ {
		if i == 150 {
			procs[lead-1].cmd.Process.Signal(syscall.SIGKILL)
			<-procs[lead-1].done
		}
		p := fmt.Sprintf("/k/n%04d", i)
		if _, _, err := c.Create(ctx, p, []byte(p), client.CreateOptions{}); err == nil {
			acked = append(acked, p)
		}
	}
	if len(acked) < 250 {
		t.Fatalf("only %d of 300 writes acknowledged across the failover", len(acked))
	}
	if nl := leaderOf(t, c); nl == lead {
		t.Fatalf("killed member %d still reported as leader", lead)
	}
	kids, _, err := c.Children(ctx, "/k")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, k := range kids {
		have["/k/"+k] = true
	}
	for _, p := range acked {
		if !have[p] {
			t.Fatalf("acknowledged %s lost", p)
		}
	}
	// Restart the killed server; it must catch up and serve the same data.
	procs[lead-1] = startServer(t, cfgPaths[lead-1], filepath.Join(dir, fmt.Sprintf("n%d.log", lead)))
	c2, err := client.New(ctx, client.Config{Endpoints: []string{eps[lead-1]}, RequestTimeout: 20 * time.Second, TLS: devTLS(t, dir)})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	kids2, _, err := c2.Children(ctx, "/k")
	if err != nil {
		t.Fatal(err)
	}
	if len(kids2) != len(kids) {
		t.Fatalf("restarted member has %d children, cluster has %d", len(kids2), len(kids))
	}
}

// TestDevCommand runs README's first command: `meridian dev` starts a
// working 3-node cluster, the CLI talks to it, and Ctrl-C stops every process.
func TestDevCommand(t *testing.T) {
	dir := t.TempDir()
	base := 300 + os.Getpid()%500
	// Run where the README's reader does: dev's default data directory
	// (data/dev) under the working directory, and the CLI with no TLS
	// flags, finding the dev certificates there.
	cmd := exec.Command(binary, "dev", "--nodes", "3", "--base-port", fmt.Sprint(base))
	cmd.Dir = dir
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	var eps string
	var zkAddrs []string
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) > 7 && f[0] == "node" && f[6] == "zk" {
			zkAddrs = append(zkAddrs, f[7])
		}
		if strings.HasPrefix(line, "endpoints: ") {
			eps = strings.TrimPrefix(line, "endpoints: ")
			break
		}
	}
	if eps == "" {
		t.Fatal("dev printed no endpoints")
	}
	var dashboard string
	if sc.Scan() {
		dashboard, _, _ = strings.Cut(strings.TrimPrefix(sc.Text(), "dashboard: "), " ")
	}
	go func() {
		for sc.Scan() {
		}
	}()
	// The dashboard printed is open to a browser on this machine, which
	// has no client certificate; /status is not.
	checkDevDashboard(t, dir, dashboard)
	run := func(args ...string) string {
		t.Helper()
		full := append([]string{"--endpoints", eps, "--timeout", "20s"}, args...)
		cmd := exec.Command(binary, full...)
		cmd.Dir = dir
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("meridian %v: %v\n%s", args, err, b)
		}
		return strings.TrimSpace(string(b))
	}
	run("create", "/hello", "world")
	if got := run("get", "/hello"); got != "world" {
		t.Fatalf("get /hello = %q", got)
	}
	if got := run("ls", "/"); !strings.Contains(got, "hello") {
		t.Fatalf("ls / = %q", got)
	}
	if got := run("status"); strings.Count(got, "leader") < 1 {
		t.Fatalf("status shows no leader:\n%s", got)
	}
	// `meridian lock` runs a command holding the lock, with its token.
	tok1 := run("lock", "deploy", "--", "sh", "-c", "echo $MERIDIAN_LOCK $MERIDIAN_FENCING_TOKEN")
	tok2 := run("lock", "deploy", "--", "sh", "-c", "echo $MERIDIAN_LOCK $MERIDIAN_FENCING_TOKEN")
	var n1, n2 uint64
	if _, err := fmt.Sscanf(tok1, "deploy %d", &n1); err != nil {
		t.Fatalf("lock output %q: %v", tok1, err)
	}
	if _, err := fmt.Sscanf(tok2, "deploy %d", &n2); err != nil || n2 <= n1 {
		t.Fatalf("second token %q not above first %d", tok2, n1)
	}
	if got := run("locks"); strings.Contains(got, "deploy") {
		t.Fatalf("lock still listed after the command exited:\n%s", got)
	}
	// The ZooKeeper connect string names every member's ZooKeeper port.
	if got := strings.Split(run("zk-servers"), ","); len(zkAddrs) != 3 || !sameSet(got, zkAddrs) {
		t.Fatalf("zk-servers = %v, want the dev cluster's %v", got, zkAddrs)
	}
	if got := run("zk-servers", "--table"); strings.Count(got, "voter") != 3 || !strings.Contains(got, "CONNECT ms") {
		t.Fatalf("zk-servers --table:\n%s", got)
	}
	checkQueueAndBarrierCLI(t, dir, eps, run)
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("dev did not stop on SIGINT")
	}
	// No server process may survive its parent.
	for i := 1; i <= 3; i++ {
		_, g, _, _ := server.DevPorts(i, base)
		if conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", g), 200*time.Millisecond); err == nil {
			conn.Close()
			t.Fatalf("node %d still listening after dev stopped", i)
		}
	}
}

// checkQueueAndBarrierCLI runs README's queue and barrier commands against
// the dev cluster, each command its own process (and session).
func checkQueueAndBarrierCLI(t *testing.T, dir, eps string, run func(args ...string) string) {
	t.Helper()
	type bg struct {
		out  *syncBuffer
		done chan error
	}
	start := func(args ...string) bg {
		out := &syncBuffer{}
		cmd := exec.Command(binary, append([]string{"--endpoints", eps, "--timeout", "20s"}, args...)...)
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		b := bg{out, make(chan error, 1)}
		go func() { b.done <- cmd.Wait() }()
		return b
	}
	wait := func(b bg, what string) string {
		t.Helper()
		select {
		case err := <-b.done:
			if err != nil {
				t.Fatalf("%s: %v\n%s", what, err, b.out)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s did not finish", what)
		}
		return strings.TrimSpace(b.out.String())
	}
	notDone := func(b bg, what string) {
		t.Helper()
		select {
		case err := <-b.done:
			t.Fatalf("%s returned early: %v\n%s", what, err, b.out)
		case <-time.After(300 * time.Millisecond):
		}
	}
	id1, id2 := run("queue", "push", "jobs", "hello"), run("queue", "push", "jobs", "world")
	if got := run("queue", "pop", "jobs", "--visibility", "1m"); got != "id="+id1+" attempt=1\nhello" {
		t.Fatalf("pop = %q (pushed %s)", got, id1)
	}
	// The popping command has exited: its detached delivery is still in flight.
	if got := run("queue", "ls", "jobs"); !strings.HasPrefix(got, "ready=1 in-flight=1 consumers=0") || !strings.Contains(got, "detached") {
		t.Fatalf("ls after pop:\n%s", got)
	}
	run("queue", "nack", "jobs", id1)
	if got := run("queue", "pop", "jobs", "--ack"); got != "id="+id1+" attempt=2\nhello" {
		t.Fatalf("pop after nack = %q", got)
	}
	if got := run("queue", "pop", "jobs"); got != "id="+id2+" attempt=1\nworld" {
		t.Fatalf("second pop = %q", got)
	}
	run("queue", "ack", "jobs", id2)
	if got := run("queue", "ls", "jobs"); got != "ready=0 in-flight=0 consumers=0 bytes=0" {
		t.Fatalf("ls after acks: %q", got)
	}
	pop := exec.Command(binary, "--endpoints", eps, "queue", "pop", "jobs")
	pop.Dir = dir
	if b, err := pop.CombinedOutput(); err == nil || !strings.Contains(string(b), "queue is empty") {
		t.Fatalf("pop on an empty queue: %v %s", err, b)
	}
	waiter := start("queue", "pop", "jobs", "--wait", "--ack")
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(run("queue", "ls", "jobs"), "consumers=1"); {
		if time.Now().After(deadline) {
			t.Fatal("pop --wait never registered as a consumer")
		}
		time.Sleep(50 * time.Millisecond)
	}
	notDone(waiter, "pop --wait on an empty queue")
	id3 := run("queue", "push", "jobs", "late")
	if got := wait(waiter, "pop --wait"); got != "id="+id3+" attempt=1\nlate" {
		t.Fatalf("pop --wait = %q", got)
	}
	// Simple barrier: waiters block until it is removed.
	run("barrier", "set", "gate")
	bw := start("barrier", "wait", "gate")
	notDone(bw, "barrier wait on a set barrier")
	run("barrier", "rm", "gate")
	wait(bw, "barrier wait")
	// Double barrier: two processes run their command between enter and
	// leave; the first does not run it before the second has entered.
	r1 := start("barrier", "run", "phase", "2", "--", "echo", "one")
	notDone(r1, "barrier run with 1 of 2 parties")
	if got := r1.out.String(); got != "" {
		t.Fatalf("command ran before the barrier opened: %q", got)
	}
	r2 := start("barrier", "run", "phase", "2", "--", "echo", "two")
	if got := wait(r1, "barrier run 1") + wait(r2, "barrier run 2"); got != "onetwo" {
		t.Fatalf("barrier run output %q", got)
	}
	if got := run("barrier", "stat", "phase"); got != "set=false parties=0 open=false entered=0 leaving=0" {
		t.Fatalf("barrier after the round: %q", got)
	}
}

// syncBuffer collects a process's output; readable while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// checkDevDashboard fetches the dashboard dev printed without a client
// certificate, trusting dev's CA under dir/data/dev/tls.
func checkDevDashboard(t *testing.T, dir, url string) {
	t.Helper()
	if !strings.HasPrefix(url, "https://127.0.0.1:") {
		t.Fatalf("dev printed no dashboard address (got %q)", url)
	}
	pool, err := pki.LoadPool(filepath.Join(dir, "data", "dev", "tls", pki.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer cl.CloseIdleConnections()
	for path, want := range map[string]int{"": 200, "dashboard/state": 200, "status": 403} {
		resp, err := cl.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || (path == "" && !strings.Contains(string(b), "<title>Meridian dashboard</title>")) {
			t.Errorf("GET %s%s without a client certificate: %d, want %d\n%.200s", url, path, resp.StatusCode, want, b)
		}
	}
}

// devTLS is the client TLS configuration of a test cluster whose dev PKI
// is in dir/tls.
func devTLS(t testing.TB, dir string) *tls.Config {
	t.Helper()
	tc, err := client.DevTLS(filepath.Join(dir, "tls"))
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// cliEnv makes the CLI use the dev PKI in dir/tls (its admin client
// certificate).
func cliEnv(dir string) []string {
	d := filepath.Join(dir, "tls")
	return append(os.Environ(), "MERIDIAN_CACERT="+filepath.Join(d, pki.CAFile),
		"MERIDIAN_CERT="+filepath.Join(d, pki.ClientFile), "MERIDIAN_KEY="+filepath.Join(d, pki.ClientKeyFile))
}
