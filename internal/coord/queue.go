package coord

import (
	"container/heap"
	"math"
	"sort"

	"github.com/meridian-coord/meridian/internal/errs"
)

// Queues: FIFO work queues with at-least-once delivery.
//
// An item's id is the log index of its push. A pop takes the head item and
// makes it invisible for a visibility lease; the consumer acks it (gone),
// nacks it (back to the front), or lets the lease pass or its session end
// (back to the front, redelivered with the next attempt number). A pop that
// finds the queue empty waits in the state, FIFO among consumers, and is
// handed the next item by the apply that makes one available (a push, nack,
// expiry or session end): one round trip for the consumer, one commit for
// the hand-off.
//
// Returned items go to the front, in push order, not to the back: the item
// was the oldest work, and sending it behind everything pushed since would
// reorder the queue on every retry. A consumer that keeps failing on an item
// sees its Attempt grow and decides (ack to drop it, or move it elsewhere).
//
// Lease time is the proposer's clock carried in commands: a delivery's
// deadline is the popping (or pushing) command's TimeMs plus the visibility;
// the leader proposes OpTick with its clock once a deadline has passed.

// Queue limits; each is enforced in Apply with its own error.
const (
	MaxItemBytes          = MaxValueBytes // one item's data (ErrItemTooLarge)
	MaxQueueItems         = 100000        // ready + in flight in one queue (ErrQueueFull)
	MaxQueueBytes         = 64 << 20      // data in one queue (ErrQueueFull)
	MaxQueues             = 10000         // queues with items or consumers (ErrTooManyQueues)
	MaxQueuedBytes        = 1 << 30       // data in all queues (ErrTooManyQueues)
	MaxConsumersPerQueue  = 10000         // waiting pops on one queue (ErrTooManyConsumers)
	MaxInFlightPerSession = 1000          // a session's waiting pops + session-bound deliveries (ErrTooManyInFlight)
	DefaultVisibilityMs   = 30000
	MaxVisibilityMs       = 12 * 3600 * 1000 // 12 hours
)

// Delivery is an item handed to a consumer.
type Delivery struct {
	Queue      string
	ID         uint64 // the push's log index
	Data       []byte
	Attempt    uint32 // 1 on first delivery; +1 on each redelivery
	Session    int64  // the consumer; 0 for a detached delivery
	DeadlineMs int64  // the lease: redelivered after this time unless acked
}

type qitem struct {
	id       uint64
	data     []byte
	attempts uint32 // deliveries so far
}

type inflight struct {
	qitem
	session  int64 // 0: detached (outlives the popping session)
	deadline int64
	waiter   uint64 // proposal id of the pop it answered
	lease    *lease
}

// Consumer is a waiting pop.
type Consumer struct {
	Session      int64
	Waiter       uint64 // the pop's proposal id
	VisibilityMs int64
	Detach       bool
}

type queue struct {
	ready     []qitem // ascending id (push order); returned items go back in order
	inflight  map[uint64]*inflight
	consumers []Consumer // FIFO; non-empty only while ready is empty
	bytes     int64
}

// lease is a delivery's entry in the expiry heap. Settling a delivery
// removes its entry, so the heap holds exactly the in-flight deliveries and
// the leader proposes a tick only when one is really due. The heap is
// derived data: not in snapshots, rebuilt on restore; its layout may differ
// between replicas, so expiry sorts what it takes.
type lease struct {
	deadline int64
	queue    string
	id       uint64
	index    int // position in the heap; -1 once out of it
}

type leaseHeap []*lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *leaseHeap) Push(x any) {
	l := x.(*lease)
	l.index = len(*h)
	*h = append(*h, l)
}
func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.index = -1
	return l
}

type queues struct {
	qs        map[string]*queue
	qSession  map[int64]map[string]int // session -> queue -> waiting pops + session-bound deliveries
	qBytes    int64                    // data in all queues
	nInflight int
	leases    leaseHeap
}

func (q *queues) init() {
	q.qs = map[string]*queue{}
	q.qSession = map[int64]map[string]int{}
}

func (s *State) applyQueue(index uint64, c *Command, live LiveFunc) (Result, []Grant, []Loss) {
	switch c.Op {
	case OpPush:
		return s.push(index, c)
	case OpPop:
		return s.pop(c, live)
	case OpAck, OpNack:
		return s.settle(c)
	default: // OpCancelPop
		return s.cancelPop(c), nil, nil
	}
}

