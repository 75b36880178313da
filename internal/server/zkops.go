package server

// The ZooKeeper listener's opcode dispatch: serve answers one decoded
// request in turn, pipeline starts a write whose commit may overlap the
// connection's earlier writes, multi and multiRead serve the batched ops,
// and reply queues every answer in request order (or, for connection loss,
// closes the connection instead). The connection it runs on, its queues
// and their backpressure are zkconn.go's.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
	"github.com/meridian-coord/meridian/internal/watch"
	zk "github.com/meridian-coord/meridian/internal/zkproto"
)

func toZKStat(st tree.Stat) zk.Stat {
	return zk.Stat{Czxid: st.Czxid, Mzxid: st.Mzxid, Ctime: st.Ctime, Mtime: st.Mtime, Version: st.Version,
		Cversion: st.Cversion, Aversion: st.Aversion, EphemeralOwner: st.EphemeralOwner, DataLength: st.DataLength,
		NumChildren: st.NumChildren, Pzxid: st.Pzxid}
}

func fromZKACL(in []zk.ACL) []tree.ACL {
	out := make([]tree.ACL, len(in))
	for i, a := range in {
		out[i] = tree.ACL{Perms: a.Perms, ID: tree.ID{Scheme: a.ID.Scheme, ID: a.ID.ID}}
	}
	return out
}

func toZKACL(in []tree.ACL) []zk.ACL {
	out := make([]zk.ACL, len(in))
	for i, a := range in {
		out[i] = zk.ACL{Perms: a.Perms, ID: zk.Id{Scheme: a.ID.Scheme, ID: a.ID.ID}}
	}
	return out
}

// reply queues the reply to request hdr and counts the request (see
// count). Called by one goroutine at a time, in request order: the reader,
// or the pipelined write whose turn it is. A request that failed with
// connection loss gets no reply: see loseConnection.
func (c *zkConn) reply(hdr zk.RequestHeader, zxid int64, err error, body zk.Record) {
	c.replyCounting(hdr, zxid, err, body, err)
}

// replyCounting is reply with the outcome counted apart from the header's
// error: a multi that failed is answered with header error 0 and counted
// with its failure, as the native API counts its Multi.
func (c *zkConn) replyCounting(hdr zk.RequestHeader, zxid int64, err error, body zk.Record, outcome error) {
	if errs.ZKConnectionLoss(err) {
		c.loseConnection(hdr, err)
		return
	}
	c.count(hdr.Type, outcome)
	// A reply never carries a zxid below one this connection was given:
	// ZooKeeper's clients take the last reply's zxid as the last seen (on
	// reconnection they ask not to go back before it), and with keyspaces
	// a read of one group may be answered at a zxid below a write's in
	// another.
	c.lastZxid = max(c.lastZxid, zxid)
	zxid = c.lastZxid
	c.seen.Store(zxid)
	code := errs.ZKCode(err)
	if code != 0 {
		body = nil
	}
	c.enqueue(zk.EncodeReply(zk.ReplyHeader{Xid: hdr.Xid, Zxid: zxid, Err: code}, body))
}

// count adds a request to meridian_requests_total as the native API counts
// its calls: method "zk:" and the opcode's name, code the outcome's label
// (codeLabel, the native API's).
func (c *zkConn) count(op int32, outcome error) {
	c.s.metrics.countZK(op, codeLabel(outcome))
}

// finish records that a request with opcode op, read at start, has had
// its reply queued (or its connection closed instead): the one place the
// ZooKeeper port's latency is observed, for the four-letter words and for
// meridian_request_duration_seconds alike.
func (c *zkConn) finish(op int32, start time.Time) {
	d := time.Since(start)
	c.l.stats.outstanding.Add(-1)
	c.l.stats.observe(d)
	c.s.metrics.observeZK(op, d)
}

// requestOpcode is the opcode of request pkt (xid, then type), read as
// zk.DecodeRequest reads it: a packet too short to carry one is a
// notification, which zkMethod labels unknown.
func requestOpcode(pkt []byte) int32 {
	if len(pkt) < 8 {
		return zk.OpNotification
	}
	return int32(binary.BigEndian.Uint32(pkt[4:8]))
}

// zkMethod is the method label of opcode op; opcodes ZooKeeper does not
// define, and those a client never sends (a header too short to carry
// one reads as notification), share one label, so a client cannot add
// series at will.
func zkMethod(op int32) string {
	name := zk.OpName(op)
	if op == zk.OpNotification || op == zk.OpError || strings.HasPrefix(name, "op(") {
		return "zk:unknown"
	}
	return "zk:" + name
}

