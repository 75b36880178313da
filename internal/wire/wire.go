// Package wire is the native API's lean transport: the methods of a gRPC
// service description (meridian.v1.Meridian), their protobuf messages,
// metadata, status codes, deadlines, cancellation and server streams,
// carried over one TCP or TLS connection in length-prefixed frames instead
// of HTTP/2.
//
// Why: on a busy server the HTTP/2 machinery (HPACK, per-stream flow
// control, a writer goroutine every reply is handed to, a reader goroutine
// per connection and a handler goroutine per call, window updates and
// pings) costs about twice the CPU of the ZooKeeper port per call, and
// the native API carries Meridian's own locks, queues and elections. Here a
// call is one frame each way; replies that are ready together leave in one
// write; a read that arrives alone is served by the goroutine that read it,
// which hands the reading on only if the read waits.
//
// It shares the port with gRPC: Split hands every connection that does not
// open with Preface to the gRPC server, so gRPC clients (other languages,
// the CLI) keep working, and both transports call the same generated
// handlers through the same interceptors: identity, authorization and the
// request core are decided in one place.
//
// A client that sends the same few keys with every call passes them as
// CallMetadata, not through the context; the server decodes a call's
// metadata once (each connection's repeated keys and values made into
// strings once) and hands it to the interceptors without copies, as the
// pairs sent (IncomingValues) or a map made on the first request for it
// (IncomingMetadata).
//
// What it must never do: interpret a request itself, skip the server's
// interceptors, hold more than its limits (MaxFrameBytes a frame,
// Options.MaxConcurrentCalls calls a connection, StreamWindowBytes unread
// on a stream, MaxPendingBytes queued for a connection's writer), or panic
// on bad input (a malformed frame closes that connection).
//
// # Frames
//
// After the client's Preface (and the TLS handshake, when the server is
// secure), both sides send frames:
//
//	u32 length of what follows (big-endian), at most MaxFrameBytes
//	u8  kind
//	u32 call id, chosen by the client, unique among its calls in flight
//	body
//
// Client to server: kindCall (u16 method name length, the full method
// name, u64 nanoseconds left until the call's deadline or 0, the metadata,
// the request message), kindCancel (empty), kindCredit (u32 bytes of a
// stream's messages the client has consumed). Server to client: kindReply
// (the header metadata, u32 length of a google.rpc.Status message, absent
// when OK, then a unary call's reply message; it ends the call),
// kindMessage (one message of a server stream). Metadata is u16 pairs,
// each u16 key length, key, u32 value length, value.
package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// Preface opens every connection of this transport (before TLS). Neither
// a TLS handshake (0x16) nor HTTP/2's client preface ("PRI ") starts with
// 'M', so one byte tells the two transports apart.
const Preface = "MRDNRPC1"

const (
	// MaxFrameBytes bounds a frame: the largest command (about 3 MiB)
	// with room for its metadata. A larger length closes the connection.
	MaxFrameBytes = 16 << 20
	// StreamWindowBytes is how much of a server stream's messages the
	// server sends before the client has consumed them (the same window
	// as gRPC's, meridianpb.StreamWindowBytes). One message may overdraw
	// it; the next waits.
	StreamWindowBytes = 4 << 20
	// MaxPendingBytes bounds what waits for a connection's writer; a
	// reply beyond it waits until the socket drains.
	MaxPendingBytes = 32 << 20
	// maxMetadataPairs bounds the metadata of one frame.
	maxMetadataPairs = 64
)

const (
	kindCall    byte = 1
	kindCancel  byte = 2
	kindCredit  byte = 3
	kindReply   byte = 4
	kindMessage byte = 5
)

const headerBytes = 4 + 1 + 4

var errMalformed = errors.New("wire: malformed frame")

// readFrame reads one frame into buf (grown as needed) and returns its
// kind, call id and body (aliasing buf). The header is read in place
// (Peek): a header array handed to io.ReadFull escapes, an allocation a
// frame.
func readFrame(r *bufio.Reader, buf []byte) (kind byte, id uint32, body, out []byte, err error) {
	h, err := r.Peek(headerBytes)
	if err != nil {
		if len(h) > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, nil, buf, err
	}
	n := binary.BigEndian.Uint32(h[:4])
	kind, id = h[4], binary.BigEndian.Uint32(h[5:9])
	_, _ = r.Discard(headerBytes) // buffered: cannot fail
	if n < 5 || n > MaxFrameBytes {
		return 0, 0, nil, buf, fmt.Errorf("wire: frame of %d bytes (limit %d)", n, MaxFrameBytes)
	}
	size := int(n) - 5
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	body = buf[:size]
	if _, err = io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, nil, buf, err
	}
	return kind, id, body, buf, nil
}