func (s *State) push(index uint64, c *Command) (Result, []Grant, []Loss) {
	n := int64(len(c.Value))
	if n > MaxItemBytes {
		return Result{Err: errs.ErrItemTooLarge}, nil, nil
	}
	q := s.qs[c.Name]
	if q == nil && len(s.qs) >= MaxQueues {
		return Result{Err: errs.ErrTooManyQueues}, nil, nil
	}
	if q != nil && (len(q.ready)+len(q.inflight) >= MaxQueueItems || q.bytes+n > MaxQueueBytes) {
		return Result{Err: errs.ErrQueueFull}, nil, nil
	}
	if s.qBytes+n > MaxQueuedBytes {
		return Result{Err: errs.ErrTooManyQueues}, nil, nil
	}
	if q == nil {
		q = &queue{inflight: map[uint64]*inflight{}}
		s.qs[c.Name] = q
	}
	q.ready = append(q.ready, qitem{id: index, data: c.Value})
	q.bytes += n
	s.qBytes += n
	return Result{Pushed: index}, s.handOut(c.Name, q, c.TimeMs), nil
}

func (s *State) pop(c *Command, live LiveFunc) (Result, []Grant, []Loss) {
	vis := c.VisibilityMs
	if vis == 0 {
		vis = DefaultVisibilityMs
	}
	if vis < 0 || vis > MaxVisibilityMs {
		return Result{Err: errs.ErrBadArguments}, nil, nil
	}
	if !live(c.Session) {
		return Result{Err: errs.ErrSessionExpired}, nil, nil
	}
	if s.sessionQueueLoad(c.Session) >= MaxInFlightPerSession {
		return Result{Err: errs.ErrTooManyInFlight}, nil, nil
	}
	q := s.qs[c.Name]
	if q != nil && len(q.ready) > 0 {
		it := q.ready[0]
		q.ready = q.ready[1:]
		if !c.Detach {
			s.trackQ(c.Session, c.Name, 1)
		}
		d := s.deliver(c.Name, q, it, Consumer{Session: c.Session, Waiter: c.ID, VisibilityMs: vis, Detach: c.Detach}, c.TimeMs)
		return Result{Granted: true, Item: d}, nil, nil
	}
	if !c.Wait {
		return Result{Err: errs.ErrQueueEmpty}, nil, nil
	}
	if q == nil && len(s.qs) >= MaxQueues {
		return Result{Err: errs.ErrTooManyQueues}, nil, nil
	}
	if q != nil && len(q.consumers) >= MaxConsumersPerQueue {
		return Result{Err: errs.ErrTooManyConsumers}, nil, nil
	}
	if q == nil {
		q = &queue{inflight: map[uint64]*inflight{}}
		s.qs[c.Name] = q
	}
	q.consumers = append(q.consumers, Consumer{Session: c.Session, Waiter: c.ID, VisibilityMs: vis, Detach: c.Detach})
	s.trackQ(c.Session, c.Name, 1)
	return Result{Position: len(q.consumers)}, nil, nil
}

// deliver puts it in flight for consumer w with a lease from nowMs. The
// caller has already counted the delivery against w's session if it is
// session-bound.
func (s *State) deliver(name string, q *queue, it qitem, w Consumer, nowMs int64) *Delivery {
	if it.attempts < math.MaxUint32 {
		it.attempts++
	}
	f := &inflight{qitem: it, deadline: addSat(nowMs, w.VisibilityMs), waiter: w.Waiter}
	if !w.Detach {
		f.session = w.Session
	}
	q.inflight[it.id] = f
	s.nInflight++
	f.lease = &lease{deadline: f.deadline, queue: name, id: it.id}
	heap.Push(&s.leases, f.lease)
	return f.delivery(name)
}

func (f *inflight) delivery(name string) *Delivery {
	return &Delivery{Queue: name, ID: f.id, Data: f.data, Attempt: f.attempts, Session: f.session, DeadlineMs: f.deadline}
}

func addSat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// handOut gives ready items to waiting consumers, FIFO on both sides.
func (s *State) handOut(name string, q *queue, nowMs int64) []Grant {
	var grants []Grant
	for len(q.consumers) > 0 && len(q.ready) > 0 {
		w := q.consumers[0]
		q.consumers = q.consumers[1:]
		it := q.ready[0]
		q.ready = q.ready[1:]
		if w.Detach {
			s.trackQ(w.Session, name, -1) // the waiting pop is answered; a detached delivery is not the session's
		}
		d := s.deliver(name, q, it, w, nowMs)
		grants = append(grants, Grant{Lock: name, Session: w.Session, Kind: GrantItem, Waiter: w.Waiter, Item: d})
	}
	return grants
}

