package coord

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestScripts runs the lock-queue scripts in testdata/scripts/ (rewrite the golden
// output with: go test ./internal/coord -rewrite).
//
//	acquire lock=a session=1 [shared] [wait] [delay=MS] [time=MS] [permits=N]
//	release lock=a session=1 [time=MS]
//	cancel lock=a session=2
//	force-release lock=a target=1
//	proclaim lock=a session=1 value=V
//	add lock=c delta=N
//	end-session session=1 [expired] [time=MS]
//	tick time=MS
//	check lock=a token=N
//	dead sessions=3,4       (acquires by these sessions see them as expired)
//	push queue=q data=D [time=MS]
//	pop queue=q session=1 [wait] [detach] [visibility=MS] [time=MS]
//	ack|nack queue=q session=1 item=N [attempt=N] [time=MS]
//	cancel-pop queue=q session=1 waiter=N
//	barrier-set|barrier-remove barrier=b
//	enter barrier=b session=1 parties=N
//	leave|cancel-enter barrier=b session=1
//	show
//
// Every write consumes the next log index (starting at 10), which is the
// token of the grants it makes, the id of an item it pushes and the
// proposal id (waiter) of a pop.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/scripts", func(t *testing.T, path string) {
		s := New()
		index := uint64(9)
		dead := map[int64]bool{}
		live := func(id int64) bool { return !dead[id] }
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			c := &Command{}
			var expired bool
			for _, a := range d.CmdArgs {
				v := ""
				if len(a.Vals) > 0 {
					v = a.Vals[0]
				}
				switch a.Key {
				case "lock", "queue", "barrier":
					c.Name = v
				case "data":
					c.Value = []byte(v)
				case "detach":
					c.Detach = true
				case "visibility":
					fmt.Sscan(v, &c.VisibilityMs)
				case "item":
					fmt.Sscan(v, &c.Item)
				case "attempt":
					fmt.Sscan(v, &c.Attempt)
				case "waiter":
					fmt.Sscan(v, &c.Waiter)
				case "parties":
					fmt.Sscan(v, &c.Parties)
				case "session":
					fmt.Sscan(v, &c.Session)
				case "target":
					fmt.Sscan(v, &c.Target)
				case "shared":
					c.Mode = Shared
				case "wait":
					c.Wait = true
				case "delay":
					fmt.Sscan(v, &c.DelayMs)
				case "permits":
					fmt.Sscan(v, &c.Permits)
				case "region":
					c.Region = v
				case "local-first":
					fmt.Sscan(v, &c.LocalFirst)
				case "value":
					c.Value = []byte(v)
				case "delta":
					fmt.Sscan(v, &c.Delta)
				case "time":
					fmt.Sscan(v, &c.TimeMs)
				case "token":
					fmt.Sscan(v, &c.Token)
				case "expired":
					expired = true
				case "sessions":
					for _, id := range a.Vals {
						var n int64
						fmt.Sscan(id, &n)
						dead[n] = true
					}
				}
			}
			var res Result
			var grants []Grant
			var losses []Loss
			switch d.Cmd {
			case "show":
				return show(s)
			case "dead":
				return ""
			case "check":
				if err := s.CheckToken(c.Name, c.Token); err != nil {
					return err.Error() + "\n"
				}
				return "ok\n"
			case "end-session":
				index++
				grants, losses = s.SessionEnded(index, c.TimeMs, c.Session, expired)
			default:
				op := map[string]OpType{"acquire": OpAcquire, "release": OpRelease, "cancel": OpCancel,
					"force-release": OpForceRelease, "tick": OpTick, "proclaim": OpProclaim, "add": OpAdd,
					"push": OpPush, "pop": OpPop, "ack": OpAck, "nack": OpNack, "cancel-pop": OpCancelPop,
					"barrier-set": OpBarrierSet, "barrier-remove": OpBarrierRemove, "enter": OpEnter, "leave": OpLeave,
					"cancel-enter": OpCancelEnter}[d.Cmd]
				if op == 0 {
					t.Fatalf("unknown command %s", d.Cmd)
				}
				c.Op = op
				// Through the codec, as in the log.
				b, err := Encode(c)
				if err != nil {
					return fmt.Sprintf("refused by the codec: %v\n", err)
				}
				c2, err := Decode(b)
				if err != nil {
					t.Fatal(err)
				}
				index++
				c2.ID = index // a pop's waiter id is its proposal id; here, its index
				res, grants, losses = s.Apply(index, c2, live)
			}
			checkSnapshot(t, s)
			var out strings.Builder
			fmt.Fprintf(&out, "index %d: ", index)
			switch {
			case res.Err != nil:
				fmt.Fprintf(&out, "error: %v\n", res.Err)
			case res.Item != nil:
				fmt.Fprintf(&out, "delivered %s\n", fmtDelivery(res.Item))
			case c.Op == OpPush:
				fmt.Fprintf(&out, "pushed id=%d\n", res.Pushed)
			case (c.Op == OpEnter || c.Op == OpLeave || c.Op == OpCancelEnter) && res.Granted:
				out.WriteString("released\n")
			case c.Op == OpEnter && res.Position > 0:
				fmt.Fprintf(&out, "waiting inside=%d\n", res.Position)
			case c.Op == OpLeave && res.Position > 0:
				fmt.Fprintf(&out, "waiting still-inside=%d\n", res.Position)
			case res.Granted:
				fmt.Fprintf(&out, "granted token=%d\n", res.Token)
			case res.Position > 0:
				fmt.Fprintf(&out, "waiting position=%d\n", res.Position)
			case c.Op == OpAdd:
				fmt.Fprintf(&out, "counter=%d\n", res.Counter)
			default:
				out.WriteString("ok\n")
			}
			for _, g := range grants {
				switch g.Kind {
				case GrantItem:
					fmt.Fprintf(&out, "deliver %s to waiter %d\n", fmtDelivery(g.Item), g.Waiter)
				case GrantEnter:
					fmt.Fprintf(&out, "release enter %s to session %d\n", g.Lock, g.Session)
				case GrantLeave:
					fmt.Fprintf(&out, "release leave %s to session %d\n", g.Lock, g.Session)
				case GrantBarrierRemoved:
					fmt.Fprintf(&out, "barrier %s removed: waiters released\n", g.Lock)
				default:
					fmt.Fprintf(&out, "grant %s to session %d token=%d %s\n", g.Lock, g.Session, g.Token, g.Mode)
				}
			}
			for _, l := range losses {
				fmt.Fprintf(&out, "lost %s by session %d token=%d (%s)\n", l.Lock, l.Session, l.Token, l.Reason)
			}
			return out.String()
		})
	})
}

