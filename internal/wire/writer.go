package wire

import (
	"net"
	"sync"
	"time"
)

// writeTimeout bounds one write to the socket: a peer that reads nothing
// for this long loses its connection instead of holding its senders.
const writeTimeout = 30 * time.Second

// writeStep is how often the write deadline is moved: a deadline is a
// timer to move (about a microsecond a write on a busy server), so it is
// set writeTimeout+writeStep ahead and moved again only once writeStep has
// passed. A write that stalls is cut off between writeTimeout and
// writeTimeout+writeStep after it began; a deadline that could have passed
// meanwhile (the connection idle for longer than writeTimeout) is always
// moved before the next write.
const writeStep = time.Second

// writer coalesces the frames of one connection. A sender appends its
// frame to the pending buffer; if nobody is writing, it becomes the
// writer and writes until the buffer stays empty, so frames queued while
// a write is under way leave together in the next one, with no goroutine
// to hand them to.
type writer struct {
	conn net.Conn

	mu      sync.Mutex
	space   *sync.Cond // signalled when pending shrinks or the writer fails
	pending []byte
	spare   []byte
	writing bool
	err     error     // first write failure; every later send fails with it
	moved   time.Time // when the write deadline was last moved (the writing goroutine's)
}

func newWriter(conn net.Conn) *writer {
	w := &writer{conn: conn}
	w.space = sync.NewCond(&w.mu)
	return w
}

// send queues frame (copied) and writes it, possibly with others, unless
// a write is under way, whose writer then takes it along. It returns the
// writer's failure, if it has failed.
func (w *writer) send(frame []byte) error {
	w.mu.Lock()
	for w.err == nil && len(w.pending) > 0 && len(w.pending)+len(frame) > MaxPendingBytes {
		w.space.Wait()
	}
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	w.pending = append(w.pending, frame...)
	if w.writing {
		w.mu.Unlock()
		return nil
	}
	w.writing = true
	w.flushLocked(maxRounds)
	err := w.err
	w.mu.Unlock()
	return err
}

// maxRounds bounds the writes one sender makes for others before a
// goroutine takes over: a caller's own frame is out after the first.
const maxRounds = 8

// flushLocked writes the pending frames until none are left, or rounds
// writes have been made (a goroutine then goes on). Caller holds w.mu and
// has set writing; it is clear when the buffer is empty.
func (w *writer) flushLocked(rounds int) {
	for ; len(w.pending) > 0 && w.err == nil; rounds-- {
		if rounds == 0 {
			go func() {
				w.mu.Lock()
				w.flushLocked(-1)
				w.mu.Unlock()
			}()
			return
		}
		buf := w.pending
		w.pending = w.spare[:0]
		w.mu.Unlock()
		if now := time.Now(); now.Sub(w.moved) >= writeStep {
			_ = w.conn.SetWriteDeadline(now.Add(writeTimeout + writeStep))
			w.moved = now
		}
		_, err := w.conn.Write(buf)
		w.mu.Lock()
		if cap(buf) <= 1<<20 {
			w.spare = buf[:0]
		} else {
			w.spare = nil // do not keep a large burst's buffer
		}
		if err != nil {
			w.err = err
			w.pending = nil
			w.conn.Close()
		}
		w.space.Broadcast()
	}
	w.writing = false
}

// fail stops the writer: queued frames are dropped and later sends fail.
func (w *writer) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
		w.pending = nil
	}
	w.space.Broadcast()
	w.mu.Unlock()
}

// framePool recycles the buffers frames are built in.
var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func getFrame() *[]byte { return framePool.Get().(*[]byte) }

func putFrame(b *[]byte) {
	if b == nil || cap(*b) > 64<<10 {
		return
	}
	*b = (*b)[:0]
	framePool.Put(b)
}
