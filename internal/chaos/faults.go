package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-coord/meridian/internal/errs"
)

// Fault kinds.
const (
	KillFollower      = "kill-follower"      // SIGKILL a follower, restart it
	KillLeader        = "kill-leader"        // SIGKILL the leader, restart it
	PauseFollower     = "pause-follower"     // SIGSTOP a follower longer than the session timeout
	PauseLeader       = "pause-leader"       // SIGSTOP the leader longer than the session timeout
	KillAll           = "kill-all"           // SIGKILL every server, restart them all (durability)
	TransferLeader    = "transfer-leader"    // move leadership under load
	PartitionFollower = "partition-follower" // cut a follower off (majority keeps going)
	PartitionLeader   = "partition-leader"   // cut the leader off (minority of one)
	PartitionLeaderTx = "asym-leader-out"    // the leader's outbound links cut, inbound kept
	PartitionLeaderRx = "asym-leader-in"     // the leader's inbound links cut, outbound kept
	PauseHolder       = "pause-holder"       // SIGSTOP a lock-holder process past its session timeout
	SlowLinks         = "slow-links"         // every raft link its own latency and jitter
	SlowLeader        = "slow-leader"        // the leader's raft links (both ways) slow, with jitter
	DiskFull          = "disk-full"          // a member's data disk filled up (tmpfs per node; needs root)
)

// diskMB is each node's tmpfs when disk-full is among the faults: room for
// a scenario's log, snapshots and Pebble's files, small enough to fill fast.
const diskMB = 64

func needsDisk(kinds []string) bool { return slices.Contains(kinds, DiskFull) }

// AllFaults lists every fault kind but the keyspace ones (KeyspaceFaults).
var AllFaults = []string{KillFollower, KillLeader, PauseFollower, PauseLeader, KillAll, TransferLeader,
	PartitionFollower, PartitionLeader, PartitionLeaderTx, PartitionLeaderRx, PauseHolder, SlowLinks, SlowLeader, DiskFull}

func needsProxies(kinds []string) bool {
	for _, k := range kinds {
		if strings.HasPrefix(k, "partition-") || strings.HasPrefix(k, "asym-") || strings.HasPrefix(k, "slow-") {
			return true
		}
	}
	return false
}

// ParseFaults parses a comma-separated list ("all" for every kind of
// AllFaults, "keyspace" for KeyspaceFaults).
func ParseFaults(s string) ([]string, error) {
	if s == "" || s == "all" {
		return AllFaults, nil
	}
	if s == "keyspace" {
		return KeyspaceFaults, nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(AllFaults, f) && !slices.Contains(KeyspaceFaults, f) {
			return nil, fmt.Errorf("unknown fault %q (known: %s)", f, strings.Join(append(slices.Clone(AllFaults), KeyspaceFaults...), ","))
		}
		out = append(out, f)
	}
	return out, nil
}

// faultEnv is what a fault acts on.
type faultEnv struct {
	cl         *Cluster
	rec        *Recorder
	rng        *rand.Rand
	logf       func(string, ...any)
	holderLog  io.Writer
	violations *[]string
	ks         string // the scenario's keyspace ("" none)
	note       string // set by runFault: appended to the fault's description

	// Set by runFault for the fault under way (history clock): when it
	// took hold, when it was undone, and the planned down time of kills.
	at, undone, down time.Duration
}

// hit marks the moment the fault takes hold; undo the moment it is taken
// back (processes continued or restarted, links healed).
func (e *faultEnv) hit()  { e.at = time.Duration(e.rec.Now()); e.undone = e.at }
func (e *faultEnv) undo() { e.undone = time.Duration(e.rec.Now()) }

