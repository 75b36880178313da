//go:build compat

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meridian-coord/meridian/internal/server"
)

// TestKazoo drives a 3-process cluster through its ZooKeeper ports with
// kazoo (tests/compat/kazoo_smoke.py). `make test` provides the pinned
// Python environment (scripts/pyenv.sh) and MERIDIAN_PYTHON.
func TestKazoo(t *testing.T) {
	py := os.Getenv("MERIDIAN_PYTHON")
	if py == "" {
		t.Fatal("MERIDIAN_PYTHON is not set: run through `make test` (it prepares .venv)")
	}
	dir := t.TempDir()
	ports := freePorts(t, 9)
	var members []server.Member
	var zkAddrs []string
	for i := 0; i < 3; i++ {
		m := server.Member{ID: uint64(i + 1), Region: "local", Zone: "z",
			Peer: fmt.Sprintf("127.0.0.1:%d", ports[3*i]), GRPC: fmt.Sprintf("127.0.0.1:%d", ports[3*i+1]),
			ZK: fmt.Sprintf("127.0.0.1:%d", ports[3*i+2])}
		members = append(members, m)
		zkAddrs = append(zkAddrs, m.ZK)
	}
	for i := 0; i < 3; i++ {
		cfg := server.Config{ID: uint64(i + 1), DataDir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)), Members: members}
		p := filepath.Join(dir, fmt.Sprintf("n%d.yaml", i+1))
		if err := cfg.WriteFile(p); err != nil {
			t.Fatal(err)
		}
		startServer(t, p, filepath.Join(dir, fmt.Sprintf("n%d.log", i+1)))
	}
	script, _ := filepath.Abs("../../tests/compat/kazoo_smoke.py")
	out, err := exec.Command(py, script, strings.Join(zkAddrs, ",")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "KAZOO SMOKE OK") {
		t.Fatalf("kazoo smoke failed: %v\n%s", err, out)
	}
}
