package chaos

import (
	"errors"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/errs"
)

// Outcome classifies a finished operation.
type Outcome int

const (
	// Known: the operation took effect exactly as its result says (a
	// definite error such as ErrBadVersion included).
	Known Outcome = iota
	// NotApplied: the error proves the write was never applied (no
	// leader, throttled); the operation is left out of the history.
	NotApplied
	// Unknown: timeouts, connection loss, leader change: the write may or
	// may not have been applied, now or later. Porcupine sees its return
	// at the end of the history.
	Unknown
)

// classify maps a client error to an outcome. Anything not known to be
// definite is Unknown: that can only hide a bug, never invent one.
func classify(err error) Outcome {
	switch {
	case err == nil, errors.Is(err, errs.ErrNoNode), errors.Is(err, errs.ErrBadVersion),
		errors.Is(err, errs.ErrNodeExists), errors.Is(err, errs.ErrNotEmpty):
		return Known
	case errs.Retryable(err):
		return NotApplied
	}
	return Unknown
}

// Recorder collects a scenario's history from concurrent workers. Times
// are nanoseconds since the scenario began (monotonic clock).
type Recorder struct {
	start time.Time

	mu     sync.Mutex
	kv     []porcupine.Operation
	seq    []seqRead
	acked  []ackedWrite
	locks  []lockEvent
	durab  []durableCreate
	faults []FaultRecord
	notes  []string

	ks *ksRecorder // the keyspace workload's history (keyspace.go)
}

// NewRecorder starts the history clock.
func NewRecorder() *Recorder { return &Recorder{start: time.Now(), ks: &ksRecorder{}} }

// Now is the history clock.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Note records a free-form line for the report (worker restarts etc).
func (r *Recorder) Note(s string) {
	r.mu.Lock()
	if len(r.notes) < 1000 {
		r.notes = append(r.notes, s)
	}
	r.mu.Unlock()
}

// kvOp records one key-value operation for porcupine.
func (r *Recorder) kvOp(clientID int, in kvInput, call int64, out kvOutput, ret int64, oc Outcome) {
	if oc == NotApplied {
		return
	}
	if oc == Unknown {
		out = kvOutput{Unknown: true}
		ret = -1 // fixed up to the end of the history by the checker
	}
	r.mu.Lock()
	r.kv = append(r.kv, porcupine.Operation{ClientId: clientID, Input: in, Call: call, Output: out, Return: ret})
	r.mu.Unlock()
}

// seqRead is a sequential (local) read: it must reflect every write whose
// zxid the session had seen before the read was sent.
type seqRead struct {
	Client  int
	Key     string
	SeenZx  int64 // the session's last-seen zxid before the call
	Exists  bool
	Mzxid   int64
	Value   string
	Session int64
}

// ackedWrite is an acknowledged Set or Create of a key with its zxid.
type ackedWrite struct {
	Key   string
	Zxid  int64
	Value string
}

func (r *Recorder) seqRead(s seqRead) {
	r.mu.Lock()
	r.seq = append(r.seq, s)
	r.mu.Unlock()
}

func (r *Recorder) ackedWrite(key string, st *client.Stat, value string) {
	if st == nil {
		return
	}
	r.mu.Lock()
	r.acked = append(r.acked, ackedWrite{Key: key, Zxid: st.GetMzxid(), Value: value})
	r.mu.Unlock()
}

// lockEvent is one lock operation by a worker.
type lockEvent struct {
	Kind    lockKind
	Worker  string
	Session int64
	Lock    string
	Token   uint64
	Call    int64
	Return  int64 // -1 when the outcome is unknown
	Err     error
	Value   string // fenced writes: the value written
	Version int32  // fenced writes: resulting version when acknowledged
}

type lockKind int

const (
	evGrant   lockKind = iota // Lock returned a lease
	evRelease                 // Unlock (Err nil: held until the release applied)
	evFenced                  // fenced Set of the protected value
	evLost                    // the lease's Lost channel closed (time in Return)
)

func (r *Recorder) lock(e lockEvent) {
	r.mu.Lock()
	r.locks = append(r.locks, e)
	r.mu.Unlock()
}

// durableCreate is a create of a unique node by the durability writer.
type durableCreate struct {
	Path   string
	Acked  bool
	Call   int64 // history clock at the call and the reply
	Return int64
}

func (r *Recorder) durable(d durableCreate) {
	r.mu.Lock()
	r.durab = append(r.durab, d)
	r.mu.Unlock()
}

// FaultRecord is one injected fault, for the report. Times are on the
// history clock.
type FaultRecord struct {
	Kind string
	Desc string
	// Start is when the fault took hold (the signal sent, the links cut,
	// the transfer asked); Undone when it was taken back (processes
	// continued or restarted, links healed), equal to Start for a fault
	// with nothing to undo; End when the fault's step returned.
	Start, Undone, End time.Duration
	// Down is the planned time the processes stay down (kills); the
	// availability bound of a kill-all adds it.
	Down time.Duration
	// ToNextWrite is the time from Start to the acknowledgment of the
	// first write invoked after it (see ackedWrites); -1 when none came
	// before the workload ended.
	ToNextWrite time.Duration
	// Bound is the unavailability allowed after this fault; OverBound
	// says it was passed (no write within it, or none at all while the
	// workload ran on past it).
	Bound     time.Duration
	OverBound bool
}

func (r *Recorder) fault(f FaultRecord) {
	r.mu.Lock()
	r.faults = append(r.faults, f)
	r.mu.Unlock()
}
