package zkproto

import (
	"bytes"
	"reflect"
	"testing"
)

// requestSeeds are well-formed packets for every opcode plus the goldens.
func requestSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for i, rec := range allRecords() {
		for _, op := range []int32{OpCreate, OpSetWatches, OpMulti, OpMultiRead, OpCheck} {
			pkt, _ := EncodeRequest(RequestHeader{Xid: int32(i), Type: op}, rec)
			seeds = append(seeds, pkt)
		}
	}
	seeds = append(seeds,
		hx(t, "00000002 0000000e", "00000001 00 ffffffff", "00000002 2f6d", "00000000", openACL, "00000000",
			"00000005 00 ffffffff", "00000002 2f6d", "00000001 78", "ffffffff", "ffffffff 01 ffffffff"),
		hx(t, "00000003 00000016", "00000004 00 ffffffff", "00000002 2f6d 00", "ffffffff 01 ffffffff"),
		hx(t, "fffffffe 0000000b"),
	)
	return seeds
}

// FuzzDecodeRequest: DecodeRequest never panics, and whatever it accepts
// re-encodes to a packet that decodes to the same value; after one
// normalisation (null strings/vectors to empty, booleans to 0/1) encoding
// is a fixed point.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range requestSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		h, body, err := DecodeRequest(pkt)
		if err != nil {
			if body != nil {
				t.Fatalf("error %v with body %T", err, body)
			}
			return
		}
		var rec Record
		if body != nil {
			rec = body.(Record)
		}
		enc1, err := EncodeRequest(h, rec)
		if err != nil {
			t.Fatalf("re-encode %T: %v", body, err)
		}
		if len(enc1) > len(pkt) {
			t.Fatalf("re-encoding grew: %d > %d", len(enc1), len(pkt))
		}
		h2, body2, err := DecodeRequest(enc1)
		if err != nil {
			t.Fatalf("re-decode: %v\n%x", err, enc1)
		}
		var rec2 Record
		if body2 != nil {
			rec2 = body2.(Record)
		}
		enc2, _ := EncodeRequest(h2, rec2)
		if !bytes.Equal(enc1, enc2) {
			t.Fatalf("not a fixed point:\n%x\n%x", enc1, enc2)
		}
	})
}

// FuzzConnectRequest: decoding never panics; an accepted packet re-encodes
// to exactly the bytes consumed (boolean normalised).
func FuzzConnectRequest(f *testing.F) {
	f.Add(hx(f, "00000000 0000000000000010 00007530 0000000000000000", passwd16, "01"))
	f.Add(hx(f, "00000000 0000000000000010 00007530 0000000000000000", passwd16))
	f.Add(hx(f, "00000000 0000000000000000 00000fa0 0102030405060708 ffffffff 00"))
	f.Fuzz(func(t *testing.T, pkt []byte) {
		r, err := DecodeConnectRequest(pkt)
		if err != nil {
			if r != nil {
				t.Fatal("error with a request")
			}
			return
		}
		enc := encode(r)
		if len(enc) > len(pkt) {
			t.Fatalf("re-encoding grew")
		}
		want := append([]byte{}, pkt[:len(enc)]...)
		if r.HasReadOnly && want[len(want)-1] != 0 {
			want[len(want)-1] = 1
		}
		if !bytes.Equal(enc, want) {
			t.Fatalf("re-encode:\n%x\n%x", enc, want)
		}
		r2, err := DecodeConnectRequest(enc)
		if err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("re-decode %+v %v", r2, err)
		}
	})
}

// FuzzReadFrame: never panics, never returns more than maxLen bytes, and
// an accepted frame is exactly the stream's prefix.
func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, []byte("hello")), 16)
	f.Add([]byte("ruok"), 0)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1}, 100)
	f.Add([]byte{0, 0, 0, 3, 1}, 3)
	f.Fuzz(func(t *testing.T, stream []byte, maxLen int) {
		maxLen %= 1 << 16 // keep legitimate allocations small
		b, err := ReadFrame(bytes.NewReader(stream), maxLen)
		if err != nil {
			if b != nil {
				t.Fatal("error with bytes")
			}
			return
		}
		limit := maxLen
		if limit <= 0 {
			limit = DefaultMaxFrame
		}
		if len(b) > limit {
			t.Fatalf("frame %d over limit %d", len(b), limit)
		}
		if got := AppendFrame(nil, b); !bytes.Equal(got, stream[:len(got)]) {
			t.Fatal("frame is not the stream prefix")
		}
	})
}

// FuzzDecodeMultiResponse covers the client-direction multi decoder.
func FuzzDecodeMultiResponse(f *testing.F) {
	f.Add(encode(MultiFailure(3, 1, CodeNoNode)))
	for _, rec := range allRecords() {
		if m, ok := rec.(*MultiResponse); ok {
			f.Add(encode(m))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m MultiResponse
		if m.Decode(NewDecoder(b)) != nil {
			return
		}
		enc := encode(&m)
		var m2 MultiResponse
		if err := m2.Decode(NewDecoder(enc)); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !bytes.Equal(encode(&m2), enc) {
			t.Fatal("not a fixed point")
		}
	})
}
