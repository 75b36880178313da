package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// RFC 2831 section 4's example exchange.
func TestDigestMD5RFCVector(t *testing.T) {
	const user, realm, pw, nonce, cnonce, uri = "chris", "elwood.innosoft.com", "secret", "OA6MG9tEQGm2hh", "OA6MHXh6VqTrRk", "imap/elwood.innosoft.com"
	if got := digestResponse(user, realm, pw, nonce, cnonce, "AUTHENTICATE:"+uri); got != "d388dad90d4bbd760a152321f2143af7" {
		t.Fatalf("response %s", got)
	}
	if got := digestResponse(user, realm, pw, nonce, cnonce, ":"+uri); got != "ea40f60335c427b5527b84dbabcdfffd" {
		t.Fatalf("rspauth %s", got)
	}
}

func clientResponse(user, pw, nonce, uri string) []byte {
	r := digestResponse(user, saslRealm, pw, nonce, "c1", "AUTHENTICATE:"+uri)
	return fmt.Appendf(nil, `charset=utf-8,username="%s",realm="%s",nonce="%s",nc=00000001,cnonce="c1",digest-uri="%s",maxbuf=65536,response=%s,qop=auth`,
		user, saslRealm, nonce, uri, r)
}

func TestDigestMD5Exchange(t *testing.T) {
	users := map[string]string{"jaasuser": "jaas_password"}
	challenge := func() (*digestMD5, string) {
		d := &digestMD5{users: users}
		c, user, err := d.step(nil)
		if err != nil || user != "" {
			t.Fatalf("challenge: %v", err)
		}
		f, ok := parseDigestDirectives(c)
		if !ok || f["realm"] != saslRealm || f["qop"] != "auth" || f["algorithm"] != "md5-sess" || f["nonce"] == "" {
			t.Fatalf("challenge %q", c)
		}
		return d, f["nonce"]
	}

	d, nonce := challenge()
	reply, user, err := d.step(clientResponse("jaasuser", "jaas_password", nonce, "zookeeper/zk-sasl-md5"))
	if err != nil || user != "jaasuser" {
		t.Fatalf("good password: %q %v", user, err)
	}
	want := "rspauth=" + digestResponse("jaasuser", saslRealm, "jaas_password", nonce, "c1", ":zookeeper/zk-sasl-md5")
	if string(reply) != want {
		t.Fatalf("rspauth %q, want %q", reply, want)
	}

	for name, resp := range map[string]func(nonce string) []byte{
		"wrong password": func(n string) []byte { return clientResponse("jaasuser", "nope", n, "zookeeper/zk-sasl-md5") },
		"unknown user":   func(n string) []byte { return clientResponse("baduser", "badpassword", n, "zookeeper/zk-sasl-md5") },
		"other nonce": func(n string) []byte {
			return clientResponse("jaasuser", "jaas_password", "x"+n, "zookeeper/zk-sasl-md5")
		},
		"other service": func(n string) []byte { return clientResponse("jaasuser", "jaas_password", n, "imap/zk-sasl-md5") },
		"garbage":       func(string) []byte { return []byte(`username="unterminated`) },
		"duplicate":     func(string) []byte { return []byte(`username=a,username=b`) },
		"huge":          func(string) []byte { return make([]byte, maxSASLTokenBytes+1) },
	} {
		d, nonce := challenge()
		if _, user, err := d.step(resp(nonce)); err == nil || user != "" {
			t.Errorf("%s: accepted as %q", name, user)
		}
	}
}

func TestLoadJAASUsers(t *testing.T) {
	p := filepath.Join(t.TempDir(), "jaas.conf")
	os.WriteFile(p, []byte(`
Client { org.apache.zookeeper.server.auth.DigestLoginModule required username="c" password="p"; };
Server {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    // a comment
    user_super="super_secret"
    user_jaasuser="jaas_password";
};`), 0o644)
	users, err := LoadJAASUsers(p)
	if err != nil || len(users) != 2 || users["super"] != "super_secret" || users["jaasuser"] != "jaas_password" {
		t.Fatalf("users %v %v", users, err)
	}
	os.WriteFile(p, nil, 0o644)
	if users, err := LoadJAASUsers(p); err != nil || len(users) != 0 {
		t.Fatalf("empty file: %v %v", users, err)
	}
	if _, err := LoadJAASUsers(p + ".missing"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing file: %v", err)
	}
}
