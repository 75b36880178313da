//go:build race

package wire

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts of pooled paths are checked only without it.
const raceEnabled = true
