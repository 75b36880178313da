package server

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	zk "github.com/meridian-coord/meridian/internal/zkproto"
)

// zkDial opens a raw ZooKeeper connection, optionally asking for read-only
// mode, and returns the decoded ConnectResponse (nil if the server closed
// the connection instead of answering).
func zkDial(t *testing.T, addr string, readOnly bool) (net.Conn, *zk.ConnectResponse) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	frame, err := zk.AppendRecordFrame(nil, &zk.ConnectRequest{TimeOut: 4000, Passwd: make([]byte, 16), ReadOnly: readOnly, HasReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	c.Write(frame)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := zk.ReadFrame(c, 1<<20)
	if err != nil {
		return c, nil
	}
	resp := &zk.ConnectResponse{}
	if err := resp.Decode(zk.NewDecoder(b)); err != nil {
		t.Fatalf("ConnectResponse: %v", err)
	}
	return c, resp
}

// zkCall sends one request and returns the reply header and the body bytes.
func zkCall(t *testing.T, c net.Conn, xid, op int32, req zk.Record) (zk.ReplyHeader, *zk.Decoder) {
	t.Helper()
	e := zk.NewEncoder(nil)
	(&zk.RequestHeader{Xid: xid, Type: op}).Encode(e)
	req.Encode(e)
	c.Write(zk.AppendFrame(nil, e.Bytes()))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := zk.ReadFrame(c, 1<<20)
	if err != nil {
		t.Fatalf("reply to op %d: %v", op, err)
	}
	d := zk.NewDecoder(b)
	var h zk.ReplyHeader
	if err := h.Decode(d); err != nil {
		t.Fatal(err)
	}
	return h, d
}

// A server cut off from its quorum admits clients that allow it to a
// read-only session (reads served, writes refused with ZNOTREADONLY), turns
// away clients that do not, and ends the read-only sessions once it has a
// leader again.
func TestZKReadOnlyMode(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.ReadOnlyMode = true })
	tc.leader()
	zc, _ := zkConnect(t, tc.zkAddrs()[:1])
	if _, err := zc.Create("/ro", []byte("seen"), 0, gozk.WorldACL(gozk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, err := zc.Sync("/ro"); err != nil {
		t.Fatal(err)
	}
	// Server 1 must have the node before it is cut off.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := treeGet(tc.servers[0], "/ro"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatal("server 1 never applied /ro")
		}
		time.Sleep(20 * time.Millisecond)
	}
	zc.Close()
	tc.stop(1)
	tc.stop(2)
	for deadline := time.Now().Add(10 * time.Second); tc.servers[0].rep.Leader() != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the lone server still believes in a leader")
		}
		time.Sleep(50 * time.Millisecond)
	}
	addr := tc.zkAddrs()[0]
	if got := tc.servers[0].fourLetterWord("isro"); got != "ro" {
		t.Fatalf("isro: %q", got)
	}

	// A client that does not allow read-only mode is turned away.
	if _, resp := zkDial(t, addr, false); resp != nil {
		t.Fatalf("read-write client admitted without a quorum: %+v", resp)
	}

	c, resp := zkDial(t, addr, true)
	if resp == nil || !resp.ReadOnly || resp.SessionID == 0 || resp.TimeOut <= 0 {
		t.Fatalf("read-only handshake: %+v", resp)
	}
	h, d := zkCall(t, c, 1, zk.OpGetData, &zk.GetDataRequest{Path: "/ro"})
	var got zk.GetDataResponse
	if h.Err != 0 || got.Decode(d) != nil || string(got.Data) != "seen" {
		t.Fatalf("read-only getData: err %d data %q", h.Err, got.Data)
	}
	if h, _ := zkCall(t, c, 2, zk.OpCreate, &zk.CreateRequest{Path: "/w", ACL: []zk.ACL{{Perms: 31, ID: zk.Id{Scheme: "world", ID: "anyone"}}}}); h.Err != -119 {
		t.Fatalf("write in read-only mode: err %d, want ZNOTREADONLY (-119)", h.Err)
	}
	if h, _ := zkCall(t, c, 3, zk.OpSync, &zk.SyncRequest{Path: "/"}); h.Err != -119 {
		t.Fatalf("sync in read-only mode: err %d", h.Err)
	}

	// Quorum back: the read-only session ends so the client finds a
	// read-write server.
	tc.start(1)
	tc.start(2)
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	for {
		if _, err := zk.ReadFrame(c, 1<<20); err != nil {
			if errors.Is(err, io.EOF) || strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "closed") {
				break
			}
			t.Fatalf("read-only connection not closed when the leader returned: %v", err)
		}
	}
	if got := tc.servers[0].fourLetterWord("isro"); got != "rw" {
		t.Fatalf("isro after recovery: %q", got)
	}
}

