package chaos

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/errs"
)

const (
	kvRoot     = "/chaos/kv"
	durRoot    = "/chaos/dur"
	lockName   = "chaos-lock"
	lockedPath = "/chaos/locked" // the value the lock protects, written fenced
	opTimeout  = 5 * time.Second
	// clientSession is the workers' session timeout: longer than a leader
	// failover, shorter than the server pauses, so a paused server's
	// clients lose their sessions.
	clientSession = 2500 * time.Millisecond
)

// keyPath is register key k's path: in the root, or, with a keyspace ks,
// every odd key in the keyspace.
func keyPath(ks string, k int) string {
	if ks != "" && k%2 == 1 {
		return fmt.Sprintf("%s/kv/k%d", ks, k)
	}
	return fmt.Sprintf("%s/k%d", kvRoot, k)
}

// worker owns one client session and replaces it when it expires.
type worker struct {
	id   int
	name string
	eps  []string
	tls  *tls.Config
	rec  *Recorder
	rng  *rand.Rand
	c    *client.Client
	// ks is the scenario's keyspace ("" none); lock and locked the lock
	// this worker takes and the value it protects (lockName, lockedPath
	// unless set).
	ks, lock, locked string
}

func (w *worker) key(k int) string { return keyPath(w.ks, k) }

func (w *worker) lockNames() (string, string) {
	if w.lock == "" {
		return lockName, lockedPath
	}
	return w.lock, w.locked
}

func (w *worker) connect(ctx context.Context) error {
	if w.c != nil {
		w.c.Close()
		w.c = nil
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c, err := client.New(cctx, client.Config{Endpoints: w.eps, SessionTimeout: clientSession, TLS: w.tls,
		// Workers are spread over the servers by the endpoint order they
		// are given, not by (all equal) loopback round trips.
		RequestTimeout: opTimeout, DialTimeout: time.Second, KeepEndpointOrder: true})
	if err != nil {
		return err
	}
	w.c = c
	return nil
}

// needsNewSession: the session is gone (expired, closed).
func needsNewSession(err error) bool {
	return errors.Is(err, errs.ErrSessionExpired) || errors.Is(err, client.ErrClosed)
}

func (w *worker) pause(stop <-chan struct{}, max time.Duration) {
	select {
	case <-stop:
	case <-time.After(time.Duration(w.rng.Int64N(int64(max)))):
	}
}

// kvWorker runs the register workload on keys until stop closes.
func (w *worker) kvLoop(ctx context.Context, stop <-chan struct{}, keys int) {
	versions := map[int]int32{}
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		if w.c == nil {
			if err := w.connect(ctx); err != nil {
				w.rec.Note(fmt.Sprintf("%s: connect: %v", w.name, err))
				w.pause(stop, 500*time.Millisecond)
				continue
			}
		}
		k := w.rng.IntN(keys)
		key := w.key(k)
		val := fmt.Sprintf("%s-%d", w.name, n)
		guessVersion := func() int32 {
			if v, ok := versions[k]; ok && w.rng.IntN(4) > 0 {
				return v
			}
			return int32(w.rng.IntN(4))
		}
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		var err error
		call := w.rec.Now()
		switch p := w.rng.IntN(100); {
		case p < 30: // linearizable read
			var data []byte
			var st *client.Stat
			data, st, err = w.c.Get(octx, key, client.WithConsistency(client.Linearizable))
			ret := w.rec.Now()
			out := kvOutput{Code: codeOf(err)}
			if err == nil {
				out.Value, out.Version = string(data), st.GetVersion()
				versions[k] = st.GetVersion()
			}
			if err == nil || errors.Is(err, errs.ErrNoNode) {
				w.rec.kvOp(w.id, kvInput{Op: opGet, Key: key}, call, out, ret, Known)
			}
		case p < 42: // sequential read, checked against the session's zxid
			seen := w.c.LastZxid()
			sess := w.c.SessionID()
			var data []byte
			var st *client.Stat
			data, st, err = w.c.Get(octx, key, client.WithConsistency(client.Sequential))
			if err == nil {
				w.rec.seqRead(seqRead{Client: w.id, Key: key, SeenZx: seen, Exists: true, Mzxid: st.GetMzxid(), Value: string(data), Session: sess})
			}
		case p < 60: // unconditional set
			var st *client.Stat
			st, err = w.c.Set(octx, key, []byte(val), client.AnyVersion)
			ret := w.rec.Now()
			out := kvOutput{Code: codeOf(err)}
			if err == nil {
				out.Version = st.GetVersion()
				w.rec.ackedWrite(key, st, val)
			}
			w.rec.kvOp(w.id, kvInput{Op: opSet, Key: key, Value: val, Version: -1}, call, out, ret, classify(err))
		case p < 75: // compare-and-set by version
			v := guessVersion()
			var st *client.Stat
			st, err = w.c.Set(octx, key, []byte(val), v)
			ret := w.rec.Now()
			out := kvOutput{Code: codeOf(err)}
			if err == nil {
				out.Version = st.GetVersion()
				w.rec.ackedWrite(key, st, val)
			}
			w.rec.kvOp(w.id, kvInput{Op: opSet, Key: key, Value: val, Version: v}, call, out, ret, classify(err))
		case p < 85: // create
			var st *client.Stat
			_, st, err = w.c.Create(octx, key, []byte(val), client.CreateOptions{})
			ret := w.rec.Now()
			if err == nil {
				w.rec.ackedWrite(key, st, val)
			}
			w.rec.kvOp(w.id, kvInput{Op: opCreate, Key: key, Value: val}, call, kvOutput{Code: codeOf(err)}, ret, classify(err))
		case p < 93: // delete, conditional half the time
			v := client.AnyVersion
			if w.rng.IntN(2) == 0 {
				v = guessVersion()
			}
			err = w.c.Delete(octx, key, v)
			ret := w.rec.Now()
			w.rec.kvOp(w.id, kvInput{Op: opDelete, Key: key, Version: v}, call, kvOutput{Code: codeOf(err)}, ret, classify(err))
		default: // check+set in one multi
			v := guessVersion()
			_, err = w.c.Multi(octx, client.CheckOp(key, v), client.SetOp(key, []byte(val), client.AnyVersion))
			ret := w.rec.Now()
			w.rec.kvOp(w.id, kvInput{Op: opMulti, Key: key, Value: val, Version: v}, call, kvOutput{Code: codeOf(err)}, ret, classify(err))
		}
		cancel()
		if needsNewSession(err) {
			w.rec.Note(fmt.Sprintf("%s: new session after %v", w.name, err))
			w.c.Close()
			w.c = nil
		}
		w.pause(stop, 20*time.Millisecond)
	}
}

