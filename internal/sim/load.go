package sim

import (
	"fmt"
	"strings"

	"go.etcd.io/raft/v3"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/fsm"
	"github.com/meridian-coord/meridian/internal/tree"
)

// The load: what clients ask members to propose, and what a server does
// with it before its replica sees it (routing, the clock envelope), and
// the keyspace leader's duties.

// upMember is a random member that is up (nil: none).
func (s *Sim) upMember() *member {
	var up []*member
	for _, m := range s.members {
		if m.up {
			up = append(up, m)
		}
	}
	if len(up) == 0 {
		return nil
	}
	return up[s.rng.IntN(len(up))]
}

// placement is keyspace i's group (1-based): three voters from member
// 2(i-1)+1 on, wrapping, and the other members learners (all voters with
// three members or fewer).
func (s *Sim) placement(i int) (voters, learners []uint64) {
	n := len(s.members)
	for j := 0; j < n; j++ {
		id := uint64((2*(i-1)+j)%n + 1)
		if j < 3 {
			voters = append(voters, id)
		} else {
			learners = append(learners, id)
		}
	}
	return voters, learners
}

// createKeyspaces proposes, from a random member, the creation of the
// first keyspace its root state does not have yet (again until it does:
// a creation refused as existing is harmless).
func (s *Sim) createKeyspaces() {
	if s.cfg.Keyspaces == 0 || s.now%50 != 0 || len(s.groups) >= 1+s.cfg.Keyspaces {
		return
	}
	m := s.upMember()
	if m == nil {
		return
	}
	table := m.nodes[0].fsm.Keyspaces()
	for i := 1; i <= s.cfg.Keyspaces; i++ {
		prefix := fmt.Sprintf("/ks%d", i)
		if _, ok := table.For(prefix); ok {
			continue
		}
		voters, learners := s.placement(i)
		id := s.newID()
		data, err := fsm.EncodeKeyspaceCommand(&fsm.KeyspaceCommand{ID: id, TimeMs: s.wallMs(m), Op: fsm.KeyspaceCreate,
			Prefix: prefix, Region: "r1", Survival: fsm.SurvivalZone, Voters: voters, Learners: learners})
		if err != nil {
			panic(err)
		}
		s.submit(m.nodes[0], id, &proposal{member: m.id}, data)
		return
	}
}

func (s *Sim) newID() uint64 {
	s.nextID++
	return s.nextID
}

// submit proposes a client's command at node n, as a server does: in a
// clock envelope (the member's wall clock, the session's seen zxid) once
// keyspaces exist, which a keyspace's group always has.
func (s *Sim) submit(n *node, id uint64, p *proposal, data []byte) {
	if n.group != 0 || n.m.nodes[0].fsm.Keyspaces().Len() > 0 {
		var err error
		p.clockMs = s.wallMs(n.m)
		data, err = fsm.WrapClock(uint64(p.clockMs), uint64(max(s.seen[p.session], 0)), data)
		if err != nil {
			panic(err)
		}
	}
	s.props[id] = p
	s.Stats.Proposals++
	_ = n.replica.Propose(data) // dropped when no leader is known: the client would retry
}

// route is the group a member sends a request for path to: the keyspace's
// that owns it by the member's root state, if that group runs there, else
// the root; sometimes (misrouteRate) any of its groups, as a member whose
// table is stale would.
func (s *Sim) route(m *member, path string) *node {
	if s.rng.Float64() < misrouteRate {
		return m.nodes[s.rng.IntN(len(m.nodes))]
	}
	if ks, ok := m.nodes[0].fsm.KeyspaceFor(path); ok {
		if n := m.node(ks.Group); n != nil {
			return n
		}
	}
	return m.nodes[0]
}

// routeName is route for a coordination object's name.
func (s *Sim) routeName(m *member, name string) *node {
	if s.rng.Float64() < misrouteRate {
		return m.nodes[s.rng.IntN(len(m.nodes))]
	}
	if ks, ok := m.nodes[0].fsm.KeyspaceForName(name); ok {
		if n := m.node(ks.Group); n != nil {
			return n
		}
	}
	return m.nodes[0]
}

// area is a random part of the namespace the member knows: the root's
// ("") or a keyspace's prefix.
func (s *Sim) area(m *member) string {
	list := m.nodes[0].fsm.Keyspaces().List()
	if len(list) == 0 || s.rng.IntN(3) == 0 {
		return ""
	}
	return list[s.rng.IntN(len(list))].Prefix
}

