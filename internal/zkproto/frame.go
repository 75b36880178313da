package zkproto

import (
	"encoding/binary"
	"io"
)

// DefaultMaxPacket is ZooKeeper's default jute.maxbuffer (0xfffff): the
// largest znode payload, and the server's packet limit.
const DefaultMaxPacket = 1048575

// PacketSlack is headroom above a payload limit for the request header,
// path, ACLs and other fields that travel with the data (ZooKeeper's
// jute.maxbuffer.extrasize default is 1024).
const PacketSlack = 1024

// DefaultMaxFrame is the frame limit ReadFrame applies when maxLen <= 0.
const DefaultMaxFrame = DefaultMaxPacket + PacketSlack

// FrameLength validates a 4-byte big-endian frame header against maxLen
// (DefaultMaxFrame if maxLen <= 0). A listener that must recognise
// four-letter words ("ruok" etc.) reads the header itself, checks it, then
// calls this.
func FrameLength(hdr [4]byte, maxLen int) (int, error) {
	if maxLen <= 0 {
		maxLen = DefaultMaxFrame
	}
	n := int32(binary.BigEndian.Uint32(hdr[:]))
	if n < 0 || int64(n) > int64(maxLen) {
		return 0, ErrFrameTooLarge
	}
	return int(n), nil
}

// frameChunk is the most ReadFrame allocates for a body before any of it
// has arrived; the buffer then doubles as bytes arrive.
const frameChunk = 64 << 10

// ReadFrame reads one length-prefixed packet: a 4-byte big-endian length,
// then that many bytes. A length above maxLen (DefaultMaxFrame if
// maxLen <= 0) or negative fails with ErrFrameTooLarge before any of the
// body is read or allocated. EOF before the first header byte is io.EOF; a
// frame cut short is io.ErrUnexpectedEOF.
//
// The body's buffer grows with what arrives (64 KiB, then doubling up to
// the declared length), so a header declaring 1 MiB followed by nothing
// costs 64 KiB, not 1 MiB: connections that send only headers cannot
// make the server allocate their declared lengths.
func ReadFrame(r io.Reader, maxLen int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n, err := FrameLength(hdr, maxLen)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, min(n, frameChunk))
	for len(b) < n {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), min(2*cap(b), n))
			copy(nb, b)
			b = nb
		}
		k, err := io.ReadFull(r, b[len(b):cap(b)])
		b = b[:len(b)+k]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return b, nil
}

// AppendFrame appends body to dst with its 4-byte length prefix.
func AppendFrame(dst, body []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	return append(dst, body...)
}

// appendFramed appends a length prefix and whatever fill encodes, patching
// the length in place so the body is not copied.
func appendFramed(dst []byte, fill func(e *Encoder)) ([]byte, error) {
	start := len(dst)
	e := NewEncoder(append(dst, 0, 0, 0, 0))
	fill(e)
	if e.err != nil {
		return dst, e.err
	}
	b := e.b
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b, nil
}

// AppendRecordFrame appends rec as one frame (used for ConnectResponse,
// which has no ReplyHeader). On error dst is returned unchanged.
func AppendRecordFrame(dst []byte, rec Record) ([]byte, error) {
	return appendFramed(dst, rec.Encode)
}

// AppendReply appends a reply frame: ReplyHeader, then body unless body is
// nil. ZooKeeper sends no body with a non-zero err (clients do not read
// one), so pass nil then. On error dst is returned unchanged.
func AppendReply(dst []byte, hdr ReplyHeader, body Record) ([]byte, error) {
	return appendFramed(dst, func(e *Encoder) {
		hdr.Encode(e)
		if body != nil {
			body.Encode(e)
		}
	})
}

// EncodeReply returns a complete reply frame (length prefix included). If
// body cannot be encoded (a server bug, e.g. an unknown multi result type)
// it returns the header alone with err CodeMarshallingError, so the client
// sees an error rather than waiting forever for its xid.
func EncodeReply(hdr ReplyHeader, body Record) []byte {
	b, err := AppendReply(nil, hdr, body)
	if err != nil {
		hdr.Err = CodeMarshallingError
		b, _ = AppendReply(nil, hdr, nil)
	}
	return b
}

// EncodeNotification returns the frame of a watch notification: xid -1 and
// the event. ZooKeeper 3.9 sends the event's zxid, 3.8 sends -1; clients
// ignore it.
func EncodeNotification(zxid int64, ev WatcherEvent) []byte {
	return EncodeReply(ReplyHeader{Xid: XidNotification, Zxid: zxid}, &ev)
}