// loseConnection answers request hdr, which failed with err (one of
// errs.ZKConnectionLoss: this server cannot serve it now, or cannot tell
// whether it took effect), by closing the connection, as ZooKeeper does:
// it never sends connection loss or operation timeout in a reply. Replies
// are queued in request order and the writer flushes the queue before it
// closes the socket, so every earlier request's reply still reaches the
// client; this request and every later one get none (a later pipelined
// write may still apply: the client, which sees all of them as connection
// loss, decides what to retry). The session is not closed: the client
// reconnects with its id and password within its timeout and goes on.
// Each such request is counted with code "connection_closed".
func (c *zkConn) loseConnection(hdr zk.RequestHeader, err error) {
	c.s.metrics.countZK(hdr.Type, "connection_closed")
	if !c.closeAs("cannot answer: "+err.Error(), true) {
		return // already closed: this reply would not have been sent either
	}
	c.s.log.Info("zk: closing connection instead of replying (connection loss)", "remote", c.c.RemoteAddr().String(),
		"session", fmt.Sprintf("0x%x", c.session), "xid", hdr.Xid, "err", err)
}

// pipeline starts pkt if it is a write whose commit may overlap those of
// the connection's earlier writes (create, delete, setData, setACL, multi), as
// ZooKeeper's commit pipeline overlaps them: a client that sends writes
// without waiting (an async API, Curator's background calls, the
// asynchronous lock strategies of "The Cost of Consensus: Synchronization
// in Geo-distributed Systems", Faisal Nawab and Alexander Pucher) pays one
// commit latency for the batch instead of one per write. Order is kept: writes are handed to raft in request
// order, which is the order raft logs them (a follower forwards them to the
// leader in that order), and replies are queued in request order, each
// after its predecessor's. A write whose outcome is unknown (the leader
// changed under it) closes the connection at its turn (see
// loseConnection) while later ones may still apply, as with ZooKeeper.
// False: serve it in turn.
func (c *zkConn) pipeline(pkt []byte, start time.Time) bool {
	if c.readOnly {
		return false
	}
	hdr, req, err := zk.DecodeRequest(pkt)
	if err != nil {
		return false
	}
	var w writeRequest
	// respond answers with the applied result (err: the proposal's error or
	// the result's).
	var respond func(res tree.Result, idx uint64, err error)
	switch r := req.(type) {
	case *zk.MultiRequest:
		if hdr.Type != zk.OpMulti {
			return false // multiRead
		}
		ops, ok := multiOps(r)
		if !ok {
			return false // served in turn, which refuses it
		}
		w.op, w.ops = tree.Op{Type: tree.OpMulti}, ops
		respond = func(res tree.Result, idx uint64, err error) {
			c.multiReply(hdr, r, res, int64(idx), err)
		}
	default:
		op, ok := zkWriteOp(hdr.Type, req)
		if !ok || hdr.Type == zk.OpDeleteContainer {
			return false // not a write, or one served in turn
		}
		w.op = op
		respond = func(res tree.Result, idx uint64, err error) {
			c.reply(hdr, int64(idx), err, zkWriteResponse(hdr.Type, res))
		}
	}
	w.session, w.auth = c.session, c.auth
	g, err := (*treeProposal)(w.command()).route(c.s)
	if err != nil {
		return false // served in turn, which refuses it
	}
	if g != c.pipeGroup && !c.drain() {
		// The session's writes take effect in the order sent: raft keeps
		// that order within a group, not across groups, so a write to
		// another group waits until those in flight are answered (and
		// its zxid then exceeds theirs: seen).
		return true // closing: the next read fails
	}
	c.pipeGroup = g
	if !c.l.reservePipelined(len(pkt)) {
		return false
	}
	select {
	case c.slots <- struct{}{}:
	case <-c.done:
		c.l.pipelinedBytes.Add(-int64(len(pkt)))
		return true // closing: the next read fails
	}
	c.s.touch(c.session)
	w.seen = c.seen.Load()
	f := c.s.submitWrite(withView(context.Background(), c.view), &w) // bounded by the request timeout
	prev, sent := c.tail, make(chan struct{})
	c.tail = sent
	c.s.wg.Add(1) // the reader holds the group, so this cannot race Close's Wait
	go func() {
		defer c.s.wg.Done()
		a, err := f.WaitOnce()
		<-prev
		if err == nil && a.refused() {
			// Routed before this member knew of a keyspace, or encoded
			// before it saw the cluster version rise: again, now that the
			// writes before it are answered (their order is kept).
			a, err = f.retry().Wait()
		}
		res, idx, err := writeOutcome(a, err)
		respond(res, idx, err)
		close(sent)
		<-c.slots
		c.l.pipelinedBytes.Add(-int64(len(pkt)))
		c.finish(hdr.Type, start)
	}()
	return true
}

