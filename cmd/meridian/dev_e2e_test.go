package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
