package chaos

import (
	"fmt"
	"path/filepath"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// LinResult is the linearizability verdict.
type LinResult struct {
	Result  porcupine.CheckResult // Ok, Illegal, or Unknown (checker timed out: inconclusive)
	Ops     int
	Unknown int    // operations with unknown outcome
	Viz     string // HTML visualization, written when the result is Illegal
}

// checkLinearizable runs porcupine on the key-value history; unknown
// outcomes return at the end of the history. On a violation it writes the
// visualization into dir.
func checkLinearizable(ops []porcupine.Operation, dir string, timeout time.Duration) (LinResult, error) {
	var end int64
	for _, op := range ops {
		end = max(end, op.Call, op.Return)
	}
	hist := make([]porcupine.Operation, len(ops))
	res := LinResult{Ops: len(ops)}
	for i, op := range ops {
		if op.Return < 0 {
			op.Return = end + 1
			res.Unknown++
		}
		hist[i] = op
	}
	r, info := porcupine.CheckOperationsVerbose(KVModel, hist, timeout)
	res.Result = r
	if r == porcupine.Illegal {
		res.Viz = filepath.Join(dir, "porcupine.html")
		if err := porcupine.VisualizePath(KVModel, info, res.Viz); err != nil {
			return res, fmt.Errorf("writing visualization: %w", err)
		}
	}
	return res, nil
}

// checkSequential: a sequential read sent after the session had seen zxid Z
// must reflect every acknowledged write of that key with zxid ≤ Z, i.e. the
// node it returns may not be older than such a write.
func checkSequential(reads []seqRead, acked []ackedWrite) []string {
	byKey := map[string][]int64{}
	for _, a := range acked {
		byKey[a.Key] = append(byKey[a.Key], a.Zxid)
	}
	for k := range byKey {
		sort.Slice(byKey[k], func(i, j int) bool { return byKey[k][i] < byKey[k][j] })
	}
	var out []string
	for _, r := range reads {
		if !r.Exists {
			continue
		}
		zs := byKey[r.Key]
		// The first acknowledged write after the node we read...
		i := sort.Search(len(zs), func(i int) bool { return zs[i] > r.Mzxid })
		// ...must be one the session had not seen yet.
		if i < len(zs) && zs[i] <= r.SeenZx {
			out = append(out, fmt.Sprintf("stale sequential read: client %d session %d read %s at mzxid %d (%q) after having seen zxid %d, but a write of it was acknowledged at zxid %d",
				r.Client, r.Session, r.Key, r.Mzxid, r.Value, r.SeenZx, zs[i]))
			if len(out) >= 20 {
				break
			}
		}
	}
	return out
}

// checkLocks checks the fencing guarantees over the lock events:
//   - two grants of the lock never carry the same token;
//   - a grant that began after another one ended has a larger token;
//   - exclusion: if a holder's release succeeded (so it held the lock until
//     then), no later-token grant returned before that release was sent;
//   - a fenced write with token t acknowledged although a grant with a
//     larger token had returned before the write was sent is a stale write
//     that was accepted;
//   - the protected value's acknowledged versions are unique and their
//     tokens never decrease in version order.
func checkLocks(evs []lockEvent) []string {
	var out []string
	add := func(f string, a ...any) {
		if len(out) < 50 {
			out = append(out, fmt.Sprintf(f, a...))
		}
	}
	var grants, releases, writes []lockEvent
	for _, e := range evs {
		switch e.Kind {
		case evGrant:
			grants = append(grants, e)
		case evRelease:
			releases = append(releases, e)
		case evFenced:
			writes = append(writes, e)
		}
	}
	byToken := map[uint64]lockEvent{}
	for _, g := range grants {
		if o, dup := byToken[g.Token]; dup && o.Session != g.Session {
			add("token %d granted to two sessions: %s (session %d) and %s (session %d)", g.Token, o.Worker, o.Session, g.Worker, g.Session)
		}
		byToken[g.Token] = g
	}
	for _, a := range grants {
		for _, b := range grants {
			if a.Return >= 0 && a.Return < b.Call && a.Token >= b.Token {
				add("token order: grant %d to %s returned at %v, before grant %d to %s was requested at %v",
					a.Token, a.Worker, dur(a.Return), b.Token, b.Worker, dur(b.Call))
			}
		}
	}
	for _, r := range releases {
		if r.Err != nil || r.Return < 0 {
			continue
		}
		for _, b := range grants {
			if b.Token > r.Token && b.Return >= 0 && b.Return < r.Call {
				add("exclusion: %s still held token %d until its release (sent at %v, succeeded) but %s was granted token %d at %v",
					r.Worker, r.Token, dur(r.Call), b.Worker, b.Token, dur(b.Return))
			}
		}
	}
	for _, w := range writes {
		if w.Err != nil || w.Return < 0 {
			continue
		}
		for _, b := range grants {
			if b.Token > w.Token && b.Return >= 0 && b.Return < w.Call {
				add("stale fenced write accepted: %s wrote %q with token %d at %v (acknowledged, version %d) after %s had been granted token %d at %v",
					w.Worker, w.Value, w.Token, dur(w.Call), w.Version, b.Worker, b.Token, dur(b.Return))
			}
		}
	}
	acked := map[int32]lockEvent{}
	var versions []int32
	for _, w := range writes {
		if w.Err != nil || w.Return < 0 {
			continue
		}
		if o, dup := acked[w.Version]; dup {
			add("two acknowledged fenced writes produced version %d: %q and %q", w.Version, o.Value, w.Value)
			continue
		}
		acked[w.Version] = w
		versions = append(versions, w.Version)
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	for i := 1; i < len(versions); i++ {
		a, b := acked[versions[i-1]], acked[versions[i]]
		if a.Token > b.Token {
			add("protected value went back in token order: version %d written with token %d (%q), version %d with token %d (%q)",
				a.Version, a.Token, a.Value, b.Version, b.Token, b.Value)
		}
	}
	return out
}

// checkLocksEach runs checkLocks on each lock's events.
func checkLocksEach(evs []lockEvent) []string {
	byLock := map[string][]lockEvent{}
	var names []string
	for _, e := range evs {
		if _, ok := byLock[e.Lock]; !ok {
			names = append(names, e.Lock)
		}
		byLock[e.Lock] = append(byLock[e.Lock], e)
	}
	var out []string
	for _, n := range names {
		v := checkLocks(byLock[n])
		if len(names) > 1 {
			for i := range v {
				v[i] = n + ": " + v[i]
			}
		}
		out = append(out, v...)
	}
	return out
}

// checkDurable: every acknowledged create is present after everything.
func checkDurable(creates []durableCreate, present map[string]bool) (acked int, out []string) {
	for _, c := range creates {
		if !c.Acked {
			continue
		}
		acked++
		if !present[c.Path] {
			if len(out) < 20 {
				out = append(out, fmt.Sprintf("acknowledged create %s lost", c.Path))
			}
		}
	}
	return acked, out
}

func dur(ns int64) time.Duration { return time.Duration(ns).Round(time.Millisecond) }

// isStale reports a fenced write refused for its token.
