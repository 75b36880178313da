package server

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/meridian-coord/meridian/internal/pki"
	zk "github.com/meridian-coord/meridian/internal/zkproto"
)

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all PEM, and returns their paths and the CA pool.
func testPKI(t *testing.T) (dir string, pool *x509.CertPool) {
	dir = t.TempDir()
	ca, err := pki.NewCA("test ca")
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Write(dir); err != nil {
		t.Fatal(err)
	}
	srv, err := ca.IssueMember("server", []string{"127.0.0.1"})
	if err == nil {
		err = srv.Write(dir, "server")
	}
	if err != nil {
		t.Fatal(err)
	}
	cl, err := ca.IssueClient("client", "")
	if err == nil {
		err = cl.Write(dir, "client")
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir, ca.Pool()
}

// The TLS ZooKeeper port serves a client with a certificate the CA signed
// and refuses one without (client auth "need", ZooKeeper's default).
func TestZKTLSPort(t *testing.T) {
	dir, pool := testPKI(t)
	ports := freePorts(t, 3)
	tc := newTestCluster(t, 3, func(c *Config) {
		c.ZKSecureListen = "127.0.0.1:" + strconv.Itoa(ports[c.ID-1])
		c.ZKTLSCert, c.ZKTLSKey = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
		c.ZKTLSClientCA = filepath.Join(dir, "ca.pem")
	})
	tc.leader()
	clientCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	dialer := func(certs []tls.Certificate) gozk.Dialer {
		return func(network, addr string, timeout time.Duration) (net.Conn, error) {
			return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, network, addr, &tls.Config{RootCAs: pool, Certificates: certs})
		}
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[1])
	zc, events, err := gozk.Connect([]string{addr}, 4*time.Second, gozk.WithDialer(dialer([]tls.Certificate{clientCert})), gozk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	for deadline := time.After(15 * time.Second); zc.State() != gozk.StateHasSession; {
		select {
		case <-events:
		case <-deadline:
			t.Fatal("no session over TLS")
		}
	}
	if _, err := zc.Create("/tls", []byte("ok"), 0, gozk.WorldACL(gozk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if data, _, err := zc.Get("/tls"); err != nil || string(data) != "ok" {
		t.Fatalf("get over TLS: %q %v", data, err)
	}

	// No client certificate: the server ends the TLS handshake (under TLS
	// 1.3 the client learns it on its first read) and never answers the
	// ConnectRequest.
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
	if err == nil {
		frame, _ := zk.AppendRecordFrame(nil, &zk.ConnectRequest{TimeOut: 4000, Passwd: make([]byte, 16)})
		c.Write(frame)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("no verdict on a client without a certificate: %v", err)
		}
	}
	if err == nil {
		t.Fatal("client without a certificate was served")
	}
}

// A zoo.cfg with secureClientPort and JKS key and trust stores (as kazoo's
// harness writes) becomes a TLS port with PEM files Meridian can load.
func TestFromZooCfgTLS(t *testing.T) {
	dir := t.TempDir()
	ks, _ := filepath.Abs("testdata/keystore.jks")
	ts, _ := filepath.Abs("testdata/truststore.jks")
	cfg := filepath.Join(dir, "zoo.cfg")
	os.WriteFile(cfg, []byte("dataDir="+dir+"\nclientPort=2181\nsecureClientPort=2281\n"+
		"ssl.keyStore.location="+ks+"\nssl.keyStore.password=apassword\n"+
		"ssl.trustStore.location="+ts+"\nssl.trustStore.password=apassword\n"), 0o644)
	z, err := FromZooCfg(cfg, insecureProps)
	if err != nil {
		t.Fatal(err)
	}
	c := z.Config
	if c.ZKSecureListen != "0.0.0.0:2281" || c.ZKTLSClientAuth != "need" || c.ZKTLSClientCA == "" {
		t.Fatalf("config: %+v", c)
	}
	tlsCfg, err := c.zkTLSConfig()
	if err != nil || len(tlsCfg.Certificates) != 1 || tlsCfg.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("tls config: %v", err)
	}
	if st, _ := os.Stat(c.ZKTLSKey); st == nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file %s: %v", c.ZKTLSKey, st)
	}

	os.WriteFile(cfg, []byte("dataDir="+dir+"\nclientPort=2181\nsecureClientPort=2281\n"+
		"ssl.keyStore.location="+ks+"\nssl.keyStore.password=wrong\n"), 0o644)
	if _, err := FromZooCfg(cfg, insecureProps); err == nil {
		t.Fatal("wrong keystore password accepted")
	}
}