func (e *faultEnv) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(e.rng.Int64N(int64(hi-lo)+1))
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// runFault injects one fault of kind and undoes it before returning. The
// random choices come from e.rng in a fixed order, so a seed fixes them.
func runFault(ctx context.Context, e *faultEnv, kind string) (string, error) {
	// Draw every random choice first so the sequence of draws does not
	// depend on what the cluster did (which node led, errors).
	down := e.between(300*time.Millisecond, 2500*time.Millisecond)
	pause := e.between(clientSession+time.Second, clientSession+2*time.Second)
	cut := e.between(1500*time.Millisecond, 4*time.Second)
	r1 := e.rng.Uint64()
	leader, err := e.cl.Leader(ctx, 15*time.Second)
	if err != nil {
		return "", fmt.Errorf("before %s: %w", kind, err)
	}
	other := func() uint64 { // a member other than the leader, from r1
		var ids []uint64
		for _, n := range e.cl.Nodes {
			if n.ID != leader {
				ids = append(ids, n.ID)
			}
		}
		return ids[r1%uint64(len(ids))]
	}
	if base, ok := keyspaceFaultBase[kind]; ok {
		// The same fault, on the keyspace group's leader.
		kl, err := e.cl.KeyspaceLeader(ctx, e.ks, 15*time.Second)
		if err != nil {
			return "", fmt.Errorf("before %s: %w", kind, err)
		}
		e.note = fmt.Sprintf(" [%s leader %d, root leader %d]", e.ks, kl, leader)
		kind, leader = base, kl
	}
	switch kind {
	case KillFollower, KillLeader:
		id := leader
		if kind == KillFollower {
			id = other()
		}
		e.hit()
		e.down = down
		e.cl.Kill(id)
		sleepCtx(ctx, down)
		err := e.cl.Start(id)
		e.undo()
		return fmt.Sprintf("SIGKILL node %d (leader %d), down %v", id, leader, down), err
	case PauseFollower, PauseLeader:
		id := leader
		if kind == PauseFollower {
			id = other()
		}
		e.hit()
		e.cl.Pause(id)
		sleepCtx(ctx, pause)
		e.cl.Resume(id)
		e.undo()
		return fmt.Sprintf("SIGSTOP node %d (leader %d) for %v", id, leader, pause), nil
	case KillAll:
		order := e.rng.Perm(len(e.cl.Nodes))
		e.hit()
		e.down = down
		for _, i := range order {
			e.cl.Kill(uint64(i + 1))
		}
		sleepCtx(ctx, down)
		for _, i := range order {
			if err := e.cl.Start(uint64(i + 1)); err != nil {
				return "", err
			}
		}
		e.undo()
		return fmt.Sprintf("SIGKILL all (order %v), down %v", order, down), nil
	case TransferLeader:
		to := other()
		e.hit()
		err := e.cl.TransferLeader(ctx, leader, to)
		desc := fmt.Sprintf("transfer leadership %d → %d", leader, to)
		if err != nil {
			desc += fmt.Sprintf(" (refused: %v)", errs.FromGRPC(err))
		}
		sleepCtx(ctx, down)
		return desc, nil
	case PartitionFollower, PartitionLeader, PartitionLeaderTx, PartitionLeaderRx:
		if !e.cl.Proxied() {
			return "", errors.New("partition faults need a proxied cluster")
		}
		id := leader
		if kind == PartitionFollower {
			id = other()
		}
		out := kind != PartitionLeaderRx
		in := kind != PartitionLeaderTx
		e.hit()
		for _, n := range e.cl.Nodes {
			if n.ID == id {
				continue
			}
			if out {
				e.cl.Block(id, n.ID)
			}
			if in {
				e.cl.Block(n.ID, id)
			}
		}
		sleepCtx(ctx, cut)
		e.cl.Heal()
		e.undo()
		return fmt.Sprintf("cut node %d (leader %d) out=%v in=%v for %v", id, leader, out, in, cut), nil
	case SlowLinks, SlowLeader:
		if !e.cl.Proxied() {
			return "", errors.New("slow-link faults need a proxied cluster")
		}
		n := uint64(len(e.cl.Nodes))
		// A fixed number of draws per kind, whatever the cluster did.
		type slow struct {
			from, to       uint64
			oneWay, jitter time.Duration
		}
		var set []slow
		var parts []string
		for from := uint64(1); from <= n; from++ {
			for to := uint64(1); to <= n; to++ {
				if from == to {
					continue
				}
				d := e.between(5*time.Millisecond, 150*time.Millisecond)
				j := time.Duration(e.rng.Int64N(int64(d)/2 + 1))
				if kind == SlowLeader {
					d = e.between(100*time.Millisecond, 300*time.Millisecond)
					j = d / 5
					if from != leader && to != leader {
						continue
					}
				}
				set = append(set, slow{from, to, d, j})
				parts = append(parts, fmt.Sprintf("%d→%d %v±%v", from, to, d.Round(time.Millisecond), j.Round(time.Millisecond)))
			}
		}
		e.hit()
		for _, l := range set {
			e.cl.SetDelay(l.from, l.to, l.oneWay, l.jitter)
		}
		sleepCtx(ctx, cut)
		e.cl.Heal()
		e.undo()
		return fmt.Sprintf("delay (leader %d) for %v: %s", leader, cut, strings.Join(parts, ", ")), nil
	case DiskFull:
		// Any member, the leader included. A member that cannot write its
		// log stops and exits (like etcd on a WAL error); it is restarted
		// once the disk has room again, as a supervisor would. Everything
		// acknowledged must survive, and the others must go on.
		id := uint64(r1%uint64(len(e.cl.Nodes))) + 1
		e.hit()
		free, err := e.cl.FillDisk(id)
		if err != nil {
			return "", err
		}
		sleepCtx(ctx, cut)
		exited := e.cl.Reap(id)
		free()
		e.undo()
		// A write that failed while the disk was full may surface at the
		// next commit, after the ballast is gone: give it a moment.
		for t0 := time.Now(); !exited && time.Since(t0) < 2*time.Second; {
			sleepCtx(ctx, 100*time.Millisecond)
			exited = e.cl.Reap(id)
		}
		desc := fmt.Sprintf("disk of node %d (leader %d) full for %v", id, leader, cut)
		if exited {
			desc += "; it exited and was restarted"
			err := e.cl.Start(id)
			e.undo()
			return desc, err
		}
		return desc + "; it kept running", nil
	case PauseHolder:
		return pauseHolder(ctx, e)
	}
	return "", fmt.Errorf("unknown fault %q", kind)
}