func show(s *State) string {
	var out strings.Builder
	for _, l := range s.List("", 1000) {
		fmt.Fprintf(&out, "%s:", l.Name)
		if l.Permits > 1 {
			fmt.Fprintf(&out, " permits=%d", l.Permits)
		}
		if l.LocalFirst > 0 {
			fmt.Fprintf(&out, " local-first=%d streak=%d last=%s", l.LocalFirst, l.Streak, l.LastRegion)
		}
		for _, h := range l.Holders {
			fmt.Fprintf(&out, " holder(s%d,t%d,%s", h.Session, h.Token, h.Mode)
			if h.Value != nil {
				fmt.Fprintf(&out, ",%q", h.Value)
			}
			out.WriteString(")")
		}
		for _, w := range l.Waiters {
			if w.Region != "" {
				fmt.Fprintf(&out, " waiter(s%d,%s,%s)", w.Session, w.Mode, w.Region)
			} else {
				fmt.Fprintf(&out, " waiter(s%d,%s)", w.Session, w.Mode)
			}
		}
		if l.DelayUntilMs != 0 {
			fmt.Fprintf(&out, " delay-until=%d", l.DelayUntilMs)
		}
		out.WriteString("\n")
	}
	for _, name := range sortedKeys(s.qs) {
		q := s.qs[name]
		fmt.Fprintf(&out, "queue %s: bytes=%d", name, q.bytes)
		for _, it := range q.ready {
			fmt.Fprintf(&out, " ready(#%d,a%d,%q)", it.id, it.attempts, it.data)
		}
		for _, id := range q.inflightIDs() {
			f := q.inflight[id]
			fmt.Fprintf(&out, " inflight(#%d,a%d,s%d,until=%d)", f.id, f.attempts, f.session, f.deadline)
		}
		for _, w := range q.consumers {
			fmt.Fprintf(&out, " consumer(s%d,w%d)", w.Session, w.Waiter)
		}
		out.WriteString("\n")
	}
	for _, name := range sortedKeys(s.simple) {
		fmt.Fprintf(&out, "barrier %s\n", name)
	}
	for _, name := range sortedKeys(s.double) {
		b, _ := s.DoubleBarrier(name)
		fmt.Fprintf(&out, "double-barrier %s: parties=%d open=%v entered=%v leaving=%v\n", name, b.Parties, b.Open, b.Entered, b.Leaving)
	}
	if out.Len() == 0 {
		return "no locks\n"
	}
	return out.String()
}

