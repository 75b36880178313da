package server

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/meridian-coord/meridian/internal/pki"
)

// Member describes one voter of the cluster: where it is and how to reach it.
// Regions and zones are part of the configuration from day one; the placement
// and read-routing features use them.
type Member struct {
	ID     uint64 `yaml:"id"`
	Region string `yaml:"region"`
	Zone   string `yaml:"zone"`
	Peer   string `yaml:"peer"` // raft transport address
	GRPC   string `yaml:"grpc"` // native API address
	ZK     string `yaml:"zk,omitempty"`
	HTTP   string `yaml:"http,omitempty"`
	// Role: "voter" (the default) or "learner" (a non-voting replica,
	// ZooKeeper's observer: it serves reads in its region, forwards writes,
	// and never counts toward a quorum or leads).
	Role string `yaml:"role,omitempty"`
	// Identity: the name this member's certificate must assert (a DNS or
	// URI alternative name, or the common name). Default: tls.member_identity
	// applied to the id. Replicated with the membership.
	Identity string `yaml:"identity,omitempty"`
}

// TLSConfig names this member's certificates (PEM files). One certificate
// serves every port this member listens on (peer, gRPC, HTTP) and dials
// the other members; CA verifies the other members and client certificates.
type TLSConfig struct {
	CA   string `yaml:"ca"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// MemberIdentity: the pattern naming a member in its certificate, {id}
	// standing for the member id (default member-{id}.meridian). A peer
	// connection is accepted only from a certificate of CA that asserts the
	// identity of the member it speaks for.
	MemberIdentity string `yaml:"member_identity,omitempty"`
	// ClientAuth on the gRPC and HTTP ports: "want" (default: a client
	// certificate, when given, is verified and becomes the caller's x509
	// identity) or "need" (connections without one are refused).
	ClientAuth string `yaml:"client_auth,omitempty"`
}

// Enabled reports whether any TLS file is configured.
func (t TLSConfig) Enabled() bool { return t.CA != "" || t.Cert != "" || t.Key != "" }

// Config is one server's configuration (YAML).
type Config struct {
	ID      uint64   `yaml:"id"`
	DataDir string   `yaml:"data_dir"`
	Members []Member `yaml:"members"`
	// Join: this is a new member of a running cluster. With an empty data
	// directory it waits to be added (meridian member add) instead of
	// bootstrapping a cluster of its own from Members, which then need only
	// list this member and enough others to reach the leader. Once it has
	// data, Join changes nothing. Never start a new member without it: a
	// bootstrapped stranger would form a second cluster with the same ids.
	Join bool `yaml:"join,omitempty"`

	// TLS: this member's certificates; required unless Insecure.
	TLS TLSConfig `yaml:"tls,omitempty"`
	// Insecure: plaintext peer, gRPC and HTTP ports with no member or
	// client certificates. Anyone who can reach the peer port can then
	// rewrite the cluster; the server logs a warning at every start.
	Insecure bool `yaml:"insecure,omitempty"`
	// ClusterToken: a random string shared by the members that bootstrap
	// the cluster (meridian certs prints one). The cluster id, exchanged
	// whenever a peer connection opens, is derived from it at bootstrap and
	// stored with the data; members of another cluster are refused.
	// Required to bootstrap unless Insecure.
	ClusterToken string `yaml:"cluster_token,omitempty"`
	// AdminSubjects: x509 subjects (RFC 2253, "CN=ops,O=example") whose
	// client certificates may administer the cluster (membership, leader
	// transfer and preference, ForceUnlock, closing another session).
	// The super digest's user may too.
	AdminSubjects []string `yaml:"admin_subjects,omitempty"`
	// MonitorSubjects: x509 subjects whose client certificates may read
	// the HTTP port's dashboard (/ and /dashboard/state: members, round
	// trips, keyspaces, locks, queues, barriers, counts) and nothing else
	// that needs an identity: not /status, not the profiles, no change.
	MonitorSubjects []string `yaml:"monitor_subjects,omitempty"`
	// DashboardOpenOnLoopback: the dashboard answers a caller that
	// connects from a loopback address (127.0.0.0/8, ::1) without a client
	// certificate. Only with listen_http on a loopback address (refused
	// otherwise), so only processes on this machine can reach it; every
	// other path keeps its rule. meridian dev sets it.
	DashboardOpenOnLoopback bool `yaml:"dashboard_open_on_loopback,omitempty"`

	// Listen addresses; empty ones default to this member's entry in Members.
	ListenGRPC string `yaml:"listen_grpc,omitempty"`
	ListenHTTP string `yaml:"listen_http,omitempty"`
	ListenPeer string `yaml:"listen_peer,omitempty"`
	ListenZK   string `yaml:"zk_listen,omitempty"` // ZooKeeper protocol; default: this member's zk address

	TickMs           int `yaml:"tick_ms"`            // raft tick (default 100)
	ElectionTicks    int `yaml:"election_ticks"`     // default 10
	HeartbeatTicks   int `yaml:"heartbeat_ticks"`    // default 1
	SessionTickMs    int `yaml:"session_tick_ms"`    // ZooKeeper tickTime: timeouts clamp to [2,20] ticks (default 2000)
	SnapshotEntries  int `yaml:"snapshot_entries"`   // default 100000 (or 32 MiB of entries, whichever first)
	RequestTimeoutMs int `yaml:"request_timeout_ms"` // default 10000: longest a write or read barrier may wait

	// Limits.
	MaxWatchesPerSession int `yaml:"max_watches_per_session"` // default 100000
	MaxQueuedEvents      int `yaml:"max_queued_events"`       // per session stream, default 10000
	// MaxSessions: live sessions in the cluster, as this member has applied
	// them; a session create beyond it is refused (ErrTooManySessions).
	// Approximate by the creates in flight. Default 100000.
	MaxSessions int `yaml:"max_sessions"`
	// MaxClientConnections per client port (ZooKeeper and native, each):
	// the ZooKeeper port closes further connections at once, the native
	// port leaves them in the listen backlog until one closes. Default
	// (0): 10000, or less if the process's file-descriptor limit has room
	// for less (see checkFDLimit); a value set here that does not fit the
	// limit refuses to start.
	MaxClientConnections int `yaml:"max_client_connections"`
	// MaxClientCnxns: ZooKeeper's maxClientCnxns, connections from one
	// client IP address on each client port (ZooKeeper and native); the
	// port closes one beyond it at accept. Absent: 60, as in ZooKeeper;
	// 0: unlimited.
	MaxClientCnxns *int `yaml:"max_client_cnxns,omitempty"`
	// MaxHTTPConnections: open connections on the HTTP port; one beyond it
	// waits in the listen backlog until one closes. Default 256.
	MaxHTTPConnections int `yaml:"max_http_connections,omitempty"`
	// IdleTimeoutMs: a gRPC connection without calls, or an HTTP
	// keep-alive connection without requests, is closed after this long
	// (a gRPC one up to an eighth of it, at most 1 s, later). Default
	// 300000 (5 minutes).
	IdleTimeoutMs int `yaml:"idle_timeout_ms,omitempty"`
	// FourLetterWords enabled on the ZooKeeper port (ZooKeeper's
	// 4lw.commands.whitelist): default [srvr], as ZooKeeper since 3.5.3;
	// ["*"] enables all, [none] none. Another word is answered "<word> is
	// not executed because it is not in the whitelist." and the connection
	// closed.
	FourLetterWords []string `yaml:"four_letter_words,omitempty"`

	LogLevel string `yaml:"log_level"` // debug, info, warn, error
	// EnablePprof serves Go's profiles under /debug/pprof/ on the HTTP
	// listener (etcd's --enable-pprof). Off by default: a profile costs
	// the server CPU while it runs, and the endpoint has no access control.
	EnablePprof bool `yaml:"enable_pprof,omitempty"`

	// SuperDigest is ZooKeeper's superDigest: "user:base64(sha1(user:password))".
	// A client that authenticates (addauth digest) as it bypasses every ACL.
	SuperDigest string `yaml:"super_digest,omitempty"`
	// ReadOnlyMode: a server without a quorum admits ZooKeeper clients that
	// allow it to read-only, local sessions (ZooKeeper's
	// readonlymode.enabled). Off by default, as in ZooKeeper.
	ReadOnlyMode bool `yaml:"read_only_mode,omitempty"`
	// JAASConfig names a JAAS login file whose Server section lists
	// DIGEST-MD5 users (user_NAME="password"), as ZooKeeper's
	// DigestLoginModule does; without it SASL is refused.
	JAASConfig string `yaml:"jaas_config,omitempty"`

	// Placement "auto" lets the leader move leadership to the voter that
	// minimises access-weighted commit latency (internal/placement), at most
	// once per PlacementMinIntervalMs (default 30000), and each regional
	// keyspace's leader to the home voter its writes come through
	// (keyspaces.go, followWrites). PreferLeader pins the root group's
	// leadership to a voter instead. Default "off".
	Placement string `yaml:"placement,omitempty"`
	// MaxTickMs > TickMs derives the raft tick from the measured round
	// trips to the voters (replica.AdaptiveTick): at least 1.5× the p99 to
	// the slowest voter, between TickMs and MaxTickMs; election timeout
	// stays ElectionTicks ticks. 0 (default): 10 × TickMs, at most 60000.
	// Equal to TickMs: the tick is always TickMs.
	MaxTickMs              int    `yaml:"max_tick_ms,omitempty"`
	PlacementMinIntervalMs int    `yaml:"placement_min_interval_ms,omitempty"`
	PreferLeader           uint64 `yaml:"prefer_leader,omitempty"`
	// PlacementPolicy: center-of-gravity (default), majority or ema (seed
	// 001's policies; the latter two for comparison).
	PlacementPolicy string `yaml:"placement_policy,omitempty"`

	// GCPercent is the Go collector's GOGC for the server process, set by
	// `meridian server` at start (it is process-wide): the heap grows by
	// this percentage of the live data between collections, so resident
	// memory is about (1 + GCPercent/100) times the live heap and the
	// collector's CPU about inversely proportional to it. 0 (absent): the
	// GOGC environment variable's, else 35. See docs/monitoring.md.
	GCPercent int `yaml:"gc_percent,omitempty"`
	// MemoryLimitMiB is the Go runtime's soft memory limit (GOMEMLIMIT)
	// for the server process: near it the collector runs more often
	// instead of letting the heap grow, whatever GCPercent. 0 (absent):
	// the GOMEMLIMIT environment variable's, else none.
	MemoryLimitMiB int `yaml:"memory_limit_mib,omitempty"`

	// A TLS client port for the ZooKeeper protocol (ZooKeeper's
	// secureClientPort), beside or instead of zk_listen. PEM files; client
	// certificates are required and checked against ZKTLSClientCA unless
	// ZKTLSClientAuth says otherwise (need, the default as in ZooKeeper;
	// want; none).
	ZKSecureListen  string `yaml:"zk_secure_listen,omitempty"`
	ZKTLSCert       string `yaml:"zk_tls_cert,omitempty"`
	ZKTLSKey        string `yaml:"zk_tls_key,omitempty"`
	ZKTLSClientCA   string `yaml:"zk_tls_client_ca,omitempty"`
	ZKTLSClientAuth string `yaml:"zk_tls_client_auth,omitempty"`

	// ApplyVersion, when set, is the apply version this member advertises
	// instead of its binary's (version.go): tests simulate a member that
	// runs an older binary. Not a configuration key.
	ApplyVersion int `yaml:"-"`
}

// LoadConfig reads and validates a YAML config file. A key the config
// does not know is an error naming it and its line: a misspelt key (say
// superdigest for super_digest) must not silently leave a setting at its
// default.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	if err := c.Normalize(); err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// zkTLSConfig builds the TLS config of the secure ZooKeeper port.
func (c *Config) zkTLSConfig() (*tls.Config, error) {
	return serverTLS("zk tls", c.ZKTLSCert, c.ZKTLSKey, c.ZKTLSClientCA, c.ZKTLSClientAuth)
}

// memberTLSConfig is the gRPC and HTTP ports' TLS: this member's
// certificate, client certificates verified against the cluster CA when
// given ("want", the default) or required ("need").
func (c *Config) memberTLSConfig() (*tls.Config, error) {
	return serverTLS("tls", c.TLS.Cert, c.TLS.Key, c.TLS.CA, c.TLS.ClientAuth)
}

// serverTLS is a listener's TLS configuration: the certificate to serve,
// and client certificates verified against the CA in caFile when
// clientAuth is "want" (if given) or "need" (always); "none" or "" asks
// for none. what names the setting in errors.
func serverTLS(what, certFile, keyFile, caFile, clientAuth string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	switch clientAuth {
	case "need":
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	case "want":
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	}
	if caFile != "" {
		if tc.ClientCAs, err = pki.LoadPool(caFile); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	} else if tc.ClientAuth != tls.NoClientCert {
		return nil, fmt.Errorf("%s: client_auth %s without a CA", what, clientAuth)
	}
	return tc, nil
}

// Self returns this server's Member entry.
func (c *Config) Self() Member {
	for _, m := range c.Members {
		if m.ID == c.ID {
			return m
		}
	}
	return Member{}
}

// Normalize fills defaults and validates.
func (c *Config) Normalize() error {
	if c.ID == 0 {
		return fmt.Errorf("id must be > 0")
	}
	if len(c.Members) == 0 {
		return fmt.Errorf("members must list every voter, including this one")
	}
	seen := map[uint64]bool{}
	voters := 0
	for _, m := range c.Members {
		if m.ID == 0 || seen[m.ID] {
			return fmt.Errorf("member ids must be unique and > 0 (got %d)", m.ID)
		}
		seen[m.ID] = true
		if m.Peer == "" || m.GRPC == "" {
			return fmt.Errorf("member %d needs peer and grpc addresses", m.ID)
		}
		switch m.Role {
		case "", "voter", "learner":
		default:
			return fmt.Errorf("member %d: role %q: want voter or learner", m.ID, m.Role)
		}
		if m.Role != "learner" {
			voters++
		}
	}
	if err := checkMemberAddrs(c.Members); err != nil {
		return err
	}
	if !seen[c.ID] {
		return fmt.Errorf("id %d is not among members", c.ID)
	}
	if voters == 0 {
		return fmt.Errorf("members must include at least one voter")
	}
	if c.DataDir == "" {
		return fmt.Errorf("data_dir is required")
	}
	self := c.Self()
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&c.ListenGRPC, self.GRPC)
	def(&c.ListenHTTP, self.HTTP)
	def(&c.ListenPeer, self.Peer)
	def(&c.ListenZK, self.ZK)
	if err := c.checkDashboard(); err != nil {
		return err
	}
	// 0 (absent) means the default; a negative value is a mistake, not a
	// request for the default.
	for _, f := range []struct {
		key string
		v   int
	}{
		{"tick_ms", c.TickMs}, {"election_ticks", c.ElectionTicks}, {"heartbeat_ticks", c.HeartbeatTicks},
		{"session_tick_ms", c.SessionTickMs}, {"snapshot_entries", c.SnapshotEntries},
		{"request_timeout_ms", c.RequestTimeoutMs}, {"max_watches_per_session", c.MaxWatchesPerSession},
		{"max_queued_events", c.MaxQueuedEvents}, {"max_sessions", c.MaxSessions},
		{"max_client_connections", c.MaxClientConnections}, {"max_http_connections", c.MaxHTTPConnections},
		{"idle_timeout_ms", c.IdleTimeoutMs}, {"max_tick_ms", c.MaxTickMs},
		{"placement_min_interval_ms", c.PlacementMinIntervalMs},
		{"gc_percent", c.GCPercent}, {"memory_limit_mib", c.MemoryLimitMiB},
	} {
		if f.v < 0 {
			return fmt.Errorf("%s: %d must not be negative (0 or absent for the default)", f.key, f.v)
		}
	}
	if c.MaxClientCnxns != nil && *c.MaxClientCnxns < 0 {
		return fmt.Errorf("max_client_cnxns: %d must not be negative (0: unlimited; absent: 60)", *c.MaxClientCnxns)
	}
	words, err := normalizeFourLetterWords(c.FourLetterWords)
	if err != nil {
		return err
	}
	c.FourLetterWords = words
	defInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defInt(&c.TickMs, 100)
	defInt(&c.ElectionTicks, 10)
	defInt(&c.HeartbeatTicks, 1)
	defInt(&c.SessionTickMs, 2000)
	defInt(&c.SnapshotEntries, 100000)
	defInt(&c.RequestTimeoutMs, 10000)
	defInt(&c.MaxWatchesPerSession, 100000)
	defInt(&c.MaxQueuedEvents, 10000)
	defInt(&c.MaxSessions, 100000)
	defInt(&c.MaxHTTPConnections, 256)
	defInt(&c.IdleTimeoutMs, 300000)
	if c.MaxClientCnxns == nil {
		n := DefaultMaxClientCnxns
		c.MaxClientCnxns = &n
	}
	defInt(&c.PlacementMinIntervalMs, 30000)
	if c.MaxTickMs == 0 {
		c.MaxTickMs = min(10*c.TickMs, 60000)
	}
	if c.MaxTickMs < c.TickMs || c.MaxTickMs > 60000 {
		return fmt.Errorf("max_tick_ms %d: want tick_ms (%d: fixed ticks) up to 60000, or 0 for 10 × tick_ms", c.MaxTickMs, c.TickMs)
	}
	switch c.Placement {
	case "":
		c.Placement = "off"
	case "off", "auto":
	default:
		return fmt.Errorf("placement %q: want off or auto", c.Placement)
	}
	switch c.PlacementPolicy {
	case "":
		c.PlacementPolicy = "center-of-gravity"
	case "center-of-gravity", "majority", "ema":
	default:
		return fmt.Errorf("placement_policy %q: want center-of-gravity, majority or ema", c.PlacementPolicy)
	}
	if c.ZKSecureListen != "" {
		if c.ZKTLSCert == "" || c.ZKTLSKey == "" {
			return fmt.Errorf("zk_secure_listen needs zk_tls_cert and zk_tls_key")
		}
		switch c.ZKTLSClientAuth {
		case "":
			c.ZKTLSClientAuth = "need"
		case "need", "want", "none":
		default:
			return fmt.Errorf("zk_tls_client_auth %q: want need, want or none", c.ZKTLSClientAuth)
		}
		if c.ZKTLSClientAuth != "none" && c.ZKTLSClientCA == "" {
			return fmt.Errorf("zk_tls_client_auth %s needs zk_tls_client_ca", c.ZKTLSClientAuth)
		}
	}
	if err := c.normalizeTLS(); err != nil {
		return err
	}
	if c.ElectionTicks <= c.HeartbeatTicks {
		return fmt.Errorf("election_ticks (%d) must exceed heartbeat_ticks (%d)", c.ElectionTicks, c.HeartbeatTicks)
	}
	return nil
}

// checkDashboard refuses an empty monitor subject and an open dashboard
// on a listener that is not loopback-only.
func (c *Config) checkDashboard() error {
	for _, subj := range c.MonitorSubjects {
		if strings.TrimSpace(subj) == "" {
			return fmt.Errorf("monitor_subjects: empty subject")
		}
	}
	if !c.DashboardOpenOnLoopback {
		return nil
	}
	if c.ListenHTTP == "" {
		return fmt.Errorf("dashboard_open_on_loopback: there is no HTTP listener (listen_http or this member's http address)")
	}
	host, _, err := net.SplitHostPort(c.ListenHTTP)
	if err != nil {
		return fmt.Errorf("dashboard_open_on_loopback: listen_http %q: %w", c.ListenHTTP, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("dashboard_open_on_loopback: listen_http %s is not a loopback address: an open dashboard is only for a port other machines cannot reach (give them monitor_subjects instead)", c.ListenHTTP)
	}
	return nil
}

// DefaultMaxClientCnxns is ZooKeeper's maxClientCnxns default.
const DefaultMaxClientCnxns = 60

// maxClientCnxns is the per-address cap (0: none).
func (c *Config) maxClientCnxns() int {
	if c.MaxClientCnxns == nil {
		return DefaultMaxClientCnxns
	}
	return *c.MaxClientCnxns
}

// checkMemberAddrs refuses two members (or two ports of one member) on
// one address: the second would fail to bind, or worse, peers would
// dial one member believing it another. Port 0 (chosen by the OS) is
// never a conflict.
func checkMemberAddrs(ms []Member) error {
	type owner struct {
		id   uint64
		kind string
	}
	seen := map[string]owner{}
	for _, m := range ms {
		for _, a := range []struct{ kind, addr string }{{"peer", m.Peer}, {"grpc", m.GRPC}, {"zk", m.ZK}, {"http", m.HTTP}} {
			if a.addr == "" {
				continue
			}
			if _, port, err := net.SplitHostPort(a.addr); err == nil && port == "0" {
				continue
			}
			if o, ok := seen[a.addr]; ok {
				if o.id == m.ID {
					return fmt.Errorf("member %d: %s and %s addresses are both %s", m.ID, o.kind, a.kind, a.addr)
				}
				return fmt.Errorf("members %d and %d: both use %s (member %d's %s address, member %d's %s address)",
					o.id, m.ID, a.addr, o.id, o.kind, m.ID, a.kind)
			}
			seen[a.addr] = owner{m.ID, a.kind}
		}
	}
	return nil
}

// normalizeFourLetterWords checks a four-letter-word list: known words,
// "*" alone for all of them, or "none" alone for none. Empty: ZooKeeper's
// default, srvr only.
func normalizeFourLetterWords(ws []string) ([]string, error) {
	if len(ws) == 0 {
		return []string{"srvr"}, nil
	}
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		w = strings.TrimSpace(w)
		switch {
		case w == "*" || w == "none":
			if len(ws) != 1 {
				return nil, fmt.Errorf("four_letter_words: %q (%s) must be listed alone", w,
					map[string]string{"*": "every word", "none": "no word"}[w])
			}
		case w == "":
			return nil, fmt.Errorf("four_letter_words: empty word")
		case !fourLetterWords[w]:
			return nil, fmt.Errorf("four_letter_words: %q is not a four-letter word Meridian answers (%s)", w, strings.Join(knownFourLetterWords(), ", "))
		}
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out, nil
}

// normalizeTLS checks that the ports are either secured or explicitly not.
func (c *Config) normalizeTLS() error {
	if c.Insecure {
		if c.TLS.Enabled() {
			return fmt.Errorf("insecure: true and tls: both set; choose one")
		}
		return nil
	}
	if c.TLS.CA == "" || c.TLS.Cert == "" || c.TLS.Key == "" {
		return fmt.Errorf("tls: ca, cert and key are required (or insecure: true for plaintext ports, which anyone who reaches them controls)")
	}
	if c.TLS.MemberIdentity == "" {
		c.TLS.MemberIdentity = pki.DefaultMemberIdentity
	}
	if err := pki.ValidPattern(c.TLS.MemberIdentity); err != nil {
		return fmt.Errorf("tls: member_identity: %w", err)
	}
	switch c.TLS.ClientAuth {
	case "":
		c.TLS.ClientAuth = "want"
	case "want", "need":
	default:
		return fmt.Errorf("tls: client_auth %q: want want or need", c.TLS.ClientAuth)
	}
	return nil
}

// memberIdentity is the certificate identity of member m.
func (c *Config) memberIdentity(m Member) string {
	if m.Identity != "" {
		return m.Identity
	}
	return pki.MemberIdentity(c.TLS.MemberIdentity, m.ID)
}

func (c *Config) tick() time.Duration { return time.Duration(c.TickMs) * time.Millisecond }
func (c *Config) sessionTick() time.Duration {
	return time.Duration(c.SessionTickMs) * time.Millisecond
}
func (c *Config) requestTimeout() time.Duration {
	return time.Duration(c.RequestTimeoutMs) * time.Millisecond
}

// Ports of node i (1-based) in a local cluster; base shifts them all.
func DevPorts(i, base int) (zk, grpc, http, peer int) {
	return 2180 + base + i, 7000 + base + i, 8080 + base + i, 9000 + base + i
}

// DevConfigs returns the configs of an n-node local cluster under dir, with
// a throwaway CA and certificates under dir/tls (see UseDevTLS).
//
// regions > 1 spreads the members over that many regions, named region-1
// and on, in consecutive runs (9 members in 3 regions: 1-3, 4-6, 7-9),
// zones a, b, c... within each: labels for placement and keyspaces, not
// emulated distance. The dashboard is open on loopback (no certificate
// needed in a browser on this machine).
func DevConfigs(n, regions, base int, dir string) ([]Config, error) {
	if regions < 1 || regions > n {
		return nil, fmt.Errorf("regions must be 1..%d (the number of members)", n)
	}
	members := make([]Member, n)
	per := (n + regions - 1) / regions
	for i := 1; i <= n; i++ {
		zk, g, h, p := DevPorts(i, base)
		region, zone := "local", fmt.Sprintf("z%d", i)
		if regions > 1 {
			region, zone = fmt.Sprintf("region-%d", (i-1)/per+1), string(rune('a'+(i-1)%per))
		}
		members[i-1] = Member{
			ID: uint64(i), Region: region, Zone: zone,
			Peer: fmt.Sprintf("127.0.0.1:%d", p), GRPC: fmt.Sprintf("127.0.0.1:%d", g),
			ZK: fmt.Sprintf("127.0.0.1:%d", zk), HTTP: fmt.Sprintf("127.0.0.1:%d", h),
		}
	}
	out := make([]Config, n)
	for i := 1; i <= n; i++ {
		out[i-1] = Config{ID: uint64(i), DataDir: filepath.Join(dir, fmt.Sprintf("n%d", i)), Members: members,
			DashboardOpenOnLoopback: true}
		if err := out[i-1].UseDevTLS(filepath.Join(dir, "tls")); err != nil {
			return nil, err
		}
		if err := out[i-1].Normalize(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// UseDevTLS secures c with the throwaway certificates of a local cluster
// in dir (pki.Dev; created on first use, certificates for every member in
// c.Members): the member's certificate, the dev CA, the dev admin client
// as admin, the dev cluster token. For meridian dev and tests.
func (c *Config) UseDevTLS(dir string) error {
	ids := make([]uint64, 0, len(c.Members))
	for _, m := range c.Members {
		ids = append(ids, m.ID)
	}
	if err := pki.Dev(dir, c.TLS.MemberIdentity, ids, []string{"127.0.0.1", "localhost", "::1"}); err != nil {
		return fmt.Errorf("dev certificates: %w", err)
	}
	tok, err := pki.Token(dir)
	if err != nil {
		return fmt.Errorf("dev certificates: %w", err)
	}
	c.Insecure = false
	c.TLS.CA = filepath.Join(dir, pki.CAFile)
	c.TLS.Cert = filepath.Join(dir, pki.MemberFile(c.ID))
	c.TLS.Key = filepath.Join(dir, pki.MemberKeyFile(c.ID))
	if c.ClusterToken == "" {
		c.ClusterToken = tok
	}
	if !slices.Contains(c.AdminSubjects, pki.DevAdminSubject) {
		c.AdminSubjects = append(c.AdminSubjects, pki.DevAdminSubject)
	}
	return nil
}

// WriteFile writes c as YAML.
func (c Config) WriteFile(path string) error {
	b, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
