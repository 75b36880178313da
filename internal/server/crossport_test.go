package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	gozk "github.com/go-zookeeper/zk"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/errs"
)

// crossOps is one port's client as the cross-port script drives it. Every
// answer is rendered as a string the same way for both ports; errors as
// "error <ZooKeeper code>".
type crossOps interface {
	create(p, data string, mode int) (string, error)   // mode: createPersistent, ...
	get(p string) (string, error)                      // "data v<version>"
	set(p, data string, version int32) (string, error) // "v<version>"
	del(p string, version int32) error
	exists(p string) (string, error)   // "false", or "true v<version> c<children> l<length> <owner>"
	children(p string) (string, error) // sorted, space-separated
	multi(ops []crossOp) (string, error)
	sessionID() int64
	closeSession() error
}

const (
	createPersistent = iota
	createSequential
	createEphemeral
	createEphemeralSequential
)

// crossOp is one operation of a multi.
type crossOp struct {
	kind    string // create, set, delete, check
	path    string
	data    string
	version int32
}

// owner renders a node's ephemeral owner relative to the caller.
func owner(ephemeralOwner, mine int64) string {
	switch ephemeralOwner {
	case 0:
		return "-"
	case mine:
		return "mine"
	}
	return "other"
}

// crossAnswer is answer with the go-zookeeper errors the script meets
// beyond those answer knows.
func crossAnswer(v string, err error) string {
	switch {
	case errors.Is(err, gozk.ErrNoChildrenForEphemerals):
		err = errs.ErrNoChildrenForEphemerals
	case errors.Is(err, gozk.ErrBadArguments):
		err = errs.ErrBadArguments
	}
	return answer(v, err)
}

type zkCross struct{ c *gozk.Conn }

func (z zkCross) create(p, data string, mode int) (string, error) {
	flags := map[int]int32{createPersistent: 0, createSequential: gozk.FlagSequence,
		createEphemeral: gozk.FlagEphemeral, createEphemeralSequential: gozk.FlagEphemeral | gozk.FlagSequence}[mode]
	return z.c.Create(p, []byte(data), flags, gozk.WorldACL(gozk.PermAll))
}

func (z zkCross) get(p string) (string, error) {
	d, st, err := z.c.Get(p)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s v%d", d, st.Version), nil
}

func (z zkCross) set(p, data string, version int32) (string, error) {
	st, err := z.c.Set(p, []byte(data), version)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("v%d", st.Version), nil
}

func (z zkCross) del(p string, version int32) error { return z.c.Delete(p, version) }

func (z zkCross) exists(p string) (string, error) {
	ok, st, err := z.c.Exists(p)
	if err != nil || !ok {
		return fmt.Sprint(ok), err
	}
	return fmt.Sprintf("true v%d c%d l%d %s", st.Version, st.NumChildren, st.DataLength, owner(st.EphemeralOwner, z.c.SessionID())), nil
}

func (z zkCross) children(p string) (string, error) {
	kids, _, err := z.c.Children(p)
	slices.Sort(kids)
	return strings.Join(kids, " "), err
}

func (z zkCross) multi(ops []crossOp) (string, error) {
	var req []any
	for _, o := range ops {
		switch o.kind {
		case "create":
			req = append(req, &gozk.CreateRequest{Path: o.path, Data: []byte(o.data), Acl: gozk.WorldACL(gozk.PermAll)})
		case "set":
			req = append(req, &gozk.SetDataRequest{Path: o.path, Data: []byte(o.data), Version: o.version})
		case "delete":
			req = append(req, &gozk.DeleteRequest{Path: o.path, Version: o.version})
		case "check":
			req = append(req, &gozk.CheckVersionRequest{Path: o.path, Version: o.version})
		}
	}
	res, err := z.c.Multi(req...)
	if err != nil {
		// The ops before the failing one answer 0 (no error), and
		// go-zookeeper returns the first op's error that is not 0.
		for i, r := range res {
			if r.Error != nil {
				return "", fmt.Errorf("at op %d: %w", i, err)
			}
		}
		return "", err
	}
	var out []string
	for i, r := range res {
		switch ops[i].kind {
		case "create":
			out = append(out, r.String)
		case "set":
			out = append(out, fmt.Sprintf("v%d", r.Stat.Version))
		default:
			out = append(out, "ok")
		}
	}
	return strings.Join(out, " | "), nil
}

func (z zkCross) sessionID() int64    { return z.c.SessionID() }
func (z zkCross) closeSession() error { z.c.Close(); return nil }

type nativeCross struct{ c *client.Client }

func (n nativeCross) create(p, data string, mode int) (string, error) {
	m := map[int]client.CreateMode{createPersistent: client.Persistent, createSequential: client.PersistentSequential,
		createEphemeral: client.Ephemeral, createEphemeralSequential: client.EphemeralSequential}[mode]
	path, _, err := n.c.Create(context.Background(), p, []byte(data), client.CreateOptions{Mode: m})
	return path, err
}

