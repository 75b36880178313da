package meridianpb

// HTTP/2 flow-control windows of the native API, the same on servers and
// clients (not generated).
//
// Both are static: a fixed window turns off gRPC's bandwidth-delay
// estimator, which otherwise answers a connection's received data with a
// PING (about one per call when a client has one call in flight) and its
// peer with a PING ack: two more frames, and two more writes and reads,
// per call in each direction. StreamWindowBytes holds the largest message
// (a command of tree.MaxCommandBytes, about 3 MiB) without waiting for a
// window update; ConnWindowBytes, what one connection may have in flight,
// is no more than the estimator's own limit (16 MiB).
const (
	StreamWindowBytes = 4 << 20
	ConnWindowBytes   = 16 << 20
)
