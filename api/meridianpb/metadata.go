package meridianpb

import (
	"strconv"
	"strings"
)

// gRPC metadata keys of the native API (not generated).
const (
	// MetadataAuth carries a caller's credentials, one value per identity,
	// "scheme credentials" as in ZooKeeper's addauth: today only
	// "digest user:password". Sent with every call; the server keeps no
	// per-connection state.
	MetadataAuth = "meridian-auth"
	// MetadataSessionPassword carries the password (16 bytes, from
	// CreateSession) of the session a request names. A request naming a
	// session without its password is refused as if the session had
	// expired.
	MetadataSessionPassword = "meridian-session-password-bin"
)

// AppendViewPair appends one "group:index" pair of the seen-groups header
// (a client's view: the highest index it has seen in each raft group; the
// header is the pairs joined by ",", or "-" for none).
func AppendViewPair(b []byte, g, index uint64) []byte {
	b = strconv.AppendUint(b, g, 10)
	b = append(b, ':')
	return strconv.AppendUint(b, index, 10)
}

// ParseViewPair reads one "group:index" pair; false when it is malformed
// or its index is 0.
func ParseViewPair(pair string) (g, index uint64, ok bool) {
	gs, is, found := strings.Cut(pair, ":")
	if !found {
		return 0, 0, false
	}
	g, err1 := strconv.ParseUint(gs, 10, 64)
	index, err2 := strconv.ParseUint(is, 10, 64)
	if err1 != nil || err2 != nil || index == 0 {
		return 0, 0, false
	}
	return g, index, true
}

// HeaderOf is a reply's Header, nil when the message has none (or is
// nil).
func HeaderOf(reply any) *Header {
	if r, ok := reply.(interface{ GetHeader() *Header }); ok {
		return r.GetHeader()
	}
	return nil
}