// drain waits until every pipelined write has queued its reply; false when
// the connection closed meanwhile.
func (c *zkConn) drain() bool {
	select {
	case <-c.tail:
		return true
	case <-c.done:
		return false
	}
}

// zkWatchSetHook, when set (tests only), runs after a read has set a watch
// and before its reply is sent.
var zkWatchSetHook atomic.Pointer[func(path string)]

// serve handles one request; false closes the connection.
func (c *zkConn) serve(pkt []byte) bool {
	hdr, req, derr := zk.DecodeRequest(pkt)
	if derr != nil && !errors.Is(derr, zk.ErrUnknownOpcode) {
		return c.malformed(hdr.Type, derr)
	}
	if !c.readOnly {
		c.s.touch(c.session)
	}
	ctx, cancel := context.WithTimeout(withView(context.Background(), c.view), c.s.cfg.requestTimeout())
	defer cancel()
	reply := func(zxid int64, err error, body zk.Record) { c.reply(hdr, zxid, err, body) }
	if errors.Is(derr, zk.ErrUnknownOpcode) {
		// Unknown or unsupported opcodes get ZUNIMPLEMENTED; the connection stays.
		reply(0, errs.ErrUnimplemented, nil)
		return true
	}
	if c.serveReservedRead(hdr, req, reply) {
		return true
	}
	applied := func() int64 { return c.s.lastZxid() }
	write := func(w *writeRequest) (tree.Result, int64, error) {
		w.session, w.auth, w.readOnly, w.seen = c.session, c.auth, c.readOnly, c.seen.Load()
		res, idx, err := c.s.write(ctx, w)
		return res, int64(idx), err
	}
	// read serves a read through the request core with this connection's
	// identities, the connection as the watcher; respond, when set, replies
	// under the tree's read lock (see Server.read).
	read := func(r readRequest, respond func(res readResult, zxid int64, err error)) (readResult, error) {
		r.auth, r.watcher = c.auth, c
		// Never older than what this connection has seen, in the read's
		// group or, through what it saw, in any other (write then flag
		// across keyspaces): the view (view.go). A read-only session
		// (no view) reads what its member has.
		r.view = c.view
		res, _, err := c.s.read(ctx, &r, respond)
		return res, err
	}
	if op, ok := zkWriteOp(hdr.Type, req); ok {
		res, idx, err := write(&writeRequest{op: op})
		reply(idx, err, zkWriteResponse(hdr.Type, res))
		return true
	}

	switch r := req.(type) {
	case *zk.ExistsRequest:
		read(readRequest{path: r.Path, kind: readExists, watch: r.Watch},
			func(res readResult, zxid int64, err error) {
				reply(zxid, err, &zk.ExistsResponse{Stat: toZKStat(res.stat)})
			})
	case *zk.GetDataRequest:
		read(readRequest{path: r.Path, kind: readData, watch: r.Watch},
			func(res readResult, zxid int64, err error) {
				reply(zxid, err, &zk.GetDataResponse{Data: res.data, Stat: toZKStat(res.stat)})
			})
	case *zk.GetChildrenRequest, *zk.GetChildren2Request:
		path, w := "", false
		if g, ok := r.(*zk.GetChildrenRequest); ok {
			path, w = g.Path, g.Watch
		} else {
			g := r.(*zk.GetChildren2Request)
			path, w = g.Path, g.Watch
		}
		read(readRequest{path: path, kind: readChildren, watch: w},
			func(res readResult, zxid int64, err error) {
				kids, st := res.children, res.stat
				if err == nil {
					kids = syntheticChildren(path, kids, &st)
				}
				if hdr.Type == zk.OpGetChildren2 {
					reply(zxid, err, &zk.GetChildren2Response{Children: kids, Stat: toZKStat(st)})
				} else {
					reply(zxid, err, &zk.GetChildrenResponse{Children: kids})
				}
			})
	case *zk.GetACLRequest:
		res, err := read(readRequest{path: r.Path, kind: readACL}, nil)
		reply(applied(), err, &zk.GetACLResponse{ACL: toZKACL(res.acl), Stat: toZKStat(res.stat)})
	case *zk.SyncRequest:
		var err error = errs.ErrNotReadOnly
		if !c.readOnly {
			err = c.s.readBarrier(ctx, c.s.groupFor(syncPath(r.Path)), true, 0)
		}
		reply(applied(), err, &zk.SyncResponse{Path: r.Path})
	case *zk.CheckVersionRequest:
		res, err := read(readRequest{path: r.Path, kind: readCheckVersion, version: r.Version}, nil)
		reply(applied(), err, &zk.SetDataResponse{Stat: toZKStat(res.stat)})
	case *zk.MultiRequest:
		if hdr.Type == zk.OpMultiRead {
			reply(applied(), nil, c.multiRead(ctx, r))
			return true
		}
		c.multi(hdr, r, write)
	case *zk.SetWatches:
		c.setWatches(hdr.Type, r.RelativeZxid, r.DataWatches, r.ExistWatches, r.ChildWatches, nil, nil)
	case *zk.SetWatches2:
		c.setWatches(hdr.Type, r.RelativeZxid, r.DataWatches, r.ExistWatches, r.ChildWatches, r.PersistentWatches, r.PersistentRecursiveWatches)
	case *zk.AddWatchRequest:
		k := watch.KindPersistent
		if r.Mode == zk.AddWatchModePersistentRecursive {
			k = watch.KindPersistentRecursive
		}
		err := tree.ValidatePath(r.Path, false)
		if err == nil {
			err = c.s.watches.Add(c, r.Path, k)
		}
		reply(applied(), err, &zk.ErrorResponse{Err: 0})
	case *zk.RemoveWatchesRequest:
		reply(applied(), c.s.watches.Remove(c, r.Path, watch.KindFromWatcherType(r.Type)), nil)
	case *zk.CheckWatchesRequest:
		var err error
		if !c.s.watches.Has(c, r.Path, watch.KindFromWatcherType(r.Type)) {
			err = errs.ErrNoWatcher
		}
		reply(applied(), err, nil)
	case *zk.AuthPacket:
		return c.addAuth(hdr, r)
	case *zk.SetSASLRequest:
		return c.saslStep(hdr, r, reply)
	case *zk.GetEphemeralsRequest:
		all, unlock := c.s.wholeTree()
		paths := all.ephemerals(c.session, r.PrefixPath)
		unlock()
		reply(applied(), nil, &zk.GetEphemeralsResponse{Ephemerals: paths})
	case *zk.GetAllChildrenNumberRequest:
		res, err := read(readRequest{path: r.Path, kind: readChildCount}, nil)
		reply(applied(), err, &zk.GetAllChildrenNumberResponse{TotalNumber: int32(res.count)})
	case *zk.ReconfigRequest:
		if c.readOnly {
			reply(0, errs.ErrNotReadOnly, nil)
			break
		}
		data, stat, err := c.s.zkReconfig(ctx, c.auth, r)
		reply(applied(), err, &zk.GetDataResponse{Data: data, Stat: stat})
	default:
		switch hdr.Type {
		case zk.OpPing:
			c.count(hdr.Type, nil)
			c.enqueue(zk.EncodeReply(zk.ReplyHeader{Xid: zk.XidPing, Zxid: c.lastZxid}, nil))
		case zk.OpCloseSession:
			c.closing.Store(true)
			if c.readOnly { // a local session ends with its connection
				reply(0, nil, nil)
				c.close("session closed by client")
				return false
			}
			idx, err := c.s.closeSession(ctx, c.session, c.auth)
			reply(int64(idx), err, nil)
			c.close("session closed by client")
			return false
		case zk.OpWhoAmI:
			var infos []zk.ClientInfo
			for _, id := range c.auth {
				infos = append(infos, zk.ClientInfo{AuthScheme: id.Scheme, User: id.ID})
			}
			reply(applied(), nil, &zk.WhoAmIResponse{ClientInfo: infos})
		default:
			// sasl and anything else decoded but not served.
			reply(0, errs.ErrUnimplemented, nil)
		}
	}
	return true
}

