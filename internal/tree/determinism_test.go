package tree

import (
	"bytes"
	"math/rand"
	"reflect"
	"testing"
)

// gen produces random but plausible commands: a small path space so that
// ops collide, sessions that come and go, time that moves forward.
type gen struct {
	rng      *rand.Rand
	now      int64
	sessions []int64
}

var (
	genPaths = []string{"/a", "/a/b", "/a/b/c", "/a/d", "/c", "/c/x", "/c/y", "/t", "/t/u", "/q/", "/q/n-", "/zookeeper/z"}
	genACLs  = [][]ACL{
		OpenACL,
		{{Perms: PermRead | PermCreate | PermDelete, ID: ID{"world", "anyone"}}},
		{{Perms: PermAll, ID: ID{"auth", ""}}},
		{{Perms: PermAll, ID: ID{"digest", "bob:h"}}, {Perms: PermRead, ID: ID{"ip", "10.0.0.0/8"}}},
		{},
	}
	genAuth = [][]ID{nil, {{"digest", "bob:h"}}, {{"ip", "10.1.2.3"}}, {{"super", ""}}}
)

func (g *gen) path() string { return genPaths[g.rng.Intn(len(genPaths))] }

func (g *gen) session() int64 {
	if len(g.sessions) == 0 || g.rng.Intn(10) == 0 {
		return int64(g.rng.Intn(5))
	}
	return g.sessions[g.rng.Intn(len(g.sessions))]
}

func (g *gen) op() Op {
	version := int32(-1)
	if g.rng.Intn(3) == 0 {
		version = int32(g.rng.Intn(3))
	}
	p := g.path()
	data := make([]byte, g.rng.Intn(8))
	g.rng.Read(data)
	switch g.rng.Intn(10) {
	case 0, 1, 2, 3:
		mode := CreateMode(g.rng.Intn(7))
		var ttl int64
		if mode.isTTL() {
			ttl = int64(1 + g.rng.Intn(5000))
		}
		return Op{Type: OpCreate, Path: p, Data: data, ACL: genACLs[g.rng.Intn(len(genACLs))], Mode: mode, TTLMs: ttl}
	case 4, 5:
		return Op{Type: OpDelete, Path: p, Version: version}
	case 6, 7:
		return Op{Type: OpSetData, Path: p, Data: data, Version: version}
	case 8:
		return Op{Type: OpSetACL, Path: p, ACL: genACLs[g.rng.Intn(len(genACLs))], Version: version}
	}
	return Op{Type: OpCheck, Path: p, Version: version}
}

func (g *gen) command() *Command {
	g.now += int64(g.rng.Intn(1000))
	c := &Command{TimeMs: g.now, Session: g.session(), Auth: genAuth[g.rng.Intn(len(genAuth))]}
	switch r := g.rng.Intn(20); {
	case r < 10:
		c.Op = g.op()
	case r < 14:
		c.Op.Type = OpMulti
		for i := g.rng.Intn(5); i >= 0; i-- {
			c.Ops = append(c.Ops, g.op())
		}
	case r < 16:
		c.Op.Type = OpCreateSession
		c.TimeoutMs = int32(MinSessionMs + g.rng.Intn(10000))
		c.Password = make([]byte, 16)
		g.rng.Read(c.Password)
	case r == 16:
		c.Op.Type = OpCloseSession
	case r == 17:
		c.Op.Type = OpExpire
		c.Sessions = []int64{g.session(), g.session()}
	case r == 18:
		c.Op.Type = OpReap
	default:
		c.Op.Type = OpNoop
	}
	return c
}

// observe records what a command's result teaches the generator.
func (g *gen) observe(res Result) {
	if res.SessionID != 0 {
		g.sessions = append(g.sessions, res.SessionID)
	}
}

// randomTree applies n random commands to a new tree.
func randomTree(t testing.TB, seed int64, n int) *Tree {
	g := &gen{rng: rand.New(rand.NewSource(seed))}
	tr := New()
	for i := 1; i <= n; i++ {
		res, _ := tr.Apply(int64(i), g.command())
		g.observe(res)
	}
	return tr
}

