package replica

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Frame: 4-byte big-endian body length, then the body: 1 byte kind, 8 bytes
// sender id, payload.
const (
	kindRaft byte = 1
	kindSide byte = 2

	frameHeader = 1 + 8
	// maxFrame bounds one inbound frame: snapshots travel in one MsgSnap.
	maxFrame = 256 << 20
	// maxSideFrame bounds side-channel payloads.
	maxSideFrame = 1 << 20
	// peerQueue bounds messages waiting for one peer; at the limit new
	// messages are dropped and raft is told the peer is unreachable (it
	// retransmits).
	peerQueue = 4096
	// writeBatch bounds messages coalesced into one write.
	writeBatch  = 256
	dialTimeout = time.Second
)

type outMsg struct {
	kind byte
	msg  *pb.Message
	side []byte
}

// transportEvents are reported back to the raft loop.
type transportEvents interface {
	deliver(m *pb.Message)
	side(from uint64, payload []byte)
	unreachable(id uint64)
	snapshotDone(id uint64, ok bool)
}

type transport struct {
	id    uint64
	log   *slog.Logger
	ev    transportEvents
	ln    net.Listener
	peers map[uint64]*peerConn

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup
}

type peerConn struct {
	id   uint64
	addr string
	q    chan outMsg
}

func newTransport(id uint64, listen string, peers []Peer, ev transportEvents, log *slog.Logger) (*transport, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("peer listener: %w", err)
	}
	t := &transport{id: id, log: log, ev: ev, ln: ln, peers: map[uint64]*peerConn{},
		conns: map[net.Conn]struct{}{}, stop: make(chan struct{})}
	for _, p := range peers {
		if p.ID == id {
			continue
		}
		pc := &peerConn{id: p.ID, addr: p.Addr, q: make(chan outMsg, peerQueue)}
		t.peers[p.ID] = pc
		t.wg.Add(1)
		go t.writer(pc)
	}
	t.wg.Add(1)
	go t.accept()
	return t, nil
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

// send queues a raft message without blocking.
func (t *transport) send(m *pb.Message) {
	pc := t.peers[m.GetTo()]
	if pc == nil {
		return
	}
	select {
	case pc.q <- outMsg{kind: kindRaft, msg: m}:
	default:
		t.ev.unreachable(pc.id)
		if m.GetType() == pb.MsgSnap {
			t.ev.snapshotDone(pc.id, false)
		}
	}
}

func (t *transport) sendSide(to uint64, payload []byte) error {
	pc := t.peers[to]
	if pc == nil {
		return fmt.Errorf("replica: unknown peer %d", to)
	}
	select {
	case pc.q <- outMsg{kind: kindSide, side: payload}:
		return nil
	default:
		return errors.New("replica: peer queue full")
	}
}

func (t *transport) writer(pc *peerConn) {
	defer t.wg.Done()
	var conn net.Conn
	var w *bufio.Writer
	backoff := 50 * time.Millisecond
	defer func() {
		if conn != nil {
			t.untrack(conn)
		}
	}()
	batch := make([]outMsg, 0, writeBatch)
	for {
		batch = batch[:0]
		select {
		case <-t.stop:
			return
		case m := <-pc.q:
			batch = append(batch, m)
		}
	drain:
		for len(batch) < writeBatch {
			select {
			case m := <-pc.q:
				batch = append(batch, m)
			default:
				break drain
			}
		}
		if conn == nil {
			c, err := net.DialTimeout("tcp", pc.addr, dialTimeout)
			if err != nil {
				t.failBatch(pc.id, batch)
				select {
				case <-t.stop:
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, time.Second)
				continue
			}
			if !t.track(c) {
				return
			}
			backoff = 50 * time.Millisecond
			conn, w = c, bufio.NewWriterSize(c, 64<<10)
		}
		err := t.writeBatch(w, batch)
		if err == nil {
			err = w.Flush()
		}
		if err != nil {
			t.log.Debug("peer write failed", "peer", pc.id, "err", err)
			t.untrack(conn)
			conn = nil
			t.failBatch(pc.id, batch)
			continue
		}
		for _, m := range batch {
			if m.kind == kindRaft && m.msg.GetType() == pb.MsgSnap {
				t.ev.snapshotDone(pc.id, true)
			}
		}
	}
}

func (t *transport) failBatch(id uint64, batch []outMsg) {
	reported := false
	for _, m := range batch {
		if m.kind != kindRaft {
			continue
		}
		if !reported {
			t.ev.unreachable(id)
			reported = true
		}
		if m.msg.GetType() == pb.MsgSnap {
			t.ev.snapshotDone(id, false)
		}
	}
}

func (t *transport) writeBatch(w *bufio.Writer, batch []outMsg) error {
	var hdr [4 + frameHeader]byte
	for _, m := range batch {
		payload := m.side
		if m.kind == kindRaft {
			b, err := proto.Marshal(m.msg)
			if err != nil {
				return err
			}
			payload = b
		}
		binary.BigEndian.PutUint32(hdr[:4], uint32(frameHeader+len(payload)))
		hdr[4] = m.kind
		binary.BigEndian.PutUint64(hdr[5:], t.id)
		if _, err := w.Write(hdr[:]); err != nil {
			return err
		}
		if _, err := w.Write(payload); err != nil {
			return err
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
		if !t.track(c) {
			return
		}
		t.wg.Add(1)
		go t.reader(c)
	}
}

// reader decodes frames from one inbound connection. Anything malformed
// closes the connection: the peer redials and raft retransmits.
func (t *transport) reader(c net.Conn) {
	defer t.wg.Done()
	defer t.untrack(c)
	r := bufio.NewReaderSize(c, 64<<10)
	var hdr [4 + frameHeader]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:4])
		kind, from := hdr[4], binary.BigEndian.Uint64(hdr[5:])
		limit := uint32(maxFrame)
		if kind == kindSide {
			limit = maxSideFrame
		}
		if n < frameHeader || n > limit || (kind != kindRaft && kind != kindSide) || t.peers[from] == nil {
			t.log.Warn("peer sent a bad frame; closing", "remote", c.RemoteAddr().String(), "len", n, "kind", kind, "from", from)
			return
		}
		body := make([]byte, n-frameHeader)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		if kind == kindSide {
			t.ev.side(from, body)
			continue
		}
		m := &pb.Message{}
		// m.From need not be the sender: a follower forwards MsgTransferLeader
		// with From set to the transferee.
		if err := proto.Unmarshal(body, m); err != nil || m.GetTo() != t.id {
			t.log.Warn("peer sent an undecodable or misaddressed raft message; closing", "remote", c.RemoteAddr().String(), "err", err)
			return
		}
		t.ev.deliver(m)
	}
}
