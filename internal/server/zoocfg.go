package server

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// ZooCfg is what FromZooCfg made of a ZooKeeper config: the Meridian config
// and the keys it read but has no equivalent for (reported, not fatal, so a
// zoo.cfg written for ZooKeeper starts Meridian unchanged).
type ZooCfg struct {
	Config  Config
	Ignored []string
}

// FromZooCfg translates a ZooKeeper zoo.cfg (Java properties) plus JVM system
// properties (-Dkey=value, as QuorumPeerMain receives them) into a Config, so
// tooling that starts ZooKeeper can start Meridian in its place.
//
// Mapping: dataDir/myid → id; dataDir/meridian → data_dir; clientPort and
// clientPortAddress → zk_listen; tickTime → session_tick_ms;
// server.N=host:quorumPort:electionPort[:role][;[host:]clientPort] → member N
// with peer host:quorumPort and grpc host:electionPort (an observer becomes
// a learner); admin.serverPort →
// http; secureClientPort with ssl.keyStore/ssl.trustStore (JKS or PEM) and
// ssl.clientAuth → the TLS ZooKeeper port (see zooTLS);
// 4lw.commands.whitelist (or its zookeeper.* system property) →
// four_letter_words; maxClientCnxns → max_client_cnxns;
// meridian.insecure=true (file or system property) → insecure, required
// because sslQuorum is not implemented (refused, as are ssl.quorum.*,
// quorum.auth.* and ssl.* keys zooTLS does not read; see
// refuseUnimplemented); the superDigest
// system property → super_digest; the
// readonlymode.enabled system property → read_only_mode; the
// java.security.auth.login.config system property → jaas_config. A config without
// server.N lines is a standalone server: one member on the client port's
// host with its peer and gRPC ports chosen by the OS.
func FromZooCfg(path string, sysProps map[string]string) (ZooCfg, error) {
	props, err := readProperties(path)
	if err != nil {
		return ZooCfg{}, err
	}
	var out ZooCfg
	c := &out.Config
	used := map[string]bool{}
	get := func(k string) string { used[k] = true; return props[k] }

	dataDir := get("dataDir")
	if dataDir == "" {
		return out, fmt.Errorf("zoo.cfg %s: dataDir is required", path)
	}
	if !filepath.IsAbs(dataDir) {
		dataDir = filepath.Join(filepath.Dir(path), dataDir)
	}
	c.DataDir = filepath.Join(dataDir, "meridian")

	host := "0.0.0.0"
	if h := get("clientPortAddress"); h != "" {
		host = h
	}
	clientPort := get("clientPort")
	if clientPort == "" {
		return out, fmt.Errorf("zoo.cfg %s: clientPort is required (Meridian has no TLS-only mode)", path)
	}
	if _, err := parsePort(clientPort); err != nil {
		return out, fmt.Errorf("zoo.cfg %s: clientPort: %w", path, err)
	}
	c.ListenZK = net.JoinHostPort(host, clientPort)
	if t := get("tickTime"); t != "" {
		ms, err := strconv.Atoi(t)
		if err != nil || ms <= 0 || ms > 60000 {
			return out, fmt.Errorf("zoo.cfg %s: tickTime %q must be 1..60000 ms", path, t)
		}
		c.SessionTickMs = ms
	}
	if p := get("admin.serverPort"); p != "" && get("admin.enableServer") != "false" {
		if _, err := parsePort(p); err != nil {
			return out, fmt.Errorf("zoo.cfg %s: admin.serverPort: %w", path, err)
		}
		c.ListenHTTP = net.JoinHostPort(loopbackIfAny(host), p)
	}
	if p := get("secureClientPort"); p != "" {
		if _, err := parsePort(p); err != nil {
			return out, fmt.Errorf("zoo.cfg %s: secureClientPort: %w", path, err)
		}
		c.ZKSecureListen = net.JoinHostPort(host, p)
		if err := zooTLS(c, dataDir, func(k string) string {
			if v := sysProps["zookeeper."+k]; v != "" {
				return v
			}
			return get(k)
		}); err != nil {
			return out, fmt.Errorf("zoo.cfg %s: %w", path, err)
		}
	}
	if err := refuseUnimplemented(props, sysProps); err != nil {
		return out, fmt.Errorf("zoo.cfg %s: %w", path, err)
	}
	wl := get("4lw.commands.whitelist")
	if v, ok := sysProps["zookeeper.4lw.commands.whitelist"]; ok {
		wl = v // the system property wins, as in ZooKeeper
	}
	if wl != "" {
		words, skipped, err := zooFourLetterWords(wl)
		if err != nil {
			return out, fmt.Errorf("zoo.cfg %s: 4lw.commands.whitelist: %w", path, err)
		}
		c.FourLetterWords = words
		for _, w := range skipped {
			out.Ignored = append(out.Ignored, "4lw.commands.whitelist:"+w)
		}
	}
	if v := get("maxClientCnxns"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return out, fmt.Errorf("zoo.cfg %s: maxClientCnxns %q: want a number >= 0 (0: unlimited)", path, v)
		}
		c.MaxClientCnxns = &n
	}
	if d := sysProps["zookeeper.DigestAuthenticationProvider.superDigest"]; d != "" {
		c.SuperDigest = d
	}
	c.ReadOnlyMode = sysProps["readonlymode.enabled"] == "true"
	c.JAASConfig = sysProps["java.security.auth.login.config"]

	for k, v := range props {
		if !strings.HasPrefix(k, "server.") {
			continue
		}
		used[k] = true
		id, err := strconv.ParseUint(strings.TrimPrefix(k, "server."), 10, 64)
		if err != nil || id == 0 {
			return out, fmt.Errorf("zoo.cfg %s: %s: server ids must be positive integers", path, k)
		}
		m, err := parseServerLine(id, v)
		if err != nil {
			return out, fmt.Errorf("zoo.cfg %s: %s: %w", path, k, err)
		}
		c.Members = append(c.Members, m)
	}
	sort.Slice(c.Members, func(i, j int) bool { return c.Members[i].ID < c.Members[j].ID })

	if len(c.Members) == 0 {
		// Standalone: one voter; nothing else dials its peer or gRPC port.
		c.ID = 1
		c.Members = []Member{{ID: 1, Region: "local", Zone: "local",
			Peer: net.JoinHostPort(loopbackIfAny(host), "0"), GRPC: net.JoinHostPort(loopbackIfAny(host), "0"),
			ZK: net.JoinHostPort(loopbackIfAny(host), clientPort)}}
	} else {
		b, err := os.ReadFile(filepath.Join(dataDir, "myid"))
		if err != nil {
			return out, fmt.Errorf("zoo.cfg %s: a replicated config needs dataDir/myid: %w", path, err)
		}
		id, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
		if err != nil {
			return out, fmt.Errorf("%s: myid %q is not a server id", filepath.Join(dataDir, "myid"), bytes.TrimSpace(b))
		}
		c.ID = id
		for i := range c.Members {
			if c.Members[i].ID == id && c.Members[i].ZK == "" {
				c.Members[i].ZK = net.JoinHostPort(loopbackIfAny(host), clientPort)
			}
		}
	}
	// Keys that only tune ZooKeeper's own implementation are listed so the
	// operator sees them; see docs/compatibility.md. Security settings
	// Meridian lacks were refused above (refuseUnimplemented).
	used["meridian.insecure"] = true
	for k := range props {
		if !used[k] {
			out.Ignored = append(out.Ignored, k)
		}
	}
	sort.Strings(out.Ignored)
	// Without sslQuorum (refused above), ZooKeeper's servers talk in
	// plaintext, and Meridian's peer, gRPC and HTTP ports would too:
	// anyone who reaches the peer port can rewrite the cluster. That is
	// accepted only when asked for by name.
	insecure, err := zooInsecure(props, sysProps)
	if err != nil {
		return out, fmt.Errorf("zoo.cfg %s: %w", path, err)
	}
	c.Insecure = true
	if err := c.Normalize(); err != nil {
		return out, fmt.Errorf("zoo.cfg %s: %w", path, err)
	}
	if !insecure {
		return out, fmt.Errorf("zoo.cfg %s: sslQuorum is not set, so the peer, gRPC and HTTP ports would be plaintext, "+
			"which anyone who can reach them controls; Meridian runs so from a zoo.cfg only with meridian.insecure=true "+
			"(in the file or as -D meridian.insecure=true), or use --config with tls: (see docs/security.md)", path)
	}
	return out, nil
}

