package server

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	zk "github.com/meridian-coord/meridian/internal/zkproto"
)

// fuzzOps are the opcodes the connection fuzzer puts in request headers:
// every one ZooKeeper defines, plus unknown ones.
var fuzzOps = []int32{
	zk.OpCreate, zk.OpDelete, zk.OpExists, zk.OpGetData, zk.OpSetData, zk.OpGetACL, zk.OpSetACL,
	zk.OpGetChildren, zk.OpSync, zk.OpPing, zk.OpGetChildren2, zk.OpCheck, zk.OpMulti, zk.OpCreate2,
	zk.OpReconfig, zk.OpCheckWatches, zk.OpRemoveWatches, zk.OpCreateContainer, zk.OpDeleteContainer,
	zk.OpCreateTTL, zk.OpMultiRead, zk.OpAuth, zk.OpSetWatches, zk.OpSASL, zk.OpGetEphemerals,
	zk.OpGetAllChildrenNumber, zk.OpSetWatches2, zk.OpAddWatch, zk.OpWhoAmI, zk.OpCreateSession,
	zk.OpCloseSession, zk.OpNotification, zk.OpError, 10, 99, 108, 1 << 30, -1 << 31,
}

// fuzzStream turns fuzz input into what a client sends. Byte 0 holds
// flags: 1 sends a valid handshake first (2: asking for read-only mode), 4
// sends the rest raw; otherwise the rest is a series of requests, each
// [opcode index][2-byte body length][body], framed with a request header,
// so most inputs get past framing and the header into the state machine.
func fuzzStream(in []byte) []byte {
	if len(in) == 0 {
		return nil
	}
	flags, b := in[0], in[1:]
	var out []byte
	if flags&1 != 0 {
		out, _ = zk.AppendRecordFrame(out, &zk.ConnectRequest{TimeOut: 4000, Passwd: make([]byte, 16), ReadOnly: flags&2 != 0, HasReadOnly: true})
	}
	if flags&4 != 0 {
		return append(out, b...)
	}
	for xid := int32(1); len(b) >= 3; xid++ {
		op := fuzzOps[int(b[0])%len(fuzzOps)]
		n := int(binary.BigEndian.Uint16(b[1:3])) % (len(b) - 2)
		body := b[3 : 3+n]
		b = b[3+n:]
		e := zk.NewEncoder(nil)
		(&zk.RequestHeader{Xid: xid, Type: op}).Encode(e)
		out = zk.AppendFrame(out, append(e.Bytes(), body...))
	}
	return out
}

// FuzzZKConnection drives one server's ZooKeeper listener with arbitrary
// byte streams over real connections. After each the server must have
// closed the connection (the client half-closed its side), released it,
// and still answer ruok. A panic anywhere kills the process: a finding.
//
//	go test -run '^$' -fuzz FuzzZKConnection -fuzztime 5m ./internal/server/
func FuzzZKConnection(f *testing.F) {
	tc := newTestCluster(f, 1, func(c *Config) { c.SessionTickMs = 200; c.FourLetterWords = []string{"ruok"} })
	tc.leader()
	s := tc.servers[0]
	addr := tc.zkAddrs()[0]

	createBody := func(path string, flags int32) []byte {
		e := zk.NewEncoder(nil)
		(&zk.CreateRequest{Path: path, Data: []byte("x"), ACL: []zk.ACL{{Perms: 31, ID: zk.Id{Scheme: "world", ID: "anyone"}}}, Flags: flags}).Encode(e)
		return e.Bytes()
	}
	req := func(opIndex byte, body []byte) []byte {
		return append([]byte{opIndex, byte(len(body) >> 8), byte(len(body))}, body...)
	}
	f.Add([]byte{1})
	f.Add([]byte{3})
	f.Add(append([]byte{1}, req(0, createBody("/f", 0))...))
	f.Add(append(append([]byte{1}, req(0, createBody("/e", 1))...), req(30, nil)...))
	f.Add(append([]byte{1}, req(12, []byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})...))
	f.Add(append([]byte{5}, 0xff, 0xff, 0xff, 0xff))
	f.Add([]byte{4, 'r', 'u', 'o', 'k'})
	f.Add(append([]byte{1}, req(23, nil)...))
	f.Add(append([]byte{1}, req(21, []byte{0, 0, 0, 0, 0, 0, 0, 6, 'd', 'i', 'g', 'e', 's', 't', 0, 0, 0, 3, 'a', ':', 'b'})...))

	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		drained := make(chan struct{})
		go func() { io.Copy(io.Discard, c); close(drained) }()
		c.Write(fuzzStream(in))
		c.(*net.TCPConn).CloseWrite()
		select {
		case <-drained:
		case <-time.After(15 * time.Second):
			t.Fatal("server kept the connection open after the client's EOF")
		}
		c.Close()
		for deadline := time.Now().Add(5 * time.Second); ; {
			s.zk.mu.Lock()
			n := len(s.zk.conns)
			s.zk.mu.Unlock()
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d connections still held after their clients left", n)
			}
			time.Sleep(5 * time.Millisecond)
		}
		probe, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer probe.Close()
		probe.Write([]byte("ruok"))
		probe.SetReadDeadline(time.Now().Add(5 * time.Second))
		if got, _ := io.ReadAll(probe); string(got) != "imok" {
			t.Fatalf("ruok after input: %q", got)
		}
	})
}
