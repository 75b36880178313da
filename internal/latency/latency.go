// Package latency owns the round-trip times a server measures to its peers
// (the cloud latency tester of "Cloudy forecast", run continuously): per peer, and per
// probe round the time to hear from a majority (what a commit waits for) and
// from every peer. Each is an HDR histogram over a sliding window plus one
// since start, so both the present and the long tail are visible.
//
// The Tracker is fed by the transport (StartRound when a round of probes
// goes out, Reply when an echo returns) and read by metrics, the API and
// timeout tuning. It never sends anything itself.
package latency

import (
	"slices"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

const (
	minMicros = 1
	maxMicros = 60_000_000 // 60 s: anything slower is recorded as 60 s
	sigDigits = 2
	// MaxOpenRounds bounds rounds awaiting replies; the oldest is expired
	// (its missing replies counted lost) to admit a new one.
	MaxOpenRounds = 256
)

// Stats summarises one histogram.
type Stats struct {
	Count                     int64
	Mean, P50, P90, P99, P999 time.Duration
	Min, Max                  time.Duration
}

// Series is one measured quantity: over the window and since start, and
// how many expected samples never came (probes or rounds lost).
type Series struct {
	Window, Total Stats
	Lost          int64
}

// PeerSeries is the round trip to one peer. Series holds every sample;
// Net (over the window) only those taken while the peer was answering
// steadily, and Stalled counts the samples left out of Net (see Reply).
type PeerSeries struct {
	Peer uint64
	Series
	Net     Stats
	Stalled int64
}

// Snapshot is everything a Tracker knows, at one instant.
type Snapshot struct {
	Self   uint64
	Window time.Duration
	Peers  []PeerSeries
	Quorum Series // per round: until a majority of the voters (this server included if it votes) answered
	All    Series // per round: until every peer answered
}

type series struct {
	cur, prev, total *hdrhistogram.Histogram
	lost             int64
}

// peerState is what Reply knows about one peer: every sample (all), the
// network samples (net: cur and prev only), when its last reply came and
// since when its probes count again.
type peerState struct {
	all, net  *series
	lastReply time.Time
	resumed   time.Time
	stalled   int64
}

func newPeerState() *peerState {
	return &peerState{all: newSeries(), net: &series{cur: newHist(), prev: newHist()}} // net: window only
}

func newSeries() *series {
	return &series{cur: newHist(), prev: newHist(), total: newHist()}
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(minMicros, maxMicros, sigDigits) }

func (s *series) record(d time.Duration) {
	us := min(max(d.Microseconds(), minMicros), maxMicros)
	s.cur.RecordValue(us)
	if s.total != nil {
		s.total.RecordValue(us)
	}
}

func (s *series) rotate() {
	s.prev, s.cur = s.cur, s.prev
	s.cur.Reset()
}

func (s *series) snapshot() Series {
	w := newHist()
	w.Merge(s.prev)
	w.Merge(s.cur)
	out := Series{Window: stats(w), Lost: s.lost}
	if s.total != nil {
		out.Total = stats(s.total)
	}
	return out
}

func stats(h *hdrhistogram.Histogram) Stats {
	if h.TotalCount() == 0 {
		return Stats{}
	}
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	return Stats{Count: h.TotalCount(), Mean: time.Duration(h.Mean() * float64(time.Microsecond)),
		P50: us(h.ValueAtQuantile(50)), P90: us(h.ValueAtQuantile(90)), P99: us(h.ValueAtQuantile(99)),
		P999: us(h.ValueAtQuantile(99.9)), Min: us(h.Min()), Max: us(h.Max())}
}

type round struct {
	seq      uint64
	started  time.Time
	replied  map[uint64]bool
	votes    int           // replies from voters, plus this server if it votes
	quorum   bool          // the majority latency was recorded
	slowest  time.Duration // the longest round trip replied so far
	slowVote time.Duration // the same, among voters
}

// Tracker accumulates measurements; safe for concurrent use.
type Tracker struct {
	self      uint64
	peers     []uint64
	voters    map[uint64]bool // who counts toward a quorum
	selfVotes bool
	window    time.Duration
	now       func() time.Time
	maxAge    time.Duration // a round older than this is expired
	stallGap  time.Duration // a peer silent this long has stalled (see Reply)

	mu      sync.Mutex
	perPeer map[uint64]*peerState
	quorum  *series
	all     *series
	open    []*round // oldest first
	nextSeq uint64
	rotated time.Time
}

// New tracks self's round trips to peers (self excluded) over a sliding
// window of about window (between window/2 and window of samples); the
// quorum latency counts the voters only (learners do not make a quorum). A
// round whose replies have not all come within maxAge is expired. now is
// the clock (time.Now outside tests).
func New(self uint64, peers, voters []uint64, window, maxAge time.Duration, now func() time.Time) *Tracker {
	t := &Tracker{self: self, window: window, maxAge: maxAge, stallGap: DefaultStallGap, now: now, perPeer: map[uint64]*peerState{},
		voters: map[uint64]bool{}, quorum: newSeries(), all: newSeries(), nextSeq: 1, rotated: now()}
	for _, v := range voters {
		t.voters[v] = true
	}
	t.selfVotes = t.voters[self]
	for _, p := range peers {
		if p != self {
			t.peers = append(t.peers, p)
			t.perPeer[p] = newPeerState()
		}
	}
	slices.Sort(t.peers)
	return t
}

// DefaultStallGap is the silence after which a peer counts as having
// stalled: three probe intervals at the default 200 ms.
const DefaultStallGap = 600 * time.Millisecond

// SetStallGap sets how long a peer may go without answering before the
// probes it answers late are left out of its network samples; about three
// probe intervals (a steady peer answers one per interval, however far).
func (t *Tracker) SetStallGap(d time.Duration) {
	t.mu.Lock()
	t.stallGap = d
	t.mu.Unlock()
}

// SetPeers changes who is probed and who votes, after a membership change.
// Measurements of peers that stay are kept; open rounds are expired (their
// replies would be counted against the wrong quorum).
func (t *Tracker) SetPeers(peers, voters []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.open {
		t.expire(r)
	}
	t.open = nil
	t.voters = map[uint64]bool{}
	for _, v := range voters {
		t.voters[v] = true
	}
	t.selfVotes = t.voters[t.self]
	per := map[uint64]*peerState{}
	t.peers = nil
	for _, p := range peers {
		if p == t.self || per[p] != nil {
			continue
		}
		t.peers = append(t.peers, p)
		if s := t.perPeer[p]; s != nil {
			per[p] = s
		} else {
			per[p] = newPeerState()
		}
	}
	slices.Sort(t.peers)
	t.perPeer = per
}

// Peers returns the peers probed.
func (t *Tracker) Peers() []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.peers)
}

