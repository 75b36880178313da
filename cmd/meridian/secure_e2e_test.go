package main

import (
	"bytes"
	"crypto/tls"
	bin "encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/pki"
)

// TestProductionInstructions follows README's "Running a server": a CA,
// member and client certificates from `meridian certs`, a config per member
// with tls, cluster_token and admin_subjects, three server processes. Then
// every port is tried as an outsider would: plaintext is refused on the
// peer, gRPC and HTTP ports; a certificate of another CA is refused on the
// peer port; without the admin certificate, data operations work (as ACLs
// allow) and administration is refused; with it, administration works.
func TestProductionInstructions(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(binary, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("meridian %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := run("certs", "ca", "--dir", certs)
	m := regexp.MustCompile(`cluster_token: ([0-9a-f]{32})`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("certs ca printed no token:\n%s", out)
	}
	token := m[1]
	for i := 1; i <= 3; i++ {
		run("certs", "member", fmt.Sprint(i), "--dir", certs, "--host", "127.0.0.1")
	}
	if out := run("certs", "client", "ops", "--dir", certs); !strings.Contains(out, "x509 subject: CN=ops") {
		t.Fatalf("certs client:\n%s", out)
	}

	ports := freePorts(t, 9)
	var members strings.Builder
	for i := 0; i < 3; i++ {
		fmt.Fprintf(&members, "  - {id: %d, region: local, zone: z%d, peer: \"127.0.0.1:%d\", grpc: \"127.0.0.1:%d\", http: \"127.0.0.1:%d\"}\n",
			i+1, i+1, ports[3*i], ports[3*i+1], ports[3*i+2])
	}
	var eps []string
	for i := 1; i <= 3; i++ {
		cfg := fmt.Sprintf(`id: %d
data_dir: %s
cluster_token: %s
tls: {ca: %s, cert: %s, key: %s}
admin_subjects: ["CN=ops"]
members:
%stick_ms: 50
session_tick_ms: 500
`, i, filepath.Join(dir, fmt.Sprintf("n%d", i)), token, filepath.Join(certs, "ca.pem"),
			filepath.Join(certs, fmt.Sprintf("member-%d.pem", i)), filepath.Join(certs, fmt.Sprintf("member-%d-key.pem", i)), members.String())
		p := filepath.Join(dir, fmt.Sprintf("n%d.yaml", i))
		if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		startServer(t, p, filepath.Join(dir, fmt.Sprintf("n%d.log", i)))
		eps = append(eps, fmt.Sprintf("127.0.0.1:%d", ports[3*(i-1)+1]))
	}
	ca, cert, key := filepath.Join(certs, "ca.pem"), filepath.Join(certs, "ops.pem"), filepath.Join(certs, "ops-key.pem")
	cli := func(admin bool, args ...string) (string, error) {
		full := []string{"--endpoints", strings.Join(eps, ","), "--timeout", "10s", "--cacert", ca}
		if admin {
			full = append(full, "--cert", cert, "--key", key)
		}
		c := exec.Command(binary, append(full, args...)...)
		c.Dir = dir // no data/dev/tls to fall back on
		b, err := c.CombinedOutput()
		return string(b), err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := cli(false, "create", "/app", "hello")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create through TLS: %v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out, err := cli(false, "get", "/app"); err != nil || !strings.Contains(out, "hello") {
		t.Fatalf("get: %v\n%s", err, out)
	}
	// Administration needs the admin certificate.
	if out, err := cli(false, "leader", "transfer", "2"); err == nil || !strings.Contains(strings.ToLower(out), "admin") {
		t.Fatalf("leader transfer without the admin certificate: %v\n%s", err, out)
	}
	if out, err := cli(true, "leader", "transfer", "2"); err != nil {
		t.Fatalf("leader transfer as ops: %v\n%s", err, out)
	}

	// gRPC: a plaintext client gets nowhere.
	if out, err := exec.Command(binary, "--endpoints", eps[0], "--timeout", "3s", "--insecure", "get", "/app").CombinedOutput(); err == nil {
		t.Fatalf("plaintext gRPC client served:\n%s", out)
	}
	// HTTP: plaintext refused; /status needs the admin certificate.
	httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[2])
	if resp, err := http.Get("http://" + httpAddr + "/status"); err == nil {
		code := resp.StatusCode
		resp.Body.Close()
		if code == 200 {
			t.Fatal("plaintext /status served")
		}
	}
	clientTLS := func(admin bool) *tls.Config {
		c, err := client.TLSConfig(ca, "", "")
		if admin {
			c, err = client.TLSConfig(ca, cert, key)
		}
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	statusCode := func(admin bool) int {
		cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS(admin)}}
		resp, err := cl.Get("https://" + httpAddr + "/status")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := statusCode(false); code != 403 {
		t.Fatalf("/status without a client certificate: %d, want 403", code)
	}
	if code := statusCode(true); code != 200 {
		t.Fatalf("/status as ops: %d, want 200", code)
	}

	// Peer port: a plaintext frame (a heartbeat of a huge term from
	// "member 2") gets no answer but a close, and a certificate of another
	// CA fails the handshake.
	peerAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	conn, err := net.DialTimeout("tcp", peerAddr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var frame bytes.Buffer
	bin.Write(&frame, bin.BigEndian, uint32(9+8))
	frame.WriteByte(6) // hello
	bin.Write(&frame, bin.BigEndian, uint64(2))
	bin.Write(&frame, bin.BigEndian, uint64(12345))
	conn.Write(frame.Bytes())
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := io.ReadAll(conn); err == nil && len(n) > 0 && !looksLikeTLSAlert(n) {
		t.Fatalf("plaintext hello answered with %d bytes", len(n))
	}
	conn.Close()
	other, err := pki.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	forged, err := other.IssueMember(pki.MemberIdentity("", 2), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	tc := clientTLS(false)
	tc.Certificates = []tls.Certificate{forged.TLSCertificate()}
	tc.ServerName = pki.MemberIdentity("", 1)
	if c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", peerAddr, tc); err == nil {
		// TLS 1.3: the client's certificate is judged after the client's
		// handshake returns; the server's refusal arrives on the first read.
		c.Write(frame.Bytes())
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("peer port answered a certificate of another CA")
		}
		c.Close()
	}
	// And the cluster still works for its own members and clients.
	if out, err := cli(false, "set", "/app", "v2"); err != nil {
		t.Fatalf("set after the attempts: %v\n%s", err, out)
	}
}

// looksLikeTLSAlert reports whether b is a TLS record (what a TLS server
// may answer to plaintext before closing).
func looksLikeTLSAlert(b []byte) bool { return len(b) >= 1 && (b[0] == 0x15 || b[0] == 0x16) }
