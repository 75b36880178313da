package server

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/placement"
)

// Leader placement (internal/placement decides; this file feeds it and
// acts). Every server counts the writes it receives and, once a second,
// followers send the leader a report over the side channel: their write
// rate and their measured round trips to every peer. The leader, with
// placement: auto, evaluates the policy each second and transfers
// leadership when it says so.

// placementTag starts a placement report on the side channel (keepalive
// batches start with their own version byte).
const placementTag byte = 0xD1

const (
	placementEvery    = time.Second
	placementStale    = 5 * time.Second // older reports are ignored
	maxReportPeers    = 1000
	loadEMAWeight     = 0.3 // of the newest second
	placementTransfer = 10 * time.Second
)

type placementReport struct {
	at   time.Time
	load float64 // writes per second (EMA)
	rtt  map[uint64]time.Duration
}

type placementState struct {
	writes      atomic.Int64 // writes received since the last evaluation
	transfering atomic.Bool

	mu      sync.Mutex
	load    float64
	lastAt  time.Time
	reports map[uint64]placementReport
	policy  placement.Policy
	last    placement.Decision
}

var errBadReport = errors.New("bad placement report")

func encodeReport(load float64, rtt map[uint64]time.Duration) []byte {
	b := []byte{placementTag}
	b = binary.AppendUvarint(b, uint64(load*1000))
	b = binary.AppendUvarint(b, uint64(len(rtt)))
	for id, d := range rtt {
		b = binary.AppendUvarint(b, id)
		b = binary.AppendUvarint(b, uint64(d.Microseconds()))
	}
	return b
}

func decodeReport(b []byte) (placementReport, error) {
	r := placementReport{rtt: map[uint64]time.Duration{}}
	if len(b) == 0 || b[0] != placementTag {
		return r, errBadReport
	}
	b = b[1:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	load, ok1 := next()
	n, ok2 := next()
	if !ok1 || !ok2 || n > maxReportPeers {
		return r, errBadReport
	}
	r.load = float64(load) / 1000
	for i := uint64(0); i < n; i++ {
		id, ok1 := next()
		us, ok2 := next()
		if !ok1 || !ok2 || us > uint64(time.Hour.Microseconds()) {
			return r, errBadReport
		}
		r.rtt[id] = time.Duration(us) * time.Microsecond
	}
	if len(b) != 0 {
		return r, errBadReport
	}
	return r, nil
}

// ownRTT is this server's row: the window median to each peer it measured.
func (s *Server) ownRTT() map[uint64]time.Duration {
	out := map[uint64]time.Duration{}
	for _, p := range s.rep.Latency().Peers {
		if p.Window.Count > 0 {
			out[p.Peer] = p.Window.P50
		}
	}
	return out
}

// placementTick runs once a second from duties.
func (s *Server) placementTick(now time.Time, leader bool) {
	ps := &s.placement
	ps.mu.Lock()
	if !ps.lastAt.IsZero() {
		rate := float64(ps.writes.Swap(0)) / now.Sub(ps.lastAt).Seconds()
		ps.load = loadEMAWeight*rate + (1-loadEMAWeight)*ps.load
	} else {
		ps.writes.Store(0)
	}
	ps.lastAt = now
	load := ps.load
	ps.mu.Unlock()
	if !leader {
		ps.mu.Lock()
		ps.policy.MinInterval = time.Duration(s.cfg.PlacementMinIntervalMs) * time.Millisecond
		ps.policy.Observe(now, s.rep.Leader())
		ps.mu.Unlock()
		if err := s.rep.SendToLeader(encodeReport(load, s.ownRTT())); err != nil {
			s.log.Debug("placement report not sent", "err", err)
		}
		return
	}
	members := s.members()
	prefer := s.cfg.PreferLeader
	if region := s.preferredRegion(); region != "" {
		prefer = voterIn(members, region, s.cfg.ID)
	}
	if s.cfg.Placement != "auto" && prefer == 0 {
		s.placement.mu.Lock()
		s.placement.last = placement.Decision{Target: s.cfg.ID, Reason: "placement is off and no leader region is preferred"}
		s.placement.mu.Unlock()
		return
	}
	rows := map[uint64]map[uint64]time.Duration{s.cfg.ID: s.ownRTT()}
	in := placement.Input{Leader: s.cfg.ID, Load: map[uint64]float64{s.cfg.ID: load}, Prefer: prefer}
	for _, m := range members {
		if m.Role != "learner" {
			in.Voters = append(in.Voters, m.ID)
		}
	}
	ps.mu.Lock()
	for id, r := range ps.reports {
		if now.Sub(r.at) <= placementStale {
			rows[id] = r.rtt
			in.Load[id] = r.load
		}
	}
	in.RTT = func(a, b uint64) (time.Duration, bool) {
		if d, ok := rows[a][b]; ok {
			return d, true
		}
		d, ok := rows[b][a]
		return d, ok
	}
	ps.policy.MinInterval = time.Duration(s.cfg.PlacementMinIntervalMs) * time.Millisecond
	if ps.policy.Chooser == nil {
		switch s.cfg.PlacementPolicy {
		case "majority":
			ps.policy.Chooser = placement.Majority{}
		case "ema":
			ps.policy.Chooser = &placement.EMA{}
		default:
			ps.policy.Chooser = placement.CenterOfGravity{}
		}
	}
	d := ps.policy.Decide(now, in)
	ps.last = d
	ps.mu.Unlock()
	if !d.Move || !ps.transfering.CompareAndSwap(false, true) {
		return
	}
	s.log.Info("leader placement: transferring leadership", "to", d.Target, "why", d.Reason)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer ps.transfering.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), placementTransfer)
		defer cancel()
		go func() {
			select {
			case <-s.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		if err := s.rep.TransferLeadership(ctx, d.Target); err != nil {
			s.log.Warn("leader placement: transfer failed", "to", d.Target, "err", err)
		}
	}()
}

