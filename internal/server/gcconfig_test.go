package server

import (
	"os"
	"path/filepath"
	"testing"
)

// TestGCSettingsInConfig: gc_percent and memory_limit_mib are read from the
// YAML config, and a negative one is refused rather than taken as a default.
func TestGCSettingsInConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(extra string) string {
		p := filepath.Join(dir, "c.yaml")
		body := "id: 1\ndata_dir: " + dir + "\ninsecure: true\nmembers:\n  - {id: 1, peer: \"127.0.0.1:1\", grpc: \"127.0.0.1:2\"}\n" + extra
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := LoadConfig(write("gc_percent: 60\nmemory_limit_mib: 900\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.GCPercent != 60 || c.MemoryLimitMiB != 900 {
		t.Fatalf("gc_percent %d, memory_limit_mib %d", c.GCPercent, c.MemoryLimitMiB)
	}
	if c, err = LoadConfig(write("")); err != nil || c.GCPercent != 0 || c.MemoryLimitMiB != 0 {
		t.Fatalf("absent: %+v, %v", c, err)
	}
	for _, bad := range []string{"gc_percent: -1\n", "memory_limit_mib: -5\n"} {
		if _, err := LoadConfig(write(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
