package client

import (
	"context"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/wire"
)

// leanAPI is the native API's client on the lean transport: the generated
// client, but the calls of one znode that carry a workload (create, set,
// delete, getData, exists, getChildren) go to the connection directly
// (wire.ClientConn.Call) with what carry would add, instead of through the
// generated code's options slice, the interceptor chain and carry's call
// option: two allocations and three layers fewer a call, same bytes on the
// wire; a set's or a getData's reply is made with its Header and Stat
// (pb.SetDataReply, pb.GetDataReply): one fewer again. A call given
// options of its own takes the generated path.
type leanAPI struct {
	pb.MeridianClient
	cc *wire.ClientConn
	c  *Client
}

// newAPI is the native API over conn, a connection c.dial opened (carry
// its interceptor).
func (c *Client) newAPI(conn Conn) pb.MeridianClient {
	api := pb.NewMeridianClient(conn)
	if wc, ok := conn.(*wire.ClientConn); ok {
		return &leanAPI{MeridianClient: api, cc: wc, c: c}
	}
	return api
}

// call is carry's work for the lean transport, around Call.
func (a *leanAPI) call(ctx context.Context, method string, in, out any, opts []grpc.CallOption) error {
	if len(opts) > 0 {
		return a.cc.Invoke(ctx, method, in, out, opts...) // carry runs on it
	}
	var md metadata.MD
	err := a.cc.Call(ctx, method, in, out, (*callPairs)(a.c), &md)
	a.c.mergeReply(md, out)
	return err
}

// callPairs appends what sentLocked makes into a lean call's frame: the
// base pairs, the zxid seen and the view, in that order, the values
// written straight into the frame. A write raises the zxid and the view,
// so the next call's strings would be made anew anyway. The two make the
// same pairs (TestCallPairs holds them to it): sentLocked serves the
// calls that go through carry (gRPC, calls with options).
type callPairs Client

func (p *callPairs) AppendPairs(b []byte, max int) ([]byte, int) {
	c := (*Client)(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	n, at := 0, 0
	base := c.basePairsLocked()
	for i := 0; i+1 < len(base) && n < max; i += 2 {
		b, at = wire.BeginPair(b, base[i])
		b = wire.EndPair(append(b, base[i+1]...), at)
		n++
	}
	if n == max {
		return b, n
	}
	b, at = wire.BeginPair(b, SeenZxidHeader)
	b = wire.EndPair(strconv.AppendInt(b, c.mu.lastZxid, 10), at)
	n++
	if n == max {
		return b, n
	}
	mark := len(b)
	b, at = wire.BeginPair(b, SeenGroupsHeader)
	sendable := false
	if len(c.mu.groups) > 1 { // encoded once a change: it sorts
		var view string
		view, sendable = c.viewHeaderLocked(func(v []byte) string { return string(v) }, nil)
		b = append(b, view...)
	} else {
		b, sendable = c.appendViewLocked(b)
	}
	if !sendable { // too many groups: as sentLocked, no view
		return b[:mark], n
	}
	return wire.EndPair(b, at), n + 1
}

// leanCall makes out, runs the call and returns out, nil on an error (as
// the generated client does).
func leanCall[Out any](a *leanAPI, ctx context.Context, method string, in any, opts []grpc.CallOption) (*Out, error) {
	out := new(Out)
	if err := a.call(ctx, method, in, out, opts); err != nil {
		return nil, err
	}
	return out, nil
}

func (a *leanAPI) Create(ctx context.Context, in *pb.CreateRequest, opts ...grpc.CallOption) (*pb.CreateResponse, error) {
	return leanCall[pb.CreateResponse](a, ctx, pb.Meridian_Create_FullMethodName, in, opts)
}

func (a *leanAPI) SetData(ctx context.Context, in *pb.SetDataRequest, opts ...grpc.CallOption) (*pb.SetDataResponse, error) {
	out, err := leanCall[pb.SetDataReply](a, ctx, pb.Meridian_SetData_FullMethodName, in, opts)
	if err != nil {
		return nil, err
	}
	return &out.SetDataResponse, nil
}

func (a *leanAPI) Delete(ctx context.Context, in *pb.DeleteRequest, opts ...grpc.CallOption) (*pb.DeleteResponse, error) {
	return leanCall[pb.DeleteResponse](a, ctx, pb.Meridian_Delete_FullMethodName, in, opts)
}

func (a *leanAPI) GetData(ctx context.Context, in *pb.ReadRequest, opts ...grpc.CallOption) (*pb.GetDataResponse, error) {
	out, err := leanCall[pb.GetDataReply](a, ctx, pb.Meridian_GetData_FullMethodName, in, opts)
	if err != nil {
		return nil, err
	}
	return &out.GetDataResponse, nil
}

func (a *leanAPI) Exists(ctx context.Context, in *pb.ReadRequest, opts ...grpc.CallOption) (*pb.ExistsResponse, error) {
	return leanCall[pb.ExistsResponse](a, ctx, pb.Meridian_Exists_FullMethodName, in, opts)
}

func (a *leanAPI) GetChildren(ctx context.Context, in *pb.ReadRequest, opts ...grpc.CallOption) (*pb.GetChildrenResponse, error) {
	return leanCall[pb.GetChildrenResponse](a, ctx, pb.Meridian_GetChildren_FullMethodName, in, opts)
}
