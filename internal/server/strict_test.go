package server

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

const strictBase = `id: 1
data_dir: /tmp/meridian-strict
insecure: true
members:
  - {id: 1, peer: "127.0.0.1:9001", grpc: "127.0.0.1:7001", zk: "127.0.0.1:2181", http: "127.0.0.1:8081"}
  - {id: 2, peer: "127.0.0.1:9002", grpc: "127.0.0.1:7002", zk: "127.0.0.1:2182", http: "127.0.0.1:8082"}
`

// Unknown keys, negative values, bad four-letter words and duplicate
// member addresses are errors naming the key (and file, and line for
// unknown keys); 0 or absent still means the default.
func TestConfigStrict(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, yaml string
		want       []string // substrings of the error; none: loads
		check      func(t *testing.T, c Config)
	}{
		{name: "defaults", yaml: strictBase, check: func(t *testing.T, c Config) {
			if c.TickMs != 100 || c.MaxSessions != 100000 || *c.MaxClientCnxns != 60 || c.MaxHTTPConnections != 256 ||
				!slices.Equal(c.FourLetterWords, []string{"srvr"}) || c.IdleTimeoutMs != 300000 {
				t.Fatalf("defaults: %+v", c)
			}
		}},
		{name: "zero is default", yaml: strictBase + "tick_ms: 0\nmax_sessions: 0\n", check: func(t *testing.T, c Config) {
			if c.TickMs != 100 || c.MaxSessions != 100000 {
				t.Fatalf("zero: %+v", c)
			}
		}},
		{name: "cnxns unlimited", yaml: strictBase + "max_client_cnxns: 0\nfour_letter_words: [\"*\"]\n", check: func(t *testing.T, c Config) {
			if *c.MaxClientCnxns != 0 || !c.fourLetterWordEnabled("cons") {
				t.Fatalf("max_client_cnxns 0 / *: %+v", c)
			}
		}},
		{name: "words", yaml: strictBase + "four_letter_words: [ruok, srvr, mntr]\n", check: func(t *testing.T, c Config) {
			if !c.fourLetterWordEnabled("ruok") || c.fourLetterWordEnabled("cons") {
				t.Fatalf("words: %v", c.FourLetterWords)
			}
		}},
		{name: "misspelt superdigest", yaml: strictBase + "superdigest: \"super:abc=\"\n", want: []string{"superdigest", "line 7"}},
		{name: "unknown member key", yaml: strings.Replace(strictBase, "peer:", "pear:", 1), want: []string{"pear", "line 5"}},
		{name: "unknown tls key", yaml: strictBase + "tls: {cafile: x}\n", want: []string{"cafile"}},
		{name: "negative tick", yaml: strictBase + "tick_ms: -5\n", want: []string{"tick_ms", "-5"}},
		{name: "negative sessions", yaml: strictBase + "max_sessions: -1\n", want: []string{"max_sessions"}},
		{name: "negative connections", yaml: strictBase + "max_client_connections: -1\n", want: []string{"max_client_connections"}},
		{name: "negative cnxns", yaml: strictBase + "max_client_cnxns: -1\n", want: []string{"max_client_cnxns"}},
		{name: "negative http", yaml: strictBase + "max_http_connections: -3\n", want: []string{"max_http_connections"}},
		{name: "negative idle", yaml: strictBase + "idle_timeout_ms: -3\n", want: []string{"idle_timeout_ms"}},
		{name: "not a number", yaml: strictBase + "tick_ms: fast\n", want: []string{"fast", "line 7"}},
		{name: "unknown word", yaml: strictBase + "four_letter_words: [srvr, dump]\n", want: []string{"four_letter_words", `"dump"`}},
		{name: "star not alone", yaml: strictBase + "four_letter_words: [\"*\", ruok]\n", want: []string{"four_letter_words", "alone"}},
		{name: "same peer", yaml: strings.Replace(strictBase, "127.0.0.1:9002", "127.0.0.1:9001", 1), want: []string{"members 1 and 2", "127.0.0.1:9001"}},
		{name: "same grpc", yaml: strings.Replace(strictBase, "127.0.0.1:7002", "127.0.0.1:7001", 1), want: []string{"members 1 and 2", "grpc"}},
		{name: "same zk", yaml: strings.Replace(strictBase, "127.0.0.1:2182", "127.0.0.1:2181", 1), want: []string{"members 1 and 2", "zk"}},
		{name: "same http", yaml: strings.Replace(strictBase, "127.0.0.1:8082", "127.0.0.1:8081", 1), want: []string{"members 1 and 2", "http"}},
		{name: "peer is another's grpc", yaml: strings.Replace(strictBase, "127.0.0.1:9002", "127.0.0.1:7001", 1), want: []string{"members 1 and 2", "grpc", "peer"}},
		{name: "one member twice", yaml: strings.Replace(strictBase, "127.0.0.1:2182", "127.0.0.1:7002", 1), want: []string{"member 2", "127.0.0.1:7002"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
			os.WriteFile(p, []byte(tc.yaml), 0o644)
			c, err := LoadConfig(p)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				tc.check(t, c)
				return
			}
			if err == nil {
				t.Fatalf("loaded: %+v", c)
			}
			for _, w := range append(tc.want, p) {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// README's example config uses only keys the config knows, and opens the
// ZooKeeper port the README talks about: every member has a zk address
// (the default of zk_listen).
func TestReadmeConfigKeys(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(b, -1)
	if len(blocks) == 0 {
		t.Fatal("no yaml block in README.md")
	}
	for _, blk := range blocks {
		dec := yaml.NewDecoder(bytes.NewReader(blk[1]))
		dec.KnownFields(true)
		var c Config
		if err := dec.Decode(&c); err != nil && err != io.EOF {
			t.Fatalf("README config: %v\n%s", err, blk[1])
		}
		for _, m := range c.Members {
			if m.ZK == "" && c.ListenZK == "" {
				t.Errorf("README config: member %d has no zk address: no ZooKeeper port\n%s", m.ID, blk[1])
			}
		}
	}
}

// The file-descriptor check: explicit caps that do not fit refuse to
// start naming the numbers; max_client_connections left at 0 takes what
// fits (at most 10000).
func TestCheckFDLimit(t *testing.T) {
	c := Config{ListenZK: "127.0.0.1:1", MaxHTTPConnections: 256}
	if err := c.checkFDLimit(1 << 20); err != nil || c.MaxClientConnections != 10000 {
		t.Fatalf("large limit: %d %v", c.MaxClientConnections, err)
	}
	c.MaxClientConnections = 0
	if err := c.checkFDLimit(4096); err != nil || c.MaxClientConnections != (4096-256-fdPeerInbound-fdReserve)/2 {
		t.Fatalf("4096: %d %v", c.MaxClientConnections, err)
	}
	c.MaxClientConnections = 0
	if err := c.checkFDLimit(1024); err == nil || !strings.Contains(err.Error(), "1024") {
		t.Fatalf("1024: %d %v", c.MaxClientConnections, err)
	}
	c.MaxClientConnections = 10000
	err := c.checkFDLimit(4096)
	if err == nil || !strings.Contains(err.Error(), "max_client_connections 10000") || !strings.Contains(err.Error(), "limit is 4096") {
		t.Fatalf("explicit 10000 under 4096: %v", err)
	}
	if n, err := raiseFDLimit(); err != nil || n < 64 {
		t.Fatalf("raiseFDLimit: %d %v", n, err)
	}
}

func fourLetter(t *testing.T, addr, w string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte(w))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c) // the server closes after its answer
	if err != nil {
		t.Fatalf("%s: %v (got %q)", w, err, b)
	}
	return string(b)
}

// By default only srvr is answered (ZooKeeper >= 3.5.3); cons and conf,
// which name sessions and addresses, get ZooKeeper's refusal.
func TestZKFourLetterWordsDefault(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	tc.leader()
	addr := tc.zkAddrs()[0]
	if got := fourLetter(t, addr, "srvr"); !strings.Contains(got, "Mode: leader") {
		t.Fatalf("srvr = %q", got)
	}
	for _, w := range []string{"cons", "conf", "ruok", "mntr", "envi", "stat", "wchs", "isro"} {
		if got, want := fourLetter(t, addr, w), w+" is not executed because it is not in the whitelist.\n"; got != want {
			t.Fatalf("%s = %q, want %q", w, got, want)
		}
	}
}

// dialFrom connects to addr from local address ip.
func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, ip, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedAtOnce: the server closed c without a byte (read gets EOF, or a
// reset), rather than waiting for the client.
func closedAtOnce(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

// maxClientCnxns: the 61st connection from one address is closed at
// accept, on the ZooKeeper port and on the gRPC port, while another
// address still connects; a slot freed is taken again.
func TestPerAddressConnectionCap(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	tc.leader()
	zkAddr, grpcAddr := tc.zkAddrs()[0], tc.servers[0].GRPCAddr()
	for _, port := range []struct{ name, addr string }{{"zk", zkAddr}, {"grpc", grpcAddr}} {
		t.Run(port.name, func(t *testing.T) {
			conns := make([]net.Conn, DefaultMaxClientCnxns)
			for i := range conns {
				conns[i] = dialFrom(t, "127.0.0.1", port.addr)
			}
			// The accept loop has seen all 60 once the 61st is answered.
			if extra := dialFrom(t, "127.0.0.1", port.addr); !closedAtOnce(extra) {
				t.Fatalf("connection %d from 127.0.0.1 was not closed", DefaultMaxClientCnxns+1)
			}
			other := dialFrom(t, "127.0.0.2", port.addr)
			if port.name == "zk" {
				other.Write([]byte("srvr"))
				other.SetReadDeadline(time.Now().Add(5 * time.Second))
				if b, _ := io.ReadAll(other); !strings.Contains(string(b), "Zookeeper version") {
					t.Fatalf("srvr from 127.0.0.2 = %q", b)
				}
			} else if closedAtOnce(other) {
				t.Fatal("a connection from 127.0.0.2 was closed")
			}
			// The 60 are held open, not closed.
			if port.name == "zk" {
				conns[0].Write([]byte("srvr"))
				conns[0].SetReadDeadline(time.Now().Add(5 * time.Second))
				if b, _ := io.ReadAll(conns[0]); !strings.Contains(string(b), "Zookeeper version") {
					t.Fatalf("srvr on a connection within the cap = %q", b)
				}
			} else {
				conns[0].Close()
			}
			// conns[0] is closed now: its slot is free again.
			deadline := time.Now().Add(5 * time.Second)
			for closedAtOnce(dialFrom(t, "127.0.0.1", port.addr)) {
				if time.Now().After(deadline) {
					t.Fatal("no connection admitted after one of the 60 closed")
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// A zoo.cfg fails closed: security settings Meridian does not implement
// refuse to start naming the key and file; plaintext peers need
// meridian.insecure=true; 4lw.commands.whitelist and maxClientCnxns map.
func TestFromZooCfgFailsClosed(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "zoo.cfg")
	base := "dataDir=" + dir + "\nclientPort=2181\n"
	for _, tc := range []struct {
		name, body string
		props      map[string]string
		want       []string // error substrings; nil: accepted
		check      func(t *testing.T, z ZooCfg)
	}{
		{name: "plaintext peers not asked for", body: base, want: []string{"sslQuorum", "meridian.insecure=true"}},
		{name: "meridian.insecure=false", body: base + "meridian.insecure=false\n", want: []string{"meridian.insecure=true"}},
		{name: "meridian.insecure garbage", body: base + "meridian.insecure=yes\n", want: []string{"meridian.insecure", `"yes"`}},
		{name: "insecure in file", body: base + "meridian.insecure=true\n", check: func(t *testing.T, z ZooCfg) {
			if !z.Config.Insecure || !slices.Equal(z.Config.FourLetterWords, []string{"srvr"}) || *z.Config.MaxClientCnxns != 60 {
				t.Fatalf("%+v", z.Config)
			}
		}},
		{name: "sslQuorum", body: base + "sslQuorum=true\n", props: insecureProps, want: []string{"sslQuorum"}},
		{name: "sslQuorum property", body: base, props: map[string]string{"meridian.insecure": "true", "zookeeper.sslQuorum": "true"},
			want: []string{"sslQuorum", "zookeeper.sslQuorum"}},
		{name: "ssl.quorum keystore", body: base + "ssl.quorum.keyStore.location=/k.jks\n", props: insecureProps, want: []string{"ssl.quorum.keyStore.location"}},
		{name: "quorum sasl", body: base + "quorum.auth.enableSasl=true\n", props: insecureProps, want: []string{"quorum.auth.enableSasl"}},
		{name: "quorum sasl required", body: base + "quorum.auth.learnerRequireSasl=true\n", props: insecureProps, want: []string{"quorum.auth.learnerRequireSasl"}},
		{name: "quorum sasl off", body: base + "quorum.auth.enableSasl=false\n", props: insecureProps, check: func(t *testing.T, z ZooCfg) {}},
		{name: "ssl protocol", body: base + "ssl.protocol=TLSv1.3\n", props: insecureProps, want: []string{"ssl.protocol"}},
		{name: "ssl hostname verification", body: base + "ssl.hostnameVerification=true\n", props: insecureProps, want: []string{"ssl.hostnameVerification"}},
		{name: "4lw list", body: base + "4lw.commands.whitelist=stat, ruok, conf, isro\n", props: insecureProps, check: func(t *testing.T, z ZooCfg) {
			if !slices.Equal(z.Config.FourLetterWords, []string{"stat", "ruok", "conf", "isro"}) {
				t.Fatalf("words %v", z.Config.FourLetterWords)
			}
		}},
		{name: "4lw star", body: base + "4lw.commands.whitelist=*\n", props: insecureProps, check: func(t *testing.T, z ZooCfg) {
			if !z.Config.fourLetterWordEnabled("cons") {
				t.Fatalf("words %v", z.Config.FourLetterWords)
			}
		}},
		{name: "4lw property wins", body: base + "4lw.commands.whitelist=*\n",
			props: map[string]string{"meridian.insecure": "true", "zookeeper.4lw.commands.whitelist": "ruok"}, check: func(t *testing.T, z ZooCfg) {
				if !slices.Equal(z.Config.FourLetterWords, []string{"ruok"}) {
					t.Fatalf("words %v", z.Config.FourLetterWords)
				}
			}},
		{name: "4lw ZooKeeper-only", body: base + "4lw.commands.whitelist=dump\n", props: insecureProps, check: func(t *testing.T, z ZooCfg) {
			if z.Config.fourLetterWordEnabled("srvr") || !slices.Contains(z.Ignored, "4lw.commands.whitelist:dump") {
				t.Fatalf("words %v ignored %v", z.Config.FourLetterWords, z.Ignored)
			}
		}},
		{name: "4lw unknown", body: base + "4lw.commands.whitelist=ruok,bogs\n", props: insecureProps, want: []string{"4lw.commands.whitelist", `"bogs"`}},
		{name: "maxClientCnxns", body: base + "maxClientCnxns=5\n", props: insecureProps, check: func(t *testing.T, z ZooCfg) {
			if *z.Config.MaxClientCnxns != 5 {
				t.Fatalf("max_client_cnxns %d", *z.Config.MaxClientCnxns)
			}
		}},
		{name: "maxClientCnxns negative", body: base + "maxClientCnxns=-1\n", props: insecureProps, want: []string{"maxClientCnxns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.WriteFile(cfg, []byte(tc.body), 0o644)
			z, err := FromZooCfg(cfg, tc.props)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				tc.check(t, z)
				return
			}
			if err == nil {
				t.Fatalf("accepted: %+v", z.Config)
			}
			for _, w := range append(tc.want, cfg) {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// New refuses to start when the caps do not fit the descriptor limit,
// before it opens storage or binds a port.
func TestNewRefusesCapsOverFDLimit(t *testing.T) {
	c := Config{ID: 1, DataDir: t.TempDir(), Insecure: true, MaxClientConnections: 1 << 30,
		Members: []Member{{ID: 1, Peer: "127.0.0.1:0", GRPC: "127.0.0.1:0", ZK: "127.0.0.1:0"}}}
	s, err := New(c, testLogger())
	if err == nil {
		s.Close()
		t.Fatal("started with max_client_connections 2^30")
	}
	if !strings.Contains(err.Error(), "max_client_connections 1073741824") || !strings.Contains(err.Error(), "limit is") {
		t.Fatalf("error %q does not name the numbers", err)
	}
}

// The HTTP port holds at most max_http_connections (a further one waits
// in the backlog until one closes) and closes keep-alive connections idle
// for idle_timeout_ms.
func TestHTTPConnectionCapAndIdleTimeout(t *testing.T) {
	port := freePorts(t, 1)[0]
	httpAddr := "127.0.0.1:" + strconv.Itoa(port)
	tc := newTestCluster(t, 1, func(c *Config) {
		c.ListenHTTP, c.MaxHTTPConnections, c.IdleTimeoutMs = httpAddr, 2, 300
	})
	tc.leader()
	get := func(timeout time.Duration) error {
		cl := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: tc.clientTLS()}}
		resp, err := cl.Get("https://" + httpAddr + "/livez")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	a, b := dialFrom(t, "127.0.0.1", httpAddr), dialFrom(t, "127.0.0.1", httpAddr)
	time.Sleep(100 * time.Millisecond)
	if err := get(time.Second); err == nil {
		t.Fatal("a third connection was served while two were open and max_http_connections is 2")
	}
	a.Close()
	if err := get(5 * time.Second); err != nil {
		t.Fatalf("not served after one of the two closed: %v", err)
	}

	// A keep-alive connection idle past idle_timeout_ms is closed.
	tlsc := tc.clientTLS()
	tlsc.ServerName = "127.0.0.1"
	tb := tls.Client(b, tlsc)
	tb.Write([]byte("GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"))
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	got, err := io.ReadAll(tb)
	if err != nil || !strings.Contains(string(got), "200 OK") {
		t.Fatalf("keep-alive connection: %q %v", got, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("idle keep-alive connection closed after %v, want about 300ms", d)
	}
}
