package replica

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/confchange"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/latency"
)

// Frame: 4-byte big-endian body length, then the body: 1 byte kind, 8 bytes
// sender id, payload. A connection opens with a hello each way (see
// peerauth.go); after it every frame's sender must be the member the hello
// named. Snapshot messages travel under their own kind so a
// reader can apply the large limit to them only, before reading the body.
const (
	kindRaft byte = 1 // raft message other than MsgSnap
	kindSide byte = 2 // side-channel payload for the leader
	kindSnap byte = 3 // raft MsgSnap (carries the whole state machine snapshot)
	// Latency probes travel the same connections as raft messages, so they
	// measure what replication sees (queueing included). The payload is the
	// round's sequence number and the sender's clock; the reply echoes it.
	kindProbe      byte = 4
	kindProbeReply byte = 5
	probePayload        = 16
	// kindStepDown: a leader that stepped down without a successor in
	// sight (raft's CheckQuorum) tells the members it led. The payload is
	// the term it led and the member it names to campaign first (0: none).
	// It travels behind the raft messages queued before it, so it arrives
	// after the last heartbeat the sender sent as leader.
	kindStepDown byte = 8
	// Every raft group on a member other than the root (kinds 1, 3 and 8)
	// shares the same connections: its messages and step-down notices
	// travel under these kinds, the payload starting with the 8-byte group
	// id. A frame for a group this member does not run (not created here
	// yet, or removed) is dropped: raft retransmits, and the group's
	// creation reaches every member through the root group's log.
	kindGroupRaft     byte = 9
	kindGroupSnap     byte = 10
	kindGroupStepDown byte = 11
	groupIDBytes           = 8
	// kindGroupQuiesce: the leader of an idle group tells a member the
	// group goes quiet (quiesce.go). The payload, after the group id, is
	// the term it leads and its last index, which is also its commit
	// index. Only groups quiesce: the root has no such kind.
	kindGroupQuiesce byte = 12
	// kindGroupWake: a member of a group that has known no leader for an
	// election timeout (restarted while the group was quiet) asks the
	// others to tick again. The payload is the group id alone.
	kindGroupWake byte = 13
)

const (
	stepDownPayload = 16
	quiescePayload  = 16

	frameHeader = 1 + 8
	// maxSnapFrame bounds a MsgSnap frame, hence the state machine snapshot.
	maxSnapFrame = 256 << 20
	// maxSidePayload bounds side-channel payloads.
	maxSidePayload = 1 << 20
	// msgFrameSlack is added to MaxSizePerMsg+MaxProposalBytes for the
	// largest ordinary raft message: a MsgApp holds up to MaxSizePerMsg of
	// entries plus always at least one entry, which may be a full proposal.
	msgFrameSlack = 1 << 20
	// peerQueue bounds messages waiting for one peer; at the limit new
	// messages are dropped and raft is told the peer is unreachable (it
	// retransmits).
	peerQueue = 4096
	// urgentQueue bounds probes and echoes waiting for one peer (a few
	// rounds); at the limit new ones are dropped and counted lost.
	urgentQueue = 16
	// writeBatch bounds messages coalesced into one write.
	writeBatch = 256
	// maxInbound bounds inbound connections; more are closed at accept.
	maxInbound = 256
	// maxUnauthPerAddr bounds the inbound connections from one address
	// that have not yet finished their TLS handshake and hello (each for at
	// most helloTimeout): without it, one address that keeps opening
	// connections and saying nothing holds every inbound slot, and a member
	// that restarts cannot get back in. A member dials each other member
	// once at a time, so a host running several members needs a few.
	maxUnauthPerAddr = 16
	dialTimeout      = time.Second
	// writeTimeout (plus a second per MiB) bounds one batched write, so a
	// peer that stopped reading is noticed and redialled.
	writeTimeout = 5 * time.Second
)

// errNoClusterID: a joining member has not yet been contacted by the group,
// so it has no cluster id to present and does not dial.
var errNoClusterID = errors.New("no cluster id yet (waiting to be contacted by the group)")

type outMsg struct {
	kind  byte
	group uint64 // 0: the root group
	msg   *pb.Message
	side  []byte
}

// transportEvents are reported back to the raft loop.
type transportEvents interface {
	deliver(m *pb.Message)
	side(from uint64, payload []byte)
	unreachable(id uint64)
	snapshotDone(id uint64, ok bool)
	steppedDown(from, term, successor uint64)
	quiesceNotice(from, term, index uint64)
	wakeRequest(from uint64)
}