// zooInsecure reads meridian.insecure from the file or the system
// properties (which win).
func zooInsecure(props, sysProps map[string]string) (bool, error) {
	v, ok := props["meridian.insecure"]
	if sv, sok := sysProps["meridian.insecure"]; sok {
		v, ok = sv, true
	}
	switch {
	case !ok, v == "false":
		return false, nil
	case v == "true":
		return true, nil
	}
	return false, fmt.Errorf("meridian.insecure %q: want true or false", v)
}

// zooTLSKeys are the ssl.* keys zooTLS implements for secureClientPort.
var zooTLSKeys = map[string]bool{
	"ssl.keyStore.location": true, "ssl.keyStore.password": true, "ssl.keyStore.type": true,
	"ssl.trustStore.location": true, "ssl.trustStore.password": true, "ssl.trustStore.type": true,
	"ssl.clientAuth": true,
}

// refuseUnimplemented fails closed on security settings Meridian does not
// implement from a zoo.cfg: ignoring them would run a cluster less
// protected than its operator configured. sslQuorum (TLS between
// servers) and ssl.quorum.*: Meridian's member TLS needs certificates
// naming member ids, which ZooKeeper's quorum keystores do not; configure
// it with --config and tls:. quorum.auth.* (SASL between servers): not
// implemented; "false" is accepted. ssl.* beyond the key and trust stores
// and clientAuth (protocols, cipher suites, hostname verification, CRL,
// OCSP, ...) would change the TLS port in ways zooTLS does not. Keys are
// checked in the file and as zookeeper.* system properties; the error
// names the first, in sorted order.
func refuseUnimplemented(props, sysProps map[string]string) error {
	type kv struct{ key, value, where string }
	var all []kv
	for k, v := range props {
		all = append(all, kv{k, v, ""})
	}
	for k, v := range sysProps {
		if zk, ok := strings.CutPrefix(k, "zookeeper."); ok {
			all = append(all, kv{zk, v, " (system property " + k + ")"})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].key+all[i].where < all[j].key+all[j].where })
	for _, p := range all {
		switch {
		case p.key == "sslQuorum":
			if p.value != "false" {
				return fmt.Errorf("sslQuorum%s: TLS between servers is not configured from a zoo.cfg; use --config with tls: (member certificates; see docs/security.md)", p.where)
			}
		case strings.HasPrefix(p.key, "ssl.quorum."):
			return fmt.Errorf("%s%s: TLS between servers is not configured from a zoo.cfg; use --config with tls: (see docs/security.md)", p.key, p.where)
		case strings.HasPrefix(p.key, "quorum.auth."):
			if p.value != "false" {
				return fmt.Errorf("%s%s: SASL between servers is not implemented; Meridian authenticates members by certificate (--config with tls:)", p.key, p.where)
			}
		case strings.HasPrefix(p.key, "ssl.") && !zooTLSKeys[p.key]:
			return fmt.Errorf("%s%s: not implemented for the TLS client port (only ssl.keyStore.*, ssl.trustStore.* and ssl.clientAuth are)", p.key, p.where)
		}
	}
	return nil
}

