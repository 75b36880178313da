package server

import (
	"crypto/ecdsa"
	"crypto/x509"
	"os"
	"testing"
)

// The fixtures were made with the JDK's keytool: keystore.jks holds an EC
// key for CN=localhost, truststore.jks its certificate; both with password
// "apassword".
func TestDecodeJKS(t *testing.T) {
	ks, err := os.ReadFile("testdata/keystore.jks")
	if err != nil {
		t.Fatal(err)
	}
	st, err := decodeJKS(ks, "apassword")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Keys) != 1 || len(st.Certs) != 0 || st.Keys[0].Alias != "server" || len(st.Keys[0].Chain) != 1 {
		t.Fatalf("keystore: %+v", st)
	}
	cert, err := x509.ParseCertificate(st.Keys[0].Chain[0])
	if err != nil || cert.Subject.CommonName != "localhost" {
		t.Fatalf("certificate: %v %v", cert, err)
	}
	key, ok := st.Keys[0].Key.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.PublicKey) {
		t.Fatalf("key %T does not match its certificate", st.Keys[0].Key)
	}

	ts, err := os.ReadFile("testdata/truststore.jks")
	if err != nil {
		t.Fatal(err)
	}
	tst, err := decodeJKS(ts, "apassword")
	if err != nil || len(tst.Keys) != 0 || len(tst.Certs) != 1 || string(tst.Certs[0]) != string(st.Keys[0].Chain[0]) {
		t.Fatalf("truststore: %+v %v", tst, err)
	}

	if _, err := decodeJKS(ks, "wrong"); err == nil {
		t.Fatal("wrong password accepted")
	}
	for n := 0; n < len(ks); n += 7 {
		if _, err := decodeJKS(ks[:n], "apassword"); err == nil {
			t.Fatalf("truncated to %d bytes: accepted", n)
		}
	}
	bad := append([]byte(nil), ks...)
	bad[40] ^= 1
	if _, err := decodeJKS(bad, "apassword"); err == nil {
		t.Fatal("corrupted keystore accepted")
	}
}

func FuzzDecodeJKS(f *testing.F) {
	ks, _ := os.ReadFile("testdata/keystore.jks")
	ts, _ := os.ReadFile("testdata/truststore.jks")
	f.Add(ks)
	f.Add(ts)
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeJKS(b, "apassword") // must not panic or allocate without bound
	})
}
