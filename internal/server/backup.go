package server

import (
	"time"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/backup"
	"github.com/meridian-coord/meridian/internal/replica"
)

// backupChunk is the most one SnapshotChunk carries.
const backupChunk = 1 << 20

// SnapshotSave streams a backup (internal/backup): every group's state
// machine snapshot, each taken right after a linearizable barrier on its
// group (so it holds every write acknowledged before the call, in any
// group), the root's first, then the keyspaces' by id. Admin only (the
// method table). The file is built in memory (a snapshot is, already)
// and streamed in chunks of at most 1 MiB.
func (a *api) SnapshotSave(r *pb.SnapshotSaveRequest, stream pb.Meridian_SnapshotSaveServer) error {
	ctx := stream.Context()
	st := a.s.rep.Status()
	m := backup.Manifest{ClusterID: st.ClusterID, CreatedMs: time.Now().UnixMilli(), Member: a.s.cfg.ID}
	for _, mm := range a.s.members() {
		role := "voter"
		if mm.Role == "learner" {
			role = "learner"
		}
		m.Members = append(m.Members, backup.Member{ID: mm.ID, Role: role, Region: mm.Region, Zone: mm.Zone,
			Peer: mm.Peer, GRPC: mm.GRPC, ZK: mm.ZK, HTTP: mm.HTTP})
	}
	var snaps [][]byte
	for _, g := range append([]*group{a.s.root}, a.s.keyspaceGroups.all()...) {
		if err := a.s.readBarrier(ctx, g, true, 0); err != nil {
			return a.done("SnapshotSave", err)
		}
		data, idx, zxid, err := g.fsm.SnapshotAt()
		if err != nil {
			return a.done("SnapshotSave", err)
		}
		m.Groups = append(m.Groups, backup.Group{Group: g.id, Prefix: g.ks.Prefix, Index: idx, LastZxid: zxid})
		snaps = append(snaps, data)
	}
	file, err := backup.Write(m, snaps)
	if err != nil {
		return a.done("SnapshotSave", err)
	}
	for off := 0; off < len(file); off += backupChunk {
		end := min(off+backupChunk, len(file))
		if err := stream.Send(&pb.SnapshotChunk{Data: file[off:end], TotalBytes: uint64(len(file))}); err != nil {
			return err
		}
	}
	return a.done("SnapshotSave", nil)
}

// Restore seeds the data directory of cfg's member (empty) from a backup
// file, to start a new cluster from it: every member of the new cluster
// restores the same file with the same members and cluster token, then
// starts as usual. Sessions in the backup are ended (backup.Prepare). The
// new cluster's members come from cfg, not from the backup; its cluster id
// from cfg's token (a backup's cluster and its copy do not talk to each
// other).
func Restore(cfg Config, file []byte, nowMs int64) error {
	if err := cfg.Normalize(); err != nil {
		return err
	}
	m, snaps, err := backup.Read(file)
	if err != nil {
		return err
	}
	var ids []uint64
	peers := make([]replica.Peer, 0, len(cfg.Members))
	for _, mm := range cfg.Members {
		peers = append(peers, toPeer(mm))
		ids = append(ids, mm.ID)
	}
	p, err := backup.Prepare(m, snaps, nowMs, ids)
	if err != nil {
		return err
	}
	var groups []replica.SeedGroup
	for _, g := range p.Groups {
		groups = append(groups, replica.SeedGroup{Group: g.Keyspace.Group, Index: g.Index, Data: g.Data,
			Voters: g.Keyspace.Voters, Learners: g.Keyspace.Learners})
	}
	return replica.Seed(replica.Config{ID: cfg.ID, Peers: peers, ClusterToken: cfg.ClusterToken, DataDir: cfg.DataDir},
		p.RootIndex, p.Root, groups)
}