// beginFrame appends a frame header whose length endFrame fills in.
func beginFrame(b []byte, kind byte, id uint32) ([]byte, int) {
	start := len(b)
	b = append(b, 0, 0, 0, 0, kind)
	b = binary.BigEndian.AppendUint32(b, id)
	return b, start
}

// endFrame sets the length of the frame begun at start.
func endFrame(b []byte, start int) []byte {
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// appendMetadata appends md and then the pairs of kv (key, value, …), at
// most maxMetadataPairs in all (the rest are not sent).
func appendMetadata(b []byte, md metadata.MD, kv []string) []byte {
	n := len(kv) / 2
	for _, vs := range md {
		n += len(vs)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(min(n, maxMetadataPairs)))
	written := 0
	pair := func(k, v string) bool {
		if written == maxMetadataPairs {
			return false
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(k)))
		b = append(b, k...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
		written++
		return true
	}
	for k, vs := range md {
		for _, v := range vs {
			if !pair(k, v) {
				return b
			}
		}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if !pair(kv[i], kv[i+1]) {
			return b
		}
	}
	return b
}

// Pairs are metadata pairs a caller appends to its call's frame itself
// (ClientConn.Call): AppendPairs appends at most max pairs, each begun by
// BeginPair and ended by EndPair, and returns the frame and how many it
// appended. For pairs whose values change with nearly every call (a
// client's last zxid seen), made in the frame instead of in strings first.
type Pairs interface {
	AppendPairs(b []byte, max int) ([]byte, int)
}

// BeginPair appends a pair's key (in lower case) and room for its value's
// length; the value follows, then EndPair(b, at).
func BeginPair(b []byte, key string) (out []byte, at int) {
	b = binary.BigEndian.AppendUint16(b, uint16(len(key)))
	b = append(b, key...)
	return append(b, 0, 0, 0, 0), len(b)
}

// EndPair sets the length of the value appended since BeginPair.
func EndPair(b []byte, at int) []byte {
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b
}

// appendPairs appends the metadata pairs of md, kv and then more (nil:
// none), at most maxMetadataPairs in all.
func appendPairs(b []byte, md metadata.MD, kv []string, more Pairs) []byte {
	if more == nil {
		return appendMetadata(b, md, kv)
	}
	at := len(b)
	b = appendMetadata(b, md, kv)
	n := int(binary.BigEndian.Uint16(b[at:]))
	if n >= maxMetadataPairs {
		return b
	}
	b, added := more.AppendPairs(b, maxMetadataPairs-n)
	binary.BigEndian.PutUint16(b[at:], uint16(n+min(added, maxMetadataPairs-n)))
	return b
}

// decoder reads a frame's body; the first failure sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil || n < 0 || n > len(d.b) {
		d.err = errMalformed
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u16() int {
	v := d.take(2)
	if v == nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(v))
}

func (d *decoder) u32() uint32 {
	v := d.take(4)
	if v == nil {
		return 0
	}
	return binary.BigEndian.Uint32(v)
}