type transport struct {
	id  uint64
	log *slog.Logger
	ev  transportEvents // the root group's
	// groups are the other raft groups on this member (copy on write).
	groups  atomic.Pointer[map[uint64]transportEvents]
	groupMu sync.Mutex // serialises changes to groups
	lat     *latency.Tracker
	origin  time.Time // probe send times are offsets from it (monotonic)
	ln      net.Listener
	// peers (the others) and members (everyone in the configuration, self
	// included) change with the membership: readers load the current map,
	// setPeers swaps in a new one (copy on write).
	peers atomic.Pointer[map[uint64]*peerConn]
	// members maps every member to the certificate identity it presents.
	members atomic.Pointer[map[uint64]string]
	pmu     sync.Mutex // serialises setPeers
	// maxMsgFrame bounds an ordinary (non-snapshot) raft message frame.
	maxMsgFrame int
	// snap: the member's snapshot files, streamed to and from (snapstream.go).
	snap snapStore
	// tls: nil for plaintext (the operator said insecure).
	tls *PeerTLS
	// cluster is this member's cluster id, 0 until a joining member adopts
	// one (adoptCluster, which stores it through adopt).
	cluster atomic.Uint64
	adoptMu sync.Mutex
	adopt   func(uint64) error

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	inbound int
	// unauth counts, per remote address, the inbound connections not yet
	// authenticated; unauthAddr is each such connection's address.
	unauth     map[string]int
	unauthAddr map[net.Conn]string
	closed     bool
	stop       chan struct{}
	wg         sync.WaitGroup
}

type peerConn struct {
	id       uint64
	addr     string
	identity string // what its certificate must assert
	q        chan outMsg
	// urgent carries probes and their echoes, which go ahead of queued
	// raft traffic so they measure the network, not this queue.
	urgent chan outMsg
	quit   chan struct{} // closed when the peer leaves the configuration
}

// events returns the receiver of group's events, nil when this member does
// not run group.
func (t *transport) events(group uint64) transportEvents {
	if group == 0 {
		return t.ev
	}
	if g := t.groups.Load(); g != nil {
		return (*g)[group]
	}
	return nil
}

// addGroup routes group's frames to ev; it fails when group already runs.
func (t *transport) addGroup(group uint64, ev transportEvents) error {
	t.groupMu.Lock()
	defer t.groupMu.Unlock()
	next := map[uint64]transportEvents{}
	if g := t.groups.Load(); g != nil {
		if _, ok := (*g)[group]; ok {
			return fmt.Errorf("replica: group %d already runs on this member", group)
		}
		for k, v := range *g {
			next[k] = v
		}
	}
	next[group] = ev
	t.groups.Store(&next)
	return nil
}

// removeGroup stops routing group's frames (they are dropped from now on).
func (t *transport) removeGroup(group uint64) {
	t.groupMu.Lock()
	defer t.groupMu.Unlock()
	next := map[uint64]transportEvents{}
	if g := t.groups.Load(); g != nil {
		for k, v := range *g {
			if k != group {
				next[k] = v
			}
		}
	}
	t.groups.Store(&next)
}

// peer returns the connection to id, nil when id is not a peer.
func (t *transport) peer(id uint64) *peerConn { return (*t.peers.Load())[id] }

// isMember reports whether id is in the configuration (self included).
func (t *transport) isMember(id uint64) bool {
	_, ok := (*t.members.Load())[id]
	return ok
}

// setPeers makes peers the configuration: writers start for new peers and
// for peers whose address changed, and stop for peers that left.
func (t *transport) setPeers(peers []Peer) {
	t.pmu.Lock()
	defer t.pmu.Unlock()
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	old := map[uint64]*peerConn{}
	if p := t.peers.Load(); p != nil {
		old = *p
	}
	next, members := map[uint64]*peerConn{}, map[uint64]string{}
	for _, p := range peers {
		ident := t.identityOf(p)
		members[p.ID] = ident
		if p.ID == t.id {
			continue
		}
		if pc := old[p.ID]; pc != nil && pc.addr == p.Addr && pc.identity == ident {
			next[p.ID] = pc
			continue
		}
		pc := &peerConn{id: p.ID, addr: p.Addr, identity: ident, q: make(chan outMsg, peerQueue), urgent: make(chan outMsg, urgentQueue), quit: make(chan struct{})}
		next[p.ID] = pc
		if !closed {
			t.wg.Add(1)
			go t.writer(pc)
		}
	}
	for id, pc := range old {
		if next[id] != pc {
			close(pc.quit)
		}
	}
	t.members.Store(&members)
	t.peers.Store(&next)
}

// transportSecurity is how a transport authenticates its peers: TLS (nil:
// plaintext), this member's cluster id (0: adopt the first authenticated
// one, storing it through adopt).
type transportSecurity struct {
	tls     *PeerTLS
	cluster uint64
	adopt   func(uint64) error
}

func newTransport(id uint64, listen string, peers []Peer, maxMsgFrame int, sec transportSecurity, ev transportEvents, lat *latency.Tracker, probeEvery time.Duration, log *slog.Logger) (*transport, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("peer listener: %w", err)
	}
	t := &transport{id: id, log: log, ev: ev, lat: lat, origin: time.Now(), ln: ln,
		maxMsgFrame: maxMsgFrame, conns: map[net.Conn]struct{}{}, unauth: map[string]int{}, unauthAddr: map[net.Conn]string{}, stop: make(chan struct{}),
		tls: sec.tls, adopt: sec.adopt}
	t.cluster.Store(sec.cluster)
	t.setPeers(peers)
	t.wg.Add(1)
	go t.accept()
	if lat != nil && probeEvery > 0 {
		t.wg.Add(1)
		go t.probe(probeEvery)
	}
	return t, nil
}

