package server

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/errs"
)

// A native call returns the client's view in its reply's Header when the
// call added to the view the client sent, and nothing when it did not; a
// reply without a Header (an error) returns it in the header metadata.
func TestNativeReplyCarriesView(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	tc.leader()
	api := rawConn(t, tc.servers[0].GRPCAddr(), tc.clientTLS())
	with := func(view string) context.Context {
		return metadata.AppendToOutgoingContext(ctx(t), seenGroupsHeader, view)
	}

	var md metadata.MD
	created, err := api.Create(with("-"), &pb.CreateRequest{Path: "/v", Data: []byte("x")}, grpc.Header(&md))
	if err != nil {
		t.Fatal(err)
	}
	view := created.GetHeader().GetView()
	if _, index, ok := pb.ParseViewPair(view); !ok || index == 0 {
		t.Fatalf("a create's reply carries view %q; want the root group at the create's index", view)
	}
	if vs := md.Get(seenGroupsHeader); len(vs) != 0 {
		t.Fatalf("the view also came as metadata: %q", vs)
	}

	// The leader's own entries after its election (the cluster version,
	// the group's dependency marker) may apply after the create: a reply
	// then carries the newer view, which is sent again, until a read sees
	// nothing new.
	for i, quiet := 0, false; !quiet; i++ {
		if i == 50 {
			t.Fatalf("50 reads, each saw something new (last view %q)", view)
		}
		md = nil
		got, err := api.GetData(with(view), &pb.ReadRequest{Path: "/v"}, grpc.Header(&md))
		if err != nil || string(got.GetData()) != "x" {
			t.Fatalf("read: %v, %v", got, err)
		}
		if len(md.Get(seenGroupsHeader)) != 0 {
			t.Fatalf("a read's view came as metadata: %q", md.Get(seenGroupsHeader))
		}
		v := got.GetHeader().GetView()
		if quiet = v == ""; !quiet {
			_, sent, _ := pb.ParseViewPair(view)
			if _, index, ok := pb.ParseViewPair(v); !ok || index <= sent {
				t.Fatalf("a read sent view %q and returned %q, nothing new; want none", view, v)
			}
			view = v
		}
	}

	md = nil
	_, err = api.GetData(with("-"), &pb.ReadRequest{Path: "/missing"}, grpc.Header(&md))
	if !errors.Is(errs.FromGRPC(err), errs.ErrNoNode) {
		t.Fatalf("read of a missing node: %v", err)
	}
	vs := md.Get(seenGroupsHeader)
	if len(vs) != 1 {
		t.Fatalf("an error's header metadata carries views %q; want one", vs)
	}
	if _, index, ok := pb.ParseViewPair(vs[0]); !ok || index == 0 {
		t.Fatalf("an error's view %q; want the root group at what the member applied", vs[0])
	}
}

// A view keeps the root's index out of its map: a root-only view is read,
// raised and encoded as any other, and reading and raising it inside a
// call's callInfo allocates nothing but the callInfo every call has.
func TestRootViewWithoutMap(t *testing.T) {
	for _, tc := range []struct {
		in, raised string
		seven      uint64 // group 7's index
	}{
		{"-", "0:9", 0},
		{"0:5", "0:9", 0},
		{"0:12", "0:12", 0},
		{"0:5,7:3", "0:9,7:3", 3},
		{"3:4,7:3", "0:9,3:4,7:3", 3},
	} {
		ci := &callInfo{}
		if !parseView(tc.in, &ci.own) {
			t.Fatalf("parseView(%q) refused", tc.in)
		}
		v := &ci.own
		if got := encodeView(v); got != tc.in || v.grownSinceParse() {
			t.Fatalf("parseView(%q) encodes as %q (grown %v)", tc.in, got, v.grownSinceParse())
		}
		v.observe(0, 9)
		if got := encodeView(v); got != tc.raised {
			t.Fatalf("%q after the root at 9: %q, want %q", tc.in, got, tc.raised)
		}
		if got, want := v.grownSinceParse(), tc.in != tc.raised; got != want {
			t.Fatalf("%q raised to %q: grown %v", tc.in, tc.raised, got)
		}
		if v.need(0) < 9 || v.need(7) != tc.seven {
			t.Fatalf("%q: need root %d, group 7 %d", tc.raised, v.need(0), v.need(7))
		}
	}
	for _, bad := range []string{"", "0:", "x:1", "0:0", "0:5,"} {
		if parseView(bad, &view{}) {
			t.Fatalf("parseView(%q) accepted", bad)
		}
	}
	index := uint64(100)
	if n := testing.AllocsPerRun(100, func() {
		ci := &callInfo{}
		if !parseView("0:99", &ci.own) {
			t.Fatal("refused")
		}
		index++
		ci.own.observe(0, index)
	}); n != 1 {
		t.Fatalf("%.1f allocations to read and raise a root-only view in its callInfo, want 1", n)
	}
}