// propose sends one random client command to a random live member, which
// routes it to a group (raft forwards it to that group's leader, through
// the simulated network). Commands run on behalf of sessions the member
// knows as live, as a client's would: they create nodes (ephemeral ones
// too), take and release locks (with a lock-delay at times), write under
// a lock's fence, write then flag elsewhere, and sessions are created,
// closed and expired (in the root), so applies end sessions that hold and
// wait for locks in every group.
func (s *Sim) propose() {
	m := s.upMember()
	if m == nil {
		return
	}
	root := m.nodes[0]
	sessions := root.fsm.Tree().Sessions()
	session := int64(1) // none known: the command fails as a stale session's would
	if len(sessions) > 0 {
		session = sessions[s.rng.IntN(len(sessions))].ID
	}
	area := s.area(m)
	path := fmt.Sprintf("%s/n%d", area, s.rng.IntN(50))
	lock := objectName(area, fmt.Sprintf("lock-%d", s.rng.IntN(3)))
	now := s.wallMs(m)
	id := s.newID()
	p := &proposal{member: m.id, session: session}
	var to *node
	var data []byte
	var err error
	kinds := 8
	if s.cfg.Keyspaces > 0 {
		kinds = 10
	}
	switch s.rng.IntN(kinds) {
	case 0:
		mode, owner := tree.ModePersistent, int64(0)
		if s.rng.IntN(2) == 0 {
			mode, owner = tree.ModeEphemeral, session
		}
		to = s.route(m, path)
		data, err = tree.EncodeCommand(&tree.Command{ID: id, TimeMs: now, Session: owner, Op: tree.Op{Type: tree.OpCreate,
			Path: path, Data: []byte("x"), ACL: tree.OpenACL, Mode: mode}})
	case 1:
		to = s.route(m, path)
		data, err = tree.EncodeCommand(&tree.Command{ID: id, TimeMs: now, Op: tree.Op{Type: tree.OpSetData,
			Path: path, Data: fmt.Appendf(nil, "v%d", s.now), Version: -1}})
	case 2, 3:
		delay := int64(0)
		if s.rng.IntN(4) == 0 {
			delay = 30
		}
		to = s.routeName(m, lock)
		data, err = coord.Encode(&coord.Command{ID: id, Op: coord.OpAcquire, Name: lock, Session: session, Wait: true,
			DelayMs: delay, TimeMs: now})
	case 4:
		to = s.routeName(m, lock)
		data, err = coord.Encode(&coord.Command{ID: id, Op: coord.OpRelease, Name: lock, Session: session, TimeMs: now})
	case 5:
		to = root
		data, err = tree.EncodeCommand(&tree.Command{ID: id, TimeMs: now, Op: tree.Op{Type: tree.OpCreateSession},
			TimeoutMs: 10000, Password: []byte("0123456789abcdef")})
	case 6:
		to = root
		if s.rng.IntN(2) == 0 {
			data, err = tree.EncodeCommand(&tree.Command{ID: id, TimeMs: now, Session: session, Op: tree.Op{Type: tree.OpCloseSession}})
			break
		}
		ids := []int64{session}
		if len(sessions) > 1 && s.rng.IntN(2) == 0 {
			ids = append(ids, sessions[s.rng.IntN(len(sessions))].ID)
		}
		data, err = tree.EncodeCommand(&tree.Command{ID: id, TimeMs: now, Op: tree.Op{Type: tree.OpExpire}, Sessions: ids})
	case 7:
		to = root // lets delayed locks be granted (a keyspace's leader ticks its own group)
		data, err = coord.Encode(&coord.Command{ID: id, Op: coord.OpTick, TimeMs: now})
	case 8:
		// A write fenced by a lock, at times in another group than the
		// lock's (refused: ErrCrossKeyspace); the token is the last grant
		// the member applied.
		to = s.routeName(m, lock)
		target := fmt.Sprintf("%s/n%d", s.area(m), s.rng.IntN(50))
		var inner []byte
		inner, err = tree.EncodeCommand(&tree.Command{ID: id, TimeMs: now, Session: session, Op: tree.Op{Type: tree.OpSetData,
			Path: target, Data: fmt.Appendf(nil, "f%d", s.now), Version: -1}})
		if err == nil {
			data, err = coord.Encode(&coord.Command{ID: id, Op: coord.OpFenced, Name: lock, Session: session,
				Token: to.tokens[lock], Inner: inner, TimeMs: now})
		}
	default:
		// Write then flag: a write in one group, then, once the client saw
		// its result, a flag in another carrying the session's seen zxid.
		flagArea := s.area(m)
		for tries := 0; flagArea == area && tries < 4; tries++ {
			flagArea = s.area(m)
		}
		to = s.route(m, path)
		ks, _ := root.fsm.KeyspaceFor(flagArea + "/f")
		p.write, p.flagGroup = true, ks.Group
		data, err = tree.EncodeCommand(&tree.Command{ID: id, TimeMs: now, Op: tree.Op{Type: tree.OpCreate,
			Path: fmt.Sprintf("%s/w%d", area, id), Data: []byte("x"), ACL: tree.OpenACL, Mode: tree.ModePersistent}})
	}
	if err != nil {
		panic(err)
	}
	s.submit(to, id, p, data)
}