func (n nativeCross) get(p string) (string, error) {
	d, st, err := n.c.Get(context.Background(), p)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s v%d", d, st.Version), nil
}

func (n nativeCross) set(p, data string, version int32) (string, error) {
	st, err := n.c.Set(context.Background(), p, []byte(data), version)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("v%d", st.Version), nil
}

func (n nativeCross) del(p string, version int32) error {
	return n.c.Delete(context.Background(), p, version)
}

func (n nativeCross) exists(p string) (string, error) {
	ok, st, err := n.c.Exists(context.Background(), p)
	if err != nil || !ok {
		return fmt.Sprint(ok), err
	}
	return fmt.Sprintf("true v%d c%d l%d %s", st.Version, st.NumChildren, st.DataLength, owner(st.EphemeralOwner, n.c.SessionID())), nil
}

func (n nativeCross) children(p string) (string, error) {
	kids, _, err := n.c.Children(context.Background(), p)
	slices.Sort(kids)
	return strings.Join(kids, " "), err
}

func (n nativeCross) multi(ops []crossOp) (string, error) {
	var req []*client.Op
	for _, o := range ops {
		switch o.kind {
		case "create":
			req = append(req, client.CreateOp(o.path, []byte(o.data), client.CreateOptions{}))
		case "set":
			req = append(req, client.SetOp(o.path, []byte(o.data), o.version))
		case "delete":
			req = append(req, client.DeleteOp(o.path, o.version))
		case "check":
			req = append(req, client.CheckOp(o.path, o.version))
		}
	}
	res, err := n.c.Multi(context.Background(), req...)
	if err != nil {
		// The native port reports each op's code from the tree: the ones
		// not at fault say runtime inconsistency.
		for i, r := range res {
			if c := r.GetErrorCode(); c != 0 && c != errs.ZKCode(errs.ErrRuntimeInconsistency) {
				return "", fmt.Errorf("at op %d: %w", i, err)
			}
		}
		return "", err
	}
	var out []string
	for i, r := range res {
		switch ops[i].kind {
		case "create":
			out = append(out, r.GetPath())
		case "set":
			out = append(out, fmt.Sprintf("v%d", r.GetStat().GetVersion()))
		default:
			out = append(out, "ok")
		}
	}
	return strings.Join(out, " | "), nil
}

func (n nativeCross) sessionID() int64    { return n.c.SessionID() }
func (n nativeCross) closeSession() error { return n.c.Close() }

// multiAnswer renders a multi's answer: its results, or its error with the
// index of the op at fault.
func multiAnswer(v string, err error) string {
	at := ""
	if err != nil {
		if s, _, ok := strings.Cut(err.Error(), ":"); ok && strings.HasPrefix(s, "at op ") {
			at = " " + s
		}
	}
	return crossAnswer(v, err) + at
}

