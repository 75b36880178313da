package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/backup"
	"github.com/meridian-coord/meridian/internal/server"
)

// snapshotCommand is `meridian snapshot save|inspect`.
func snapshotCommand() *cobra.Command {
	s := &cobra.Command{Use: "snapshot", Short: "Back the cluster up to a file, and inspect such a file",
		Long: `save writes every raft group's state (the tree, locks, queues, barriers,
counters, sessions, the keyspace table and every keyspace's data) to a file,
each group taken after a linearizable barrier, from a running cluster
(admin). inspect checks a file (checksums, every snapshot restores) and
counts what it holds. restore seeds a new member's empty data directory
from a file: run it for every member of the new cluster, with each one's
server config (the same members and cluster token in all), then start them
as usual. The new cluster has its own cluster id (its token's) and none of
the saved sessions (their ephemerals are deleted and their locks released);
its members must include every member id the saved keyspaces' groups name.`}
	save := &cobra.Command{
		Use: "save FILE", Short: "Save a backup of the running cluster to FILE (admin)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Written beside FILE first: FILE appears only whole.
			tmp := args[0] + ".partial"
			f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			progress := func(done, total uint64) {
				if total > 0 {
					fmt.Fprintf(os.Stderr, "\rsaving: %s of %s (%d%%)", size(done), size(total), done*100/total)
				}
			}
			err = withClient(func(ctx context.Context, c *client.Client) error { return c.SaveSnapshot(ctx, f, progress) })
			fmt.Fprintln(os.Stderr)
			if err == nil {
				err = f.Sync()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = os.Rename(tmp, args[0])
			}
			if err != nil {
				os.Remove(tmp)
				return err
			}
			return inspectFile(args[0])
		},
	}
	inspect := &cobra.Command{
		Use: "inspect FILE", Short: "Check a backup file and count what it holds", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return inspectFile(args[0]) },
	}
	var config string
	restore := &cobra.Command{
		Use: "restore FILE --config SERVER.yaml", Short: "Seed a new member's data directory from a backup", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if config == "" {
				return fmt.Errorf("--config is required: the new member's server config (its id, data directory, the new cluster's members and token)")
			}
			cfg, err := server.LoadConfig(config)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			if err := server.Restore(cfg, b, time.Now().UnixMilli()); err != nil {
				return fmt.Errorf("restore %s into %s: %w", args[0], cfg.DataDir, err)
			}
			fmt.Printf("member %d seeded from %s in %s; start it: meridian server --config %s\n", cfg.ID, args[0], cfg.DataDir, config)
			return nil
		},
	}
	restore.Flags().StringVar(&config, "config", "", "the new member's server config")
	s.AddCommand(save, inspect, restore)
	return s
}

// inspection is `snapshot inspect -o json`'s form.
type inspection struct {
	File      string           `json:"file"`
	Bytes     int64            `json:"bytes"`
	ClusterID string           `json:"cluster_id"`
	CreatedMs int64            `json:"created_ms"`
	Member    uint64           `json:"member"`
	Members   []backup.Member  `json:"members"`
	Groups    []backup.Summary `json:"groups"`
}

func inspectFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	m, snaps, err := backup.Read(b)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	groups, err := backup.Inspect(m, snaps)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	in := inspection{File: path, Bytes: int64(len(b)), ClusterID: m.ClusterID, CreatedMs: m.CreatedMs, Member: m.Member,
		Members: m.Members, Groups: groups}
	return output(in, func() {
		fmt.Printf("%s: %s, cluster %s, saved through member %d, %d members\n", path, size(uint64(len(b))), m.ClusterID, m.Member, len(m.Members))
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "GROUP\tPREFIX\tINDEX\tLAST ZXID\tZNODES\tEPHEMERALS\tSESSIONS\tLOCKS\tKEYSPACES\tBYTES\tSHA-256")
		for _, g := range groups {
			prefix := g.Prefix
			if g.Group == 0 {
				prefix = "/ (root)"
			}
			fmt.Fprintf(w, "%d\t%s\t%d\t0x%x\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", g.Group, prefix, g.Index, g.LastZxid, g.Znodes,
				g.Ephemerals, g.Sessions, g.Locks, g.Keyspaces, g.Bytes, g.SHA256[:16])
		}
		w.Flush()
	})
}

// size is n bytes for people.
func size(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
