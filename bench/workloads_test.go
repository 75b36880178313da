package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// countingKV counts the calls it gets.
type countingKV struct {
	puts, gets atomic.Int32
	keys       chan string
}

func (k *countingKV) Create(context.Context, string, []byte) error { return nil }
func (k *countingKV) Put(_ context.Context, key string, _ []byte) error {
	k.puts.Add(1)
	k.keys <- key
	return nil
}
func (k *countingKV) Get(_ context.Context, key string) ([]byte, error) {
	k.gets.Add(1)
	k.keys <- key
	return nil, nil
}
func (k *countingKV) Close() {}

// TestFirstCallsBeforeTheWindow: before a throughput window every client
// makes exactly one call of the point's kind, to one of the point's keys.
func TestFirstCallsBeforeTheWindow(t *testing.T) {
	key := func(k int) string { return fmt.Sprintf("/tp-k%d", k) }
	for _, kind := range []string{"write", "read"} {
		kvs := make([]KV, 3)
		counts := make([]*countingKV, 3)
		for i := range kvs {
			counts[i] = &countingKV{keys: make(chan string, 4)}
			kvs[i] = counts[i]
		}
		firstCalls(kvs, kind, key, []byte("v"))
		for i, c := range counts {
			puts, gets := c.puts.Load(), c.gets.Load()
			if want := map[string][2]int32{"write": {1, 0}, "read": {0, 1}}[kind]; puts != want[0] || gets != want[1] {
				t.Errorf("%s: client %d made %d puts and %d gets, want %v", kind, i, puts, gets, want)
			}
			if k := <-c.keys; k != key(i) {
				t.Errorf("%s: client %d called on %s, want %s", kind, i, k, key(i))
			}
		}
	}
}
