package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/pki"
	"github.com/meridian-coord/meridian/internal/server"
)

// TestMemberAddPromoteRemove grows a 3-process cluster by a fourth server
// started with --join, through the CLI a user would type: add it as a
// learner, promote it, write through it, remove it.
func TestMemberAddPromoteRemove(t *testing.T) {
	dir := t.TempDir()
	ports := freePorts(t, 8)
	var members []server.Member
	for i := 0; i < 4; i++ {
		members = append(members, server.Member{ID: uint64(i + 1), Region: "local", Zone: "z",
			Peer: fmt.Sprintf("127.0.0.1:%d", ports[2*i]), GRPC: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])})
	}
	members[3].Region = "far"
	// newcomer starts server id on the fourth member's addresses with --join;
	// its file names itself and the members it can reach.
	newcomer := func(id uint64) *proc {
		m := members[3]
		m.ID = id
		cfg := server.Config{ID: id, DataDir: filepath.Join(dir, fmt.Sprintf("n%d", id)), Members: append(members[:3:3], m),
			TickMs: 50, ElectionTicks: 10, SessionTickMs: 500}
		p, _ := startMember(t, dir, cfg, "--join")
		return p
	}
	for i := 0; i < 3; i++ {
		cfg := server.Config{ID: uint64(i + 1), DataDir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)), Members: members[:3],
			TickMs: 50, ElectionTicks: 10, SessionTickMs: 500}
		startMember(t, dir, cfg)
	}
	p4 := newcomer(4)
	eps := members[0].GRPC + "," + members[1].GRPC + "," + members[2].GRPC
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"--endpoints", eps, "--timeout", "20s"}, args...)...)
		cmd.Env = cliEnv(dir)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("meridian %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: strings.Split(eps, ","), SessionTimeout: 5 * time.Second, RequestTimeout: 10 * time.Second, TLS: devTLS(t, dir)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	leaderOf(t, c)
	if _, _, err := c.Create(ctx, "/before", []byte("x"), client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Without an admin identity (the CA only: no client certificate) the
	// CLI cannot change membership, and nothing changes.
	noAdmin := exec.Command(binary, "--endpoints", eps, "--timeout", "20s", "--cacert", filepath.Join(dir, "tls", pki.CAFile),
		"member", "add", "4", "--peer", members[3].Peer, "--grpc", members[3].GRPC, "--learner")
	if b, err := noAdmin.CombinedOutput(); err == nil || !strings.Contains(string(b), "admin identity") {
		t.Fatalf("member add without an admin identity: %v\n%s", err, b)
	}
	// Nor can a plaintext client talk to the TLS port at all.
	if b, err := exec.Command(binary, "--endpoints", eps, "--timeout", "3s", "--insecure", "ls", "/").CombinedOutput(); err == nil {
		t.Fatalf("plaintext CLI against a TLS port succeeded:\n%s", b)
	}
	if out := cli("member", "list"); strings.Contains(out, members[3].Peer) {
		t.Fatalf("refused member add changed the membership:\n%s", out)
	}

	// By hand: learner, voter, learner again, gone.
	out := cli("member", "add", "4", "--peer", members[3].Peer, "--grpc", members[3].GRPC, "--region", "far", "--learner")
	if !strings.Contains(out, "learner") || !strings.Contains(out, "far") {
		t.Fatalf("member add:\n%s", out)
	}
	// Adding it again is refused (it used to make it a voter in region
	// default); update changes its location, not its role.
	again := exec.Command(binary, "--endpoints", eps, "--timeout", "20s", "member", "add", "4", "--peer", members[3].Peer, "--grpc", members[3].GRPC)
	again.Env = cliEnv(dir)
	if b, err := again.CombinedOutput(); err == nil || !strings.Contains(string(b), "member 4 already exists (learner") {
		t.Fatalf("member add of an existing id: %v\n%s", err, b)
	}
	out = cli("member", "update", "4", "--zone", "moved", "--http", "127.0.0.1:1")
	if row := memberRow(out, "4"); len(row) < 5 || row[1] != "learner" || row[2] != "far" || row[3] != "moved" {
		t.Fatalf("member update 4 --zone moved:\n%s", out)
	}
	out = cli("member", "promote", "4")
	if strings.Contains(out, "learner") {
		t.Fatalf("member promote:\n%s", out)
	}
	c4, err := client.New(ctx, client.Config{Endpoints: []string{members[3].GRPC}, SessionTimeout: 5 * time.Second, RequestTimeout: 10 * time.Second, TLS: devTLS(t, dir)})
	if err != nil {
		t.Fatal(err)
	}
	// The newcomer serves what was written before it joined and takes writes.
	if data, _, err := c4.Get(ctx, "/before"); err != nil || string(data) != "x" {
		t.Fatalf("read on the new member: %q %v", data, err)
	}
	if _, _, err := c4.Create(ctx, "/via-4", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c4.Close()
	out = cli("member", "demote", "4")
	if !strings.Contains(out, "learner") {
		t.Fatalf("member demote:\n%s", out)
	}
	out = cli("member", "remove", "4")
	if strings.Contains(out, members[3].Peer) {
		t.Fatalf("member remove:\n%s", out)
	}
	p4.cmd.Process.Kill()
	<-p4.done

	// Back as member 5 (raft does not reuse a removed id), promoted by the
	// leader once caught up.
	newcomer(5)
	_ = cli("member", "add", "5", "--peer", members[3].Peer, "--grpc", members[3].GRPC, "--region", "far", "--promote")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out = cli("member", "list")
		if strings.Count(out, "voter") == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("member 5 not promoted:\n%s", out)
		}
	}
	// Asked through any member (a follower asks the leader again), the
	// list shows how far every member's log matches the leader's.
	for _, m := range members[:3] {
		cmd := exec.Command(binary, "--endpoints", m.GRPC, "--timeout", "20s", "member", "list")
		cmd.Env = cliEnv(dir)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("member list via %s: %v\n%s", m.GRPC, err, b)
		}
		rows := 0
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || f[0] == "ID" || f[0] == "configuration" {
				continue
			}
			rows++
			if f[len(f)-1] == "0" {
				t.Fatalf("member list via %s: no MATCH for member %s:\n%s", m.GRPC, f[0], b)
			}
		}
		if rows != 4 {
			t.Fatalf("member list via %s: %d members:\n%s", m.GRPC, rows, b)
		}
	}
	if _, _, err := c.Create(ctx, "/after", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// memberRow returns the fields of member id's row in member list output.
func memberRow(out, id string) []string {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == id {
			return f
		}
	}
	return nil
}
