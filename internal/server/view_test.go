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
