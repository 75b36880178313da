package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/fsm"
	"github.com/meridian-coord/meridian/internal/server"
)

// startCLICluster starts three server processes with the dev PKI in
// dir/tls and returns their gRPC endpoints, comma-separated. Each also
// listens on an HTTP port (its member's http_addr).
func startCLICluster(t *testing.T, dir string) string {
	t.Helper()
	ports := freePorts(t, 9)
	var members []server.Member
	for i := 0; i < 3; i++ {
		members = append(members, server.Member{ID: uint64(i + 1), Region: "local", Zone: "z",
			Peer: fmt.Sprintf("127.0.0.1:%d", ports[3*i]), GRPC: fmt.Sprintf("127.0.0.1:%d", ports[3*i+1]),
			HTTP: fmt.Sprintf("127.0.0.1:%d", ports[3*i+2])})
	}
	var eps []string
	for i := 0; i < 3; i++ {
		cfg := server.Config{ID: uint64(i + 1), DataDir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)), Members: members,
			TickMs: 50, ElectionTicks: 10, SessionTickMs: 500, ListenHTTP: members[i].HTTP}
		startMember(t, dir, cfg)
		eps = append(eps, members[i].GRPC)
	}
	// The CLI fails at once while nothing listens: wait for a leader.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: eps, TLS: devTLS(t, dir)})
	if err != nil {
		t.Fatal(err)
	}
	leaderOf(t, c)
	c.Close()
	return strings.Join(eps, ",")
}

// cliRun runs the CLI against eps and returns its combined output and
// exit status.
func cliRun(t *testing.T, dir, eps string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"--endpoints", eps, "--timeout", "20s"}, args...)...)
	cmd.Env = cliEnv(dir)
	b, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return strings.TrimSpace(string(b)), exit.ExitCode()
	case err != nil:
		t.Fatalf("meridian %v: %v", args, err)
	}
	return strings.TrimSpace(string(b)), 0
}