// pauseHolder is the GC-pause case: a lock holder process is stopped past
// its session timeout, the lock moves on, and when it wakes its fenced
// writes with the old token must be refused.
func pauseHolder(ctx context.Context, e *faultEnv) (string, error) {
	call := e.rec.Now()
	h, err := startHolder(e.cl.Endpoints(e.rng.IntN(len(e.cl.Nodes))), e.cl.TLSDir(), e.holderLog)
	if err != nil {
		return "", err
	}
	defer h.kill()
	e.rec.lock(lockEvent{Kind: evGrant, Worker: "holder", Session: h.Sess, Lock: lockName, Token: h.Token, Call: call, Return: e.rec.Now()})
	write := func(how string) string {
		val := fmt.Sprintf("t%d-holder-%s", h.Token, how)
		call := e.rec.Now()
		line, err := h.write(how, val)
		ret := e.rec.Now()
		ev := lockEvent{Kind: evFenced, Worker: "holder-" + how, Session: h.Sess, Lock: lockName, Token: h.Token, Call: call, Return: ret, Value: val}
		f := strings.Fields(line)
		switch {
		case err != nil || len(f) < 2:
			ev.Return, ev.Err = -1, fmt.Errorf("holder: %q %v", line, err)
		case f[0] == "ok":
			v, _ := strconv.Atoi(f[1])
			ev.Version = int32(v)
		case f[1] == "stale":
			ev.Err = errs.ErrStaleToken
		case f[1] == "expired":
			ev.Err = errs.ErrSessionExpired
		default:
			ev.Return, ev.Err = -1, errors.New(line)
		}
		e.rec.lock(ev)
		return line
	}
	before := write("own")
	pausedAt := e.rec.Now()
	e.hit()
	h.stop()
	// Wait for the lock to move on: the holder's session (1 s) expires and
	// a lock worker is granted a larger token.
	deadline := time.Now().Add(20 * time.Second)
	var next uint64
	for next == 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		sleepCtx(ctx, 100*time.Millisecond)
		e.rec.mu.Lock()
		for _, ev := range e.rec.locks {
			if ev.Kind == evGrant && ev.Token > h.Token && ev.Return > pausedAt {
				next = ev.Token
			}
		}
		e.rec.mu.Unlock()
	}
	stoppedFor := time.Duration(e.rec.Now() - pausedAt).Round(time.Millisecond)
	h.cont()
	e.undo()
	if next == 0 {
		*e.violations = append(*e.violations, fmt.Sprintf(
			"liveness: lock holder (session %d, token %d) stopped for %v, yet no one was granted the lock after it", h.Sess, h.Token, stoppedFor))
		return fmt.Sprintf("SIGSTOP lock holder token %d for %v: lock NOT re-granted", h.Token, stoppedFor), nil
	}
	own := write("own")
	fresh := write("fresh")
	if !strings.HasPrefix(fresh, "err stale") {
		// The checker judges acknowledged stale writes; an unexpected
		// error class is worth seeing in the report too.
		e.rec.Note(fmt.Sprintf("holder fresh-session fenced write with stale token %d: %s", h.Token, fresh))
	}
	return fmt.Sprintf("SIGSTOP lock holder token %d for %v; re-granted token %d; writes: before %q, own session %q, fresh session %q",
		h.Token, stoppedFor, next, before, own, fresh), nil
}
