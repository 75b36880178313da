package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/client"
)

// keyspaceCommand is `meridian keyspace create|ls|rm`.
func keyspaceCommand() *cobra.Command {
	k := &cobra.Command{Use: "keyspace", Short: "Regional keyspaces: a prefix in its own raft group, homed in a region",
		Long: `A keyspace gives a prefix ("/eu") its own raft group: its znodes, and the
locks, queues, elections, counters and barriers named "eu/...", commit
among voters placed in its home region (zone survival: three zones of the
region) or across regions (region survival: five voters, two at home, no
region with a majority), and every other member keeps a non-voting copy
for local reads. ZooKeeper clients still see one tree.`}
	var home, survive string
	create := &cobra.Command{
		Use: "create PREFIX --home REGION [--survive zone|region]", Short: "Create a keyspace (admin)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if home == "" {
				return fmt.Errorf("--home is required: the region whose members vote")
			}
			if survive != "zone" && survive != "region" {
				return fmt.Errorf("--survive %q: zone or region", survive)
			}
			return withClient(func(ctx context.Context, c *client.Client) error {
				ks, err := c.CreateKeyspace(ctx, args[0], home, survive)
				if err != nil {
					return err
				}
				return printKeyspaces([]*pb.Keyspace{ks})
			})
		},
	}
	create.Flags().StringVar(&home, "home", "", "the home region (its members vote)")
	create.Flags().StringVar(&survive, "survive", "zone", "what the keyspace survives: the loss of a zone of its home region (zone) or of a whole region (region)")
	ls := &cobra.Command{
		Use: "ls", Short: "List keyspaces, their homes, voters and leaders", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, c *client.Client) error {
				list, err := c.Keyspaces(ctx)
				if err != nil {
					return err
				}
				return printKeyspaces(list)
			})
		},
	}
	rm := &cobra.Command{
		Use: "rm PREFIX", Short: "Remove an empty keyspace (admin)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, c *client.Client) error {
				return c.RemoveKeyspace(ctx, args[0])
			})
		},
	}
	k.AddCommand(create, ls, rm)
	return k
}

func printKeyspaces(list []*pb.Keyspace) error {
	// JSON: each Keyspace message in the CLI's stable form (every field,
	// [] for empty lists; docs/compatibility.md).
	return output(list, func() {
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "PREFIX\tHOME\tSURVIVE\tGROUP\tVOTERS\tLEADER\tLEARNERS")
		for _, ks := range list {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%d\t%s\n", ks.GetPrefix(), ks.GetHome(), ks.GetSurvival(), ks.GetGroup(),
				ids(ks.GetVoters()), ks.GetLeaderId(), ids(ks.GetLearners()))
		}
		w.Flush()
	})
}

func ids(v []uint64) string {
	s := make([]string, len(v))
	for i, id := range v {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}
