package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meridian-coord/meridian/internal/server"
)

// TestDevRefusesTakenPort: with one of its ports taken, dev fails before
// starting anything, naming the port and the process holding it.
func TestDevRefusesTakenPort(t *testing.T) {
	var l net.Listener
	var base int
	for base = 1000 + os.Getpid()%500; base < 1600; base += 10 {
		_, grpc, _, _ := server.DevPorts(2, base)
		var err error
		if l, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", grpc)); err == nil {
			break
		}
	}
	if l == nil {
		t.Fatal("no port to take")
	}
	defer l.Close()
	_, grpc, _, _ := server.DevPorts(2, base)
	cmd := exec.Command(binary, "dev", "--base-port", fmt.Sprint(base), "--data", filepath.Join(t.TempDir(), "dev"))
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("dev with a port taken exited 0:\n%s", out)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Signal(syscall.SIGINT)
		<-done
		t.Fatalf("dev kept running with a port taken:\n%s", out)
	}
	got := out.String()
	if want := fmt.Sprintf("node 2's gRPC port %d is taken by pid %d", grpc, os.Getpid()); !strings.Contains(got, want) {
		t.Errorf("dev output:\n%s\nwant %q", got, want)
	}
	if strings.Contains(got, "endpoints:") || strings.Contains(got, "pid ") && strings.Contains(got, "node 1  pid") {
		t.Errorf("dev started nodes:\n%s", got)
	}
}

// TestDevRestartsNode: a node killed from outside stays down, dev says
// so, restart N starts it again under dev, and Ctrl-C then stops it with
// the others (before, a node restarted by hand outlived dev).
func TestDevRestartsNode(t *testing.T) {
	base := 1600 + os.Getpid()%400
	cmd := exec.Command(binary, "dev", "--nodes", "3", "--base-port", fmt.Sprint(base), "--data", filepath.Join(t.TempDir(), "dev"))
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-done
	}()
	waitFor := func(what string, cond func(string) bool) string {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if got := out.String(); cond(got) {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s; dev printed:\n%s", what, out)
			}
		}
	}
	got := waitFor("the endpoints", func(s string) bool { return strings.Contains(s, "endpoints: ") })
	var pid int
	for _, line := range strings.Split(got, "\n") {
		if f := strings.Fields(line); len(f) > 3 && f[0] == "node" && f[1] == "2" && f[2] == "pid" {
			pid, _ = strconv.Atoi(f[3])
		}
	}
	if pid == 0 {
		t.Fatalf("no pid for node 2:\n%s", got)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor("node 2's exit", func(s string) bool { return strings.Contains(s, "node 2 exited") })
	fmt.Fprintln(stdin, "restart 2")
	got = waitFor("node 2's restart", func(s string) bool { return strings.Contains(s, "node 2 restarted  pid ") })
	_, after, _ := strings.Cut(got, "node 2 restarted  pid ")
	pid2, err := strconv.Atoi(strings.Fields(after)[0])
	if err != nil || pid2 == pid {
		t.Fatalf("restarted pid %q: %v", after, err)
	}
	_, grpc, _, _ := server.DevPorts(2, base)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", grpc)); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 2 does not listen after its restart:\n%s", out)
		}
	}
	fmt.Fprintln(stdin, "restart 9")
	waitFor("the refusal of an unknown node", func(s string) bool { return strings.Contains(s, `unknown command "restart 9"`) })
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatalf("dev exited with %v:\n%s", err, out)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("dev did not stop:\n%s", out)
	}
	if err := syscall.Kill(pid2, 0); err == nil {
		t.Fatalf("the restarted node (pid %d) outlived dev", pid2)
	}
}
