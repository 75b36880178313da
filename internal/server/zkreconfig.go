package server

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/replica"
	"github.com/meridian-coord/meridian/internal/tree"
	zk "github.com/meridian-coord/meridian/internal/zkproto"
)

// ZooKeeper's reconfig (opcode 16) over Meridian's runtime membership:
// "server.ID=host:quorumPort:electionPort[:participant|observer][;[host:]clientPort]"
// lines name members (the quorum port is Meridian's peer port, the
// election port its gRPC port, as in zoo.cfg), observers are raft
// learners, and the configuration version is the log index of the last
// membership change.

// maxReconfigBytes bounds the joining/leaving/new-members strings.
const maxReconfigBytes = 64 << 10

// zkConfig renders the membership as ZooKeeper's dynamic configuration
// (the data of /zookeeper/config and reconfig's answer) with its version.
func (s *Server) zkConfig() (string, uint64) {
	peers, idx := s.rep.Configuration()
	var b strings.Builder
	for _, p := range peers {
		m := fromPeer(p)
		host, pport, err := net.SplitHostPort(m.Peer)
		if err != nil {
			host, pport = m.Peer, "0"
		}
		eport := pport
		if _, gp, err := net.SplitHostPort(m.GRPC); err == nil {
			eport = gp
		}
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		role := "participant"
		if p.Learner {
			role = "observer"
		}
		fmt.Fprintf(&b, "server.%d=%s:%s:%s:%s", m.ID, host, pport, eport, role)
		if m.ZK != "" {
			b.WriteString(";" + m.ZK)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "version=%x", idx)
	return b.String(), idx
}

// zkConfigPath is ZooKeeper's dynamic-configuration node: Meridian serves
// it from the membership (it is not in the tree), with a data watch that
// fires when the configuration changes.
const zkConfigPath = "/zookeeper/config"

// onConfigChange (raft loop) tells /zookeeper/config's watchers that the
// configuration changed, with the change's index as the zxid.
func (s *Server) onConfigChange(index uint64) {
	s.watches.Trigger(tree.Event{Type: tree.EventNodeDataChanged, Path: zkConfigPath, Zxid: int64(index)})
}

// zkConfigNode is /zookeeper/config's data and stat: mzxid is the
// configuration's index (its version in the data), the version counts
// nothing (0), the ACL is world-readable.
func (s *Server) zkConfigNode() ([]byte, tree.Stat) {
	text, idx := s.zkConfig()
	return []byte(text), tree.Stat{Mzxid: int64(idx), Czxid: 0, DataLength: int32(len(text))}
}

// parseZKServers parses comma- or newline-separated server lines.
func parseZKServers(list string) ([]Member, error) {
	var out []Member
	for _, item := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == '\n' }) {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		id, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(k), "server."), 10, 64)
		if !ok || !strings.HasPrefix(strings.TrimSpace(k), "server.") || err != nil || id == 0 {
			return nil, fmt.Errorf("%w: %q is not server.ID=host:port:port[:role][;[host:]port]", errs.ErrBadArguments, item)
		}
		m, err := parseServerLine(id, v)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", errs.ErrBadArguments, item, err)
		}
		// Keep the client address as given (parseServerLine maps a wildcard
		// host to loopback for dialing; reconfig echoes what it was told).
		if _, client, ok := strings.Cut(v, ";"); ok {
			client = strings.TrimSpace(client)
			if !strings.Contains(client, ":") {
				client = "0.0.0.0:" + client
			}
			m.ZK = client
		}
		out = append(out, m)
	}
	return out, nil
}

func parseZKIDs(list string) ([]uint64, error) {
	var out []uint64
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		id, err := strconv.ParseUint(f, 10, 64)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("%w: leaving server id %q", errs.ErrBadArguments, f)
		}
		out = append(out, id)
	}
	return out, nil
}

// zkReconfig runs a reconfig request in ZooKeeper's order of checks:
// version, arguments, then permission (super user only), then the change.
func (s *Server) zkReconfig(ctx context.Context, auth []tree.ID, r *zk.ReconfigRequest) ([]byte, zk.Stat, error) {
	if len(r.JoiningServers)+len(r.LeavingServers)+len(r.NewMembers) > maxReconfigBytes {
		return nil, zk.Stat{}, errs.ErrRequestTooLarge
	}
	_, version := s.zkConfig()
	if r.CurConfigID != -1 && uint64(r.CurConfigID) != version {
		return nil, zk.Stat{}, errs.ErrBadVersion
	}
	cur := s.members()
	var changes []replica.MemberChange
	add := func(m Member) {
		t := replica.AddVoter
		if m.Role == "learner" {
			t = replica.AddLearner
		}
		for _, c := range cur {
			if c.ID == m.ID && c.Role == m.Role && c.Peer == m.Peer {
				return // already so: nothing to change
			}
		}
		changes = append(changes, replica.MemberChange{Type: t, Peer: toPeer(m)})
	}
	if r.NewMembers != "" {
		if r.JoiningServers != "" || r.LeavingServers != "" {
			return nil, zk.Stat{}, fmt.Errorf("%w: new members with joining or leaving", errs.ErrBadArguments)
		}
		ms, err := parseZKServers(r.NewMembers)
		if err != nil {
			return nil, zk.Stat{}, err
		}
		keep := map[uint64]bool{}
		for _, m := range ms {
			keep[m.ID] = true
			add(m)
		}
		for _, c := range cur {
			if !keep[c.ID] {
				changes = append(changes, replica.MemberChange{Type: replica.Remove, Peer: replica.Peer{ID: c.ID}})
			}
		}
	} else {
		ms, err := parseZKServers(r.JoiningServers)
		if err != nil {
			return nil, zk.Stat{}, err
		}
		ids, err := parseZKIDs(r.LeavingServers)
		if err != nil {
			return nil, zk.Stat{}, err
		}
		for _, m := range ms {
			add(m)
		}
		for _, id := range ids {
			changes = append(changes, replica.MemberChange{Type: replica.Remove, Peer: replica.Peer{ID: id}})
		}
	}
	super := false
	for _, id := range auth {
		super = super || id.Scheme == "super"
	}
	if !super {
		return nil, zk.Stat{}, errs.ErrNoAuth
	}
	if len(changes) > 0 {
		if err := s.changeMembers(ctx, changes); err != nil {
			return nil, zk.Stat{}, err
		}
	}
	text, idx := s.zkConfig()
	return []byte(text), zk.Stat{Czxid: int64(idx), Mzxid: int64(idx), Pzxid: int64(idx), DataLength: int32(len(text))}, nil
}
