package tree

import (
	"fmt"
	"io"
	"runtime"
	"testing"

	"github.com/meridian-coord/meridian/internal/testutil"
)

// fillScale applies n creates of 100 zero bytes under /scale, the shape of
// the scale benchmark (bench/scale.go: "/scale/n%08d", open ACL).
func fillScale(tb testing.TB, tr *Tree, n int) {
	tb.Helper()
	zxid := int64(1)
	apply := func(path string) {
		_, _ = tr.Apply(zxid, &Command{TimeMs: 1_764_000_000_000 + zxid, Op: Op{
			Type: OpCreate, Path: path, Data: make([]byte, 100), ACL: OpenACL, Mode: ModePersistent,
		}})
		zxid++
	}
	apply("/scale")
	for i := 0; i < n; i++ {
		apply(fmt.Sprintf("/scale/n%08d", i))
	}
}

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkTreeMillionZnodes reports the live heap per znode of a tree of
// a million 100-byte znodes under one parent (heapB/znode), the figure the
// scale benchmark's RSS per znode is mostly made of, and the CPU time of
// one full collection with that tree live (gcCPU-ms: what the collector
// spends a cycle on it; how often cycles come is GOGC's business). The
// ns/op is the fill's time per create. Run with -benchtime=1x.
func BenchmarkTreeMillionZnodes(b *testing.B) {
	const n = 1_000_000
	for i := 0; i < b.N; i++ {
		before := heapInUse()
		tr := New()
		b.StartTimer()
		fillScale(b, tr, n)
		b.StopTimer()
		after := heapInUse()
		if tr.NodeCount() != n+4 {
			b.Fatalf("%d nodes", tr.NodeCount())
		}
		const cycles = 5
		start := testutil.ProcessCPU()
		for range cycles {
			runtime.GC()
		}
		b.ReportMetric(float64(testutil.ProcessCPU()-start)/cycles/1e6, "gcCPU-ms")
		b.ReportMetric(float64(after-before)/n, "heapB/znode")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/create")
		runtime.KeepAlive(tr)
	}
}

// BenchmarkSnapshotMillionZnodes is one snapshot of a million 100-byte
// znodes (a View, sorted and written), the work a member does every
// SnapshotEntries writes once the tree is that large.
func BenchmarkSnapshotMillionZnodes(b *testing.B) {
	tr := New()
	fillScale(b, tr, 1_000_000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n, err := tr.View().WriteTo(io.Discard)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(n)
	}
}
