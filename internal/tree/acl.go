package tree

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/meridian-coord/meridian/internal/errs"
)

// openACL is the one shared copy of OpenACL stored on nodes. ACL slices held
// by nodes are never modified in place, so sharing is safe and saves memory
// for the common case.
var openACL = []ACL{{Perms: PermAll, ID: ID{Scheme: "world", ID: "anyone"}}}

func isOpenACL(acl []ACL) bool {
	return len(acl) == 1 && acl[0] == openACL[0]
}

// intern returns the ACL as a node stores it: the shared open ACL when acl
// equals it, else a pointer to acl (a node's ACL field is one pointer, not
// a slice header: 16 bytes less a node).
func intern(acl []ACL) *[]ACL {
	if isOpenACL(acl) {
		return &openACL
	}
	p := new([]ACL) // not &acl: that would move acl to the heap on every call
	*p = acl
	return p
}

// fixupACL is ZooKeeper's PrepRequestProcessor.fixupACL: it drops duplicate
// entries, expands "auth" entries into the requester's authenticated
// identities and validates the rest. The result is a fresh slice.
//
// As in ZooKeeper only authenticated identities take part in the "auth"
// expansion: digest, sasl and x509 (a verified client certificate) ones.
// ip identities are not (ZooKeeper's IP provider is not "authenticated"),
// world is anyone, and super may not appear in an ACL.
func fixupACL(in []ACL, auth []ID) (*[]ACL, error) {
	if len(in) == 0 || len(in) > MaxACLEntries {
		return nil, errs.ErrInvalidACL
	}
	if isOpenACL(in) {
		return &openACL, nil // the common case, without the copy below
	}
	out := make([]ACL, 0, len(in))
next:
	for i, a := range in {
		for _, prev := range in[:i] {
			if prev == a {
				continue next
			}
		}
		if a.Perms&^PermAll != 0 {
			return nil, errs.ErrInvalidACL
		}
		if a.ID.Scheme == "auth" {
			found := false
			for _, id := range auth {
				if (id.Scheme == "digest" && validDigestID(id.ID)) || (id.Scheme == "sasl" && validSASLID(id.ID)) ||
					(id.Scheme == "x509" && id.ID != "") {
					found = true
					out = append(out, ACL{Perms: a.Perms, ID: id})
				}
			}
			if !found {
				return nil, errs.ErrInvalidACL
			}
			continue
		}
		if !validACLEntry(a) {
			return nil, errs.ErrInvalidACL
		}
		out = append(out, a)
	}
	if len(out) > MaxACLEntries {
		return nil, errs.ErrInvalidACL
	}
	return intern(out), nil
}

// validACLEntry checks an explicit (already expanded) ACL entry.
func validACLEntry(a ACL) bool {
	if a.Perms&^PermAll != 0 {
		return false
	}
	switch a.ID.Scheme {
	case "world":
		return a.ID.ID == "anyone"
	case "digest":
		return validDigestID(a.ID.ID)
	case "ip":
		return validIPExpr(a.ID.ID)
	case "sasl":
		return validSASLID(a.ID.ID)
	case "x509":
		// ZooKeeper's X509AuthenticationProvider: the id is a certificate
		// subject DN, matched exactly.
		return a.ID.ID != ""
	}
	return false
}

// validSASLID accepts what ZooKeeper's KerberosName parses: a name, an
// optional /host and an optional @REALM, without spaces.
func validSASLID(id string) bool {
	return id != "" && !strings.ContainsAny(id, " \t\n") && strings.Count(id, "@") <= 1 && strings.Count(id, "/") <= 1
}

// validDigestID mirrors DigestAuthenticationProvider.isValid: Java's
// id.split(":") (which drops trailing empty strings) must give two parts.
func validDigestID(id string) bool {
	parts := strings.Split(id, ":")
	for len(parts) > 0 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	return len(parts) == 2
}

// parseIPExpr parses "addr" or "addr/bits" as IPAuthenticationProvider does.
func parseIPExpr(expr string) (netip.Addr, int, bool) {
	addrPart, bitsPart, hasBits := strings.Cut(expr, "/")
	addr, err := netip.ParseAddr(addrPart)
	if err != nil || addr.Zone() != "" {
		return netip.Addr{}, 0, false
	}
	bits := addr.BitLen()
	if hasBits {
		b, err := strconv.Atoi(bitsPart)
		if err != nil || b < 0 || b > addr.BitLen() {
			return netip.Addr{}, 0, false
		}
		bits = b
	}
	return addr, bits, true
}

func validIPExpr(expr string) bool {
	_, _, ok := parseIPExpr(expr)
	return ok
}

// ipMatches reports whether the requester address id lies in the ACL's
// address or CIDR expr. Families must agree, as in ZooKeeper.
func ipMatches(id, expr string) bool {
	prefixAddr, bits, ok := parseIPExpr(expr)
	if !ok {
		return false
	}
	addr, err := netip.ParseAddr(id)
	if err != nil || addr.Zone() != "" || addr.BitLen() != prefixAddr.BitLen() {
		return false
	}
	p, err := prefixAddr.Prefix(bits)
	if err != nil {
		return false
	}
	return p.Contains(addr)
}

// isSuper reports whether the identities include the super user, who
// bypasses every ACL check.
func isSuper(auth []ID) bool {
	for _, id := range auth {
		if id.Scheme == "super" {
			return true
		}
	}
	return false
}

// checkPerm is ZooKeeper's checkACL: an empty ACL allows everything, super
// bypasses, otherwise some entry granting perm must match an identity.
func checkPerm(acl []ACL, perm int32, auth []ID) error {
	if len(acl) == 0 || isSuper(auth) {
		return nil
	}
	for _, a := range acl {
		if a.Perms&perm == 0 {
			continue
		}
		if a.ID.Scheme == "world" && a.ID.ID == "anyone" {
			return nil
		}
		for _, id := range auth {
			if id.Scheme != a.ID.Scheme {
				continue
			}
			switch id.Scheme {
			case "digest", "sasl", "x509":
				if id.ID == a.ID.ID {
					return nil
				}
			case "ip":
				if ipMatches(id.ID, a.ID.ID) {
					return nil
				}
			}
		}
	}
	return errs.ErrNoAuth
}