// settle acks or nacks a delivery. A session-bound delivery is settled only
// by its session; a detached one by anyone who names it. Attempt 0 matches
// the current delivery; another attempt number must be the current one, so
// a consumer whose lease expired cannot settle the redelivery.
func (s *State) settle(c *Command) (Result, []Grant, []Loss) {
	q := s.qs[c.Name]
	var f *inflight
	if q != nil {
		f = q.inflight[c.Item]
	}
	if f == nil || (f.session != 0 && f.session != c.Session) || (c.Attempt != 0 && c.Attempt != f.attempts) {
		return Result{Err: errs.ErrNotInFlight}, nil, nil
	}
	s.takeInflight(c.Name, q, f)
	var grants []Grant
	if c.Op == OpNack {
		q.putBack(f.qitem)
		grants = s.handOut(c.Name, q, c.TimeMs)
	} else {
		q.bytes -= int64(len(f.data))
		s.qBytes -= int64(len(f.data))
	}
	s.dropQueueIfEmpty(c.Name, q)
	return Result{}, grants, nil
}

func (s *State) takeInflight(name string, q *queue, f *inflight) {
	delete(q.inflight, f.id)
	s.nInflight--
	if f.session != 0 {
		s.trackQ(f.session, name, -1)
	}
	if f.lease.index >= 0 {
		heap.Remove(&s.leases, f.lease.index)
	}
}

// putBack returns an item to the front of the queue, in push order.
func (q *queue) putBack(it qitem) {
	i := sort.Search(len(q.ready), func(i int) bool { return q.ready[i].id > it.id })
	q.ready = append(q.ready, qitem{})
	copy(q.ready[i+1:], q.ready[i:])
	q.ready[i] = it
}

// cancelPop withdraws a waiting pop. If it was answered meanwhile the result
// carries the delivery (still in flight), so the caller can take or nack it.
func (s *State) cancelPop(c *Command) Result {
	q := s.qs[c.Name]
	if q == nil {
		return Result{}
	}
	for i, w := range q.consumers {
		if w.Waiter == c.Waiter && w.Session == c.Session {
			q.consumers = append(q.consumers[:i:i], q.consumers[i+1:]...)
			s.trackQ(c.Session, c.Name, -1)
			s.dropQueueIfEmpty(c.Name, q)
			return Result{}
		}
	}
	for _, id := range q.inflightIDs() {
		if f := q.inflight[id]; f.waiter == c.Waiter && (f.session == c.Session || f.session == 0) {
			return Result{Granted: true, Item: f.delivery(c.Name)}
		}
	}
	return Result{}
}

