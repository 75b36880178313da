// Package script holds what the datadriven script harnesses share.
package script

import (
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// Args are a datadriven directive's arguments (or an op line's, inside a
// multi), with the lookups every script harness needs; each harness adds
// its own domain arguments (paths, ACLs, connections) on top.
type Args []datadriven.CmdArg

// Get returns key's first value; a key given without a value is present
// with "".
func (a Args) Get(key string) (string, bool) {
	for _, arg := range a {
		if arg.Key == key {
			if len(arg.Vals) == 0 {
				return "", true
			}
			return arg.Vals[0], true
		}
	}
	return "", false
}

// Has reports whether key was given, with or without a value.
func (a Args) Has(key string) bool { _, ok := a.Get(key); return ok }

// Vals returns every value of key (key=(x,y)).
func (a Args) Vals(key string) []string {
	for _, arg := range a {
		if arg.Key == key {
			return arg.Vals
		}
	}
	return nil
}

// Str returns key's value, or def when it is absent.
func (a Args) Str(key, def string) string {
	if v, ok := a.Get(key); ok {
		return v
	}
	return def
}

// Int returns key's value as an integer (decimal, or 0x hexadecimal), or
// def when it is absent; a value that is not a number fails the test.
func (a Args) Int(t testing.TB, key string, def int64) int64 {
	t.Helper()
	v, ok := a.Get(key)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v, 0, 64)
	if err != nil {
		t.Fatalf("%s=%s: %v", key, v, err)
	}
	return n
}

// ACL splits one ACL as zkCli writes it, scheme:id:perms (the id is what
// lies between the first and the last colon, so digest ids keep theirs),
// with Perms for the permissions. A malformed entry fails the test.
func ACL(t testing.TB, v string) (scheme, id string, perms int32) {
	t.Helper()
	i, j := strings.IndexByte(v, ':'), strings.LastIndexByte(v, ':')
	if i < 0 || i == j {
		t.Fatalf("bad acl %q", v)
	}
	return v[:i], v[i+1 : j], Perms(t, v[j+1:])
}

// Perms is letters from rwcda or a number, as ZooKeeper's permission bits
// (read 1, write 2, create 4, delete 8, admin 16).
func Perms(t testing.TB, s string) int32 {
	t.Helper()
	if n, err := strconv.Atoi(s); err == nil {
		return int32(n)
	}
	var p int32
	for _, c := range s {
		k := strings.IndexRune("rwcda", c)
		if k < 0 {
			t.Fatalf("bad perms %q", s)
		}
		p |= 1 << k
	}
	return p
}
