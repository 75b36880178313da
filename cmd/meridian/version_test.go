package main

import (
	"encoding/json"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/meridian-coord/meridian/internal/server"
)

// TestVersionCommand: `meridian version` needs no cluster and prints the
// binary's version, Go release and ZooKeeper protocol version, as text and
// as JSON.
func TestVersionCommand(t *testing.T) {
	out, err := exec.Command(binary, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("meridian version: %v\n%s", err, out)
	}
	for _, want := range []string{"meridian " + server.Version, "go " + runtime.Version(), "zookeeper protocol " + server.ZooKeeperVersion} {
		if !strings.Contains(string(out), want) {
			t.Errorf("meridian version:\n%s\nwant %q", out, want)
		}
	}
	out, err = exec.Command(binary, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("meridian version -o json: %v", err)
	}
	var got map[string]string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("meridian version -o json: %v\n%s", err, out)
	}
	want := map[string]string{"version": server.Version, "go_version": runtime.Version(), "zookeeper_version": server.ZooKeeperVersion}
	if len(got) != len(want) {
		t.Errorf("meridian version -o json = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("meridian version -o json: %s = %q, want %q", k, got[k], v)
		}
	}
}