// multiReadPath is the path a multiRead op reads ("" for any other op).
func multiReadPath(o zk.MultiOp) string {
	switch op := o.Op.(type) {
	case *zk.GetDataRequest:
		return op.Path
	case *zk.GetChildrenRequest:
		return op.Path
	}
	return ""
}

// multiRead answers each getData/getChildren op on its own (no atomicity, as
// in ZooKeeper), all from one consistent view of the tree.
func (c *zkConn) multiRead(ctx context.Context, r *zk.MultiRequest) *zk.MultiResponse {
	out := &zk.MultiResponse{}
	// Every group read first as fresh as this connection's view requires,
	// then recorded in it as seen.
	var groups []*group
	if c.view != nil {
		for _, o := range r.Ops {
			path := multiReadPath(o)
			if tree.ValidatePath(path, false) != nil {
				continue
			}
			g := c.s.groupFor(path)
			if slices.Contains(groups, g) {
				continue
			}
			if err := c.s.viewBarrier(ctx, g, false, c.view); err != nil {
				for range r.Ops {
					out.Results = append(out.Results, zk.OpResult{Type: zk.OpError, Err: errs.ZKCode(err)})
				}
				return out
			}
			groups = append(groups, g)
		}
		defer func() {
			for _, g := range groups {
				g.fsm.RLock()
				c.view.observe(g.id, g.fsm.Applied())
				g.fsm.RUnlock()
			}
		}()
	}
	all, unlock := c.s.wholeTree()
	defer unlock()
	for _, o := range r.Ops {
		rr := readRequest{path: multiReadPath(o), kind: readData, auth: c.auth}
		if o.Type != zk.OpGetData {
			rr.kind = readChildren
		}
		err := rr.validate()
		var rres readResult
		if err == nil {
			rres, err = readLocked(all.treeFor(rr.path), &rr)
		}
		var res zk.OpResult
		switch {
		case err != nil:
		case rr.kind == readData:
			res = zk.OpResult{Type: zk.OpGetData, Data: rres.data, Stat: toZKStat(rres.stat)}
		default:
			res = zk.OpResult{Type: zk.OpGetChildren, Children: rres.children}
		}
		if err != nil {
			res = zk.OpResult{Type: zk.OpError, Err: errs.ZKCode(err)}
		}
		out.Results = append(out.Results, res)
	}
	return out
}