// Two replicas applying the same log, and a third restored from a snapshot
// taken half way, agree on every result, every event and the final state.
func TestDeterminism(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		g := &gen{rng: rand.New(rand.NewSource(seed))}
		const n = 2000
		a, b := New(), New()
		var c *Tree
		for i := int64(1); i <= n; i++ {
			cmd := g.command()
			// Replicas decode their own copy of the entry.
			enc, err := EncodeCommand(cmd)
			if err != nil {
				t.Fatal(err)
			}
			cmdB, err := DecodeCommand(enc)
			if err != nil {
				t.Fatal(err)
			}
			resA, evA := a.Apply(i, cmd)
			resB, evB := b.Apply(i, cmdB)
			g.observe(resA)
			if !reflect.DeepEqual(resA, resB) || !reflect.DeepEqual(evA, evB) {
				t.Fatalf("seed %d index %d: replicas diverge:\n%+v %v\n%+v %v", seed, i, resA, evA, resB, evB)
			}
			if c != nil {
				resC, evC := c.Apply(i, cmd)
				if !reflect.DeepEqual(resA, resC) || !reflect.DeepEqual(evA, evC) {
					t.Fatalf("seed %d index %d: restored replica diverges:\n%+v %v\n%+v %v", seed, i, resA, evA, resC, evC)
				}
			}
			if i == n/2 {
				var buf bytes.Buffer
				if err := a.Snapshot(&buf); err != nil {
					t.Fatal(err)
				}
				if c, err = Restore(&buf); err != nil {
					t.Fatal(err)
				}
			}
			if i%100 == 0 {
				checkInvariants(t, a)
				if a.Digest() != b.Digest() || (c != nil && a.Digest() != c.Digest()) {
					t.Fatalf("seed %d index %d: digests differ", seed, i)
				}
				for _, now := range []int64{0, g.now, g.now + 10000} {
					if a.NeedsReap(now) != b.NeedsReap(now) || (c != nil && a.NeedsReap(now) != c.NeedsReap(now)) {
						t.Fatalf("seed %d index %d: NeedsReap differs", seed, i)
					}
				}
			}
		}
		checkInvariants(t, c)
		if a.Digest() != b.Digest() || a.Digest() != c.Digest() {
			t.Fatalf("seed %d: final digests differ", seed)
		}
		if a.NodeCount() < 5 {
			t.Fatalf("seed %d: generator too weak, %d nodes", seed, a.NodeCount())
		}
	}
}

// Views taken while a log is applied change nothing the tree does (results,
// events, state: the copies made for them are invisible), and each, written
// later, is the state when it was taken.
func TestViewsUnderRandomLog(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		g := &gen{rng: rand.New(rand.NewSource(seed))}
		a, b := New(), New() // a hands out views, b does not
		type pending struct {
			view *View
			want []byte
			due  int64
		}
		var views []pending
		for i := int64(1); i <= 2000; i++ {
			if g.rng.Intn(40) == 0 {
				var buf bytes.Buffer
				if err := b.Snapshot(&buf); err != nil {
					t.Fatal(err)
				}
				views = append(views, pending{a.View(), buf.Bytes(), i + int64(g.rng.Intn(200))})
			}
			cmd := g.command()
			resA, evA := a.Apply(i, cmd)
			resB, evB := b.Apply(i, cmd)
			g.observe(resA)
			if !reflect.DeepEqual(resA, resB) || !reflect.DeepEqual(evA, evB) {
				t.Fatalf("seed %d index %d: views changed a result:\n%+v %v\n%+v %v", seed, i, resA, evA, resB, evB)
			}
			for k := 0; k < len(views); k++ {
				if v := views[k]; v.due <= i {
					var buf bytes.Buffer
					if _, err := v.view.WriteTo(&buf); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(buf.Bytes(), v.want) {
						t.Fatalf("seed %d index %d: a view changed with the tree", seed, i)
					}
					views = append(views[:k], views[k+1:]...)
					k--
				}
			}
			if i%50 == 0 {
				checkInvariants(t, a)
				if a.Digest() != b.Digest() {
					t.Fatalf("seed %d index %d: digests differ", seed, i)
				}
			}
		}
	}
}