// LastReply is when peer last answered a probe (zero: never, or not a
// peer). A replica whose raft group is quiesced uses it to notice that
// the group's leader stopped answering (internal/replica/quiesce.go).
func (t *Tracker) LastReply(peer uint64) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ps := t.perPeer[peer]; ps != nil {
		return ps.lastReply
	}
	return time.Time{}
}

// StartRound opens a round of probes and returns its sequence number.
func (t *Tracker) StartRound() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.maintain(now)
	if len(t.open) >= MaxOpenRounds {
		t.expire(t.open[0])
		t.open = t.open[1:]
	}
	seq := t.nextSeq
	t.nextSeq++
	r := &round{seq: seq, started: now, replied: map[uint64]bool{}}
	if t.selfVotes {
		r.votes = 1
	}
	if r.votes >= t.majority() { // a single voter is its own quorum, at once
		r.quorum = true
		t.quorum.record(0)
	}
	if len(t.peers) == 0 {
		t.all.record(0)
		return seq
	}
	t.open = append(t.open, r)
	return seq
}

// Reply records peer's echo of round seq, which took rtt (measured by the
// caller from the send time carried in the probe). Unknown peers, rounds
// already expired and duplicates are ignored.
//
// Every sample goes into the peer's Series. Only network samples go into
// Net: a peer that stops answering for longer than the stall gap (paused,
// restarting, cut off, or this server itself stalled) answers the probes
// that waited meanwhile in a burst when it comes back, each with a round
// trip as long as its wait, which says nothing about the network. So when
// a reply ends such a silence (or is the peer's first), every probe sent
// before that moment is left out of Net; probes sent after it count. A
// steady peer answers one probe per interval however far away it is, so a
// slow network keeps counting; a stall shorter than the gap can leak a few
// samples, which a robust statistic over the window absorbs.
func (t *Tracker) Reply(peer, seq uint64, rtt time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.maintain(now)
	ps := t.perPeer[peer]
	if ps == nil {
		return
	}
	s := ps.all
	i := slices.IndexFunc(t.open, func(r *round) bool { return r.seq == seq })
	if i < 0 {
		return
	}
	r := t.open[i]
	if r.replied[peer] {
		return
	}
	r.replied[peer] = true
	s.record(rtt)
	if ps.lastReply.IsZero() || now.Sub(ps.lastReply) > t.stallGap {
		ps.resumed = now
	}
	ps.lastReply = now
	if now.Add(-rtt).Before(ps.resumed) {
		ps.stalled++
	} else {
		ps.net.record(rtt)
	}
	if t.voters[peer] {
		r.votes++
	}
	// This reply completes a majority or all; the round's latency is the
	// longest round trip among the replies counted (each probe carries its
	// own send time, stamped when written, so replies need not arrive in
	// round-trip order).
	r.slowest = max(r.slowest, rtt)
	if t.voters[peer] {
		r.slowVote = max(r.slowVote, rtt)
	}
	if !r.quorum && r.votes >= t.majority() {
		r.quorum = true
		t.quorum.record(r.slowVote)
	}
	if len(r.replied) == len(t.peers) {
		t.all.record(r.slowest)
		t.open = slices.Delete(t.open, i, i+1)
	}
}

func (t *Tracker) majority() int { return len(t.voters)/2 + 1 }

// maintain expires old rounds and rotates the window.
func (t *Tracker) maintain(now time.Time) {
	for len(t.open) > 0 && now.Sub(t.open[0].started) > t.maxAge {
		t.expire(t.open[0])
		t.open = t.open[1:]
	}
	if now.Sub(t.rotated) >= t.window/2 {
		for _, ps := range t.perPeer {
			ps.all.rotate()
			ps.net.rotate()
		}
		t.quorum.rotate()
		t.all.rotate()
		t.rotated = now
	}
}

func (t *Tracker) expire(r *round) {
	for _, p := range t.peers {
		if !r.replied[p] {
			t.perPeer[p].all.lost++
		}
	}
	if !r.quorum {
		t.quorum.lost++
	}
	t.all.lost++
}

// Snapshot returns the current statistics.
func (t *Tracker) Snapshot() Snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.maintain(t.now())
	out := Snapshot{Self: t.self, Window: t.window, Quorum: t.quorum.snapshot(), All: t.all.snapshot()}
	for _, p := range t.peers {
		ps := t.perPeer[p]
		out.Peers = append(out.Peers, PeerSeries{Peer: p, Series: ps.all.snapshot(), Net: ps.net.snapshot().Window, Stalled: ps.stalled})
	}
	return out
}
