package server

import (
	"bufio"
	"crypto/md5"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// SASL on the ZooKeeper port: the DIGEST-MD5 mechanism (RFC 2831) with
// qop=auth, as ZooKeeper's server offers it with a JAAS DigestLoginModule.
// A client that authenticates gets the identity ("sasl", username), which
// ACLs with scheme "sasl" name. Kerberos (GSSAPI) is not offered.

// saslRealm is the realm and host ZooKeeper fixes for DIGEST-MD5 (its
// SecurityUtils uses "zk-sasl-md5" instead of a host name; clients know it).
const saslRealm = "zk-sasl-md5"

const (
	maxSASLTokenBytes = 4096 // a DIGEST-MD5 response is a few hundred bytes
	maxSASLSteps      = 4    // empty token, response, and slack
)

var errSASL = errors.New("SASL authentication failed")

// LoadJAASUsers reads the user_NAME="password" options of the Server
// section of a JAAS login file, the way ZooKeeper's DigestLoginModule is
// configured. Other sections and modules are ignored.
func LoadJAASUsers(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b strings.Builder
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	users := map[string]string{}
	m := jaasSection.FindStringSubmatch(b.String())
	if m == nil {
		return users, nil
	}
	for _, kv := range jaasUser.FindAllStringSubmatch(m[1], -1) {
		users[kv[1]] = kv[2]
	}
	return users, nil
}

var (
	jaasSection = regexp.MustCompile(`(?s)\bServer\s*\{(.*?)\}\s*;`)
	jaasUser    = regexp.MustCompile(`\buser_([^\s=]+)\s*=\s*"([^"]*)"`)
)

// digestMD5 is the server side of one DIGEST-MD5 exchange.
type digestMD5 struct {
	users map[string]string
	nonce string
	steps int
}

// step consumes the client's token and returns the server's. done with a
// non-empty user means authenticated; an error means the client must be
// disconnected, as ZooKeeper does.
func (d *digestMD5) step(token []byte) (reply []byte, user string, err error) {
	d.steps++
	if d.steps > maxSASLSteps || len(token) > maxSASLTokenBytes {
		return nil, "", errSASL
	}
	if d.nonce == "" {
		// The first token is empty (DIGEST-MD5 has no initial response):
		// answer with the challenge.
		n := make([]byte, 24)
		rand.Read(n)
		d.nonce = base64.RawStdEncoding.EncodeToString(n)
		return fmt.Appendf(nil, `realm="%s",nonce="%s",qop="auth",charset=utf-8,algorithm=md5-sess`, saslRealm, d.nonce), "", nil
	}
	f, ok := parseDigestDirectives(token)
	if !ok {
		return nil, "", errSASL
	}
	user = f["username"]
	password, known := d.users[user]
	switch {
	case !known, f["nonce"] != d.nonce, f["nc"] != "00000001", f["cnonce"] == "",
		f["qop"] != "" && f["qop"] != "auth", f["realm"] != "" && f["realm"] != saslRealm,
		f["digest-uri"] != "zookeeper/"+saslRealm,
		f["authzid"] != "" && f["authzid"] != user:
		return nil, "", errSASL
	}
	expect := digestResponse(user, saslRealm, password, d.nonce, f["cnonce"], "AUTHENTICATE:"+f["digest-uri"])
	if subtle.ConstantTimeCompare([]byte(expect), []byte(strings.ToLower(f["response"]))) != 1 {
		return nil, "", errSASL
	}
	return []byte("rspauth=" + digestResponse(user, saslRealm, password, d.nonce, f["cnonce"], ":"+f["digest-uri"])), user, nil
}

// digestResponse is RFC 2831's response-value for qop=auth, md5-sess.
func digestResponse(user, realm, password, nonce, cnonce, a2 string) string {
	key := md5.Sum([]byte(user + ":" + realm + ":" + password))
	a1 := md5.Sum(append(key[:], ":"+nonce+":"+cnonce...))
	h2 := md5.Sum([]byte(a2))
	kd := md5.Sum([]byte(hex.EncodeToString(a1[:]) + ":" + nonce + ":00000001:" + cnonce + ":auth:" + hex.EncodeToString(h2[:])))
	return hex.EncodeToString(kd[:])
}

// parseDigestDirectives splits name=value and name="quoted \"value\""
// pairs separated by commas. A directive given twice is refused.
func parseDigestDirectives(b []byte) (map[string]string, bool) {
	out := map[string]string{}
	s := string(b)
	for len(s) > 0 {
		s = strings.TrimLeft(s, " \t,")
		if s == "" {
			break
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			return nil, false
		}
		name := strings.ToLower(strings.TrimSpace(s[:eq]))
		s = strings.TrimLeft(s[eq+1:], " \t")
		var val strings.Builder
		if strings.HasPrefix(s, `"`) {
			i, closed := 1, false
			for ; i < len(s); i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
					val.WriteByte(s[i])
					continue
				}
				if s[i] == '"' {
					closed = true
					break
				}
				val.WriteByte(s[i])
			}
			if !closed {
				return nil, false
			}
			s = s[i+1:]
		} else {
			end := strings.IndexByte(s, ',')
			if end < 0 {
				end = len(s)
			}
			val.WriteString(strings.TrimSpace(s[:end]))
			s = s[end:]
		}
		if _, dup := out[name]; dup {
			return nil, false
		}
		out[name] = val.String()
	}
	return out, true
}