// probe sends a round of probes to every peer at a steady rate. A probe
// that finds its peer's queue full is dropped (and counted lost when its
// round expires), like any message to an overloaded peer. Probes and
// echoes jump the raft queue and a probe's send time is stamped when it is
// written (writer), so a round trip is the network and the two processes'
// turnaround, not the time spent queued behind raft traffic or a dial.
func (t *transport) probe(every time.Duration) {
	defer t.wg.Done()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
		}
		seq := t.lat.StartRound()
		for _, pc := range *t.peers.Load() {
			payload := make([]byte, probePayload) // stamped by the writer
			binary.BigEndian.PutUint64(payload, seq)
			select {
			case pc.urgent <- outMsg{kind: kindProbe, side: payload}:
			default:
			}
		}
	}
}

// probed handles a probe or its echo from peer from.
func (t *transport) probed(kind byte, from uint64, payload []byte) {
	if kind == kindProbe {
		if pc := t.peer(from); pc != nil {
			select {
			case pc.urgent <- outMsg{kind: kindProbeReply, side: append([]byte(nil), payload...)}:
			default:
			}
		}
		return
	}
	if t.lat == nil {
		return
	}
	sent := time.Duration(binary.BigEndian.Uint64(payload[8:]))
	if rtt := time.Since(t.origin) - sent; rtt >= 0 && sent > 0 {
		t.lat.Reply(from, binary.BigEndian.Uint64(payload), rtt)
	}
}

func (t *transport) close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	close(t.stop)
	t.ln.Close()
	for c := range t.conns {
		c.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
}

func (t *transport) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		c.Close()
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

func (t *transport) untrack(c net.Conn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
	c.Close()
}

// admit tracks an inbound connection unless maxInbound are already open
// or its address already has maxUnauthPerAddr that have not authenticated.
func (t *transport) admit(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	host := remoteHost(c)
	if t.closed || t.inbound >= maxInbound || t.unauth[host] >= maxUnauthPerAddr {
		c.Close()
		return false
	}
	t.inbound++
	t.conns[c] = struct{}{}
	t.unauth[host]++
	t.unauthAddr[c] = host
	return true
}

// authenticated stops counting c against its address's unauthenticated
// connections.
func (t *transport) authenticated(c net.Conn) {
	t.mu.Lock()
	t.forgetUnauth(c)
	t.mu.Unlock()
}

// forgetUnauth is authenticated's bookkeeping; t.mu is held.
func (t *transport) forgetUnauth(c net.Conn) {
	host, ok := t.unauthAddr[c]
	if !ok {
		return
	}
	delete(t.unauthAddr, c)
	if t.unauth[host]--; t.unauth[host] <= 0 {
		delete(t.unauth, host)
	}
}

func (t *transport) release(c net.Conn) {
	t.mu.Lock()
	t.inbound--
	delete(t.conns, c)
	t.forgetUnauth(c)
	t.mu.Unlock()
	c.Close()
}

// remoteHost is c's remote IP address (the whole address when it has no
// port).
func remoteHost(c net.Conn) string {
	a := c.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(a); err == nil {
		return host
	}
	return a
}

// send queues a raft message of group without blocking.
func (t *transport) send(group uint64, m *pb.Message) {
	pc := t.peer(m.GetTo())
	if pc == nil {
		return
	}
	select {
	case pc.q <- outMsg{kind: kindRaft, group: group, msg: m}:
	default:
		if ev := t.events(group); ev != nil {
			ev.unreachable(pc.id)
			if m.GetType() == pb.MsgSnap {
				ev.snapshotDone(pc.id, false)
			}
		}
	}
}

// sendStepDown queues a step-down notice of group to peer to, behind the
// raft messages already queued for it; dropped when the queue is full (the
// members then fall back to their own election timeouts).
func (t *transport) sendStepDown(group, to, term, successor uint64) {
	pc := t.peer(to)
	if pc == nil {
		return
	}
	payload := make([]byte, stepDownPayload)
	binary.BigEndian.PutUint64(payload, term)
	binary.BigEndian.PutUint64(payload[8:], successor)
	select {
	case pc.q <- outMsg{kind: kindStepDown, group: group, side: payload}:
	default:
	}
}

// sendQuiesce queues a quiesce notice of group (never the root) to peer
// to, behind the raft messages already queued for it (the heartbeats that
// carried the commit index); dropped when the queue is full (the member
// then keeps ticking).
func (t *transport) sendQuiesce(group, to, term, index uint64) {
	pc := t.peer(to)
	if pc == nil || group == 0 {
		return
	}
	payload := make([]byte, groupIDBytes+quiescePayload)
	binary.BigEndian.PutUint64(payload, group)
	binary.BigEndian.PutUint64(payload[8:], term)
	binary.BigEndian.PutUint64(payload[16:], index)
	select {
	case pc.q <- outMsg{kind: kindGroupQuiesce, group: group, side: payload}:
	default:
	}
}

