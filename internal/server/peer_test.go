package server

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	raftpb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-coord/meridian/internal/replica"
)

// TestClusterPeerPortTLS: the test cluster's dev certificates really
// secure the peer port: members replicate over it, share the cluster id
// derived from the dev token, and a plaintext peer is refused.
func TestClusterPeerPortTLS(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	want := replica.FormatClusterID(replica.ClusterID(tc.cfgs[0].ClusterToken))
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ok := true
		for _, s := range tc.servers {
			st := s.Replica().Status()
			ok = ok && st.Leader != 0 && st.Applied > 0
			if st.ClusterID != want {
				t.Fatalf("member %d: cluster id %q, want %q", st.ID, st.ClusterID, want)
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader over TLS peers")
		}
	}
	c, err := net.Dial("tcp", tc.cfgs[0].Self().Peer)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A well-formed heartbeat "from member 2" at the current term, as a
	// plaintext peer would send it: before the peer port spoke TLS it was
	// delivered and the connection stayed open.
	body, err := proto.Marshal(&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), To: proto.Uint64(1), From: proto.Uint64(2),
		Term: proto.Uint64(tc.servers[0].Replica().Status().Term)})
	if err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, 4+1+8, 4+1+8+len(body))
	binary.BigEndian.PutUint32(frame, uint32(1+8+len(body)))
	frame[4] = 1 // a raft message
	binary.BigEndian.PutUint64(frame[5:], 2)
	c.Write(append(frame, body...))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := io.Copy(io.Discard, c); n > 0 || isTimeout(err) {
		t.Fatalf("plaintext raft frame on a TLS peer port: read %d bytes, %v; want the connection closed", n, err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// lockedBuffer collects log output from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestClusterInsecureWarns: a server configured insecure: true runs its
// peer port in plaintext and says at every start, once, that anyone who
// reaches that port controls the cluster.
func TestClusterInsecureWarns(t *testing.T) {
	ports := freePorts(t, 2)
	cfg := Config{ID: 1, DataDir: t.TempDir(), Insecure: true,
		Members: []Member{{ID: 1, Region: "local", Zone: "z1", Peer: "127.0.0.1:" + strconv.Itoa(ports[0]), GRPC: "127.0.0.1:" + strconv.Itoa(ports[1])}},
		TickMs:  20, ElectionTicks: 10, SessionTickMs: 100}
	for start := 1; start <= 2; start++ {
		var logs lockedBuffer
		s, err := New(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		s.Serve()
		s.Close()
		var warns int
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "anyone who can reach the peer port") {
				warns++
			}
		}
		if warns != 1 {
			t.Fatalf("start %d: %d warnings about the plaintext peer port, want 1; logs:\n%s", start, warns, logs.String())
		}
	}
}

// Member.Identity travels through the replicated address book.
func TestMemberIdentityInAddressBook(t *testing.T) {
	m := Member{ID: 4, Peer: "10.0.0.4:9000", Identity: "node-d.example"}
	if got := fromPeer(toPeer(m)).Identity; got != m.Identity {
		t.Fatalf("identity %q after the address book, want %q", got, m.Identity)
	}
	if p := toPeer(Member{ID: 5}); p.Identity != "" {
		t.Fatalf("default identity stored as %q; want empty (the pattern applies)", p.Identity)
	}
}