// setWatches serves setWatches and setWatches2 (op): the client re-arms
// its watches on a new connection, each fired at once if it missed a change
// since rel.
func (c *zkConn) setWatches(op int32, rel int64, data, exist, child, pers, rec []string) {
	all, unlock := c.s.wholeTree()
	err := c.s.watches.SetWatches(c, rel, all, data, exist, child, pers, rec)
	unlock()
	if errs.ZKConnectionLoss(err) {
		c.loseConnection(zk.RequestHeader{Xid: zk.XidSetWatches, Type: op}, err)
		return
	}
	c.count(op, err)
	c.enqueue(zk.EncodeReply(zk.ReplyHeader{Xid: zk.XidSetWatches, Zxid: max(c.lastZxid, c.s.lastZxid()), Err: errs.ZKCode(err)}, nil))
}

// multi serves a multi: all ops in one command; on failure ZooKeeper's
// error results (0 before the failing op, its code, -2 after) with a reply
// header error of 0.
func (c *zkConn) multi(hdr zk.RequestHeader, r *zk.MultiRequest, write func(*writeRequest) (tree.Result, int64, error)) {
	ops, ok := multiOps(r)
	if !ok {
		c.reply(hdr, 0, errs.ErrBadArguments, nil)
		return
	}
	res, idx, err := write(&writeRequest{op: tree.Op{Type: tree.OpMulti}, ops: ops})
	c.multiReply(hdr, r, res, idx, err)
}

// multiOps are the tree operations of a multi's ops; false if one is not a
// write a multi may hold.
func multiOps(r *zk.MultiRequest) ([]tree.Op, bool) {
	var ops []tree.Op
	for _, o := range r.Ops {
		switch op := o.Op.(type) {
		case *zk.CheckVersionRequest:
			ops = append(ops, tree.Op{Type: tree.OpCheck, Path: op.Path, Version: op.Version})
		case *zk.SetACLRequest, *zk.DeleteContainerRequest:
			return nil, false // not ops of a multi
		default:
			w, ok := zkWriteOp(o.Type, o.Op)
			if !ok {
				return nil, false
			}
			ops = append(ops, w)
		}
	}
	return ops, true
}