func fmtDelivery(d *Delivery) string {
	return fmt.Sprintf("%s#%d attempt=%d session=%d until=%d data=%q", d.Queue, d.ID, d.Attempt, d.Session, d.DeadlineMs, d.Data)
}

// checkSnapshot asserts that a snapshot restores to the same state.
func checkSnapshot(t *testing.T, s *State) {
	t.Helper()
	snap := s.Snapshot()
	r, err := Restore(snap)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if !bytes.Equal(r.Snapshot(), snap) || show(r) != show(s) {
		t.Fatalf("snapshot round trip changed the state:\n%s\nvs\n%s", show(s), show(r))
	}
	for sess := range s.bySession {
		if strings.Join(s.Held(sess), ",") != strings.Join(r.Held(sess), ",") {
			t.Fatalf("session %d index differs after restore", sess)
		}
	}
	checkLeases(t, s)
	checkLeases(t, r)
	for _, st := range []*State{s, r} {
		n := 0
		for name, l := range st.locks {
			if _, ok := st.delayed[name]; ok != (l.delayUntil != 0) {
				t.Fatalf("lock %s: delayUntil %d, in the delayed index %v", name, l.delayUntil, ok)
			}
			if l.delayUntil != 0 {
				n++
			}
		}
		if n != len(st.delayed) {
			t.Fatalf("delayed index has %d entries for %d delayed locks", len(st.delayed), n)
		}
	}
	// Derived indexes are rebuilt, not stored: they must match too.
	if !reflect.DeepEqual(s.qSession, r.qSession) || !reflect.DeepEqual(s.bSession, r.bSession) ||
		s.qBytes != r.qBytes || s.nInflight != r.nInflight {
		t.Fatalf("queue/barrier indexes differ after restore: %v %v %d %d vs %v %v %d %d",
			s.qSession, s.bSession, s.qBytes, s.nInflight, r.qSession, r.bSession, r.qBytes, r.nInflight)
	}
}

func TestSnapshotCorruptionDetected(t *testing.T) {
	s := New()
	live := func(int64) bool { return true }
	s.Apply(1, &Command{Op: OpAcquire, Name: "a", Session: 1}, live)
	s.Apply(2, &Command{Op: OpAcquire, Name: "a", Session: 2, Wait: true, Mode: Shared}, live)
	snap := s.Snapshot()
	for i := range snap {
		bad := bytes.Clone(snap)
		bad[i] ^= 0x41
		if _, err := Restore(bad); err == nil {
			t.Fatalf("flipped byte %d not detected", i)
		}
	}
	for n := 0; n < len(snap); n++ {
		if _, err := Restore(snap[:n]); err == nil {
			t.Fatalf("truncation to %d not detected", n)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, c := range []*Command{
		{Op: OpAcquire, Name: "x", Session: 5, Wait: true, DelayMs: 100, Inner: []byte{1, 2}},
		{Op: OpPush, Name: "q", Value: []byte("item")},
		{Op: OpPop, Name: "q", Session: 5, Wait: true, VisibilityMs: 30000, Detach: true},
		{Op: OpAck, Name: "q", Session: 5, Item: 12, Attempt: 2},
		{Op: OpCancelPop, Name: "q", Session: 5, Waiter: 1 << 62},
		{Op: OpEnter, Name: "b", Session: 5, Parties: 3},
	} {
		b, _ := Encode(c)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			return
		}
		// Non-canonical varints decode too; what must hold is that the
		// decoded command survives a round trip unchanged.
		again, err := Encode(c)
		if err != nil {
			t.Fatalf("decoded command does not re-encode: %v", err)
		}
		c2, err := Decode(again)
		if err != nil || !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip changed the command: %+v vs %+v (%v)", c, c2, err)
		}
	})
}

