package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	gozk "github.com/go-zookeeper/zk"
)

// zkConnect opens a go-zookeeper connection to servers (quiet, the
// scenario's session timeout), draining its session events. settled
// reports whether the connection has had a session for zkSettle: see
// zkWatchLoop.
func zkConnect(servers []string) (conn *gozk.Conn, settled func() bool, err error) {
	conn, sess, err := gozk.Connect(servers, clientSession, gozk.WithLogInfo(false), gozk.WithLogger(quietZKLogger{}))
	if err != nil {
		return nil, nil, err
	}
	var since atomic.Int64 // when the session came (unix ns); 0 while none
	go func() {
		for ev := range sess {
			switch ev.State {
			case gozk.StateHasSession:
				since.Store(time.Now().UnixNano())
			case gozk.StateDisconnected, gozk.StateConnecting, gozk.StateExpired:
				since.Store(0)
			}
		}
	}()
	settled = func() bool {
		t := since.Load()
		return t != 0 && time.Since(time.Unix(0, t)) >= zkSettle
	}
	return conn, settled, nil
}

// zkSettle: go-zookeeper v1.0.4 re-sets its watches on a new connection
// while reading its last zxid, which the new connection's reader may be
// writing (a data race in the library, go-zookeeper/zk#35, unfixed); a
// watcher that sends nothing until the connection has had its session
// this long gives that reader nothing to answer meanwhile.
const zkSettle = 200 * time.Millisecond

// zkKVLoop runs the register workload through the ZooKeeper protocol with
// go-zookeeper, on the same keys as the native workers, so both APIs share
// one history. Reads are sync + getData (Meridian's sync is a linearizable
// barrier on the connection's server, so the read after it is
// linearizable); writes are setData with and without a version, create,
// delete, and multi(check, setData).
func (w *worker) zkKVLoop(ctx context.Context, stop <-chan struct{}, servers []string, keys int) {
	conn, _, err := zkConnect(servers)
	if err != nil {
		w.rec.Note(fmt.Sprintf("%s: connect: %v", w.name, err))
		return
	}
	defer conn.Close()
	acl := gozk.WorldACL(gozk.PermAll)
	versions := map[int]int32{}
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		k := w.rng.IntN(keys)
		key := keyPath(w.ks, k)
		val := fmt.Sprintf("%s-%d", w.name, n)
		guessVersion := func() int32 {
			if v, ok := versions[k]; ok && w.rng.IntN(4) > 0 {
				return v
			}
			return int32(w.rng.IntN(4))
		}
		call := w.rec.Now()
		switch p := w.rng.IntN(100); {
		case p < 30: // sync + read
			// The read's window starts before the sync: the sync fixes the
			// point it reads at (a ReadIndex), and a write that completes
			// between the sync and the getData may or may not be in it.
			if _, err := conn.Sync(key); err != nil {
				break // no read was made
			}
			data, st, err := conn.Get(key)
			ret := w.rec.Now()
			out := kvOutput{Code: zkCodeOf(err)}
			if err == nil {
				out.Value, out.Version = string(data), st.Version
				versions[k] = st.Version
			}
			if err == nil || errors.Is(err, gozk.ErrNoNode) {
				w.rec.kvOp(w.id, kvInput{Op: opGet, Key: key}, call, out, ret, Known)
			}
		case p < 55: // unconditional set
			st, err := conn.Set(key, []byte(val), -1)
			ret := w.rec.Now()
			out := kvOutput{Code: zkCodeOf(err)}
			if err == nil {
				out.Version = st.Version
			}
			w.rec.kvOp(w.id, kvInput{Op: opSet, Key: key, Value: val, Version: -1}, call, out, ret, zkClassify(err))
		case p < 72: // compare-and-set
			v := guessVersion()
			st, err := conn.Set(key, []byte(val), v)
			ret := w.rec.Now()
			out := kvOutput{Code: zkCodeOf(err)}
			if err == nil {
				out.Version = st.Version
			}
			w.rec.kvOp(w.id, kvInput{Op: opSet, Key: key, Value: val, Version: v}, call, out, ret, zkClassify(err))
		case p < 84: // create
			_, err := conn.Create(key, []byte(val), 0, acl)
			ret := w.rec.Now()
			w.rec.kvOp(w.id, kvInput{Op: opCreate, Key: key, Value: val}, call, kvOutput{Code: zkCodeOf(err)}, ret, zkClassify(err))
		case p < 92: // delete, conditional half the time
			v := int32(-1)
			if w.rng.IntN(2) == 0 {
				v = guessVersion()
			}
			err := conn.Delete(key, v)
			ret := w.rec.Now()
			w.rec.kvOp(w.id, kvInput{Op: opDelete, Key: key, Version: v}, call, kvOutput{Code: zkCodeOf(err)}, ret, zkClassify(err))
		default: // check + set in one multi
			v := guessVersion()
			res, err := conn.Multi(&gozk.CheckVersionRequest{Path: key, Version: v}, &gozk.SetDataRequest{Path: key, Data: []byte(val), Version: -1})
			ret := w.rec.Now()
			if err == nil {
				// The transaction's outcome is the first failing op's code.
				for _, r := range res {
					if r.Error != nil {
						err = r.Error
						break
					}
				}
			}
			w.rec.kvOp(w.id, kvInput{Op: opMulti, Key: key, Value: val, Version: v}, call, kvOutput{Code: zkCodeOf(err)}, ret, zkClassify(err))
		}
		w.pause(stop, 20*time.Millisecond)
	}
}

// zkCodeOf maps a go-zookeeper error to the model's result code.
func zkCodeOf(err error) int {
	switch {
	case err == nil:
		return resOK
	case errors.Is(err, gozk.ErrNoNode):
		return resNoNode
	case errors.Is(err, gozk.ErrBadVersion):
		return resBadVersion
	case errors.Is(err, gozk.ErrNodeExists):
		return resNodeExists
	case errors.Is(err, gozk.ErrNotEmpty):
		return resNotEmpty
	}
	return -1
}

// zkClassify: a definite ZooKeeper error is a known outcome; anything else
// (connection loss, session expiry, timeouts) is unknown. Nothing from
// go-zookeeper proves a write was not applied.
func zkClassify(err error) Outcome {
	if zkCodeOf(err) >= 0 {
		return Known
	}
	return Unknown
}
