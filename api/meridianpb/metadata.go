package meridianpb

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