// sendWake queues a wake request of group (never the root) to peer to;
// dropped when the queue is full (asked again an election timeout later).
func (t *transport) sendWake(group, to uint64) {
	pc := t.peer(to)
	if pc == nil || group == 0 {
		return
	}
	select {
	case pc.q <- outMsg{kind: kindGroupWake, group: group, side: binary.BigEndian.AppendUint64(nil, group)}:
	default:
	}
}

func (t *transport) sendSide(to uint64, payload []byte) error {
	pc := t.peer(to)
	if pc == nil {
		return errs.ErrNotLeader
	}
	select {
	case pc.q <- outMsg{kind: kindSide, side: payload}:
		return nil
	default:
		return errs.ErrThrottled
	}
}

// maxKeptScratch bounds the marshalling buffer a writer keeps between
// batches: a rare batch of large appends does not pin its size.
const maxKeptScratch = 1 << 20

// writer owns the outbound connection to one peer: it dials lazily,
// coalesces everything queued into one flushed write, and on any failure
// drops the batch (reporting it to raft), closes the connection and redials
// with backoff when the next message comes.
func (t *transport) writer(pc *peerConn) {
	defer t.wg.Done()
	var conn, raw net.Conn // raw: the TCP connection under conn (tracked)
	var w *bufio.Writer
	backoff := 50 * time.Millisecond
	var warned time.Time // last refusal logged at warning level
	defer func() {
		if raw != nil {
			t.untrack(raw)
		}
	}()
	batch := make([]outMsg, 0, writeBatch)
	var frames []frame // encode's, reused batch after batch
	var scratch []byte // the batch's marshalled raft messages (encode)
	keepalive := time.NewTimer(keepaliveEvery)
	defer keepalive.Stop()
	for {
		batch = batch[:0]
		select {
		case <-t.stop:
			return
		case <-pc.quit:
			return
		case m := <-pc.urgent:
			batch = append(batch, m)
		case m := <-pc.q:
			batch = append(batch, m)
		case <-keepalive.C:
			keepalive.Reset(keepaliveEvery)
			if conn == nil {
				continue
			}
			batch = append(batch, outMsg{kind: kindKeepalive})
		}
	drain:
		for len(batch) < writeBatch {
			select {
			case m := <-pc.urgent:
				batch = append(batch, m)
			default:
				select {
				case m := <-pc.q:
					batch = append(batch, m)
				default:
					break drain
				}
			}
		}
		// Probes and echoes first: they are independent of raft's order.
		slices.SortStableFunc(batch, func(a, b outMsg) int { return urgency(a.kind) - urgency(b.kind) })
		// The previous batch is written (or dropped): its buffers are free.
		if cap(scratch) > maxKeptScratch {
			scratch = nil
		}
		scratch = scratch[:0]
		clear(frames)
		var size int
		frames, size = t.encode(pc.id, batch, frames, &scratch)
		if len(frames) == 0 {
			continue
		}
		if conn == nil {
			var c, rc net.Conn
			err := errNoClusterID
			if t.cluster.Load() != 0 { // a joiner speaks once it has adopted one
				c, rc, err = t.dial(pc)
			}
			if err != nil {
				if rc == nil && errors.Is(err, net.ErrClosed) {
					return
				}
				if rc != nil {
					t.untrack(rc)
				}
				// Unreachable peers are routine (debug); a peer that
				// refuses us is a configuration or security problem
				// (warning, at most every 30 s per peer).
				if rc == nil || time.Since(warned) < 30*time.Second {
					t.log.Debug("peer dial failed", "peer", pc.id, "err", err)
				} else {
					warned = time.Now()
					t.log.Warn("peer connection refused", "peer", pc.id, "addr", pc.addr, "err", err)
				}
				t.failFrames(pc.id, frames)
				select {
				case <-t.stop:
					return
				case <-pc.quit:
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, time.Second)
				continue
			}
			backoff = 50 * time.Millisecond
			conn, raw, w = c, rc, bufio.NewWriterSize(c, 64<<10)
		}
		keepalive.Reset(keepaliveEvery)
		stampProbes(frames, time.Since(t.origin))
		conn.SetWriteDeadline(time.Now().Add(writeTimeout + time.Duration(size>>20)*time.Second))
		err := writeFrames(w, t.id, frames)
		if err == nil {
			err = w.Flush()
		}
		if err != nil {
			t.log.Debug("peer write failed", "peer", pc.id, "err", err)
			t.untrack(raw)
			conn, raw = nil, nil
			t.failFrames(pc.id, frames)
			continue
		}
		for _, f := range frames {
			if f.kind == kindSnap || f.kind == kindGroupSnap || f.kind == kindSnapStream {
				if ev := t.events(f.group); ev != nil {
					ev.snapshotDone(pc.id, true)
				}
			}
		}
	}
}

