package meridianpb

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

type fastMessage interface {
	proto.Message
	AppendWire([]byte) ([]byte, bool)
	UnmarshalWire([]byte) bool
}

// fastTypes are the messages with their own codec, each with a maker of
// random values and a new empty one.
var fastTypes = []struct {
	name  string
	rand  func(r *rand.Rand) fastMessage
	empty func() fastMessage
}{
	{"Header", func(r *rand.Rand) fastMessage { return randHeader(r) }, func() fastMessage { return &Header{} }},
	{"Stat", func(r *rand.Rand) fastMessage { return randStat(r) }, func() fastMessage { return &Stat{} }},
	{"Fence", func(r *rand.Rand) fastMessage { return randFence(r) }, func() fastMessage { return &Fence{} }},
	{"ReadRequest", func(r *rand.Rand) fastMessage {
		return &ReadRequest{SessionId: randInt64(r), Path: randString(r), Watch: r.IntN(2) == 0,
			Consistency: Consistency(randInt32(r)), MinZxid: randInt64(r)}
	}, func() fastMessage { return &ReadRequest{} }},
	{"GetDataResponse", func(r *rand.Rand) fastMessage {
		return &GetDataResponse{Header: maybe(r, randHeader), Data: randBytes(r), Stat: maybe(r, randStat)}
	}, func() fastMessage { return &GetDataResponse{} }},
	{"SetDataRequest", func(r *rand.Rand) fastMessage {
		x := &SetDataRequest{SessionId: randInt64(r), Path: randString(r), Data: randBytes(r), Fence: maybe(r, randFence)}
		if r.IntN(2) == 0 {
			v := randInt32(r)
			x.Version = &v
		}
		return x
	}, func() fastMessage { return &SetDataRequest{} }},
	{"SetDataResponse", func(r *rand.Rand) fastMessage {
		return &SetDataResponse{Header: maybe(r, randHeader), Stat: maybe(r, randStat)}
	}, func() fastMessage { return &SetDataResponse{} }},
}

func maybe[T any](r *rand.Rand, f func(*rand.Rand) *T) *T {
	if r.IntN(3) == 0 {
		return nil
	}
	return f(r)
}

func randInt64(r *rand.Rand) int64 {
	switch r.IntN(5) {
	case 0:
		return 0
	case 1:
		return -r.Int64N(1 << 40)
	case 2:
		return math.MaxInt64 - r.Int64N(3)
	case 3:
		return math.MinInt64 + r.Int64N(3)
	}
	return r.Int64N(1 << uint(r.IntN(62)+1))
}

func randInt32(r *rand.Rand) int32 {
	v := randInt64(r)
	if r.IntN(2) == 0 {
		return int32(v)
	}
	return int32(v % 1000)
}

func randString(r *rand.Rand) string {
	parts := []string{"", "/", "a", "/k1", "é", "日本", "\x00", strings200()}
	var b []byte
	for i := r.IntN(4); i > 0; i-- {
		b = append(b, parts[r.IntN(len(parts))]...)
	}
	return string(b)
}

func strings200() string { return string(bytes.Repeat([]byte("x"), 200)) }

