package tree

import "math/bits"

// sortByPath sorts nodes by path, the snapshot's order, for a fraction of
// what comparing paths costs at scale. A comparison sort of a million
// node pointers follows two pointers (node, then path) for every
// comparison, twenty million of them, each likely a cache miss: 0.6 s of
// a 0.7 s snapshot. Here each path is read once per level, eight bytes of
// it become an integer key kept beside the node, and the keys are sorted;
// nodes whose keys tie (a common prefix) are sorted again on the next
// bytes past the prefix they all share. Paths hold no zero byte
// (ValidatePath), so a key padded with zeros orders a path before the
// longer paths it prefixes, as string comparison does.
//
// It needs one uint64 a node while it runs (8 MB for a million).
func sortByPath(nodes []*node) {
	sortFrom(nodes, make([]uint64, len(nodes)), 0)
}

// sortFrom sorts nodes whose paths share their first off bytes.
func sortFrom(nodes []*node, keys []uint64, off int) {
	for i, n := range nodes {
		keys[i] = pathKey(n.path(), off)
	}
	sortKeys(keys, nodes)
	for i := 0; i < len(nodes); {
		j := i + 1
		for j < len(nodes) && keys[j] == keys[i] {
			j++
		}
		if j-i > 1 {
			// Distinct paths with equal keys are at least off+8 long (a
			// shorter one would be padded with a zero no other path has).
			run := nodes[i:j]
			sortFrom(run, keys[i:j], commonPrefix(run, off+8))
		}
		i = j
	}
}

// pathKey is p's bytes off to off+8, big-endian, padded with zeros.
func pathKey(p string, off int) uint64 {
	if off+8 <= len(p) {
		b := p[off : off+8]
		return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
			uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
	}
	var k uint64
	for i := 0; i < 8; i++ {
		k <<= 8
		if off+i < len(p) {
			k |= uint64(p[off+i])
		}
	}
	return k
}

// commonPrefix is the length of the prefix all nodes' paths share, given
// that they share at least the first from bytes.
func commonPrefix(nodes []*node, from int) int {
	first := nodes[0].path()
	l := len(first)
	for _, n := range nodes[1:] {
		p := n.path()
		l = min(l, len(p))
		i := from
		for i < l && p[i] == first[i] {
			i++
		}
		l = i
		if l == from {
			break
		}
	}
	return l
}

// sortKeys sorts keys ascending, applying every move to nodes too
// (introsort: quicksort, heapsort past a depth, insertion sort for short
// ranges; equal keys end in any order).
func sortKeys(keys []uint64, nodes []*node) {
	quickKeys(keys, nodes, 2*bits.Len(uint(len(keys))))
}

func quickKeys(k []uint64, v []*node, depth int) {
	for len(k) > 16 {
		if depth == 0 {
			heapKeys(k, v)
			return
		}
		depth--
		// Median of three moved to the middle: Hoare's partition with the
		// middle element's value ends with 0 <= j < len-1.
		m, hi := len(k)/2, len(k)-1
		if k[m] < k[0] {
			swapKV(k, v, m, 0)
		}
		if k[hi] < k[m] {
			swapKV(k, v, hi, m)
			if k[m] < k[0] {
				swapKV(k, v, m, 0)
			}
		}
		pivot := k[m]
		i, j := -1, len(k)
		for {
			for i++; k[i] < pivot; i++ {
			}
			for j--; k[j] > pivot; j-- {
			}
			if i >= j {
				break
			}
			swapKV(k, v, i, j)
		}
		// [0, j] <= pivot <= [j+1, len): recurse into the shorter side.
		if j+1 < len(k)-j-1 {
			quickKeys(k[:j+1], v[:j+1], depth)
			k, v = k[j+1:], v[j+1:]
		} else {
			quickKeys(k[j+1:], v[j+1:], depth)
			k, v = k[:j+1], v[:j+1]
		}
	}
	for i := 1; i < len(k); i++ {
		for j := i; j > 0 && k[j] < k[j-1]; j-- {
			swapKV(k, v, j, j-1)
		}
	}
}

func heapKeys(k []uint64, v []*node) {
	n := len(k)
	for i := n/2 - 1; i >= 0; i-- {
		siftKeys(k, v, i, n)
	}
	for end := n - 1; end > 0; end-- {
		swapKV(k, v, 0, end)
		siftKeys(k, v, 0, end)
	}
}

func siftKeys(k []uint64, v []*node, root, n int) {
	for {
		c := 2*root + 1
		if c >= n {
			return
		}
		if c+1 < n && k[c] < k[c+1] {
			c++
		}
		if k[root] >= k[c] {
			return
		}
		swapKV(k, v, root, c)
		root = c
	}
}

func swapKV(k []uint64, v []*node, i, j int) {
	k[i], k[j] = k[j], k[i]
	v[i], v[j] = v[j], v[i]
}
