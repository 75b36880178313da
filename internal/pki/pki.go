// Package pki creates and reads the certificates Meridian's ports use: a
// cluster CA, member certificates (one per member, used both to serve and
// to dial: the peer port's mutual TLS, the gRPC and HTTP ports) and client
// certificates (the native API's and ZooKeeper port's x509 identity).
//
// It owns the rule that names a member in a certificate (MemberIdentity)
// and the reading of identities back out of a verified certificate
// (Identities, Subject). It never decides who may do what: the replica
// checks member identities, the server's request core checks clients.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DefaultMemberIdentity is the pattern a member certificate's identity
// follows unless the configuration says otherwise; {id} is the member id.
const DefaultMemberIdentity = "member-{id}.meridian"

// MemberIdentity applies pattern (which must contain {id}) to a member id.
func MemberIdentity(pattern string, id uint64) string {
	if pattern == "" {
		pattern = DefaultMemberIdentity
	}
	return strings.ReplaceAll(pattern, "{id}", strconv.FormatUint(id, 10))
}

// ValidPattern reports whether pattern can name members: it must contain
// {id} exactly once, so that no two members share an identity.
func ValidPattern(pattern string) error {
	if strings.Count(pattern, "{id}") != 1 {
		return fmt.Errorf("member identity pattern %q must contain {id} exactly once", pattern)
	}
	return nil
}

// Identities returns the names a certificate asserts: its DNS and URI
// subject alternative names and its subject's common name. A member's
// identity matches when it equals any of them.
func Identities(c *x509.Certificate) []string {
	out := append([]string(nil), c.DNSNames...)
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	if c.Subject.CommonName != "" {
		out = append(out, c.Subject.CommonName)
	}
	return out
}

// HasIdentity reports whether certificate c asserts identity.
func HasIdentity(c *x509.Certificate, identity string) bool {
	for _, n := range Identities(c) {
		if n == identity {
			return true
		}
	}
	return false
}

// Subject is a client certificate's x509 identity: its subject's
// distinguished name in RFC 2253 form ("CN=alice,O=example"), as
// ZooKeeper's X509AuthenticationProvider names it.
func Subject(c *x509.Certificate) string { return c.Subject.String() }

// CA is a certificate authority able to issue certificates.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// Validity of what this package issues.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 2 * 365 * 24 * time.Hour
)

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// NewCA creates a self-signed CA named name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Meridian"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Leaf is an issued certificate with its key.
type Leaf struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// IssueMember issues a member certificate: identity is its common name and
// first DNS name, hosts (IP addresses or DNS names the member is reached
// at) are added as alternative names so clients can verify it as a server.
// It is valid for both serving and dialing.
func (ca *CA) IssueMember(identity string, hosts []string) (*Leaf, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: identity, Organization: []string{"Meridian"}},
		DNSNames:    []string{identity},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" && h != identity {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(tmpl)
}

// IssueClient issues a client certificate whose subject is name (its
// common name), with organization org if given.
func (ca *CA) IssueClient(name, org string) (*Leaf, error) {
	subj := pkix.Name{CommonName: name}
	if org != "" {
		subj.Organization = []string{org}
	}
	return ca.issue(&x509.Certificate{Subject: subj, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

func (ca *CA) issue(tmpl *x509.Certificate) (*Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if tmpl.SerialNumber, err = serial(); err != nil {
		return nil, err
	}
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(leafValidity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Leaf{Cert: cert, Key: key}, nil
}

// TLSCertificate returns the leaf as a tls.Certificate.
func (l *Leaf) TLSCertificate() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{l.Cert.Raw}, PrivateKey: l.Key, Leaf: l.Cert}
}

// Pool returns a pool holding only the CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// WriteCA writes the CA's certificate and key as dir/ca.pem and
// dir/ca-key.pem (the key readable by the owner only).
func (ca *CA) Write(dir string) error {
	if err := writeCert(filepath.Join(dir, "ca.pem"), ca.Cert); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, "ca-key.pem"), ca.Key)
}

// Write writes the leaf as dir/name.pem and dir/name-key.pem.
func (l *Leaf) Write(dir, name string) error {
	if err := writeCert(filepath.Join(dir, name+".pem"), l.Cert); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+"-key.pem"), l.Key)
}

func writeCert(path string, c *x509.Certificate) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}), 0o644)
}

func writeKey(path string, k *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// LoadCA reads a CA written by Write (dir/ca.pem, dir/ca-key.pem).
func LoadCA(dir string) (*CA, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		return nil, fmt.Errorf("load CA from %s: %w", dir, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("CA key is not ECDSA")
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%s is not a CA certificate", filepath.Join(dir, "ca.pem"))
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadPool reads a PEM file of CA certificates.
func LoadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("no certificates in %s", path)
	}
	return p, nil
}

// Files of a directory written by Dev.
const (
	CAFile          = "ca.pem"
	ClientFile      = "client.pem" // the admin client certificate
	ClientKeyFile   = "client-key.pem"
	TokenFile       = "cluster-token"
	DevAdminName    = "admin"
	DevAdminOrg     = "Meridian"
	DevAdminSubject = "CN=admin,O=Meridian"
)

// MemberFile and MemberKeyFile name member id's certificate in a Dev directory.
func MemberFile(id uint64) string    { return fmt.Sprintf("member-%d.pem", id) }
func MemberKeyFile(id uint64) string { return fmt.Sprintf("member-%d-key.pem", id) }

// Dev prepares dir for a throwaway local cluster: a CA, a certificate for
// each member id (identity from pattern, hosts as alternative names), an
// admin client certificate (subject DevAdminSubject) and a random cluster
// token. A directory that already has a CA keeps it and gains only the
// member certificates it lacks, so a restarted dev cluster keeps its
// identity.
func Dev(dir, pattern string, ids []uint64, hosts []string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, err := LoadCA(dir)
	if err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, CAFile)); statErr == nil {
			return err
		}
		if ca, err = NewCA("meridian dev CA"); err != nil {
			return err
		}
		if err := ca.Write(dir); err != nil {
			return err
		}
		admin, err := ca.IssueClient(DevAdminName, DevAdminOrg)
		if err != nil {
			return err
		}
		if err := admin.Write(dir, "client"); err != nil {
			return err
		}
		tok := make([]byte, 16)
		if _, err := rand.Read(tok); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, TokenFile), []byte(fmt.Sprintf("%x\n", tok)), 0o600); err != nil {
			return err
		}
	}
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(dir, MemberFile(id))); err == nil {
			continue
		}
		leaf, err := ca.IssueMember(MemberIdentity(pattern, id), hosts)
		if err != nil {
			return err
		}
		if err := leaf.Write(dir, strings.TrimSuffix(MemberFile(id), ".pem")); err != nil {
			return err
		}
	}
	return nil
}

// Token reads the cluster token Dev wrote into dir.
func Token(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, TokenFile))
	return strings.TrimSpace(string(b)), err
}