// multiReply answers a multi with its applied result: err is the proposal's
// error, or the result's own.
func (c *zkConn) multiReply(hdr zk.RequestHeader, r *zk.MultiRequest, res tree.Result, idx int64, err error) {
	if err != nil && len(res.Multi) == 0 {
		c.reply(hdr, idx, err, nil)
		return
	}
	if res.Err != nil {
		failed := 0
		for i, o := range res.Multi {
			if o.Err != nil && !errors.Is(o.Err, errs.ErrRuntimeInconsistency) {
				failed = i
				break
			}
		}
		c.replyCounting(hdr, idx, nil, zk.MultiFailure(len(res.Multi), failed, errs.ZKCode(res.Err)), res.Err)
		return
	}
	out := &zk.MultiResponse{}
	for i, o := range res.Multi {
		switch r.Ops[i].Type {
		case zk.OpCreate:
			out.Results = append(out.Results, zk.OpResult{Type: zk.OpCreate, Path: o.Path})
		case zk.OpCreate2, zk.OpCreateContainer, zk.OpCreateTTL:
			out.Results = append(out.Results, zk.OpResult{Type: zk.OpCreate2, Path: o.Path, Stat: toZKStat(o.Stat)})
		case zk.OpSetData:
			out.Results = append(out.Results, zk.OpResult{Type: zk.OpSetData, Stat: toZKStat(o.Stat)})
		case zk.OpDelete:
			out.Results = append(out.Results, zk.OpResult{Type: zk.OpDelete})
		case zk.OpCheck:
			out.Results = append(out.Results, zk.OpResult{Type: zk.OpCheck})
		}
	}
	c.reply(hdr, idx, nil, out)
}

// malformed closes the connection of a request it cannot decode (counted
// as the native API counts a malformed call).
func (c *zkConn) malformed(op int32, err error) bool {
	c.count(op, errs.ErrMarshalling)
	c.closeWhy = fmt.Sprintf("malformed request (%s): %v", zk.OpName(op), err)
	c.s.log.Warn("zk: closing connection", "remote", c.c.RemoteAddr().String(), "why", c.closeWhy)
	return false
}

// zkWriteOp is the one translation of a ZooKeeper write into a tree
// operation, for pipeline, serve and multi alike: op is the opcode of the
// request (or of the multi's op), req its decoded record. False: not a
// write (check, outside a multi, is served as a read).
func zkWriteOp(op int32, req any) (tree.Op, bool) {
	create := func(path string, data []byte, acl []zk.ACL, flags int32, ttl int64) tree.Op {
		if op == zk.OpCreateContainer {
			flags = int32(tree.ModeContainer)
		}
		return tree.Op{Type: tree.OpCreate, Path: path, Data: data, ACL: fromZKACL(acl), Mode: tree.CreateMode(flags), TTLMs: ttl}
	}
	switch r := req.(type) {
	case *zk.CreateRequest:
		return create(r.Path, r.Data, r.ACL, r.Flags, 0), true
	case *zk.CreateTTLRequest:
		return create(r.Path, r.Data, r.ACL, r.Flags, r.TTL), true
	case *zk.DeleteRequest:
		return tree.Op{Type: tree.OpDelete, Path: r.Path, Version: r.Version}, true
	case *zk.DeleteContainerRequest:
		return tree.Op{Type: tree.OpDelete, Path: r.Path, Version: -1}, true
	case *zk.SetDataRequest:
		return tree.Op{Type: tree.OpSetData, Path: r.Path, Data: r.Data, Version: r.Version}, true
	case *zk.SetACLRequest:
		return tree.Op{Type: tree.OpSetACL, Path: r.Path, ACL: fromZKACL(r.ACL), Version: r.Version}, true
	}
	return tree.Op{}, false
}

// zkWriteResponse is the body of the reply to a write (not a multi) of
// opcode op with its applied result.
func zkWriteResponse(op int32, res tree.Result) zk.Record {
	switch op {
	case zk.OpCreate:
		return &zk.CreateResponse{Path: res.Op.Path}
	case zk.OpCreate2, zk.OpCreateContainer, zk.OpCreateTTL:
		return &zk.Create2Response{Path: res.Op.Path, Stat: toZKStat(res.Op.Stat)}
	case zk.OpSetData:
		return &zk.SetDataResponse{Stat: toZKStat(res.Op.Stat)}
	case zk.OpSetACL:
		return &zk.SetACLResponse{Stat: toZKStat(res.Op.Stat)}
	}
	return nil // delete, deleteContainer
}