// Without read-only mode (the default, as in ZooKeeper) a server with no
// quorum admits nobody.
func TestZKNoQuorumRefusesClients(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	tc.stop(1)
	tc.stop(2)
	for deadline := time.Now().Add(10 * time.Second); tc.servers[0].rep.Leader() != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the lone server still believes in a leader")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, resp := zkDial(t, tc.zkAddrs()[0], true); resp != nil {
		t.Fatalf("admitted without a quorum: %+v", resp)
	}
	if got := tc.servers[0].fourLetterWord("isro"); got != "rw" {
		t.Fatalf("isro with read-only mode off: %q", got)
	}
}

// ZooKeeper keeps null data apart from empty data; kazoo's test suite
// checks that create(path) with no value reads back None.
func TestZKNullAndEmptyData(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	zc, _ := zkConnect(t, tc.zkAddrs()[:1])
	acl := gozk.WorldACL(gozk.PermAll)
	if _, err := zc.Create("/null", nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	if _, err := zc.Create("/empty", []byte{}, 0, acl); err != nil {
		t.Fatal(err)
	}
	if _, err := zc.Create("/set", []byte("x"), 0, acl); err != nil {
		t.Fatal(err)
	}
	if _, err := zc.Set("/set", nil, -1); err != nil {
		t.Fatal(err)
	}
	for path, wantNull := range map[string]bool{"/null": true, "/empty": false, "/set": true} {
		c := rawZK(t, tc.zkAddrs()[1])
		h, d := zkCall(t, c, 1, zk.OpGetData, &zk.GetDataRequest{Path: path})
		var got zk.GetDataResponse
		if h.Err != 0 || got.Decode(d) != nil || (got.Data == nil) != wantNull || len(got.Data) != 0 || got.Stat.DataLength != 0 {
			t.Errorf("%s: err %d data %#v stat %+v", path, h.Err, got.Data, got.Stat)
		}
	}
}

// insecureProps: -D meridian.insecure=true, which a zoo.cfg needs to run
// with plaintext peers (sslQuorum is not implemented).
var insecureProps = map[string]string{"meridian.insecure": "true"}

func TestFromZooCfg(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	os.MkdirAll(data, 0o755)
	os.WriteFile(filepath.Join(data, "myid"), []byte("2\n"), 0o644)
	cfg := filepath.Join(dir, "zoo.cfg")
	os.WriteFile(cfg, []byte(`
# kazoo's harness writes configs like this one
tickTime=2000
dataDir=`+data+`
clientPort=20010
admin.serverPort=20013
maxClientCnxns=0
server.1=localhost:20002:20001:participant
server.2=localhost:20012:20011:participant;20010
server.3=localhost:20022:20021:observer
initLimit=4
`), 0o644)
	z, err := FromZooCfg(cfg, map[string]string{
		"zookeeper.DigestAuthenticationProvider.superDigest": "super:D/InIHSb7yEEbrWz8b9l71RjZJU=",
		"readonlymode.enabled":                               "true",
		"meridian.insecure":                                  "true",
	})
	if err != nil {
		t.Fatal(err)
	}
	c := z.Config
	if c.ID != 2 || c.DataDir != filepath.Join(data, "meridian") || c.ListenZK != "0.0.0.0:20010" ||
		c.ListenHTTP != "127.0.0.1:20013" || c.SessionTickMs != 2000 || !c.ReadOnlyMode ||
		c.SuperDigest != "super:D/InIHSb7yEEbrWz8b9l71RjZJU=" || len(c.Members) != 3 {
		t.Fatalf("config: %+v", c)
	}
	if m := c.Members[1]; m.ID != 2 || m.Peer != "localhost:20012" || m.GRPC != "localhost:20011" || m.ZK != "localhost:20010" {
		t.Fatalf("member 2: %+v", m)
	}
	if m := c.Members[2]; m.ID != 3 || m.Peer != "localhost:20022" || m.GRPC != "localhost:20021" || m.Role != "learner" {
		t.Fatalf("member 3: %+v", m)
	}
	// maxClientCnxns maps to max_client_cnxns (0: unlimited, as written).
	if strings.Join(z.Ignored, ",") != "initLimit" || c.MaxClientCnxns == nil || *c.MaxClientCnxns != 0 {
		t.Fatalf("ignored: %v, max_client_cnxns %v", z.Ignored, c.MaxClientCnxns)
	}

	for name, body := range map[string]string{
		"no dataDir":  "clientPort=1\n",
		"no port":     "dataDir=" + data + "\n",
		"bad port":    "dataDir=" + data + "\nclientPort=70000\n",
		"bad role":    "dataDir=" + data + "\nclientPort=1\nserver.2=h:1:2:witness\n",
		"no voter":    "dataDir=" + data + "\nclientPort=1\nserver.2=h:1:2:observer\n",
		"bad server":  "dataDir=" + data + "\nclientPort=1\nserver.x=h:1:2\n",
		"short line":  "dataDir=" + data + "\nclientPort=1\nserver.2=h:1\n",
		"not in list": "dataDir=" + data + "\nclientPort=1\nserver.1=h:1:2\n",
		"garbage":     "dataDir=" + data + "\nclientPort=1\nnonsense\n",
		"bad tick":    "dataDir=" + data + "\nclientPort=1\ntickTime=-5\n",
	} {
		os.WriteFile(cfg, []byte(body), 0o644)
		if _, err := FromZooCfg(cfg, insecureProps); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}

	// Standalone: no server lines, no myid needed.
	os.Remove(filepath.Join(data, "myid"))
	os.WriteFile(cfg, []byte("dataDir="+data+"\nclientPort=2181\n"), 0o644)
	z, err = FromZooCfg(cfg, insecureProps)
	if err != nil || z.Config.ID != 1 || len(z.Config.Members) != 1 || z.Config.ListenZK != "0.0.0.0:2181" {
		t.Fatalf("standalone: %+v %v", z.Config, err)
	}
	if !bytes.Contains([]byte(z.Config.Members[0].ZK), []byte("2181")) {
		t.Fatalf("standalone member: %+v", z.Config.Members[0])
	}
}

// srvr, mntr and cons report the listener's real counters, not constants.
func TestZKFourLetterWordCounters(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.FourLetterWords = []string{"*"} })
	tc.leader()
	addr := tc.zkAddrs()[0]
	word := func(w string) string { return fourLetter(t, addr, w) }
	field := func(text, key string) string {
		for _, line := range strings.Split(text, "\n") {
			if k, v, ok := strings.Cut(line, key); ok && k == "" {
				return strings.TrimSpace(v)
			}
		}
		t.Fatalf("no %q in %q", key, text)
		return ""
	}
	if got := field(word("srvr"), "Received:"); got != "0" {
		t.Fatalf("received before any request: %s", got)
	}
	c := rawZK(t, addr) // handshake: one frame each way
	for i := int32(1); i <= 5; i++ {
		if h, _ := zkCall(t, c, i, zk.OpExists, &zk.ExistsRequest{Path: "/"}); h.Err != 0 {
			t.Fatal(h.Err)
		}
	}
	srvr := word("srvr")
	if field(srvr, "Received:") != "6" || field(srvr, "Sent:") != "6" || field(srvr, "Connections:") != "2" /* this one too */ ||
		!strings.HasPrefix(field(srvr, "Zookeeper version:"), ZooKeeperVersion+"-meridian-") {
		t.Fatalf("srvr:\n%s", srvr)
	}
	if lat := field(srvr, "Latency min/avg/max:"); lat == "0.000/0.000/0.000" {
		t.Fatalf("latency not measured: %s", lat)
	}
	mntr := word("mntr")
	if field(mntr, "zk_packets_received") != "6" || field(mntr, "zk_num_alive_connections") != "2" {
		t.Fatalf("mntr:\n%s", mntr)
	}
	if cons := word("cons"); !strings.Contains(cons, "recved=6,sent=6") {
		t.Fatalf("cons:\n%s", cons)
	}
}