// onPlacementReport stores a follower's report (kept on every server; only
// the leader uses them).
func (s *Server) onPlacementReport(from uint64, payload []byte) {
	r, err := decodeReport(payload)
	if err != nil {
		s.log.Warn("bad placement report", "from", from, "err", err)
		return
	}
	r.at = time.Now()
	s.placement.mu.Lock()
	if s.placement.reports == nil {
		s.placement.reports = map[uint64]placementReport{}
	}
	s.placement.reports[from] = r
	s.placement.mu.Unlock()
}

// PlacementDecision returns the leader's last placement evaluation.
func (s *Server) PlacementDecision() placement.Decision {
	s.placement.mu.Lock()
	defer s.placement.mu.Unlock()
	return s.placement.last
}

// settingPreferRegion is the coordination-state setting that holds the
// operator's preferred leader region (meridian leader prefer): replicated,
// so it outlives leader changes and restarts. It overrides prefer_leader.
const settingPreferRegion = "placement.prefer_region"

func (s *Server) preferredRegion() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.coord.Setting(settingPreferRegion)
}

// voterIn picks the voter in region that should lead: leader itself when it
// is there, else the lowest id there (0: no voter in region).
func voterIn(members []Member, region string, leader uint64) uint64 {
	var pick uint64
	for _, m := range members {
		if m.Role == "learner" || m.Region != region {
			continue
		}
		if m.ID == leader {
			return leader
		}
		if pick == 0 || m.ID < pick {
			pick = m.ID
		}
	}
	return pick
}

// SetLeaderPreference sets (or, with an empty region, clears) the preferred
// leader region; a region without a voter is refused.
func (a *api) SetLeaderPreference(ctx context.Context, r *pb.LeaderPreferenceRequest) (*pb.LeaderPreferenceResponse, error) {
	region := r.GetRegion()
	if region != "" && voterIn(a.s.members(), region, 0) == 0 {
		return nil, a.done("SetLeaderPreference", fmt.Errorf("%w: no voter in region %q", errs.ErrBadArguments, region))
	}
	out, err := a.s.Submit(ctx, coordCommand(&coord.Command{Op: coord.OpSetting, Name: settingPreferRegion, Value: []byte(region)})).Wait()
	idx := out.zxid
	if err != nil {
		return nil, a.done("SetLeaderPreference", err)
	}
	return &pb.LeaderPreferenceResponse{Header: a.header(idx), Region: region}, a.done("SetLeaderPreference", nil)
}