func FuzzRestore(f *testing.F) {
	s := New()
	s.Apply(1, &Command{Op: OpAcquire, Name: "a", Session: 1}, func(int64) bool { return true })
	f.Add(s.Snapshot())
	f.Add(queueState().Snapshot())
	f.Fuzz(func(t *testing.T, b []byte) {
		// As given, and with a valid checksum appended so the fuzzer reaches
		// the parser behind the CRC.
		for _, in := range [][]byte{b, binary.BigEndian.AppendUint32(bytes.Clone(b), crc32.Checksum(b, crcTable))} {
			r, err := Restore(in)
			if err != nil {
				continue
			}
			// Whatever Restore accepts its own snapshot restores again.
			if _, err := Restore(r.Snapshot()); err != nil {
				t.Fatalf("restored state does not round trip: %v", err)
			}
		}
	})
}

func TestValidName(t *testing.T) {
	for _, bad := range []string{"", "a\x00b", "tab\there", "del\x7f", strings.Repeat("x", MaxLockNameBytes+1)} {
		if ValidName(bad) == nil {
			t.Errorf("ValidName(%q) accepted", bad)
		}
	}
	for _, good := range []string{"a", "/locks/db", "ünïcode", strings.Repeat("x", MaxLockNameBytes)} {
		if err := ValidName(good); err != nil {
			t.Errorf("ValidName(%q) = %v", good, err)
		}
	}
}

// checkLeases asserts the lease heap holds exactly the in-flight deliveries,
// each entry where its index says, in heap order.
func checkLeases(t *testing.T, s *State) {
	t.Helper()
	n := 0
	for name, q := range s.qs {
		for id, f := range q.inflight {
			n++
			if f.lease == nil || f.lease.index < 0 || f.lease.index >= len(s.leases) || s.leases[f.lease.index] != f.lease ||
				f.lease.queue != name || f.lease.id != id || f.lease.deadline != f.deadline {
				t.Fatalf("delivery %s#%d: lease entry %+v out of place", name, id, f.lease)
			}
		}
	}
	if n != len(s.leases) || n != s.nInflight {
		t.Fatalf("%d deliveries, %d lease entries, nInflight %d", n, len(s.leases), s.nInflight)
	}
	for i := 1; i < len(s.leases); i++ {
		if s.leases[(i-1)/2].deadline > s.leases[i].deadline {
			t.Fatalf("lease heap out of order at %d", i)
		}
	}
}

func TestSettings(t *testing.T) {
	s := New()
	live := func(int64) bool { return true }
	if r, _, _ := s.Apply(1, &Command{Op: OpSetting, Name: "placement.prefer_region", Value: []byte("us-west")}, live); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := s.Setting("placement.prefer_region"); got != "us-west" {
		t.Fatalf("setting = %q", got)
	}
	if r, _, _ := s.Apply(2, &Command{Op: OpSetting, Name: "", Value: []byte("x")}, live); r.Err == nil {
		t.Fatal("empty setting name accepted")
	}
	if r, _, _ := s.Apply(3, &Command{Op: OpSetting, Name: "big", Value: make([]byte, MaxSettingBytes+1)}, live); r.Err == nil {
		t.Fatal("oversized setting accepted")
	}
	// Snapshots carry settings (version 3) and restore them.
	snap := s.Snapshot()
	if snap[0] != snapshotV3 {
		t.Fatalf("snapshot version %d with a setting", snap[0])
	}
	r, err := Restore(snap)
	if err != nil || r.Setting("placement.prefer_region") != "us-west" {
		t.Fatalf("restore: %v %q", err, r.Setting("placement.prefer_region"))
	}
	if !bytes.Equal(r.Snapshot(), snap) {
		t.Fatal("snapshot of the restored state differs")
	}
	// Deleting the last setting returns to the older format.
	s.Apply(4, &Command{Op: OpSetting, Name: "placement.prefer_region"}, live)
	if s.Setting("placement.prefer_region") != "" || s.Snapshot()[0] != snapshotV1 {
		t.Fatalf("after delete: %q, version %d", s.Setting("placement.prefer_region"), s.Snapshot()[0])
	}
	// The command round-trips through the codec.
	b, err := Encode(&Command{Op: OpSetting, Name: "a", Value: []byte("b")})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := Decode(b); err != nil || c.Op != OpSetting || c.Name != "a" || string(c.Value) != "b" {
		t.Fatalf("decode: %+v %v", c, err)
	}
}
