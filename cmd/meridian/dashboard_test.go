//go:build browser

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/server"
)

// TestDashboardInChromium loads every view of the dashboard of a real
// cluster (four server processes in two regions, a regional keyspace, a
// held lock with a waiter, a queue, barriers, sessions and a watch) in
// headless Chromium, Debian's package (CHROMIUM: scripts/install-chromium.sh
// provides it; `make test` sets it), and asserts what each view must show
// in the DOM the page built. It also takes a screenshot of each view:
// into MERIDIAN_DASHBOARD_SCREENSHOTS when set (docs/dashboard is where
// the documentation's are), else into a temporary directory.
func TestDashboardInChromium(t *testing.T) {
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		t.Fatal("CHROMIUM is not set: run through `make test` (scripts/install-chromium.sh provides it)")
	}
	shots := os.Getenv("MERIDIAN_DASHBOARD_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	dir := t.TempDir()
	ports := freePorts(t, 12)
	region := map[uint64]string{1: "eu-west", 2: "eu-west", 3: "eu-west", 4: "us-east"}
	zone := map[uint64]string{1: "eu-west-a", 2: "eu-west-b", 3: "eu-west-c", 4: "us-east-a"}
	var members []server.Member
	for i := 0; i < 4; i++ {
		id := uint64(i + 1)
		members = append(members, server.Member{ID: id, Region: region[id], Zone: zone[id],
			Peer: fmt.Sprintf("127.0.0.1:%d", ports[3*i]), GRPC: fmt.Sprintf("127.0.0.1:%d", ports[3*i+1]),
			HTTP: fmt.Sprintf("127.0.0.1:%d", ports[3*i+2])})
	}
	var grpc []string
	for _, m := range members {
		startMember(t, dir, server.Config{ID: m.ID, DataDir: filepath.Join(dir, fmt.Sprintf("n%d", m.ID)), Members: members,
			DashboardOpenOnLoopback: true})
		grpc = append(grpc, m.GRPC)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	newClient := func(eps ...string) *client.Client {
		c, err := client.New(ctx, client.Config{Endpoints: eps, KeepEndpointOrder: true, TLS: devTLS(t, dir), RequestTimeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("client: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	holder, waiter := newClient(grpc...), newClient(grpc...)
	for {
		_, err := holder.CreateKeyspace(ctx, "/x", "eu-west", "zone")
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("create keyspace /x: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	lease, err := holder.Lock(ctx, "orders/lock", client.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go waiter.Lock(ctx, "orders/lock", client.LockOptions{})
	for i := 0; i < 3; i++ {
		if _, err := holder.Queue("emails").Push(ctx, []byte("hello")); err != nil {
			t.Fatal(err)
		}
	}
	if err := holder.Barrier("deploy").Set(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := holder.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The leader's dashboard: the members report their round trips to
	// the leader, so it has the whole matrix. Watches are counted where
	// they are registered: the watcher's session is on the leader.
	base := fmt.Sprintf("https://%s/", members[st.GetLeaderId()-1].HTTP)
	leader := fmt.Sprint(st.GetLeaderId())
	watcher := newClient(members[st.GetLeaderId()-1].GRPC)
	go watcher.DoubleBarrier("rendezvous", 3).Enter(ctx)
	if _, _, err := watcher.Create(ctx, "/x/config", []byte("v1"), client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := watcher.GetW(ctx, "/x/config"); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []byte {
		t.Helper()
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// --ignore-certificate-errors: the dev CA is not in Chromium's
		// store; --user-data-dir: nothing shared with another run.
		all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--ignore-certificate-errors",
			"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=3000"}, args...)
		cmd := exec.CommandContext(c, chromium, all...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
		}
		return out
	}
	views := []struct {
		name  string
		check func(d *dom) error
	}{
		{"members", func(d *dom) error {
			for id := uint64(1); id <= 4; id++ {
				m := d.find("data-member-id", fmt.Sprint(id))
				if m == nil {
					return fmt.Errorf("member %d not shown", id)
				}
				if m.attr("data-region") != region[id] || m.attr("data-zone") != zone[id] || m.attr("data-role") != "voter" {
					return fmt.Errorf("member %d shown as %s", id, m.text())
				}
				if d.within("data-region", region[id], m) == nil || d.within("data-zone", zone[id], m) == nil {
					return fmt.Errorf("member %d not under its region and zone", id)
				}
				isLeader := m.attr("data-leader") == "true" && m.child("data-leader-marker", "") != nil && strings.Contains(m.text(), "leader")
				if isLeader != (fmt.Sprint(id) == leader) {
					return fmt.Errorf("member %d: leader marker %v, leader is %s", id, isLeader, leader)
				}
			}
			return counts(d)
		}},
		{"latency", func(d *dom) error {
			for from := 1; from <= 4; from++ {
				for to := 1; to <= 4; to++ {
					if from == to {
						continue
					}
					c := d.findAll("data-from", fmt.Sprint(from), "data-to", fmt.Sprint(to))
					if c == nil || c.attr("data-rtt-us") == "" || !strings.HasSuffix(c.text(), " ms") {
						return fmt.Errorf("round trip %d→%d not shown", from, to)
					}
				}
			}
			if d.find("data-group", "0") == nil {
				return fmt.Errorf("no leader change of the root group in the history")
			}
			return nil
		}},
		{"keyspaces", func(d *dom) error {
			k := d.find("data-keyspace", "/x")
			if k == nil || k.child("data-home", "eu-west") == nil || !strings.Contains(k.text(), "zone") {
				return fmt.Errorf("keyspace /x at home in eu-west not shown")
			}
			return nil
		}},
		{"coordination", func(d *dom) error {
			l := d.find("data-lock", "orders/lock")
			if l == nil {
				return fmt.Errorf("lock orders/lock not shown")
			}
			h := l.child("data-holder-session", fmt.Sprintf("0x%x", holder.SessionID()))
			if h == nil || h.attr("data-token") != fmt.Sprint(lease.Token) || !strings.Contains(h.text(), fmt.Sprintf("token %d", lease.Token)) {
				return fmt.Errorf("holder 0x%x with token %d not shown: %s", holder.SessionID(), lease.Token, l.text())
			}
			if l.child("data-waiter-session", fmt.Sprintf("0x%x", waiter.SessionID())) == nil {
				return fmt.Errorf("waiter 0x%x not shown: %s", waiter.SessionID(), l.text())
			}
			q := d.find("data-queue", "emails")
			if q == nil || q.child("data-ready", "3") == nil {
				return fmt.Errorf("queue emails with 3 ready not shown")
			}
			if d.find("data-barrier", "deploy") == nil {
				return fmt.Errorf("barrier deploy not shown")
			}
			if b := d.find("data-double-barrier", "rendezvous"); b == nil || !strings.Contains(b.text(), "waiting") {
				return fmt.Errorf("double barrier rendezvous not shown")
			}
			return counts(d)
		}},
	}
	for _, v := range views {
		var last error
		for deadline := time.Now().Add(30 * time.Second); ; {
			d, err := parseDOM(run("--dump-dom", base+"#"+v.name))
			if err == nil {
				if got := d.root.attr("data-rendered"); got != v.name {
					err = fmt.Errorf("view %q rendered, want %s", got, v.name)
				} else {
					err = v.check(d)
				}
			}
			if err == nil {
				break
			}
			if err.Error() != fmt.Sprint(last) {
				t.Logf("%s: %v (retrying)", v.name, err)
			}
			last = err
			if time.Now().After(deadline) {
				t.Fatalf("view %s: %v", v.name, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
		png := filepath.Join(shots, v.name+".png")
		run("--screenshot="+png, "--window-size=1400,1000", "--hide-scrollbars", base+"#"+v.name)
		if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Fatalf("screenshot of %s: %v", v.name, err)
		}
	}
}

// counts checks the summary every view shows: at least this test's three
// sessions and its watch, the lock, the queue, the barriers.
func counts(d *dom) error {
	for k, least := range map[string]int{"sessions": 3, "watches": 1, "locks": 1, "queues": 1, "barriers": 2} {
		var n int
		s := d.find("data-count", k)
		if s != nil {
			s = s.child("class", "v")
		}
		if s == nil {
			return fmt.Errorf("count %s not shown", k)
		}
		if _, err := fmt.Sscan(s.text(), &n); err != nil || n < least {
			return fmt.Errorf("count %s: %q, want at least %d", k, s.text(), least)
		}
	}
	return nil
}

// dom is a page as Chromium dumped it; node helpers find elements by
// attribute.
type dom struct{ root node }

type node struct{ *html.Node }

func parseDOM(b []byte) (*dom, error) {
	doc, err := html.Parse(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	d := &dom{}
	var body func(n *html.Node)
	body = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "body" {
			d.root = node{n}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			body(c)
		}
	}
	body(doc)
	if d.root.Node == nil {
		return nil, fmt.Errorf("no body in the DOM")
	}
	return d, nil
}

func (n node) attr(k string) string {
	for _, a := range n.Attr {
		if a.Key == k {
			return a.Val
		}
	}
	return ""
}

func (n node) has(k string) bool {
	for _, a := range n.Attr {
		if a.Key == k {
			return true
		}
	}
	return false
}

func (n node) text() string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(x *html.Node) {
		if x.Type == html.TextNode {
			b.WriteString(x.Data)
		}
		for c := x.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n.Node)
	return strings.TrimSpace(b.String())
}

// child is the first element below n whose attributes have these values
// (pairs of name and value).
func (n node) child(kv ...string) *node {
	var found *node
	var walk func(*html.Node)
	walk = func(x *html.Node) {
		for c := x.FirstChild; c != nil && found == nil; c = c.NextSibling {
			if c.Type == html.ElementNode {
				ok := true
				for i := 0; i+1 < len(kv); i += 2 {
					ok = ok && (node{c}).has(kv[i]) && (node{c}).attr(kv[i]) == kv[i+1]
				}
				if ok {
					found = &node{c}
					return
				}
			}
			walk(c)
		}
	}
	walk(n.Node)
	return found
}

func (d *dom) find(k, v string) *node     { return d.root.child(k, v) }
func (d *dom) findAll(kv ...string) *node { return d.root.child(kv...) }

// within is the nearest ancestor of n with attribute k = v, if any.
func (d *dom) within(k, v string, n *node) *node {
	for p := n.Parent; p != nil; p = p.Parent {
		if (node{p}).attr(k) == v {
			return &node{p}
		}
	}
	return nil
}