// urgency orders a batch: probes and echoes (0) before everything else (1).
func urgency(kind byte) int {
	if kind == kindProbe || kind == kindProbeReply {
		return 0
	}
	return 1
}

// stampProbes writes the send time (an offset from the transport's origin)
// into every probe about to be written.
func stampProbes(frames []frame, at time.Duration) {
	for _, f := range frames {
		if f.kind == kindProbe {
			binary.BigEndian.PutUint64(f.payload[8:], uint64(at))
		}
	}
}

// failFrames tells each group's raft that frames were not sent: the peer
// is unreachable (raft backs off to probing) and any snapshot failed (raft
// will retry it).
func (t *transport) failFrames(id uint64, frames []frame) {
	var reported map[uint64]bool
	for _, f := range frames {
		raftMsg, snap := f.kind == kindRaft || f.kind == kindGroupRaft, f.kind == kindSnap || f.kind == kindGroupSnap || f.kind == kindSnapStream
		if !raftMsg && !snap {
			continue
		}
		ev := t.events(f.group)
		if ev == nil {
			continue
		}
		if !reported[f.group] {
			ev.unreachable(id)
			if reported == nil {
				reported = map[uint64]bool{}
			}
			reported[f.group] = true
		}
		if snap {
			ev.snapshotDone(id, false)
		}
	}
}

type frame struct {
	kind    byte
	group   uint64 // kinds 9-11: the group (its id leads the payload)
	payload []byte
	stream  *snapSource // kindSnapStream: the file whose bytes follow the payload
}

// encode marshals a batch. A message that cannot be encoded, or is larger
// than peers accept, is dropped here and reported as a failed send instead of
// getting the connection closed by the receiver.
//
// Raft messages are marshalled into *buf, one buffer for the batch that
// the writer reuses once the batch is written (a raft message was an
// allocation of its size each), and frames reuses the writer's slice.
func (t *transport) encode(to uint64, batch []outMsg, frames []frame, buf *[]byte) ([]frame, int) {
	frames = frames[:0]
	size := 0
	for _, m := range batch {
		f := frame{kind: m.kind, group: m.group, payload: m.side}
		var prefix []byte
		if m.group != 0 {
			prefix = binary.BigEndian.AppendUint64(make([]byte, 0, groupIDBytes), m.group)
		}
		if m.kind == kindStepDown && m.group != 0 {
			f.kind, f.payload = kindGroupStepDown, append(prefix, m.side...)
		}
		if m.kind == kindRaft && m.msg.GetType() == pb.MsgSnap {
			sf, err := t.encodeSnap(m, prefix)
			if err != nil {
				t.log.Error("dropping unsendable snapshot", "peer", to, "group", m.group, "err", err)
				t.failFrames(to, []frame{{kind: sf.kind, group: m.group}})
				continue
			}
			f = sf
			if f.stream != nil {
				size += int(f.stream.size)
			}
		} else if m.kind == kindRaft {
			limit := t.maxMsgFrame
			if m.group != 0 {
				f.kind = kindGroupRaft
			}
			at := len(*buf)
			b := append(*buf, prefix...)
			b, err := (proto.MarshalOptions{}).MarshalAppend(b, m.msg)
			if err == nil && len(b)-at-len(prefix)+frameHeader > limit {
				err = fmt.Errorf("%d bytes exceed the %d byte frame limit", len(b)-at-len(prefix), limit)
			}
			if err != nil {
				*buf = b[:at]
				t.log.Error("dropping unsendable raft message", "peer", to, "group", m.group, "type", m.msg.GetType().String(), "err", err)
				t.failFrames(to, []frame{{kind: f.kind, group: m.group}})
				continue
			}
			// Should b have moved, the frames before keep the old array.
			*buf, f.payload = b, b[at:len(b):len(b)]
		}
		frames = append(frames, f)
		size += 4 + frameHeader + len(f.payload)
	}
	return frames, size
}

