// Package zkproto is the ZooKeeper client wire format (jute) codec used by
// Meridian's ZooKeeper-compatible listener: packet framing, the jute
// primitives, every client request/response record, the multi/multiRead
// encodings and the protocol constants (opcodes, error codes, special xids,
// watcher event types and keeper states, permissions, create modes).
//
// It owns bytes only: no sockets, no sessions, no server state. Layouts
// follow zookeeper.jute and the hand-written records (MultiOperationRecord,
// MultiResponse, the optional readOnly byte of ConnectRequest/Response) of
// Apache ZooKeeper 3.8/3.9, byte for byte.
//
// Everything here decodes bytes straight off the network, so it must never
// panic on them: every length prefix is checked against the bytes left
// before anything is allocated, and malformed input yields an error value
// (ErrShortBuffer, ErrBadLength, ...). Decoding is as lenient as ZooKeeper
// itself where ZooKeeper is lenient (trailing bytes after a request body are
// ignored, any non-zero boolean byte is true) and strict everywhere else.
package zkproto