// codeOf maps a known error to the model's result code.
func codeOf(err error) int {
	switch {
	case err == nil:
		return resOK
	case errors.Is(err, errs.ErrNoNode):
		return resNoNode
	case errors.Is(err, errs.ErrBadVersion):
		return resBadVersion
	case errors.Is(err, errs.ErrNodeExists):
		return resNodeExists
	case errors.Is(err, errs.ErrNotEmpty):
		return resNotEmpty
	}
	return -1
}

// lockLoop acquires the lock, writes the protected value under the fence a
// few times, and releases it.
func (w *worker) lockLoop(ctx context.Context, stop <-chan struct{}) {
	lockName, lockedPath := w.lockNames()
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		if w.c == nil {
			if err := w.connect(ctx); err != nil {
				w.rec.Note(fmt.Sprintf("%s: connect: %v", w.name, err))
				w.pause(stop, 500*time.Millisecond)
				continue
			}
		}
		sess := w.c.SessionID()
		lctx, cancel := context.WithTimeout(ctx, 8*time.Second)
		call := w.rec.Now()
		lease, err := w.c.Lock(lctx, lockName, client.LockOptions{Timeout: 4 * time.Second})
		ret := w.rec.Now()
		cancel()
		if err != nil {
			if !errors.Is(err, errs.ErrLockWaitTimeout) {
				// A grant may have happened that we never heard of; end
				// the session so it cannot hold the lock unseen.
				w.rec.Note(fmt.Sprintf("%s: lock: %v; new session", w.name, err))
				w.c.Close()
				w.c = nil
			}
			continue
		}
		w.rec.lock(lockEvent{Kind: evGrant, Worker: w.name, Session: sess, Lock: lockName, Token: lease.Token, Call: call, Return: ret})
		writes := 1 + w.rng.IntN(3)
		for i := 0; i < writes; i++ {
			select {
			case <-lease.Lost():
				w.rec.lock(lockEvent{Kind: evLost, Worker: w.name, Session: sess, Lock: lockName, Token: lease.Token, Return: w.rec.Now()})
			default:
			}
			val := fmt.Sprintf("t%d-%s-%d-%d", lease.Token, w.name, n, i)
			fctx, cancel := context.WithTimeout(ctx, opTimeout)
			call := w.rec.Now()
			st, err := w.c.Fenced(lockName, lease.Token).Set(fctx, lockedPath, []byte(val), client.AnyVersion)
			ret := w.rec.Now()
			cancel()
			w.recordFenced(w.name, sess, lease.Token, val, call, ret, st, err)
			w.pause(stop, 30*time.Millisecond)
		}
		uctx, cancel := context.WithTimeout(ctx, opTimeout)
		call = w.rec.Now()
		err = lease.Unlock(uctx)
		ret = w.rec.Now()
		cancel()
		if classify(err) == Unknown && !errors.Is(err, errs.ErrLockNotHeld) {
			ret = -1
		}
		w.rec.lock(lockEvent{Kind: evRelease, Worker: w.name, Session: sess, Lock: lockName, Token: lease.Token, Call: call, Return: ret, Err: err})
		if err != nil {
			w.c.Close()
			w.c = nil
		}
		w.pause(stop, 50*time.Millisecond)
	}
}