func writeFrames(w *bufio.Writer, from uint64, frames []frame) error {
	var hdr [4 + frameHeader]byte
	for _, f := range frames {
		binary.BigEndian.PutUint32(hdr[:4], uint32(frameHeader+len(f.payload)))
		hdr[4] = f.kind
		binary.BigEndian.PutUint64(hdr[5:], from)
		if _, err := w.Write(hdr[:]); err != nil {
			return err
		}
		if _, err := w.Write(f.payload); err != nil {
			return err
		}
		if f.stream != nil {
			if err := writeStream(w, f.stream); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *transport) accept() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			select {
			case <-t.stop:
				return
			default:
			}
			t.log.Warn("peer accept", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if !t.admit(c) {
			t.log.Warn("too many inbound peer connections (in all, or unauthenticated from this address); closing", "remote", c.RemoteAddr().String())
			continue
		}
		t.wg.Add(1)
		go t.reader(c)
	}
}

// reader authenticates one inbound connection (accepted) and decodes its
// frames. Anything malformed closes the connection (the reason is logged):
// a real peer redials and raft retransmits.
func (t *transport) reader(raw net.Conn) {
	defer t.wg.Done()
	defer t.release(raw)
	c, r, sender, ok := t.accepted(raw)
	if !ok {
		return
	}
	t.authenticated(raw)
	var hdr [4 + frameHeader]byte
	var scratch []byte // the bodies of raft messages (readBodyInto)
	bad := func(reason string, args ...any) {
		t.log.Warn("bad peer frame; closing connection", append([]any{"remote", raw.RemoteAddr().String(), "member", sender, "reason", reason}, args...)...)
	}
	for {
		// Idle limit: live peers write at least every keepaliveEvery. The
		// deadlines are set only before a read that may block: a batch's
		// frames arrive together, and most are read from the buffer (a
		// deadline costs a clock read and a timer update, twice a frame).
		if r.Buffered() < len(hdr) {
			c.SetReadDeadline(time.Now().Add(inboundIdle))
		}
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				t.log.Debug("peer read", "remote", c.RemoteAddr().String(), "err", err)
			}
			return
		}
		n := int64(binary.BigEndian.Uint32(hdr[:4]))
		kind, from := hdr[4], binary.BigEndian.Uint64(hdr[5:])
		var limit int64
		if f, fixed := fixedFrames[kind]; fixed {
			if n != f.size {
				bad(f.what+" of the wrong size", "len", n)
				return
			}
			limit = f.size
		}
		switch kind {
		case kindRaft:
			limit = int64(t.maxMsgFrame)
		case kindSnap:
			limit = maxSnapFrame
		case kindSide:
			limit = maxSidePayload + frameHeader
		case kindGroupRaft:
			limit = int64(t.maxMsgFrame) + groupIDBytes
		case kindGroupSnap:
			limit = maxSnapFrame + groupIDBytes
		case kindSnapStream: // the metadata and message; the file's bytes follow
			limit = int64(t.maxMsgFrame) + snapStreamMeta
		case kindKeepalive:
			limit = frameHeader
		case kindProbe, kindProbeReply, kindStepDown, kindGroupStepDown, kindGroupQuiesce, kindGroupWake:
			// fixedFrames: checked above
		default:
			bad("unknown kind", "kind", kind)
			return
		}
		if n < frameHeader || n > limit {
			bad("length out of range", "len", n, "limit", limit)
			return
		}
		if from != sender {
			bad("frame sender differs from the member the connection authenticated as", "from", from)
			return
		}
		if t.peer(from) == nil {
			bad("sender no longer a member", "from", from)
			return
		}
		// Body limit: 5 s plus a second per MiB declared, so a stalled
		// frame cannot hold an inbound slot.
		if kind == kindSnapStream || int64(r.Buffered()) < n-frameHeader {
			c.SetReadDeadline(time.Now().Add(bodyTimeout + time.Duration(n>>20)*time.Second))
		}
		if kind == kindSnapStream {
			m, group, err := t.receiveStream(r, n-frameHeader, from, func(size uint64) {
				c.SetReadDeadline(time.Now().Add(bodyTimeout + time.Duration(size>>20)*time.Second))
			})
			if err != nil {
				bad("snapshot stream", "err", err)
				return
			}
			if ev := t.events(group); ev != nil && m != nil {
				ev.deliver(m)
			}
			continue
		}
		var body []byte
		var err error
		if (kind == kindRaft || kind == kindGroupRaft) && n-frameHeader <= maxReusedBody {
			// Decoding copies what it keeps, so a raft message's body is
			// read into the connection's buffer: one allocation less per
			// frame.
			body, err = readBodyInto(r, scratch, n-frameHeader)
			scratch = body[:0]
		} else {
			body, err = readBody(r, n-frameHeader)
		}
		if err != nil {
			bad("truncated frame", "err", err)
			return
		}
		if kind == kindKeepalive {
			continue
		}
		if kind == kindSide {
			t.ev.side(from, body)
			continue
		}
		if kind == kindProbe || kind == kindProbeReply {
			t.probed(kind, from, body)
			continue
		}
		var group uint64
		switch kind {
		case kindGroupRaft, kindGroupSnap, kindGroupStepDown, kindGroupQuiesce, kindGroupWake:
			if len(body) < groupIDBytes {
				bad("group frame without a group id", "len", len(body))
				return
			}
			group, body = binary.BigEndian.Uint64(body), body[groupIDBytes:]
			if group == 0 {
				bad("group frame for the root group")
				return
			}
		}
		ev := t.events(group)
		if kind == kindStepDown || kind == kindGroupStepDown {
			if ev != nil {
				ev.steppedDown(from, binary.BigEndian.Uint64(body), binary.BigEndian.Uint64(body[8:]))
			}
			continue
		}
		if kind == kindGroupQuiesce {
			if ev != nil {
				ev.quiesceNotice(from, binary.BigEndian.Uint64(body), binary.BigEndian.Uint64(body[8:]))
			}
			continue
		}
		if kind == kindGroupWake {
			if ev != nil {
				ev.wakeRequest(from)
			}
			continue
		}
		m := &pb.Message{}
		// Unknown fields are dropped: raft compares configurations with
		// them included and panics when they differ.
		if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, m); err != nil {
			bad("undecodable raft message", "err", err)
			return
		}
		if err := t.validate(m, from, kind == kindSnap || kind == kindGroupSnap); err != nil {
			bad("invalid raft message", "group", group, "err", err)
			return
		}
		if _, isRef, _ := decodeSnapRef(m.GetSnapshot().GetData()); isRef {
			// Only a stream's receiver makes references (to its own files).
			bad("snapshot naming a file", "group", group)
			return
		}
		if ev != nil {
			ev.deliver(m)
		}
	}
}

