package coord

import (
	"bytes"
	"fmt"
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
//	show
//
// Every write consumes the next log index (starting at 10), which is the
// token of the grants it makes.
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
				case "lock":
					c.Lock = v
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
				if err := s.CheckToken(c.Lock, c.Token); err != nil {
					return err.Error() + "\n"
				}
				return "ok\n"
			case "end-session":
				index++
				grants, losses = s.SessionEnded(index, c.TimeMs, c.Session, expired)
			default:
				op := map[string]OpType{"acquire": OpAcquire, "release": OpRelease, "cancel": OpCancel,
					"force-release": OpForceRelease, "tick": OpTick, "proclaim": OpProclaim, "add": OpAdd}[d.Cmd]
				if op == 0 {
					t.Fatalf("unknown command %s", d.Cmd)
				}
				c.Op = op
				// Through the codec, as in the log.
				b, err := Encode(c)
				if err != nil {
					t.Fatal(err)
				}
				c2, err := Decode(b)
				if err != nil {
					t.Fatal(err)
				}
				index++
				res, grants, losses = s.Apply(index, c2, live)
			}
			checkSnapshot(t, s)
			var out strings.Builder
			fmt.Fprintf(&out, "index %d: ", index)
			switch {
			case res.Err != nil:
				fmt.Fprintf(&out, "error: %v\n", res.Err)
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
				fmt.Fprintf(&out, "grant %s to session %d token=%d %s\n", g.Lock, g.Session, g.Token, g.Mode)
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
		for _, h := range l.Holders {
			fmt.Fprintf(&out, " holder(s%d,t%d,%s", h.Session, h.Token, h.Mode)
			if h.Value != nil {
				fmt.Fprintf(&out, ",%q", h.Value)
			}
			out.WriteString(")")
		}
		for _, w := range l.Waiters {
			fmt.Fprintf(&out, " waiter(s%d,%s)", w.Session, w.Mode)
		}
		if l.DelayUntilMs != 0 {
			fmt.Fprintf(&out, " delay-until=%d", l.DelayUntilMs)
		}
		out.WriteString("\n")
	}
	if out.Len() == 0 {
		return "no locks\n"
	}
	return out.String()
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
}

func TestSnapshotCorruptionDetected(t *testing.T) {
	s := New()
	live := func(int64) bool { return true }
	s.Apply(1, &Command{Op: OpAcquire, Lock: "a", Session: 1}, live)
	s.Apply(2, &Command{Op: OpAcquire, Lock: "a", Session: 2, Wait: true, Mode: Shared}, live)
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
	b, _ := Encode(&Command{Op: OpAcquire, Lock: "x", Session: 5, Wait: true, DelayMs: 100, Inner: []byte{1, 2}})
	f.Add(b)
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
	s.Apply(1, &Command{Op: OpAcquire, Lock: "a", Session: 1}, func(int64) bool { return true })
	f.Add(s.Snapshot())
	f.Fuzz(func(t *testing.T, b []byte) {
		Restore(b)
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