func (w *worker) recordFenced(who string, sess int64, token uint64, val string, call, ret int64, st *client.Stat, err error) {
	lockName, _ := w.lockNames()
	e := lockEvent{Kind: evFenced, Worker: who, Session: sess, Lock: lockName, Token: token, Call: call, Return: ret, Err: err, Value: val}
	if err == nil {
		e.Version = st.GetVersion()
	} else if !errors.Is(err, errs.ErrStaleToken) && classify(err) != Known && classify(err) != NotApplied {
		e.Return = -1
	}
	w.rec.lock(e)
}

// durLoop creates unique nodes; every acknowledged one must survive
// anything, including a whole-cluster SIGKILL.
func (w *worker) durLoop(ctx context.Context, stop <-chan struct{}) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		if w.c == nil {
			if err := w.connect(ctx); err != nil {
				w.pause(stop, 500*time.Millisecond)
				continue
			}
		}
		p := fmt.Sprintf("%s/%s-%06d", durRoot, w.name, n)
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		call := w.rec.Now()
		_, _, err := w.c.Create(octx, p, []byte(p), client.CreateOptions{})
		ret := w.rec.Now()
		cancel()
		if classify(err) != NotApplied {
			w.rec.durable(durableCreate{Path: p, Acked: err == nil, Call: call, Return: ret})
		}
		if needsNewSession(err) {
			w.c.Close()
			w.c = nil
		}
		w.pause(stop, 40*time.Millisecond)
	}
}

// runWorkers starts the workloads and returns a function that stops them
// and waits (bounded) for them to finish.
func runWorkers(ctx context.Context, cl *Cluster, rec *Recorder, seed uint64, kvWorkers, lockWorkers, keys int, ks string) func() {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ws []*worker
	mk := func(i int, name string) *worker {
		w := &worker{id: i, name: name, eps: cl.Endpoints(i), tls: cl.ClientTLS(), rec: rec, rng: rand.New(rand.NewPCG(seed, uint64(i)+1)), ks: ks}
		ws = append(ws, w)
		return w
	}
	for i := 0; i < kvWorkers; i++ {
		w := mk(i, fmt.Sprintf("kv%d", i))
		wg.Add(1)
		go func() { defer wg.Done(); w.kvLoop(ctx, stop, keys) }()
	}
	for i := 0; i < lockWorkers; i++ {
		w := mk(kvWorkers+i, fmt.Sprintf("lk%d", i))
		if ks != "" && i%2 == 1 {
			// Every other lock worker contends for a lock of the keyspace.
			w.lock, w.locked = ksLockName(ks), ks+"/locked"
		}
		wg.Add(1)
		go func() { defer wg.Done(); w.lockLoop(ctx, stop) }()
	}
	d := mk(kvWorkers+lockWorkers, "dur")
	wg.Add(1)
	go func() { defer wg.Done(); d.durLoop(ctx, stop) }()
	// One register worker through the ZooKeeper protocol, on its own server.
	z := mk(kvWorkers+lockWorkers+1, "zkv")
	wg.Add(1)
	go func() {
		defer wg.Done()
		z.zkKVLoop(ctx, stop, cl.ZKServers((kvWorkers+lockWorkers+1)%len(cl.Nodes)), keys)
	}()
	if ks != "" {
		startKeyspaceWorkers(ctx, cl, kvWorkers+lockWorkers+2, ks, stop, &wg, mk)
	}
	return func() {
		close(stop)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			// Their clients are still in use: leave them to the process exit.
			rec.Note("workers did not stop within 30s")
			return
		}
		for _, w := range ws {
			if w.c != nil {
				w.c.Close()
			}
		}
	}
}