// fixedFrames are the kinds whose frames have exactly one length (the
// header's 9 bytes included); any other length closes the connection.
var fixedFrames = map[byte]struct {
	size int64
	what string
}{
	kindProbe:         {probePayload + frameHeader, "probe"},
	kindProbeReply:    {probePayload + frameHeader, "probe reply"},
	kindStepDown:      {stepDownPayload + frameHeader, "step-down notice"},
	kindGroupStepDown: {groupIDBytes + stepDownPayload + frameHeader, "step-down notice"},
	kindGroupQuiesce:  {groupIDBytes + quiescePayload + frameHeader, "quiesce notice"},
	kindGroupWake:     {groupIDBytes + frameHeader, "wake request"},
}

// readBody reads a frame body of size bytes. Up to 64 KiB it allocates
// exactly size once; beyond that it doubles only as bytes arrive, so a bogus
// length costs at most 64 KiB or twice what the peer really sent, never
// 256 MiB.
// (bytes.Buffer.ReadFrom, used before, reallocated every full buffer to twice
// its size before seeing EOF: two allocations and a copy per frame.)
func readBody(r io.Reader, size int64) ([]byte, error) {
	buf := make([]byte, 0, min(size, 64<<10))
	for int64(len(buf)) < size {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, int(min(size-int64(len(buf)), int64(len(buf)))))
		}
		end := int(min(size, int64(cap(buf))))
		k, err := io.ReadFull(r, buf[len(buf):end])
		buf = buf[:len(buf)+k]
		if err != nil {
			return nil, err
		}
	}
	return buf, nil
}

// maxReusedBody bounds the raft message bodies a connection reads into its
// own buffer (readBodyInto): larger ones, rare, are read afresh.
const maxReusedBody = 64 << 10

// readBodyInto reads a frame body of size bytes (at most maxReusedBody)
// into buf, grown if it is too small.
func readBodyInto(r io.Reader, buf []byte, size int64) ([]byte, error) {
	if int64(cap(buf)) < size {
		buf = make([]byte, size, min(max(size, 2*int64(cap(buf)), 4<<10), maxReusedBody))
	}
	buf = buf[:size]
	if _, err := io.ReadFull(r, buf); err != nil {
		return buf[:0], err
	}
	return buf, nil
}