// objectName is the name of a coordination object in an area: "lock-1"
// in the root's, "ks1/lock-1" in keyspace /ks1's.
func objectName(area, base string) string {
	if area == "" {
		return base
	}
	return strings.TrimPrefix(area, "/") + "/" + base
}

// proposeFlags proposes the flags whose writes were answered, from the
// member that proposed the write, if it is still up, in the flag's group
// as that member routes it (no misrouting), with the session's seen zxid.
func (s *Sim) proposeFlags() error {
	flags := s.flags
	s.flags = nil
	for _, f := range flags {
		m := s.members[f.member-1]
		if !m.up {
			continue
		}
		to := m.node(f.group)
		if to == nil {
			to = m.nodes[0]
		}
		prefix := ""
		if f.group != 0 {
			prefix = s.groups[f.group].ks.Prefix
		}
		id := s.newID()
		data, err := tree.EncodeCommand(&tree.Command{ID: id, TimeMs: s.wallMs(m), Op: tree.Op{Type: tree.OpCreate,
			Path: fmt.Sprintf("%s/flag%d", prefix, id), Data: []byte("f"), ACL: tree.OpenACL, Mode: tree.ModePersistent}})
		if err != nil {
			return err
		}
		s.submit(to, id, &proposal{member: m.id, session: f.session, flag: true, dep: f.dep}, data)
	}
	return nil
}

// duties are a keyspace leader's, every dutyEveryMs, as a server runs
// them: end there, in the group, the sessions that take part in it and
// that the member's root state no longer knows (closed or expired), and
// tick its coordination state when a lock-delay is due. A duty not yet
// applied is proposed again after dutyRetryMs. The rule is the server's
// (internal/server keyspaceDuties), which the simulation does not run.
func (s *Sim) duties() {
	if s.now%dutyEveryMs != 0 {
		return
	}
	for _, m := range s.members {
		if !m.up {
			continue
		}
		root := m.nodes[0].fsm.Tree()
		rootZxid := m.nodes[0].fsm.LastZxid()
		for _, n := range m.nodes[1:] {
			if n.replica.BasicStatus().RaftState != raft.StateLeader {
				clear(n.endsAt)
				continue
			}
			now := s.wallMs(m)
			var expire []int64
			for _, id := range n.fsm.Participants() {
				// A session's id is its creation's zxid in the root:
				// above rootZxid, the member's root state has not seen it
				// yet, which is not its end.
				if _, live := root.Session(id); live || id > rootZxid {
					continue
				}
				if at, ok := n.endsAt[id]; ok && s.now-at < dutyRetryMs {
					continue
				}
				n.endsAt[id] = s.now
				if s.closed[id] {
					pid := s.newID()
					data, err := tree.EncodeCommand(&tree.Command{ID: pid, TimeMs: now, Session: id, Op: tree.Op{Type: tree.OpCloseSession}})
					if err != nil {
						panic(err)
					}
					s.submit(n, pid, &proposal{member: m.id}, data)
				} else if len(expire) < tree.MaxExpireBatch {
					expire = append(expire, id)
				}
			}
			if len(expire) > 0 {
				pid := s.newID()
				data, err := tree.EncodeCommand(&tree.Command{ID: pid, TimeMs: now, Op: tree.Op{Type: tree.OpExpire}, Sessions: expire})
				if err != nil {
					panic(err)
				}
				s.submit(n, pid, &proposal{member: m.id}, data)
			}
			if n.fsm.Coord().NeedsTick(now) && s.now-n.tickAt >= dutyRetryMs {
				n.tickAt = s.now
				pid := s.newID()
				data, err := coord.Encode(&coord.Command{ID: pid, Op: coord.OpTick, TimeMs: now})
				if err != nil {
					panic(err)
				}
				s.submit(n, pid, &proposal{member: m.id}, data)
			}
		}
	}
}
