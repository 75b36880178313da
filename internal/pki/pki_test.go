package pki

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
)

// A member certificate verifies against its CA for both serving and
// dialing, asserts its identity and not another member's; a client
// certificate's subject is its x509 identity.
func TestIssueAndVerify(t *testing.T) {
	dir := t.TempDir()
	if err := Dev(dir, "", []uint64{1, 2}, []string{"127.0.0.1", "localhost"}); err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(dir+"/"+MemberFile(1), dir+"/"+MemberKeyFile(1))
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(pair.Certificate[0])
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Fatalf("member certificate does not verify for %v: %v", usage, err)
		}
	}
	if err := cert.VerifyHostname("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if !HasIdentity(cert, "member-1.meridian") || HasIdentity(cert, "member-2.meridian") {
		t.Fatalf("identities %v", Identities(cert))
	}
	cl, err := tls.LoadX509KeyPair(dir+"/"+ClientFile, dir+"/"+ClientKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	cc, _ := x509.ParseCertificate(cl.Certificate[0])
	if got := Subject(cc); got != DevAdminSubject {
		t.Fatalf("subject %q, want %q", got, DevAdminSubject)
	}
	// A second Dev keeps the CA and token and adds a member.
	tok, _ := Token(dir)
	if err := Dev(dir, "", []uint64{1, 2, 3}, nil); err != nil {
		t.Fatal(err)
	}
	ca2, _ := LoadCA(dir)
	tok2, _ := Token(dir)
	if !ca2.Cert.Equal(ca.Cert) || tok2 != tok || len(tok) != 32 {
		t.Fatalf("Dev replaced the CA or token (%q -> %q)", tok, tok2)
	}
	// Another CA's certificate does not verify.
	other, _ := NewCA("other")
	leaf, _ := other.IssueMember(MemberIdentity("", 1), nil)
	if _, err := leaf.Cert.Verify(x509.VerifyOptions{Roots: ca.Pool()}); err == nil {
		t.Fatal("certificate of another CA verified")
	}
}

func TestMemberIdentityPattern(t *testing.T) {
	if got := MemberIdentity("node{id}.eu.example.com", 12); got != "node12.eu.example.com" {
		t.Fatal(got)
	}
	for _, bad := range []string{"node", "{id}{id}"} {
		if ValidPattern(bad) == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}