// TestCLIAgainstCluster runs the CLI's data commands against one
// 3-process cluster: errors that say what and why, rm -r and create -p,
// complete JSON, the consistency flag, observe's exit on Ctrl-C.
func TestCLIAgainstCluster(t *testing.T) {
	dir := t.TempDir()
	eps := startCLICluster(t, dir)
	ok := func(args ...string) string {
		t.Helper()
		out, code := cliRun(t, dir, eps, args...)
		if code != 0 {
			t.Fatalf("meridian %v: exit %d\n%s", args, code, out)
		}
		return out
	}
	fails := func(args ...string) string {
		t.Helper()
		out, code := cliRun(t, dir, eps, args...)
		if code == 0 {
			t.Fatalf("meridian %v succeeded:\n%s", args, out)
		}
		return out
	}
	ok("create", "/app", "x")

	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{[]string{"get", "app"}, []string{"invalid path", `"app"`, "must start with /"}},
			{[]string{"create", "/a/b/c"}, []string{"node does not exist", "/a (an ancestor of /a/b/c) is missing", "create -p"}},
			{[]string{"set", "/app", "y", "--version", "7"}, []string{"version does not match", "expected version 7, current version 0"}},
			{[]string{"rm", "/app/none"}, []string{"node does not exist: /app/none"}},
			{[]string{"queue", "ack", "work", "N"}, []string{`item id "N"`, "want the number queue pop printed"}},
			{[]string{"counter", "c", "x"}, []string{`delta "x": want an integer`}},
		} {
			out := fails(tc.args...)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("meridian %v:\n%s\nwant it to say %q", tc.args, out, w)
				}
			}
		}
		ok("create", "/app/child")
		if out := fails("rm", "/app"); !strings.Contains(out, "node has children: /app has 1 children") || !strings.Contains(out, "rm -r") {
			t.Errorf("rm of a node with children:\n%s", out)
		}
		ok("rm", "/app/child")
	})

	t.Run("snapshot", func(t *testing.T) {
		file := filepath.Join(dir, "backup.mrd")
		ok("create", "/saved", "v")
		ok("snapshot", "save", file)
		if _, err := os.Stat(file + ".partial"); !os.IsNotExist(err) {
			t.Errorf("the partial file is left: %v", err)
		}
		var in struct {
			Groups []struct {
				Group  uint64 `json:"group"`
				Znodes int    `json:"znodes"`
				Index  uint64 `json:"index"`
				SHA256 string `json:"sha256"`
			} `json:"groups"`
			Members []struct {
				ID uint64 `json:"id"`
			} `json:"members"`
		}
		if err := json.Unmarshal([]byte(ok("-o", "json", "snapshot", "inspect", file)), &in); err != nil {
			t.Fatal(err)
		}
		if len(in.Groups) != 1 || in.Groups[0].Znodes < 3 || in.Groups[0].Index == 0 || len(in.Groups[0].SHA256) != 64 || len(in.Members) != 3 {
			t.Errorf("inspect: %+v", in)
		}
		// restore seeds a new member's empty data directory, once.
		cfgs, err := server.DevConfigs(3, 1, 3000+os.Getpid()%500, filepath.Join(dir, "restored"))
		if err != nil {
			t.Fatal(err)
		}
		conf := filepath.Join(dir, "restored-n1.yaml")
		if err := cfgs[0].WriteFile(conf); err != nil {
			t.Fatal(err)
		}
		if out := ok("snapshot", "restore", file, "--config", conf); !strings.Contains(out, "member 1 seeded from") {
			t.Errorf("restore:\n%s", out)
		}
		if out := fails("snapshot", "restore", file, "--config", conf); !strings.Contains(out, "already holds a member's state") {
			t.Errorf("a second restore into the same directory:\n%s", out)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 1
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if out := fails("snapshot", "inspect", file); !strings.Contains(out, "checksum") {
			t.Errorf("inspect of a damaged file:\n%s", out)
		}
	})

	t.Run("local-first", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := client.New(ctx, client.Config{Endpoints: strings.Split(eps, ","), TLS: devTLS(t, dir)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		lease, err := c.Lock(ctx, "jobs", client.LockOptions{LocalFirst: 3})
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Unlock(ctx)
		_, err = c.Lock(ctx, "jobs", client.LockOptions{LocalFirst: 2, TryOnly: true})
		if !errors.Is(err, client.ErrBadArguments) || !strings.Contains(err.Error(), "every acquirer of a name must give the same K") {
			t.Errorf("acquire with another K: %v", err)
		}
		out, code := cliRun(t, dir, eps, "lock", "--local-first", "2", "jobs", "--", "true")
		if code != 2 || !strings.Contains(out, "same K") {
			t.Errorf("lock --local-first 2 while held with K 3: exit %d\n%s", code, out)
		}
		out, code = cliRun(t, dir, eps, "lock", "--local-first", "2", "--permits", "3", "sem", "--", "true")
		if code != 2 || !strings.Contains(out, "local-first lock has one holder") {
			t.Errorf("lock --local-first with --permits: exit %d\n%s", code, out)
		}
	})

	t.Run("rm -r and create -p", func(t *testing.T) {
		ok("create", "-p", "/p/q/r", "deep")
		if got := ok("get", "/p/q/r"); got != "deep" {
			t.Fatalf("get after create -p = %q", got)
		}
		ok("create", "--parents", "/p/q/s") // existing parents are fine
		if got := ok("create", "-p", "-s", "/p/n/job-"); got != "/p/n/job-0000000000" {
			t.Fatalf("create -p -s = %q", got)
		}
		ok("rm", "-r", "/p")
		if out := fails("get", "/p"); !strings.Contains(out, "node does not exist") {
			t.Fatalf("/p after rm -r:\n%s", out)
		}
		if got := ok("ls", "/"); slices.Contains(strings.Split(got, "\n"), "p") {
			t.Fatalf("ls / after rm -r /p:\n%s", got)
		}
	})

	t.Run("json", func(t *testing.T) {
		ok("create", "/fresh")
		var st map[string]any
		if err := json.Unmarshal([]byte(ok("stat", "/fresh", "-o", "json")), &st); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"version", "num_children", "data_length", "cversion", "aversion", "ephemeral_owner"} {
			if v, present := st[k]; !present || v != float64(0) {
				t.Errorf("stat -o json: %s = %v (present %v)", k, v, present)
			}
		}
		if got := ok("locks", "-o", "json"); got != "[]" {
			t.Errorf("locks -o json with no locks = %q", got)
		}
		if got := ok("ls", "/fresh", "-o", "json"); got != "[]" {
			t.Errorf("ls -o json of a leaf = %q", got)
		}
		if out := fails("stat", "/fresh", "-o", "yaml"); !strings.Contains(out, "supported formats are text, json") {
			t.Errorf("-o yaml:\n%s", out)
		}
	})

	t.Run("consistency", func(t *testing.T) {
		if got := ok("create", "--sequential", "/seq-"); !strings.HasPrefix(got, "/seq-00000") {
			t.Errorf("create --sequential = %q, want a sequential node", got)
		}
		if got := ok("get", "--consistency", "sequential", "/fresh"); got != "" {
			t.Errorf("get --consistency sequential = %q", got)
		}
		if got := ok("--sequential", "get", "/app"); !strings.HasSuffix(got, "x") {
			t.Errorf("--sequential get (the old spelling) = %q", got)
		}
	})

	t.Run("status -o json is /status", func(t *testing.T) { checkStatusJSONIsHTTPStatus(t, dir, ok("status", "-o", "json")) })

	// Every member runs this binary: the leader records its apply version
	// as the cluster's within moments of the election.
	t.Run("status shows the cluster version", func(t *testing.T) {
		want := fmt.Sprintf("cluster version: %d", fsm.ApplyVersion)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			got := ok("status")
			if slices.Contains(strings.Split(got, "\n"), want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("status never showed the line %q:\n%s", want, got)
			}
		}
	})

	t.Run("observe exits 0 on Ctrl-C", func(t *testing.T) {
		cmd := exec.Command(binary, "--endpoints", eps, "observe", "sched")
		cmd.Env = cliEnv(dir)
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "no leader"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("observe printed nothing:\n%s", out)
			}
		}
		cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("observe after SIGINT: %v\n%s", err, out)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("observe did not stop on SIGINT")
		}
	})
}