// zooFourLetterWords reads a 4lw.commands.whitelist value: a comma list
// or "*". Words ZooKeeper has and Meridian does not answer are returned as
// skipped (they would not be answered anyway); a word ZooKeeper does not
// know is an error naming it.
func zooFourLetterWords(v string) (words, skipped []string, err error) {
	for _, w := range strings.Split(v, ",") {
		w = strings.TrimSpace(w)
		switch {
		case w == "":
		case w == "*" || fourLetterWords[w]:
			words = append(words, w)
		case zkOnlyFourLetterWords[w]:
			skipped = append(skipped, w)
		default:
			return nil, nil, fmt.Errorf("%q is not a four-letter word", w)
		}
	}
	if slices.Contains(words, "*") {
		words = []string{"*"}
	}
	if len(words) == 0 {
		// Only words Meridian does not answer: none of Meridian's is
		// enabled, as ZooKeeper would answer none of them.
		words = []string{"none"}
	}
	return words, skipped, nil
}

// zkOnlyFourLetterWords are ZooKeeper's words Meridian does not answer.
var zkOnlyFourLetterWords = map[string]bool{"crst": true, "dump": true, "srst": true, "dirs": true,
	"wchc": true, "wchp": true, "gtmk": true, "stmk": true, "hash": true}