func randBytes(r *rand.Rand) []byte {
	switch r.IntN(4) {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	b := make([]byte, r.IntN(2000))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func randHeader(r *rand.Rand) *Header {
	return &Header{Zxid: randInt64(r), MemberId: uint64(randInt64(r)), LeaderId: r.Uint64N(10), Term: uint64(randInt64(r)), NotifiedZxid: randInt64(r), View: randString(r)}
}

func randStat(r *rand.Rand) *Stat {
	return &Stat{Czxid: randInt64(r), Mzxid: randInt64(r), Ctime: randInt64(r), Mtime: randInt64(r),
		Version: randInt32(r), Cversion: randInt32(r), Aversion: randInt32(r), EphemeralOwner: randInt64(r),
		DataLength: randInt32(r), NumChildren: randInt32(r), Pzxid: randInt64(r)}
}

func randFence(r *rand.Rand) *Fence {
	return &Fence{Lock: randString(r) + string(bytes.Repeat([]byte("l"), r.IntN(300))), Token: uint64(randInt64(r))}
}

// The codec writes proto.Marshal's bytes and reads them back as
// proto.Unmarshal does; on bytes it does not take (corrupted, unknown
// fields, a submessage twice) it says so, and what it does take,
// proto.Unmarshal reads alike.
func TestFastCodec(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, ft := range fastTypes {
		t.Run(ft.name, func(t *testing.T) {
			for i := 0; i < 3000; i++ {
				m := ft.rand(r)
				want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				prefix := []byte("prefix")
				got, ok := m.AppendWire(prefix)
				if !ok || !bytes.Equal(got[:len(prefix)], []byte("prefix")) || !bytes.Equal(got[len(prefix):], want) {
					t.Fatalf("AppendWire(%v) = %x, %v; proto.Marshal: %x", m, got, ok, want)
				}
				back := ft.empty()
				if !back.UnmarshalWire(want) || !proto.Equal(back, m) {
					t.Fatalf("UnmarshalWire(%x) = %v, want %v", want, back, m)
				}
				checkAgainstProto(t, ft.empty, corrupt(r, want))
			}
			// A field it does not know: proto keeps it; so must the caller.
			b, _ := ft.rand(r).AppendWire(nil)
			b = protowire.AppendTag(b, 99, protowire.VarintType)
			b = protowire.AppendVarint(b, 7)
			if ft.empty().UnmarshalWire(b) {
				t.Fatal("UnmarshalWire took an unknown field")
			}
			m := ft.empty()
			if err := proto.Unmarshal(b, m); err != nil {
				t.Fatal(err)
			}
			if _, ok := m.AppendWire(nil); ok {
				t.Fatal("AppendWire encoded a message with unknown fields")
			}
		})
	}
}

// checkAgainstProto: whatever UnmarshalWire takes, proto.Unmarshal takes
// and reads the same.
func checkAgainstProto(t *testing.T, empty func() fastMessage, b []byte) {
	t.Helper()
	fast := empty()
	if !fast.UnmarshalWire(b) {
		return // the caller falls back to proto.Unmarshal
	}
	slow := empty()
	if err := proto.Unmarshal(b, slow); err != nil {
		t.Fatalf("UnmarshalWire took %x, proto.Unmarshal: %v", b, err)
	}
	if !proto.Equal(fast, slow) {
		t.Fatalf("%x: UnmarshalWire %v, proto.Unmarshal %v", b, fast, slow)
	}
}

// corrupt returns b changed: a byte flipped, cut short, a field twice.
func corrupt(r *rand.Rand, b []byte) []byte {
	b = bytes.Clone(b)
	switch {
	case len(b) == 0:
		return []byte{byte(r.Uint32())}
	case r.IntN(3) == 0:
		return b[:r.IntN(len(b))]
	case r.IntN(2) == 0:
		return append(b, b...) // every field twice
	}
	b[r.IntN(len(b))] ^= byte(1 << r.IntN(8))
	return b
}

func FuzzFastCodec(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, ft := range fastTypes {
		b, _ := ft.rand(r).AppendWire(nil)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, ft := range fastTypes {
			checkAgainstProto(t, ft.empty, b)
		}
	})
}

// A reply to a read or a write of one znode decodes its Header and Stat in
// one allocation, and decodes as proto.Unmarshal does.
func TestReplyHeaderAndStatOneAllocation(t *testing.T) {
	h := &Header{Zxid: 7, MemberId: 2, LeaderId: 3, Term: 4}
	st := &Stat{Czxid: 5, Mzxid: 7, Version: 2, DataLength: 3}
	for _, m := range []interface {
		proto.Message
		UnmarshalWire([]byte) bool
	}{&SetDataResponse{Header: h, Stat: st}, &GetDataResponse{Header: h, Data: []byte("abc"), Stat: st}} {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got := m.ProtoReflect().New().Interface().(interface {
			proto.Message
			UnmarshalWire([]byte) bool
		})
		if !got.UnmarshalWire(b) || !proto.Equal(got, m) {
			t.Fatalf("%T decoded as %v, want %v", m, got, m)
		}
		want := 1.0 // Header and Stat
		if _, ok := m.(*GetDataResponse); ok {
			want = 2 // and the data's copy
		}
		if n := testing.AllocsPerRun(100, func() { got.UnmarshalWire(b) }); n != want {
			t.Errorf("%T: %.0f allocations a decode, want %.0f", m, n, want)
		}
	}
}

// A SetDataReply or GetDataReply decodes as its response does through
// proto.Unmarshal, into its own Header and Stat (no allocation but the
// data's copy), again and again, and falls back to proto for what the
// hand decoder does not take.
func TestRepliesDecodeIntoThemselves(t *testing.T) {
	h := &Header{Zxid: 7, MemberId: 2, LeaderId: 3, Term: 4, View: "1:7"}
	st := &Stat{Czxid: 5, Mzxid: 7, Version: 2, DataLength: 3}
	set, get := &SetDataReply{}, &GetDataReply{}
	for _, tc := range []struct {
		m     proto.Message
		into  interface{ UnmarshalWire([]byte) bool }
		got   func() proto.Message
		inner func() (*Header, *Stat)
		want  float64
	}{
		{&SetDataResponse{Header: h, Stat: st}, set, func() proto.Message { return &set.SetDataResponse },
			func() (*Header, *Stat) { return &set.hs.h, &set.hs.s }, 1}, // the view's string
		{&GetDataResponse{Header: h, Data: []byte("abc"), Stat: st}, get, func() proto.Message { return &get.GetDataResponse },
			func() (*Header, *Stat) { return &get.hs.h, &get.hs.s }, 2}, // and the data's copy
	} {
		b, err := proto.Marshal(tc.m)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if !tc.into.UnmarshalWire(b) || !proto.Equal(tc.got(), tc.m) {
				t.Fatalf("%T decoded as %v, want %v", tc.into, tc.got(), tc.m)
			}
		}
		ih, is := tc.inner()
		if HeaderOf(tc.got()) != ih || tc.got().(interface{ GetStat() *Stat }).GetStat() != is {
			t.Errorf("%T: Header and Stat not its own", tc.into)
		}
		if n := testing.AllocsPerRun(100, func() { tc.into.UnmarshalWire(b) }); n != tc.want {
			t.Errorf("%T: %.0f allocations a decode, want %.0f", tc.into, n, tc.want)
		}
		unknown := protowire.AppendTag(append([]byte{}, b...), 99, protowire.VarintType)
		unknown = protowire.AppendVarint(unknown, 1)
		if tc.into.UnmarshalWire(unknown) {
			t.Errorf("%T: decoded an unknown field by hand", tc.into)
		}
		if err := proto.Unmarshal(unknown, tc.into.(proto.Message)); err != nil || !proto.Equal(HeaderOf(tc.got()), h) {
			t.Errorf("%T through proto: %v, header %v", tc.into, err, HeaderOf(tc.got()))
		}
	}
}