// TestCLIUnreachable: with every endpoint refusing connections the CLI
// fails at once (it waited out its 10 s timeout), naming every endpoint and
// why; status exits non-zero.
func TestCLIUnreachable(t *testing.T) {
	dir := t.TempDir()
	ports := freePorts(t, 2) // free, so nothing listens: refused
	eps := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", ports[0], ports[1])
	for _, args := range [][]string{{"get", "/app"}, {"status"}} {
		start := time.Now()
		cmd := exec.Command(binary, append([]string{"--endpoints", eps, "--insecure"}, args...)...)
		cmd.Dir = dir
		b, err := cmd.CombinedOutput()
		took := time.Since(start)
		if err == nil {
			t.Errorf("meridian %v with every endpoint down succeeded:\n%s", args, b)
		}
		if took > 3*time.Second {
			t.Errorf("meridian %v took %v to fail", args, took)
		}
		for _, ep := range strings.Split(eps, ",") {
			if !strings.Contains(string(b), "dial tcp "+ep+": connect: connection refused") {
				t.Errorf("meridian %v does not say why %s failed:\n%s", args, ep, b)
			}
		}
		if strings.Contains(string(b), "outcome unknown") {
			t.Errorf("meridian %v: %s", args, b)
		}
	}
}

// checkStatusJSONIsHTTPStatus: each endpoint's object in `status -o json`
// (out) has the same fields, named the same, as its member's /status,
// and the same values for those that do not move on an idle cluster; the
// indexes only grow between the two.
func checkStatusJSONIsHTTPStatus(t *testing.T, dir, out string) {
	var rows []struct {
		Endpoint string         `json:"endpoint"`
		Error    string         `json:"error"`
		Status   map[string]any `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	if len(rows) != 3 {
		t.Fatalf("status -o json: %d rows, want 3\n%s", len(rows), out)
	}
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: devTLS(t, dir)}}
	defer cl.CloseIdleConnections()
	for _, r := range rows {
		if r.Status == nil {
			t.Fatalf("%s: %s", r.Endpoint, r.Error)
		}
		var httpAddr string
		for _, m := range r.Status["members"].([]any) {
			m := m.(map[string]any)
			if m["id"] == r.Status["member_id"] {
				httpAddr, _ = m["http_addr"].(string)
			}
		}
		resp, err := cl.Get("https://" + httpAddr + "/status")
		if err != nil {
			t.Fatal(err)
		}
		var web map[string]any
		err = json.NewDecoder(resp.Body).Decode(&web)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s/status: %d %v", httpAddr, resp.StatusCode, err)
		}
		if a, b := slices.Sorted(maps.Keys(r.Status)), slices.Sorted(maps.Keys(web)); !slices.Equal(a, b) {
			t.Errorf("member %v: status -o json fields %v, /status fields %v", r.Status["member_id"], a, b)
		}
		for _, k := range []string{"member_id", "leader_id", "term", "role", "version", "cluster_id", "tick_ms",
			"election_timeout_ms"} {
			if !reflect.DeepEqual(web[k], r.Status[k]) {
				t.Errorf("member %v: %s: /status %v, status -o json %v", r.Status["member_id"], k, web[k], r.Status[k])
			}
		}
		// A member's match index moves on between the two reads (the
		// cluster's own entries): the members agree but for it, and it
		// does not go back.
		wRest, wMatch := withoutMatch(web["members"])
		cRest, cMatch := withoutMatch(r.Status["members"])
		if !reflect.DeepEqual(wRest, cRest) {
			t.Errorf("member %v: members: /status %v, status -o json %v", r.Status["member_id"], web["members"], r.Status["members"])
		}
		for id, c := range cMatch {
			if w := wMatch[id]; w < c {
				t.Errorf("member %v: member %v's match_index: /status %v, earlier status -o json %v", r.Status["member_id"], id, w, c)
			}
		}
		for _, k := range []string{"commit_index", "applied_index", "last_index"} {
			if w, c := web[k].(float64), r.Status[k].(float64); w < c || c < 1 {
				t.Errorf("member %v: %s: /status %v, earlier status -o json %v", r.Status["member_id"], k, w, c)
			}
		}
		if id, _ := web["cluster_id"].(string); id == "" {
			t.Errorf("member %v: /status has no cluster_id", web["member_id"])
		}
		for _, m := range web["members"].([]any) {
			if role := m.(map[string]any)["role"]; role != "voter" {
				t.Errorf("member %v: role %v, want voter", m.(map[string]any)["id"], role)
			}
		}
	}
}

// withoutMatch is a status's members without their match indexes (in
// order) and those indexes by member id.
func withoutMatch(members any) (rest []map[string]any, match map[any]float64) {
	match = map[any]float64{}
	list, _ := members.([]any)
	for _, m := range list {
		m, _ := m.(map[string]any)
		match[m["id"]], _ = m["match_index"].(float64)
		r := maps.Clone(m)
		delete(r, "match_index")
		rest = append(rest, r)
	}
	return rest, match
}
