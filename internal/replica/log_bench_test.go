package replica

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkLogWrites: three members on real disks and loopback TCP, 64
// proposers writing 1 KB values through the leader, the default snapshot
// and compaction settings. Besides the time a write, it reports what the
// members' stores wrote a write: flushed tables (flushB/op) and compaction
// output (compactB/op), summed over the members. The log is truncated
// behind each snapshot, so each byte of it compacted before that is work
// thrown away. Run long enough for several snapshots (32 MiB of entries
// each): -benchtime=100000x.
func BenchmarkLogWrites(b *testing.B) {
	c := newCluster(b, 3, nil)
	lead := c.leader()
	val := strings.Repeat("v", 1000)
	stores := func() (flushed, compacted uint64) {
		for _, r := range c.reps {
			t := r.disk.db.Metrics().Total()
			flushed += t.TableBytesFlushed - t.TableBytesIn
			compacted += t.TableBytesCompacted
		}
		return flushed, compacted
	}
	f0, c0 := stores()
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if err := c.reps[lead].Propose(context.Background(), fmt.Appendf(nil, "k%d=%s", w, val)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	f1, c1 := stores()
	b.ReportMetric(float64(f1-f0)/float64(b.N), "flushB/op")
	b.ReportMetric(float64(c1-c0)/float64(b.N), "compactB/op")
}
