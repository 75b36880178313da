package tree

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// checkPathSort checks that sortByPath gives string comparison's order.
func checkPathSort(t *testing.T, paths []string) {
	t.Helper()
	nodes := make([]*node, len(paths))
	for i, p := range paths {
		nodes[i] = &node{}
		nodes[i].setPathData(p, []byte("data"))
	}
	sortByPath(nodes)
	want := slices.Clone(paths)
	slices.Sort(want)
	for i, n := range nodes {
		if n.path() != want[i] {
			t.Fatalf("position %d: %q, want %q (%d paths)", i, n.path(), want[i], len(paths))
		}
	}
}

// TestSortByPath: the snapshot's sort gives string order on the shapes
// that stress its levels: paths that prefix others, long shared
// prefixes, bytes past 0x7f, '/' against the bytes either side of it,
// many equal keys and ranges long enough for quicksort's depth limit.
func TestSortByPath(t *testing.T) {
	checkPathSort(t, nil)
	checkPathSort(t, []string{"/"})
	checkPathSort(t, []string{"/a/b", "/a", "/a-c", "/a.c", "/a0", "/ab", "/a/b/c", "/a/bc", "/", "/é", "/\u00ff", "/~"})
	long := "/" + strings.Repeat("x", 300)
	var ps []string
	for i := range 500 {
		ps = append(ps, fmt.Sprintf("%s/%d", long, i), fmt.Sprintf("%s%d", long, i))
	}
	ps = append(ps, long)
	checkPathSort(t, ps)
	ps = ps[:0]
	for i := range 100_000 {
		ps = append(ps, fmt.Sprintf("/scale/n%08d", (i*7919)%100_000))
	}
	checkPathSort(t, append(ps, "/scale", "/", "/zookeeper", "/zookeeper/quota"))
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("-./0a\x7f\xc3\xa9~")
	for round := range 200 {
		seen := map[string]bool{}
		ps = ps[:0]
		for range rng.IntN(3000) {
			b := []byte{'/'}
			for range rng.IntN(1 + round%40) {
				b = append(b, alphabet[rng.IntN(len(alphabet))])
			}
			if !seen[string(b)] {
				seen[string(b)] = true
				ps = append(ps, string(b))
			}
		}
		checkPathSort(t, ps)
	}
}

// TestSortKeysAdversarial: many equal keys, sorted and reversed input,
// and the heapsort fallback all sort.
func TestSortKeysAdversarial(t *testing.T) {
	for name, gen := range map[string]func(i, n int) uint64{
		"equal":    func(i, n int) uint64 { return 7 },
		"two":      func(i, n int) uint64 { return uint64(i % 2) },
		"sorted":   func(i, n int) uint64 { return uint64(i) },
		"reversed": func(i, n int) uint64 { return uint64(n - i) },
		"organ":    func(i, n int) uint64 { return uint64(min(i, n-i)) },
	} {
		for _, n := range []int{0, 1, 2, 17, 1000, 100_000} {
			k := make([]uint64, n)
			v := make([]*node, n)
			for i := range k {
				k[i] = gen(i, n)
				v[i] = &node{stat: nodeStat{Czxid: int64(k[i])}}
			}
			sortKeys(k, v)
			for i := range k {
				if i > 0 && k[i] < k[i-1] || uint64(v[i].stat.Czxid) != k[i] {
					t.Fatalf("%s, %d keys: wrong at %d", name, n, i)
				}
			}
			if n > 1 {
				heapKeys(k, v) // the depth limit's path, on its own
				for i := 1; i < n; i++ {
					if k[i] < k[i-1] || uint64(v[i].stat.Czxid) != k[i] {
						t.Fatalf("%s, %d keys: heapsort wrong at %d", name, n, i)
					}
				}
			}
		}
	}
}
