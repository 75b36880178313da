package server

import (
	"bytes"
	"crypto"
	"crypto/sha1"
	"crypto/subtle"
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf16"
)

// Java KeyStore (JKS) files, read so that a zoo.cfg's ssl.keyStore and
// ssl.trustStore work unchanged with --zoo-cfg. Only reading is supported,
// and only what ZooKeeper deployments use: private-key entries protected
// with Sun's JKS key algorithm, and trusted certificates.

const (
	jksMagic      = 0xFEEDFEED
	jksMaxEntries = 1000
	jksMaxBlob    = 1 << 20 // one key or certificate
)

var jksKeyAlgorithm = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 42, 2, 17, 1, 1}

var errJKS = errors.New("not a readable JKS keystore")

// jksKey is a private-key entry: the key and its certificate chain (DER).
type jksKey struct {
	Alias string
	Key   crypto.PrivateKey
	Chain [][]byte
}

// jksStore is a decoded keystore.
type jksStore struct {
	Keys  []jksKey
	Certs [][]byte // trusted certificate entries (DER)
}

// decodeJKS parses a JKS file, checks its integrity digest with password,
// and decrypts its private keys with the same password (ZooKeeper uses one
// password for the store and its keys).
func decodeJKS(b []byte, password string) (*jksStore, error) {
	pw := jksPassword(password)
	if len(b) < 12+sha1.Size {
		return nil, errJKS
	}
	body, digest := b[:len(b)-sha1.Size], b[len(b)-sha1.Size:]
	h := sha1.New()
	h.Write(pw)
	h.Write([]byte("Mighty Aphrodite"))
	h.Write(body)
	if subtle.ConstantTimeCompare(h.Sum(nil), digest) != 1 {
		return nil, fmt.Errorf("%w: integrity check failed (wrong password?)", errJKS)
	}
	r := &jksReader{b: body}
	if r.u32() != jksMagic {
		return nil, fmt.Errorf("%w: bad magic", errJKS)
	}
	version := r.u32()
	if version != 1 && version != 2 {
		return nil, fmt.Errorf("%w: version %d", errJKS, version)
	}
	n := r.u32()
	if n > jksMaxEntries {
		return nil, fmt.Errorf("%w: %d entries", errJKS, n)
	}
	cert := func() []byte {
		if version == 2 {
			if t := r.utf(); t != "X.509" && r.err == nil {
				r.err = fmt.Errorf("%w: certificate type %q", errJKS, t)
			}
		}
		return r.blob()
	}
	st := &jksStore{}
	for i := uint32(0); i < n && r.err == nil; i++ {
		tag := r.u32()
		alias := r.utf()
		r.u64() // creation time
		switch tag {
		case 1:
			enc := r.blob()
			var chain [][]byte
			for j, m := uint32(0), r.u32(); j < m && r.err == nil; j++ {
				if m > jksMaxEntries {
					return nil, fmt.Errorf("%w: chain of %d", errJKS, m)
				}
				chain = append(chain, cert())
			}
			if r.err != nil {
				break
			}
			key, err := jksDecryptKey(enc, pw)
			if err != nil {
				return nil, fmt.Errorf("key %q: %w", alias, err)
			}
			st.Keys = append(st.Keys, jksKey{Alias: alias, Key: key, Chain: chain})
		case 2:
			st.Certs = append(st.Certs, cert())
		default:
			return nil, fmt.Errorf("%w: entry type %d (secret keys are JCEKS)", errJKS, tag)
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errJKS, len(r.b))
	}
	return st, nil
}

// jksDecryptKey undoes Sun's JKS key protection: salt, a SHA-1 keystream
// XORed over the PKCS#8 key, and a SHA-1 check of password and plaintext.
func jksDecryptKey(der []byte, pw []byte) (crypto.PrivateKey, error) {
	var info struct {
		Algo struct {
			ID     asn1.ObjectIdentifier
			Params asn1.RawValue `asn1:"optional"`
		}
		Data []byte
	}
	if rest, err := asn1.Unmarshal(der, &info); err != nil || len(rest) != 0 {
		return nil, fmt.Errorf("%w: bad EncryptedPrivateKeyInfo", errJKS)
	}
	if !info.Algo.ID.Equal(jksKeyAlgorithm) {
		return nil, fmt.Errorf("%w: key protection %v is not JKS's", errJKS, info.Algo.ID)
	}
	d := info.Data
	if len(d) < 2*sha1.Size {
		return nil, errJKS
	}
	salt, enc, check := d[:sha1.Size], d[sha1.Size:len(d)-sha1.Size], d[len(d)-sha1.Size:]
	plain := make([]byte, len(enc))
	cur := salt
	for off := 0; off < len(enc); off += sha1.Size {
		s := sha1.Sum(append(append([]byte{}, pw...), cur...))
		cur = s[:]
		for i := 0; i < sha1.Size && off+i < len(enc); i++ {
			plain[off+i] = enc[off+i] ^ cur[i]
		}
	}
	sum := sha1.Sum(append(append([]byte{}, pw...), plain...))
	if subtle.ConstantTimeCompare(sum[:], check) != 1 {
		return nil, fmt.Errorf("%w: key password does not match", errJKS)
	}
	key, err := x509.ParsePKCS8PrivateKey(plain)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errJKS, err)
	}
	return key, nil
}

// jksPassword is Java's char[] password as big-endian UTF-16 bytes.
func jksPassword(p string) []byte {
	var b bytes.Buffer
	for _, u := range utf16.Encode([]rune(p)) {
		b.WriteByte(byte(u >> 8))
		b.WriteByte(byte(u))
	}
	return b.Bytes()
}

type jksReader struct {
	b   []byte
	err error
}

func (r *jksReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("%w: truncated", errJKS)
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *jksReader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (r *jksReader) u64() uint64 {
	if b := r.take(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

// utf reads Java's writeUTF: a 2-byte length and modified UTF-8, which is
// plain UTF-8 for the ASCII aliases and type names keystores hold.
func (r *jksReader) utf() string {
	b := r.take(2)
	if b == nil {
		return ""
	}
	return string(r.take(int(binary.BigEndian.Uint16(b))))
}

func (r *jksReader) blob() []byte {
	n := r.u32()
	if n > jksMaxBlob {
		r.err = fmt.Errorf("%w: %d-byte entry", errJKS, n)
		return nil
	}
	return append([]byte(nil), r.take(int(n))...)
}
