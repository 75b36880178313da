package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// SeedGroup is one keyspace group's saved state for Seed.
type SeedGroup struct {
	Group            uint64
	Index            uint64 // the state's index in the group's log
	Data             []byte // the state machine's snapshot
	Voters, Learners []uint64
}

// Seed writes a new member's store (cfg.DataDir, empty) from a saved
// state instead of bootstrapping it empty: the root group's state machine
// snapshot data at index, its configuration cfg.Peers (voters and
// learners as they say), the cluster id of cfg.ClusterToken, and each of
// groups at its index with its configuration. Every member of the new
// cluster seeds from the same state with the same cfg.Peers and so starts
// identical, as a bootstrapped cluster does; its first leader's term is 2.
func Seed(cfg Config, index uint64, data []byte, groups []SeedGroup) error {
	cfg.defaults()
	cfg.Peers = slices.Clone(cfg.Peers)
	if _, err := checkPeers(cfg); err != nil {
		return err
	}
	if cfg.DataDir == "" {
		return errors.New("replica: no data directory")
	}
	if index == 0 {
		return errors.New("replica: seed at index 0")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d, err := openDisk(cfg.DataDir, nil, log)
	if err != nil {
		return fmt.Errorf("replica: open pebble: %w", err)
	}
	defer d.close()
	if err := seedable(d); err != nil {
		return fmt.Errorf("replica: %s: %w", cfg.DataDir, err)
	}
	slices.SortFunc(cfg.Peers, func(x, y Peer) int { return cmpU64(x.ID, y.ID) })
	cs := &pb.ConfState{}
	for _, p := range cfg.Peers {
		if p.Learner {
			cs.Learners = append(cs.Learners, p.ID)
		} else {
			cs.Voters = append(cs.Voters, p.ID)
		}
	}
	if len(cs.Voters) == 0 {
		return errors.New("replica: seed without a voter")
	}
	for _, g := range groups {
		if g.Group == 0 || g.Index == 0 {
			return fmt.Errorf("replica: seed group %d at index %d", g.Group, g.Index)
		}
		gd := d.group(g.Group)
		if err := seedable(gd); err != nil {
			return fmt.Errorf("replica: group %d: %w", g.Group, err)
		}
		peers, err := groupPeers(cfg.Peers, GroupConfig{Group: g.Group, Voters: g.Voters, Learners: g.Learners})
		if err != nil {
			return fmt.Errorf("replica: group %d: %w", g.Group, err)
		}
		gcs := &pb.ConfState{Voters: slices.Sorted(slices.Values(g.Voters)), Learners: slices.Sorted(slices.Values(g.Learners))}
		if err := seedOne(gd, g.Index, book{Peers: peers, Index: g.Index}, gcs, g.Data); err != nil {
			return fmt.Errorf("replica: group %d: %w", g.Group, err)
		}
	}
	if err := seedOne(d, index, book{Peers: cfg.Peers, Index: index}, cs, data); err != nil {
		return err
	}
	return d.setClusterID(ClusterID(cfg.ClusterToken))
}

// seedable refuses a store that holds any raft state.
func seedable(d *disk) error {
	hs, snap, ents, err := d.Load()
	if err != nil {
		return err
	}
	if !raft.IsEmptyHardState(hs) || !raft.IsEmptySnap(snap) || len(ents) > 0 {
		return errors.New("the data directory already holds a member's state")
	}
	return nil
}

// seedOne writes one group's first snapshot: the state at index, term 1,
// committed.
func seedOne(d *disk, index uint64, b book, cs *pb.ConfState, data []byte) error {
	snap := &pb.Snapshot{
		Data:     wrapSnapshot(b, data),
		Metadata: &pb.SnapshotMetadata{ConfState: cs, Index: new(index), Term: new(uint64(1))},
	}
	return d.Save(&pb.HardState{Term: new(uint64(1)), Commit: new(index)}, nil, snap, true)
}