func (d *decoder) u64() uint64 {
	v := d.take(8)
	if v == nil {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// metadata decodes metadata: keys are lower-cased as gRPC's are; keys
// and values are copied (the frame's buffer is reused), or taken from
// names when it has them: the keys and values a connection sends on
// every call are made into strings once.
func (d *decoder) metadata(names *interner) metadata.MD {
	n := d.pairs()
	if n == 0 {
		return nil
	}
	if names != nil && names.share && n <= maxSharedPairs {
		return d.sharedMetadata(names, n, nil).MD()
	}
	return d.mapMetadata(names, n)
}

// callMetadata is metadata as a server's call keeps it (nil: none): the
// pairs, the map made of them only when asked for (callMD); into, if not
// nil, is the callMD to fill when pairs are decoded anew (the call's own,
// allocated with it).
func (d *decoder) callMetadata(names *interner, into *callMD) *callMD {
	n := d.pairs()
	if n == 0 {
		return nil
	}
	if names != nil && names.share && n <= maxSharedPairs {
		return d.sharedMetadata(names, n, into)
	}
	if md := d.mapMetadata(names, n); md != nil {
		return &callMD{md: md}
	}
	return nil
}

// pairs reads how many metadata pairs follow (0 on a malformed count).
func (d *decoder) pairs() int {
	n := d.u16()
	if n > maxMetadataPairs {
		d.err = errMalformed
		return 0
	}
	return n
}

// mapMetadata decodes n pairs into a map, nil when malformed; a sharing
// interner forgets the last call's pairs.
func (d *decoder) mapMetadata(names *interner, n int) metadata.MD {
	md := make(metadata.MD, n)
	vals := make([]string, n) // one array for the values of keys sent once
	for i := 0; i < n && d.err == nil; i++ {
		k := d.take(d.u16())
		v := d.take(int(d.u32()))
		if d.err != nil {
			return nil
		}
		key := names.key(k)
		vals[i] = names.value(key, v)
		add(md, key, vals, i)
	}
	if names != nil {
		names.prev, names.cur = names.prev[:0], nil
	}
	return md
}

// add sets vals[i] as key's value in md, after the values it has.
func add(md metadata.MD, key string, vals []string, i int) {
	if vs, ok := md[key]; ok {
		md[key] = append(vs[:len(vs):len(vs)], vals[i])
	} else {
		md[key] = vals[i : i+1 : i+1]
	}
}

// callMD is a call's incoming metadata. Decoded by a server connection
// (sharedMetadata) it is the pairs as sent, keys lower-cased, and the
// metadata.MD of them is made on the first MD: the interceptors look a
// key up among a few pairs (get), and a call whose pairs differ from the
// last call's only in a value (a client's zxid seen, after each write)
// costs one allocation and its new values, not a map. Shared by the calls
// that sent the same pairs; nobody may modify it, its slices or its map.
type callMD struct {
	keys, vals []string // nil keys: md is made already
	once       sync.Once
	md         metadata.MD
	valArr     [maxSharedPairs]string // vals' array
}

// MD is the metadata as gRPC's map (nil for a nil callMD).
func (m *callMD) MD() metadata.MD {
	if m == nil {
		return nil
	}
	if m.keys != nil {
		m.once.Do(func() {
			md := make(metadata.MD, len(m.keys))
			for i, k := range m.keys {
				add(md, k, m.vals, i)
			}
			m.md = md
		})
	}
	return m.md
}

// get is MD()[key] (key in lower case), without making the map when key
// was sent once.
func (m *callMD) get(key string) []string {
	if m == nil {
		return nil
	}
	if m.keys == nil {
		return m.md[key]
	}
	at := -1
	for i, k := range m.keys {
		if k == key {
			if at >= 0 {
				return m.MD()[key] // sent more than once
			}
			at = i
		}
	}
	if at < 0 {
		return nil
	}
	return m.vals[at : at+1 : at+1]
}

// sharedMetadata decodes the n pairs of a server connection's call
// (names.share), comparing each with the pair the connection's last call
// sent in its place: the same pairs again (a client's calls until its
// credentials, view or last zxid seen change) give the callMD made of
// them then, shared with the earlier calls, which read it and never
// change it; a pair whose key is the one sent in its place before takes
// the strings made of it then, without a lookup (a new zxid seen: one new
// string), and when every key is, the new callMD shares the keys too.
func (d *decoder) sharedMetadata(names *interner, n int, into *callMD) *callMD {
	var raw [maxSharedPairs][2][]byte
	cur := names.cur
	same := cur != nil && len(names.prev) == n
	for i := 0; i < n; i++ {
		k := d.take(d.u16())
		v := d.take(int(d.u32()))
		if d.err != nil {
			return nil
		}
		raw[i] = [2][]byte{k, v}
		same = same && string(k) == names.prev[i].sent && string(v) == names.prev[i].val
	}
	if same {
		return cur
	}
	m := into
	if m == nil {
		m = &callMD{}
	}
	sameKeys := cur != nil && len(cur.keys) == n
	keep := true // every key and value short enough to keep
	for i := 0; i < n; i++ {
		k, v := raw[i][0], raw[i][1]
		var p sentPair
		if i < len(names.prev) && string(k) == names.prev[i].sent {
			p = names.prev[i]
			if string(v) != p.val {
				p.val = string(v)
			}
		} else {
			sameKeys = false
			p.sent, p.key = string(k), names.key(k)
			p.val = names.value(p.key, v)
		}
		keep = keep && len(k) <= maxInternedValue && len(v) <= maxInternedValue
		m.valArr[i] = p.val
		if i < len(names.prev) {
			names.prev[i] = p
		} else {
			names.prev = append(names.prev, p)
		}
	}
	names.prev = names.prev[:n]
	m.vals = m.valArr[:n:n]
	if sameKeys {
		m.keys = cur.keys
	} else {
		m.keys = make([]string, n)
		for i := range m.keys {
			m.keys[i] = names.prev[i].key
		}
	}
	names.cur = m
	if !keep {
		names.prev, names.cur = names.prev[:0], nil
	}
	return m
}

// maxSharedPairs bounds the pairs a server connection keeps of its last
// call's metadata to compare the next call's with; a call with more is
// decoded on its own.
const maxSharedPairs = 8

// maxInterned bounds an interner's keys; past it, keys and values are
// copied as they come.
const maxInterned = 32

// maxInternedValue bounds a value an interner keeps.
const maxInternedValue = 256

// interner is one connection's metadata strings: its keys (lower case)
// and each key's last value. nil: none kept. Not safe for concurrent use.
//
// With share set (a server's connection), it also keeps the pairs of the
// last call (at most maxSharedPairs, each key and value at most
// maxInternedValue bytes) and the callMD made of them: a call that sends
// the same pairs again gets that same callMD (sharedMetadata).
type interner struct {
	keys  map[string]string // as sent → lower case
	last  map[string]string // key → its last value
	share bool
	prev  []sentPair
	cur   *callMD
}

// sentPair is a metadata pair as a connection sent it: the key as sent,
// the key lower-cased, the value.
type sentPair struct{ sent, key, val string }

func (in *interner) key(k []byte) string {
	if in == nil {
		return lower(k)
	}
	if s, ok := in.keys[string(k)]; ok {
		return s
	}
	s := lower(k)
	if len(in.keys) < maxInterned {
		if in.keys == nil {
			in.keys, in.last = map[string]string{}, map[string]string{}
		}
		in.keys[string(k)] = s
	}
	return s
}

func (in *interner) value(key string, v []byte) string {
	if in == nil || in.last == nil || len(v) > maxInternedValue {
		return string(v)
	}
	s, ok := in.last[key]
	if ok && s == string(v) {
		return s
	}
	s = string(v)
	if ok || len(in.last) < maxInterned {
		in.last[key] = s
	}
	return s
}

// lower is strings.ToLower for metadata keys without a detour through a
// string when the key is lower case already.
func lower(k []byte) string {
	for _, c := range k {
		if 'A' <= c && c <= 'Z' {
			b := make([]byte, len(k))
			for i, c := range k {
				if 'A' <= c && c <= 'Z' {
					c += 'a' - 'A'
				}
				b[i] = c
			}
			return string(b)
		}
	}
	return string(k)
}

// fastMessage is a message with an encoding of its own, without
// reflection (the calls the native API makes most: api/meridianpb's
// fast.go); false from either method means: use proto's.
type fastMessage interface {
	AppendWire([]byte) ([]byte, bool)
	UnmarshalWire([]byte) bool
}

// marshalAppend appends m's protobuf encoding.
func marshalAppend(b []byte, m proto.Message) ([]byte, error) {
	if f, ok := m.(fastMessage); ok {
		if out, ok := f.AppendWire(b); ok {
			return out, nil
		}
	}
	return proto.MarshalOptions{}.MarshalAppend(b, m) // over what AppendWire left
}

// unmarshal decodes b into m (proto.Unmarshal's semantics: m is reset,
// and nothing of b is kept).
func unmarshal(b []byte, m proto.Message) error {
	if f, ok := m.(fastMessage); ok && f.UnmarshalWire(b) {
		return nil
	}
	return proto.Unmarshal(b, m)
}
