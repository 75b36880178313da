package tree

import (
	"fmt"
	"runtime"
	"testing"
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
// a million 100-byte znodes under one parent (bytes/znode), the figure the
// scale benchmark's RSS per znode is mostly made of. The ns/op is the
// fill's time per create. Run with -benchtime=1x.
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
		b.ReportMetric(float64(after-before)/n, "heapB/znode")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/create")
		runtime.KeepAlive(tr)
	}
}