func (q *queue) inflightIDs() []uint64 {
	ids := make([]uint64, 0, len(q.inflight))
	for id := range q.inflight {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func (s *State) dropQueueIfEmpty(name string, q *queue) {
	if len(q.ready) == 0 && len(q.inflight) == 0 && len(q.consumers) == 0 {
		delete(s.qs, name)
	}
}

func (s *State) trackQ(session int64, name string, delta int) {
	m := s.qSession[session]
	if m == nil {
		m = map[string]int{}
		s.qSession[session] = m
	}
	if m[name] += delta; m[name] <= 0 {
		delete(m, name)
		if len(m) == 0 {
			delete(s.qSession, session)
		}
	}
}

func (s *State) sessionQueueLoad(session int64) int {
	n := 0
	for _, k := range s.qSession[session] {
		n += k
	}
	return n
}

// leaseDue reports whether a delivery's lease has passed by nowMs.
func (s *State) leaseDue(nowMs int64) bool {
	return len(s.leases) > 0 && s.leases[0].deadline <= nowMs
}

// expireLeases returns every delivery whose lease passed by nowMs to the
// front of its queue and hands items to waiting consumers. Order is by
// queue name, then id, whatever the heap's layout.
func (s *State) expireLeases(nowMs int64) []Grant {
	var due []*lease
	for len(s.leases) > 0 && s.leases[0].deadline <= nowMs {
		due = append(due, heap.Pop(&s.leases).(*lease))
	}
	sort.Slice(due, func(i, j int) bool {
		if due[i].queue != due[j].queue {
			return due[i].queue < due[j].queue
		}
		return due[i].id < due[j].id
	})
	var grants []Grant
	for i, l := range due {
		q := s.qs[l.queue]
		f := q.inflight[l.id]
		s.takeInflight(l.queue, q, f)
		q.putBack(f.qitem)
		if i == len(due)-1 || due[i+1].queue != l.queue {
			grants = append(grants, s.handOut(l.queue, q, nowMs)...)
		}
	}
	return grants
}

func (s *State) rebuildLeases() {
	h := make(leaseHeap, 0, s.nInflight)
	for name, q := range s.qs {
		for _, f := range q.inflight {
			f.lease = &lease{deadline: f.deadline, queue: name, id: f.id, index: len(h)}
			h = append(h, f.lease)
		}
	}
	heap.Init(&h)
	s.leases = h
}

// queueSessionsEnded withdraws the sessions' waiting pops and returns their
// session-bound deliveries to the front of their queues, which may hand
// them to other consumers at once.
func (s *State) queueSessionsEnded(sessions []int64, nowMs int64) []Grant {
	// Every ended session leaves every queue before anything is handed out,
	// so no item goes to a consumer ending in the same command.
	touched := map[string]bool{}
	for _, session := range sessions {
		names := make([]string, 0, len(s.qSession[session]))
		for name := range s.qSession[session] {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			q := s.qs[name]
			if q == nil {
				continue
			}
			kept := q.consumers[:0:0]
			for _, w := range q.consumers {
				if w.Session != session {
					kept = append(kept, w)
				}
			}
			q.consumers = kept
			for _, id := range q.inflightIDs() {
				if f := q.inflight[id]; f.session == session {
					s.takeInflight(name, q, f)
					q.putBack(f.qitem)
				}
			}
			touched[name] = true
		}
		delete(s.qSession, session)
	}
	names := make([]string, 0, len(touched))
	for name := range touched {
		names = append(names, name)
	}
	sort.Strings(names)
	var grants []Grant
	for _, name := range names {
		if q := s.qs[name]; q != nil {
			grants = append(grants, s.handOut(name, q, nowMs)...)
			s.dropQueueIfEmpty(name, q)
		}
	}
	return grants
}

// QueueInfo summarizes one queue.
type QueueInfo struct {
	Name      string
	Ready     int    // items waiting for a consumer
	InFlight  int    // delivered, not yet acked
	Consumers int    // waiting pops
	Bytes     int64  // data of ready and in-flight items
	Head      uint64 // id of the next item a pop gets (0: none ready)
}

// QueueStats returns a queue's summary; a queue with nothing in it (or never
// used) reports zeros.
func (s *State) QueueStats(name string) QueueInfo {
	info := QueueInfo{Name: name}
	if q := s.qs[name]; q != nil {
		info.Ready, info.InFlight, info.Consumers, info.Bytes = len(q.ready), len(q.inflight), len(q.consumers), q.bytes
		if len(q.ready) > 0 {
			info.Head = q.ready[0].id
		}
	}
	return info
}

// InFlight lists a queue's deliveries in id order, at most limit.
func (s *State) InFlight(name string, limit int) []Delivery {
	q := s.qs[name]
	if q == nil {
		return nil
	}
	var out []Delivery
	for _, id := range q.inflightIDs() {
		if len(out) >= limit {
			break
		}
		out = append(out, *q.inflight[id].delivery(name))
	}
	return out
}

// DeliveryFor returns the in-flight delivery that answered the pop with
// proposal id waiter by session, if any (a server that skipped the grant by
// installing a snapshot finds it here).
func (s *State) DeliveryFor(name string, session int64, waiter uint64) *Delivery {
	q := s.qs[name]
	if q == nil {
		return nil
	}
	for _, id := range q.inflightIDs() {
		if f := q.inflight[id]; f.waiter == waiter && (f.session == session || f.session == 0) {
			return f.delivery(name)
		}
	}
	return nil
}

// Queues lists the summaries of the queues with items or waiting
// consumers, by name, at most limit, and how many such queues there are.
func (s *State) Queues(limit int) ([]QueueInfo, int) {
	names := make([]string, 0, len(s.qs))
	for n := range s.qs {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]QueueInfo, 0, min(limit, len(names)))
	for _, n := range names[:min(limit, len(names))] {
		out = append(out, s.QueueStats(n))
	}
	return out, len(names)
}
