package server

// The ZooKeeper listener's synthetic views, answered from this member's
// state rather than from the tree: /meridian (the lock table, read-only,
// no watches) and /zookeeper/config (the membership, as ZooKeeper's
// getConfig reads it). serve sends reads of those paths here; the
// children of / and /zookeeper list them.

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
	"github.com/meridian-coord/meridian/internal/watch"
	zk "github.com/meridian-coord/meridian/internal/zkproto"
)

// serveReservedRead answers reads under /meridian from the lock table:
// /meridian/locks lists locks (names path-escaped), each node's data is its
// holders and waiters as JSON. These nodes are read-only and carry no watches.
func (c *zkConn) serveReservedRead(hdr zk.RequestHeader, req any, reply func(int64, error, zk.Record)) bool {
	var path string
	switch r := req.(type) {
	case *zk.ExistsRequest:
		path = r.Path
	case *zk.GetDataRequest:
		path = r.Path
	case *zk.GetChildrenRequest:
		path = r.Path
	case *zk.GetChildren2Request:
		path = r.Path
	case *zk.GetACLRequest:
		path = r.Path
	default:
		return false
	}
	if path == zkConfigPath {
		c.serveConfigRead(hdr, req, reply)
		return true
	}
	if !tree.Reserved(path) {
		return false
	}
	kids, data, err := c.s.lockView(path)
	st := toZKStat(tree.Stat{DataLength: int32(len(data)), NumChildren: int32(len(kids))})
	if data == nil {
		data = []byte{}
	}
	var body zk.Record
	switch hdr.Type {
	case zk.OpExists:
		body = &zk.ExistsResponse{Stat: st}
	case zk.OpGetData:
		body = &zk.GetDataResponse{Data: data, Stat: st}
	case zk.OpGetChildren:
		body = &zk.GetChildrenResponse{Children: kids}
	case zk.OpGetChildren2:
		body = &zk.GetChildren2Response{Children: kids, Stat: st}
	case zk.OpGetACL:
		body = &zk.GetACLResponse{ACL: []zk.ACL{{Perms: tree.PermRead, ID: zk.Id{Scheme: "world", ID: "anyone"}}}, Stat: st}
	}
	reply(c.s.lastZxid(), err, body)
	return true
}

// serveConfigRead answers reads of /zookeeper/config (what ZooKeeper's
// getConfig sends: getData on that path) from the membership; exists and
// getData may leave a data watch, fired by the next membership change.
func (c *zkConn) serveConfigRead(hdr zk.RequestHeader, req any, reply func(int64, error, zk.Record)) {
	// The watch goes in before the configuration is read: a change in
	// between then fires it (the reply may already show the change), and
	// none can fall between the read and the registration unseen.
	watchIt := false
	switch r := req.(type) {
	case *zk.ExistsRequest:
		watchIt = r.Watch
	case *zk.GetDataRequest:
		watchIt = r.Watch
	}
	if watchIt {
		if err := c.s.watches.Add(c, zkConfigPath, watch.KindData); err != nil {
			reply(c.s.lastZxid(), err, nil)
			return
		}
	}
	data, st := c.s.zkConfigNode()
	var body zk.Record
	switch req.(type) {
	case *zk.ExistsRequest:
		body = &zk.ExistsResponse{Stat: toZKStat(st)}
	case *zk.GetDataRequest:
		body = &zk.GetDataResponse{Data: data, Stat: toZKStat(st)}
	case *zk.GetChildrenRequest:
		body = &zk.GetChildrenResponse{Children: []string{}}
	case *zk.GetChildren2Request:
		body = &zk.GetChildren2Response{Children: []string{}, Stat: toZKStat(st)}
	case *zk.GetACLRequest:
		body = &zk.GetACLResponse{ACL: []zk.ACL{{Perms: tree.PermRead, ID: zk.Id{Scheme: "world", ID: "anyone"}}}, Stat: toZKStat(st)}
	}
	reply(c.s.lastZxid(), nil, body)
}

// lockView renders the reserved subtree.
func (s *Server) lockView(path string) (children []string, data []byte, err error) {
	const locksDir = tree.ReservedRoot + "/locks"
	all, unlock := s.wholeTree()
	defer unlock()
	switch {
	case path == tree.ReservedRoot:
		return []string{"locks"}, nil, nil
	case path == locksDir:
		for _, l := range all.locks("", 10000) {
			children = append(children, url.PathEscape(l.Name))
		}
		return children, nil, nil
	case strings.HasPrefix(path, locksDir+"/"):
		name, uerr := url.PathUnescape(path[len(locksDir)+1:])
		if uerr != nil {
			return nil, nil, errs.ErrNoNode
		}
		info, ok := all.lock(name)
		if !ok {
			return nil, nil, errs.ErrNoNode
		}
		type holder struct {
			Session string `json:"session"`
			Token   uint64 `json:"token"`
			Shared  bool   `json:"shared,omitempty"`
		}
		view := struct {
			Name         string   `json:"name"`
			Permits      int32    `json:"permits"`
			Holders      []holder `json:"holders"`
			Waiters      []string `json:"waiters"`
			DelayUntilMs int64    `json:"delay_until_ms,omitempty"`
		}{Name: info.Name, Permits: info.Permits, Holders: []holder{}, Waiters: []string{}, DelayUntilMs: info.DelayUntilMs}
		for _, h := range info.Holders {
			view.Holders = append(view.Holders, holder{Session: fmt.Sprintf("0x%x", h.Session), Token: h.Token, Shared: h.Mode == coord.Shared})
		}
		for _, w := range info.Waiters {
			view.Waiters = append(view.Waiters, fmt.Sprintf("0x%x", w.Session))
		}
		data, _ = json.Marshal(view)
		return nil, data, nil
	}
	return nil, nil, errs.ErrNoNode
}

// syntheticChildren adds the synthetic views to a listing of their parent
// that succeeded: meridian under /, config under /zookeeper.
func syntheticChildren(path string, kids []string, st *tree.Stat) []string {
	switch path {
	case "/":
		// The read-only view of Meridian's own state hangs off the root.
		kids = append(kids, tree.ReservedRoot[1:])
		st.NumChildren++
	case "/zookeeper":
		kids = append(kids, zkConfigPath[len("/zookeeper/"):])
		st.NumChildren++
	}
	return kids
}