// TestCrossPortScript runs one script of tree requests through the
// ZooKeeper port and then the native port, each time from the same
// starting state, and requires the same answers: creates (plain,
// sequential, ephemeral, under an ephemeral, without a parent, existing),
// reads, versioned sets and deletes with their errors, exists, children, a
// multi that applies and one whose failing op rolls the others back, and a
// session whose close removes its ephemerals. Every answer is also pinned,
// so both ports cannot agree on being wrong.
func TestCrossPortScript(t *testing.T) {
	ac := newAuthCluster(t, 1)
	admin := nativeCross{ac.native(t, identity{name: "super", digests: []string{"super:secret"}})}
	// clear removes /cross and everything under it.
	var clear func(p string)
	clear = func(p string) {
		kids, err := admin.children(p)
		if err != nil {
			return
		}
		for _, k := range strings.Fields(kids) {
			clear(p + "/" + k)
		}
		if err := admin.del(p, -1); err != nil && !errors.Is(err, client.ErrNoNode) {
			t.Fatalf("clear %s: %v", p, err)
		}
	}
	type step struct {
		name string
		do   func(o crossOps) string
		want string
	}
	code := func(err error) string { return fmt.Sprintf("error %d", errs.ZKCode(err)) }
	steps := []step{
		{"create", func(o crossOps) string { return crossAnswer(o.create("/cross", "a", createPersistent)) }, "/cross"},
		{"create existing", func(o crossOps) string { return crossAnswer(o.create("/cross", "a", createPersistent)) }, code(errs.ErrNodeExists)},
		{"create without parent", func(o crossOps) string { return crossAnswer(o.create("/cross/none/kid", "k", createPersistent)) }, code(errs.ErrNoNode)},
		{"create sequential", func(o crossOps) string { return crossAnswer(o.create("/cross/seq-", "s", createSequential)) }, "/cross/seq-0000000000"},
		{"get", func(o crossOps) string { return crossAnswer(o.get("/cross")) }, "a v0"},
		{"get missing", func(o crossOps) string { return crossAnswer(o.get("/cross/none")) }, code(errs.ErrNoNode)},
		{"set bad version", func(o crossOps) string { return crossAnswer(o.set("/cross", "b", 5)) }, code(errs.ErrBadVersion)},
		{"set version 0", func(o crossOps) string { return crossAnswer(o.set("/cross", "b", 0)) }, "v1"},
		{"set any version", func(o crossOps) string { return crossAnswer(o.set("/cross", "c", -1)) }, "v2"},
		{"set missing", func(o crossOps) string { return crossAnswer(o.set("/cross/none", "c", -1)) }, code(errs.ErrNoNode)},
		{"get after sets", func(o crossOps) string { return crossAnswer(o.get("/cross")) }, "c v2"},
		{"exists missing", func(o crossOps) string { return crossAnswer(o.exists("/cross/none")) }, "false"},
		{"exists", func(o crossOps) string { return crossAnswer(o.exists("/cross")) }, "true v2 c1 l1 -"},
		{"children", func(o crossOps) string { return crossAnswer(o.children("/cross")) }, "seq-0000000000"},
		{"children missing", func(o crossOps) string { return crossAnswer(o.children("/cross/none")) }, code(errs.ErrNoNode)},
		{"delete not empty", func(o crossOps) string { return crossAnswer("ok", o.del("/cross", -1)) }, code(errs.ErrNotEmpty)},
		{"delete bad version", func(o crossOps) string { return crossAnswer("ok", o.del("/cross/seq-0000000000", 3)) }, code(errs.ErrBadVersion)},
		{"delete", func(o crossOps) string { return crossAnswer("ok", o.del("/cross/seq-0000000000", 0)) }, "ok"},
		{"delete missing", func(o crossOps) string { return crossAnswer("ok", o.del("/cross/seq-0000000000", -1)) }, code(errs.ErrNoNode)},
		{"multi", func(o crossOps) string {
			return multiAnswer(o.multi([]crossOp{{kind: "create", path: "/cross/m1", data: "m"},
				{kind: "set", path: "/cross", data: "d", version: 2}, {kind: "check", path: "/cross", version: 3},
				{kind: "delete", path: "/cross/m1", version: -1}}))
		}, "/cross/m1 | v3 | ok | ok"},
		{"multi failing", func(o crossOps) string {
			return multiAnswer(o.multi([]crossOp{{kind: "create", path: "/cross/m2", data: "m"},
				{kind: "delete", path: "/cross/none", version: -1}, {kind: "set", path: "/cross", data: "e", version: -1}}))
		}, code(errs.ErrNoNode) + " at op 1"},
		{"multi failing check", func(o crossOps) string {
			return multiAnswer(o.multi([]crossOp{{kind: "check", path: "/cross", version: 9},
				{kind: "set", path: "/cross", data: "e", version: -1}}))
		}, code(errs.ErrBadVersion) + " at op 0"},
		{"multi rolled back: create", func(o crossOps) string { return crossAnswer(o.exists("/cross/m2")) }, "false"},
		{"multi rolled back: set", func(o crossOps) string { return crossAnswer(o.get("/cross")) }, "d v3"},
		{"ephemeral", func(o crossOps) string { return crossAnswer(o.create("/cross/eph", "e", createEphemeral)) }, "/cross/eph"},
		{"exists ephemeral", func(o crossOps) string { return crossAnswer(o.exists("/cross/eph")) }, "true v0 c0 l1 mine"},
		{"child of ephemeral", func(o crossOps) string { return crossAnswer(o.create("/cross/eph/kid", "k", createPersistent)) }, code(errs.ErrNoChildrenForEphemerals)},
		{"ephemeral sequential", func(o crossOps) string { return crossAnswer(o.create("/cross/es-", "e", createEphemeralSequential)) }, "/cross/es-0000000005"},
		{"children with ephemerals", func(o crossOps) string { return crossAnswer(o.children("/cross")) }, "eph es-0000000005"},
		// The session ends: its ephemerals go with it (seen by another
		// session).
		{"close session", func(o crossOps) string { return crossAnswer("ok", o.closeSession()) }, "ok"},
		{"ephemerals gone", func(crossOps) string {
			waitUntil(t, "ephemerals removed", func() bool { kids, _ := admin.children("/cross"); return kids == "" })
			return crossAnswer(admin.exists("/cross/eph"))
		}, "false"},
	}
	ports := []struct {
		name string
		open func() crossOps
	}{
		{"zookeeper", func() crossOps { return zkCross{ac.zk(t, identity{name: "zk"})} }},
		{"native", func() crossOps { return nativeCross{ac.native(t, identity{name: "native"})} }},
	}
	answers := make([][]string, len(ports))
	for i, port := range ports {
		clear("/cross")
		o := port.open()
		for _, s := range steps {
			answers[i] = append(answers[i], s.do(o))
		}
	}
	for j, s := range steps {
		zkAns, nAns := answers[0][j], answers[1][j]
		if zkAns != nAns {
			t.Errorf("%s: zookeeper port %q, native port %q", s.name, zkAns, nAns)
		}
		if zkAns != s.want {
			t.Errorf("%s = %q (native port: %q), want %q", s.name, zkAns, nAns, s.want)
		}
	}
}
