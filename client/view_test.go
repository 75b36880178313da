package client

import (
	"testing"

	"google.golang.org/grpc/metadata"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
)

// The view a reply returns is merged from its Header and from its header
// metadata (a reply without a Header, an error, an older server), and
// sent with the next call.
func TestMergeReplyTakesTheViewFromEitherPlace(t *testing.T) {
	c := &Client{}
	c.mergeReply(nil, &pb.SetDataResponse{Header: &pb.Header{View: "1:7"}})
	c.mergeReply(metadata.Pairs(SeenGroupsHeader, "2:3"), &pb.DeleteResponse{})
	c.mergeReply(nil, &pb.SetDataResponse{Header: &pb.Header{View: "1:5"}}) // older: kept at 7
	c.mergeReply(nil, nil)
	c.mu.Lock()
	h, ok := c.viewHeaderLocked()
	c.mu.Unlock()
	if !ok || h != "1:7,2:3" {
		t.Fatalf("view %q (%v); want 1:7,2:3", h, ok)
	}
}
