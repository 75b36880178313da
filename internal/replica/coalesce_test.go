package replica

import (
	"strconv"
	"strings"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

func app(to, term, index, logTerm, commit uint64, ents ...uint64) *pb.Message {
	m := &pb.Message{Type: pb.MsgApp.Enum(), From: new(uint64(1)), To: new(to), Term: new(term),
		Index: new(index), LogTerm: new(logTerm), Commit: new(commit)}
	for _, i := range ents {
		m.Entries = append(m.Entries, &pb.Entry{Term: new(term), Index: new(i), Data: []byte("x")})
	}
	return m
}

func appResp(from, term, index uint64, reject bool) *pb.Message {
	m := &pb.Message{Type: pb.MsgAppResp.Enum(), From: new(from), To: new(uint64(1)), Term: new(term), Index: new(index)}
	if reject {
		m.Reject, m.RejectHint = new(true), new(index-1)
	}
	return m
}

// describeMsgs lists msgs one per line: type, recipient, anchor, entries, commit.
func describeMsgs(msgs []*pb.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.GetType().String())
		b.WriteString(" to=" + itoa(m.GetTo()) + " idx=" + itoa(m.GetIndex()) + " commit=" + itoa(m.GetCommit()) + " ents=[")
		for i, e := range m.GetEntries() {
			if i > 0 {
				b.WriteString(" ")
			}
			b.WriteString(itoa(e.GetIndex()))
		}
		b.WriteString("]")
		if m.GetReject() {
			b.WriteString(" reject")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// TestCoalesce: appends that follow each other to one member merge into
// one (anchored where the first is, with every entry and the last commit
// index), as do successful acknowledgements to one member; anything that
// would change what the receiver does is left alone.
func TestCoalesce(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []*pb.Message
		want string
	}{
		{"contiguous appends and commit-only appends merge, per member",
			[]*pb.Message{app(2, 5, 10, 5, 9, 11, 12), app(3, 5, 10, 5, 9, 11, 12), app(2, 5, 12, 5, 9, 13),
				app(2, 5, 13, 5, 11), app(3, 5, 12, 5, 11)},
			"MsgApp to=2 idx=10 commit=11 ents=[11 12 13]\nMsgApp to=3 idx=10 commit=11 ents=[11 12]\n"},
		{"a commit-only append followed by entries",
			[]*pb.Message{app(2, 5, 10, 5, 9), app(2, 5, 10, 5, 10, 11)},
			"MsgApp to=2 idx=10 commit=10 ents=[11]\n"},
		{"a gap, another term or a lower commit index: kept apart",
			[]*pb.Message{app(2, 5, 10, 5, 9, 11), app(2, 5, 12, 5, 9, 13), app(3, 5, 10, 5, 9, 11), app(3, 6, 11, 5, 9, 12),
				app(4, 5, 10, 5, 9, 11), app(4, 5, 11, 5, 8, 12)},
			"MsgApp to=2 idx=10 commit=9 ents=[11]\nMsgApp to=2 idx=12 commit=9 ents=[13]\n" +
				"MsgApp to=3 idx=10 commit=9 ents=[11]\nMsgApp to=3 idx=11 commit=9 ents=[12]\n" +
				"MsgApp to=4 idx=10 commit=9 ents=[11]\nMsgApp to=4 idx=11 commit=8 ents=[12]\n"},
		{"another message to the member between them: kept apart",
			[]*pb.Message{app(2, 5, 10, 5, 9, 11), {Type: pb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(5))},
				app(2, 5, 11, 5, 9, 12)},
			"MsgApp to=2 idx=10 commit=9 ents=[11]\nMsgHeartbeat to=2 idx=0 commit=0 ents=[]\nMsgApp to=2 idx=11 commit=9 ents=[12]\n"},
		{"acknowledgements: the later, higher one stands for both; rejections stay",
			[]*pb.Message{appResp(2, 5, 11, false), appResp(2, 5, 13, false), appResp(2, 5, 12, true),
				appResp(2, 5, 14, false), appResp(2, 5, 12, false), appResp(2, 6, 15, false)},
			"MsgAppResp to=1 idx=13 commit=0 ents=[]\nMsgAppResp to=1 idx=12 commit=0 ents=[] reject\n" +
				"MsgAppResp to=1 idx=14 commit=0 ents=[]\nMsgAppResp to=1 idx=12 commit=0 ents=[]\n" +
				"MsgAppResp to=1 idx=15 commit=0 ents=[]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := describeMsgs(coalesce(tc.in, 1<<20)); got != tc.want {
				t.Fatalf("got\n%swant\n%s", got, tc.want)
			}
		})
	}
}

// TestCoalesceBounds: a merge never makes an append larger than the
// limit, and never writes into the entry slices raft handed over (they may
// share its log's array).
func TestCoalesceBounds(t *testing.T) {
	a, b, c := app(2, 5, 10, 5, 9, 11), app(2, 5, 11, 5, 9, 12), app(2, 5, 12, 5, 9, 13)
	if got := describeMsgs(coalesce([]*pb.Message{a, b, c}, 2*(1+32))); got !=
		"MsgApp to=2 idx=10 commit=9 ents=[11 12]\nMsgApp to=2 idx=12 commit=9 ents=[13]\n" {
		t.Fatalf("merged past the limit:\n%s", got)
	}
	log := []*pb.Entry{{Term: new(uint64(5)), Index: new(uint64(11))}, {Term: new(uint64(5)), Index: new(uint64(99))}}
	p := app(3, 5, 10, 5, 9)
	p.Entries = log[:1]
	if got := describeMsgs(coalesce([]*pb.Message{p, app(3, 5, 11, 5, 9, 12)}, 1<<20)); got != "MsgApp to=3 idx=10 commit=9 ents=[11 12]\n" {
		t.Fatalf("got %s", got)
	}
	if log[1].GetIndex() != 99 {
		t.Fatalf("merge wrote into the log's array: entry %d", log[1].GetIndex())
	}
}
