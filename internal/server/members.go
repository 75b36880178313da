package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/replica"
)

// Runtime membership: the member list is the replica's address book, which
// raft replicates with its configuration; each record's Meta holds what the
// server needs beyond the peer address (memberMeta). The configuration file
// seeds it at bootstrap and is not consulted afterwards.

// memberMeta is a member's replica.Peer.Meta.
type memberMeta struct {
	Region string `json:"region,omitempty"`
	Zone   string `json:"zone,omitempty"`
	GRPC   string `json:"grpc,omitempty"`
	ZK     string `json:"zk,omitempty"`
	HTTP   string `json:"http,omitempty"`
}

func toPeer(m Member) replica.Peer {
	meta, _ := json.Marshal(memberMeta{Region: m.Region, Zone: m.Zone, GRPC: m.GRPC, ZK: m.ZK, HTTP: m.HTTP})
	return replica.Peer{ID: m.ID, Addr: m.Peer, Learner: m.Role == "learner", Meta: meta, Identity: m.Identity}
}

func fromPeer(p replica.Peer) Member {
	var mm memberMeta
	_ = json.Unmarshal(p.Meta, &mm) // a record without meta has only an address
	role := "voter"
	if p.Learner {
		role = "learner"
	}
	return Member{ID: p.ID, Peer: p.Addr, Role: role, Region: mm.Region, Zone: mm.Zone, GRPC: mm.GRPC, ZK: mm.ZK, HTTP: mm.HTTP, Identity: p.Identity}
}

// members returns the current membership, sorted by id.
func (s *Server) members() []Member {
	peers := s.rep.Members()
	out := make([]Member, 0, len(peers))
	for _, p := range peers {
		out = append(out, fromPeer(p))
	}
	return out
}

func (s *Server) member(id uint64) (Member, bool) {
	for _, m := range s.members() {
		if m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// changeMembers applies changes (see replica.ChangeMembers) within the
// request timeout.
//
// A change that removes or demotes the leader first moves leadership to a
// voter that stays (the lowest id), so the group is not left to notice the
// leader's departure by election timeout.
func (s *Server) changeMembers(ctx context.Context, changes []replica.MemberChange) error {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	if lead := s.rep.Leader(); lead != 0 {
		leaving := map[uint64]bool{}
		for _, c := range changes {
			if c.Type != replica.AddVoter {
				leaving[c.Peer.ID] = true
			}
		}
		if leaving[lead] {
			for _, m := range s.members() {
				if m.Role != "learner" && !leaving[m.ID] {
					if err := s.rep.TransferLeadership(ctx, m.ID); err != nil {
						if errors.Is(err, context.DeadlineExceeded) {
							err = errs.ErrTimeout
						}
						return err
					}
					break
				}
			}
		}
	}
	err := s.rep.ChangeMembers(ctx, changes)
	if errors.Is(err, context.DeadlineExceeded) {
		err = errs.ErrTimeout
	}
	return err
}

func (a *api) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	return a.memberList(), a.done("MemberList", nil)
}

func (a *api) memberList() *pb.MemberListResponse {
	st := a.s.rep.Status()
	_, idx := a.s.rep.Configuration()
	out := &pb.MemberListResponse{Header: a.header(0), ConfigIndex: idx}
	for _, m := range a.s.members() {
		out.Members = append(out.Members, toPBMember(m, st.Progress[m.ID]))
	}
	return out
}

func toPBMember(m Member, match uint64) *pb.Member {
	role := "voter"
	if m.Role == "learner" {
		role = "learner"
	}
	return &pb.Member{Id: m.ID, Region: m.Region, Zone: m.Zone, PeerAddr: m.Peer, GrpcAddr: m.GRPC,
		ZkAddr: m.ZK, HttpAddr: m.HTTP, MatchIndex: match, Learner: m.Role == "learner", Identity: m.Identity, Role: role}
}

func (a *api) MemberChange(ctx context.Context, r *pb.MemberChangeRequest) (*pb.MemberListResponse, error) {
	var changes []replica.MemberChange
	for _, op := range r.GetChanges() {
		pm := op.GetMember()
		if pm.GetId() == 0 {
			return nil, a.done("MemberChange", fmt.Errorf("%w: member id 0", errs.ErrBadMembership))
		}
		c := replica.MemberChange{Peer: replica.Peer{ID: pm.GetId()}, PromoteWhenCaughtUp: op.GetPromoteWhenCaughtUp()}
		switch op.GetType() {
		case pb.MemberChangeType_ADD_VOTER:
			c.Type = replica.AddVoter
		case pb.MemberChangeType_ADD_LEARNER:
			c.Type = replica.AddLearner
		case pb.MemberChangeType_REMOVE_MEMBER:
			c.Type = replica.Remove
		default:
			return nil, a.done("MemberChange", fmt.Errorf("%w: change type %v", errs.ErrBadMembership, op.GetType()))
		}
		if c.PromoteWhenCaughtUp && c.Type != replica.AddLearner {
			return nil, a.done("MemberChange", fmt.Errorf("%w: promote_when_caught_up is for ADD_LEARNER", errs.ErrBadMembership))
		}
		if c.Type != replica.Remove {
			m, known := a.s.member(pm.GetId())
			if !known || pm.GetPeerAddr() != "" {
				nm := Member{ID: pm.GetId(), Region: pm.GetRegion(), Zone: pm.GetZone(), Peer: pm.GetPeerAddr(),
					GRPC: pm.GetGrpcAddr(), ZK: pm.GetZkAddr(), HTTP: pm.GetHttpAddr(), Identity: pm.GetIdentity()}
				if err := checkNewMember(nm); err != nil {
					return nil, a.done("MemberChange", err)
				}
				m = nm
			}
			c.Peer = toPeer(m)
		}
		changes = append(changes, c)
	}
	if err := a.s.changeMembers(ctx, changes); err != nil {
		return nil, a.done("MemberChange", err)
	}
	return a.memberList(), a.done("MemberChange", nil)
}

// checkNewMember validates a member's record before it joins the book.
func checkNewMember(m Member) error {
	for name, addr := range map[string]string{"peer": m.Peer, "grpc": m.GRPC, "zk": m.ZK, "http": m.HTTP} {
		if addr == "" && name != "peer" {
			continue
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" {
			return fmt.Errorf("%w: member %d %s address %q: want host:port", errs.ErrBadMembership, m.ID, name, addr)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("%w: member %d %s port %q", errs.ErrBadMembership, m.ID, name, port)
		}
	}
	if len(m.Identity) > 253 || strings.ContainsAny(m.Identity, " \t\n") {
		return fmt.Errorf("%w: member %d identity: at most 253 bytes, no whitespace", errs.ErrBadMembership, m.ID)
	}
	if strings.ContainsAny(m.Region+m.Zone, " \t\n") {
		return fmt.Errorf("%w: member %d region/zone with whitespace", errs.ErrBadMembership, m.ID)
	}
	return nil
}