// zooTLS turns ZooKeeper's ssl.keyStore / ssl.trustStore settings (JKS or
// PEM files) into the PEM files Meridian reads, written under
// dataDir/meridian-tls with mode 0600. ssl.clientAuth maps to
// zk_tls_client_auth.
func zooTLS(c *Config, dataDir string, get func(string) string) error {
	ksPath, ksPass, ksType := get("ssl.keyStore.location"), get("ssl.keyStore.password"), get("ssl.keyStore.type")
	if ksPath == "" {
		return fmt.Errorf("secureClientPort needs ssl.keyStore.location")
	}
	dir := filepath.Join(dataDir, "meridian-tls")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var certPEM, keyPEM []byte
	switch storeType(ksType, ksPath) {
	case "pem":
		// ZooKeeper's PEM keystore: the key and its chain in one file.
		c.ZKTLSCert, c.ZKTLSKey = ksPath, ksPath
	case "jks":
		b, err := os.ReadFile(ksPath)
		if err != nil {
			return err
		}
		st, err := decodeJKS(b, ksPass)
		if err != nil {
			return fmt.Errorf("ssl.keyStore %s: %w", ksPath, err)
		}
		if len(st.Keys) != 1 {
			return fmt.Errorf("ssl.keyStore %s: want exactly one private key, found %d", ksPath, len(st.Keys))
		}
		der, err := x509.MarshalPKCS8PrivateKey(st.Keys[0].Key)
		if err != nil {
			return err
		}
		keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
		for _, cert := range st.Keys[0].Chain {
			certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert})...)
		}
		c.ZKTLSCert, c.ZKTLSKey = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
		if err := os.WriteFile(c.ZKTLSCert, certPEM, 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(c.ZKTLSKey, keyPEM, 0o600); err != nil {
			return err
		}
	default:
		return fmt.Errorf("ssl.keyStore.type %q: only JKS and PEM keystores are read", ksType)
	}

	c.ZKTLSClientAuth = strings.ToLower(get("ssl.clientAuth"))
	tsPath, tsPass, tsType := get("ssl.trustStore.location"), get("ssl.trustStore.password"), get("ssl.trustStore.type")
	switch {
	case tsPath == "":
	case storeType(tsType, tsPath) == "pem":
		c.ZKTLSClientCA = tsPath
	case storeType(tsType, tsPath) == "jks":
		b, err := os.ReadFile(tsPath)
		if err != nil {
			return err
		}
		st, err := decodeJKS(b, tsPass)
		if err != nil {
			return fmt.Errorf("ssl.trustStore %s: %w", tsPath, err)
		}
		var cas []byte
		for _, cert := range st.Certs {
			cas = append(cas, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert})...)
		}
		c.ZKTLSClientCA = filepath.Join(dir, "client-ca.pem")
		if err := os.WriteFile(c.ZKTLSClientCA, cas, 0o600); err != nil {
			return err
		}
	default:
		return fmt.Errorf("ssl.trustStore.type %q: only JKS and PEM truststores are read", tsType)
	}
	return nil
}

// storeType is ZooKeeper's rule: the explicit type, else the file extension.
func storeType(t, path string) string {
	if t != "" {
		return strings.ToLower(t)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".jks":
		return "jks"
	case ".pem":
		return "pem"
	case ".p12", ".pfx":
		return "pkcs12"
	}
	return ""
}

// parseServerLine reads host:quorumPort:electionPort[:role][;[host:]clientPort].
func parseServerLine(id uint64, v string) (Member, error) {
	addr, client, _ := strings.Cut(strings.TrimSpace(v), ";")
	parts := strings.Split(addr, ":")
	if len(parts) < 3 || len(parts) > 4 {
		return Member{}, fmt.Errorf("want host:quorumPort:electionPort[:role], got %q", v)
	}
	for _, p := range parts[1:3] {
		if _, err := parsePort(p); err != nil {
			return Member{}, err
		}
	}
	m := Member{ID: id, Region: "local", Zone: fmt.Sprintf("z%d", id),
		Peer: net.JoinHostPort(parts[0], parts[1]), GRPC: net.JoinHostPort(parts[0], parts[2])}
	if len(parts) == 4 {
		switch parts[3] {
		case "participant":
		case "observer":
			m.Role = "learner"
		default:
			return Member{}, fmt.Errorf("role %q: want participant or observer", parts[3])
		}
	}
	if client != "" {
		h, p, err := net.SplitHostPort(client)
		if err != nil {
			h, p = loopbackIfAny(parts[0]), client
		}
		if _, err := parsePort(p); err != nil {
			return Member{}, fmt.Errorf("client port: %w", err)
		}
		m.ZK = net.JoinHostPort(loopbackIfAny(h), p)
	}
	return m, nil
}

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("port %q must be 1..65535", s)
	}
	return p, nil
}

// loopbackIfAny turns a wildcard listen host into an address a peer can dial.
func loopbackIfAny(h string) string {
	if h == "" || h == "0.0.0.0" || h == "::" {
		return "127.0.0.1"
	}
	return h
}

// readProperties reads the subset of the Java properties format zoo.cfg
// files use: key=value or key:value lines, # and ! comments, surrounding
// whitespace trimmed. Line continuations and escapes are not used by
// ZooKeeper configs and are refused rather than misread.
func readProperties(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	props := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			return nil, fmt.Errorf("%s:%d: line continuations are not supported", path, n)
		}
		i := strings.IndexAny(line, "=:")
		if i <= 0 {
			return nil, fmt.Errorf("%s:%d: want key=value, got %q", path, n, line)
		}
		props[strings.TrimSpace(line[:i])] = strings.TrimSpace(line[i+1:])
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return props, nil
}