// validate rejects messages that raft would misbehave or panic on. Raft
// trusts its peers; these checks make sure bytes that merely decode (garbage,
// a confused peer) never reach it.
func (t *transport) validate(m *pb.Message, sender uint64, snapFrame bool) error {
	typ := m.GetType()
	if _, ok := pb.MessageType_name[int32(typ)]; !ok || raft.IsLocalMsg(typ) {
		return fmt.Errorf("message type %d not accepted from peers", typ)
	}
	if (typ == pb.MsgSnap) != snapFrame {
		return fmt.Errorf("%s in a frame of the wrong kind", typ)
	}
	if m.GetTo() != t.id {
		return fmt.Errorf("addressed to %d", m.GetTo())
	}
	// m.From need not be the frame's sender: a follower forwards
	// MsgTransferLeader with From set to the transferee. It must be a member.
	if !t.isMember(m.GetFrom()) {
		return fmt.Errorf("from non-member %d", m.GetFrom())
	}
	// Those two aside, a member speaks only for itself: the message's
	// sender is the member the connection authenticated as.
	if m.GetFrom() != sender && typ != pb.MsgTransferLeader && typ != pb.MsgProp {
		return fmt.Errorf("%s from %d on member %d's connection", typ, m.GetFrom(), sender)
	}
	// Only a forwarded transfer (a transfer to the leader itself, which raft
	// ignores) or a forwarded proposal (this member's own, passed back by a
	// member that held it while leadership moved here; raft answers no
	// proposal) may name this member as its sender; raft answers anything
	// else to its sender and panics sending to itself.
	if m.GetFrom() == t.id && typ != pb.MsgTransferLeader && typ != pb.MsgProp {
		return fmt.Errorf("%s from this member itself", typ)
	}
	ents := m.GetEntries()
	if err := inRange(m); err != nil {
		return err
	}
	// raft sends proposals and read requests without a term (they belong
	// to none) and panics forwarding one to the leader that carries one.
	if (typ == pb.MsgProp || typ == pb.MsgReadIndex) && m.GetTerm() != 0 {
		return fmt.Errorf("%s with a term", typ)
	}
	switch typ {
	case pb.MsgVote, pb.MsgPreVote, pb.MsgVoteResp, pb.MsgPreVoteResp:
		// raft answers a vote with the request's term and panics sending
		// a vote message without one.
		if m.GetTerm() == 0 {
			return fmt.Errorf("%s without a term", typ)
		}
	case pb.MsgProp:
		// Proposals are normal entries or (forwarded membership changes)
		// V2 configuration changes; raft panics on an empty proposal and on
		// an undecodable configuration change. The leader's loop validates
		// the change itself (validateForwarded) before raft sees it.
		if len(ents) == 0 {
			return errors.New("empty proposal")
		}
		for _, e := range ents {
			switch e.GetType() {
			case pb.EntryNormal:
			case pb.EntryConfChangeV2:
				if err := proto.Unmarshal(e.GetData(), &pb.ConfChangeV2{}); err != nil {
					return fmt.Errorf("undecodable configuration change: %v", err)
				}
			default:
				return fmt.Errorf("proposal of %s", e.GetType())
			}
		}
	case pb.MsgApp:
		// The same consistency raft asserts (logSlice.valid) before appending.
		prevIdx, prevTerm := m.GetIndex(), m.GetLogTerm()
		for _, e := range ents {
			if e.GetIndex() != prevIdx+1 || e.GetTerm() < prevTerm {
				return fmt.Errorf("entries not contiguous at %d", e.GetIndex())
			}
			prevIdx, prevTerm = e.GetIndex(), e.GetTerm()
		}
		if prevTerm > m.GetTerm() {
			return fmt.Errorf("entry term %d above message term %d", prevTerm, m.GetTerm())
		}
	case pb.MsgSnap:
		md := m.GetSnapshot().GetMetadata()
		if md == nil || md.GetIndex() == 0 || len(md.GetConfState().GetVoters()) == 0 {
			return errors.New("snapshot without metadata")
		}
		// A leader of term T holds no entry of a later term. A member that
		// installed such a snapshot won the next election with it and then
		// sent appends whose terms went down from it, which every follower
		// refuses: the group stopped committing.
		if md.GetTerm() > m.GetTerm() {
			return fmt.Errorf("snapshot of term %d above message term %d", md.GetTerm(), m.GetTerm())
		}
		// Every member it names must be known here or be in the address
		// book it carries (members added since this one's configuration).
		bk, _, err := unwrapSnapshot(m.GetSnapshot().GetData())
		if err != nil {
			return err
		}
		cs := md.GetConfState()
		// raft panics on a snapshot configuration it cannot restore or that
		// does not restore to itself (duplicates, a member both voter and
		// learner, a joint state without its outgoing half).
		trk := tracker.MakeProgressTracker(1, 0)
		cfg, prs, err := confchange.Restore(confchange.Changer{Tracker: trk, LastIndex: md.GetIndex()}, cs)
		if err != nil {
			return fmt.Errorf("snapshot configuration: %v", err)
		}
		trk.Config, trk.Progress = cfg, prs
		if err := cs.Equivalent(trk.ConfState()); err != nil {
			return fmt.Errorf("snapshot configuration: %v", err)
		}
		for _, ids := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing(), cs.GetLearnersNext()} {
			for _, id := range ids {
				if !t.isMember(id) && (bk == nil || bk.find(id) < 0) {
					return fmt.Errorf("snapshot configuration names non-member %d", id)
				}
			}
		}
	}
	return nil
}

// maxRaftValue bounds every index and term a peer may send. raft adds to
// them (the next index to send, the next term, the first index after a
// snapshot) and wraps around at the top of uint64: a snapshot at index
// 2^64-2, installed by a follower that then won an election, made its
// first append panic ("invalid slice"). No real log or term comes near
// 2^62 (a million entries a second for 146,000 years).
const maxRaftValue = 1 << 62

// inRange refuses a message with an index or term beyond maxRaftValue.
func inRange(m *pb.Message) error {
	md := m.GetSnapshot().GetMetadata()
	for _, v := range []uint64{m.GetTerm(), m.GetLogTerm(), m.GetIndex(), m.GetCommit(), m.GetRejectHint(), md.GetIndex(), md.GetTerm()} {
		if v > maxRaftValue {
			return fmt.Errorf("%s carries %d, beyond any real index or term", m.GetType(), v)
		}
	}
	for _, e := range m.GetEntries() {
		if e.GetIndex() > maxRaftValue || e.GetTerm() > maxRaftValue {
			return fmt.Errorf("%s carries an entry at index %d, term %d, beyond any real index or term", m.GetType(), e.GetIndex(), e.GetTerm())
		}
	}
	return nil
}
