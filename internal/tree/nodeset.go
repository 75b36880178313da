package tree

import (
	"hash/maphash"
	"iter"
)

// nodeSet is a set of nodes keyed by their path: an open-addressing hash
// table (linear probing, backward-shift deletion) of node pointers. It
// holds the tree's index of nodes (Tree.nodes) and each parent's children.
//
// It replaces map[string]*node and map[string]struct{}: a Go map keeps the
// key's string header in every slot besides the value (24 bytes a slot for
// the index, 16 for a child set) and measured 56 bytes an entry for each at
// a million entries; a slot here is one pointer, the key being the node's
// own path, so an entry costs 8 bytes over the load factor (about 14).
// Keying children by full path (unique within a parent as the name is)
// lets one table type serve both.
//
// Iteration order depends on the process's hash seed, as a Go map's does
// on its own randomness: nothing in apply may depend on it.
type nodeSet struct {
	slots []*node // nil, or a power of two long
	n     int
}

// hashSeed is per process: paths are chosen by clients, and a hash they
// could predict would let them make probe sequences as long as the table.
var hashSeed = maphash.MakeSeed()

func hashPath(p string) uint64 { return maphash.String(hashSeed, p) }

func (s *nodeSet) len() int { return s.n }

// get returns the node of path, or nil.
func (s *nodeSet) get(path string) *node {
	if s.n == 0 {
		return nil
	}
	mask := uint64(len(s.slots) - 1)
	for i := hashPath(path) & mask; ; i = (i + 1) & mask {
		e := s.slots[i]
		if e == nil {
			return nil
		}
		if e.path() == path {
			return e
		}
	}
}

// has reports whether n itself (not another node of its path) is in s.
func (s *nodeSet) has(n *node) bool { return s.get(n.path()) == n }

// put adds n, replacing the node of the same path if there is one.
func (s *nodeSet) put(n *node) {
	// Grown at a load of 3/4: linear probing's expected probe count stays
	// small up to there.
	if (s.n+1)*4 > len(s.slots)*3 {
		s.resize(max(len(s.slots)*2, 4))
	}
	mask := uint64(len(s.slots) - 1)
	for i := hashPath(n.path()) & mask; ; i = (i + 1) & mask {
		e := s.slots[i]
		if e == nil {
			s.slots[i] = n
			s.n++
			return
		}
		if e.path() == n.path() {
			s.slots[i] = n
			return
		}
	}
}

// del removes the node of path and reports whether there was one.
func (s *nodeSet) del(path string) bool {
	if s.n == 0 {
		return false
	}
	mask := uint64(len(s.slots) - 1)
	i := hashPath(path) & mask
	for ; ; i = (i + 1) & mask {
		e := s.slots[i]
		if e == nil {
			return false
		}
		if e.path() == path {
			break
		}
	}
	// Backward shift: move later entries of the probe run into the hole
	// when their home slot allows it, so that no tombstones are needed and
	// every run stays unbroken.
	for {
		s.slots[i] = nil
		j := i
		for {
			j = (j + 1) & mask
			e := s.slots[j]
			if e == nil {
				s.n--
				s.shrink()
				return true
			}
			h := hashPath(e.path()) & mask
			// e stays when its home h lies cyclically in (i, j].
			if i <= j {
				if i < h && h <= j {
					continue
				}
			} else if i < h || h <= j {
				continue
			}
			s.slots[i] = e
			i = j
			break
		}
	}
}

// shrink gives back most of the table once it is mostly empty (a parent
// whose many children were deleted), halving it well below the load at
// which put grows it, so that the two do not alternate.
func (s *nodeSet) shrink() {
	switch {
	case s.n == 0:
		s.slots = nil
	case len(s.slots) > 8 && s.n*8 < len(s.slots):
		s.resize(len(s.slots) / 2)
	}
}

func (s *nodeSet) resize(size int) {
	old := s.slots
	s.slots = make([]*node, size)
	mask := uint64(size - 1)
	for _, e := range old {
		if e == nil {
			continue
		}
		i := hashPath(e.path()) & mask
		for s.slots[i] != nil {
			i = (i + 1) & mask
		}
		s.slots[i] = e
	}
}

// replace puts n in the place of old, a node of the same path in s.
func (s *nodeSet) replace(old, n *node) {
	mask := uint64(len(s.slots) - 1)
	for i := hashPath(n.path()) & mask; s.slots[i] != nil; i = (i + 1) & mask {
		if s.slots[i] == old {
			s.slots[i] = n
			return
		}
	}
	panic("tree: replaced node not in its set")
}

// all yields the nodes in table order (see the type's comment).
func (s *nodeSet) all() iter.Seq[*node] {
	return func(yield func(*node) bool) {
		for _, e := range s.slots {
			if e != nil && !yield(e) {
				return
			}
		}
	}
}

// list returns the nodes, in table order.
func (s *nodeSet) list() []*node {
	out := make([]*node, 0, s.n)
	for _, e := range s.slots {
		if e != nil {
			out = append(out, e)
		}
	}
	return out
}

// tableSize is the table length that holds n nodes without growing.
func tableSize(n int) int {
	size := 4
	for size*3 < n*4 {
		size *= 2
	}
	return size
}
