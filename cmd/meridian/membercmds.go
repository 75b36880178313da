package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/client"
)

// memberCommand is `meridian member list|add|remove|promote|demote`.
func memberCommand() *cobra.Command {
	m := &cobra.Command{Use: "member", Short: "List and change the cluster's members (runtime reconfiguration)",
		Long: `Membership changes go through raft (joint consensus when several change at
once) and are replicated with the configuration; the config files only seed
a new cluster. To add a server: start it with --join (its config lists
itself and the current members), then run "meridian member add".`}
	list := &cobra.Command{
		Use: "list", Short: "List members", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, c *client.Client) error {
				r, err := c.Members(ctx)
				if err != nil {
					return err
				}
				return printMembers(fromLeader(ctx, r))
			})
		},
	}
	var nm pb.Member
	var learner, promote bool
	add := &cobra.Command{
		Use:   "add ID --peer HOST:PORT --grpc HOST:PORT [--zk HOST:PORT] [--region R] [--zone Z] [--learner]",
		Short: "Add a member (a voter, or a learner with --learner)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil || id == 0 {
				return fmt.Errorf("member id %q: want a positive integer", args[0])
			}
			if nm.PeerAddr == "" || nm.GrpcAddr == "" {
				return fmt.Errorf("--peer and --grpc are required")
			}
			op := &pb.MemberChangeOp{Type: pb.MemberChangeType_ADD_VOTER, Member: &pb.Member{Id: id, PeerAddr: nm.PeerAddr,
				GrpcAddr: nm.GrpcAddr, ZkAddr: nm.ZkAddr, HttpAddr: nm.HttpAddr, Region: nm.Region, Zone: nm.Zone, Identity: nm.Identity}}
			if learner || promote {
				op.Type = pb.MemberChangeType_ADD_LEARNER
				op.PromoteWhenCaughtUp = promote
			}
			return withClient(func(ctx context.Context, c *client.Client) error {
				// The server takes an add of a known id as a change of that
				// member's record and role; here add means a new member.
				r, err := c.Members(ctx)
				if err != nil {
					return err
				}
				if m := findMember(r, id); m != nil {
					return fmt.Errorf("member %d already exists (%s in region %q, peer %s): use member promote/demote to change its role, member update to change its addresses or location",
						id, roleOf(m), m.GetRegion(), m.GetPeerAddr())
				}
				return changeWith(ctx, c, op)
			})
		},
	}
	add.Flags().StringVar(&nm.PeerAddr, "peer", "", "raft peer address")
	add.Flags().StringVar(&nm.GrpcAddr, "grpc", "", "native API address")
	add.Flags().StringVar(&nm.ZkAddr, "zk", "", "ZooKeeper protocol address")
	add.Flags().StringVar(&nm.HttpAddr, "http", "", "health and metrics address")
	add.Flags().StringVar(&nm.Region, "region", "default", "region")
	add.Flags().StringVar(&nm.Zone, "zone", "", "zone")
	add.Flags().StringVar(&nm.Identity, "identity", "", "the name the new member's certificate asserts (default: the cluster's member_identity pattern for ID, member-ID.meridian)")
	add.Flags().BoolVar(&learner, "learner", false, "add as a non-voting replica (promote it by hand once caught up)")
	add.Flags().BoolVar(&promote, "promote", false, "add as a learner that the leader promotes to voter once it has caught up")
	byID := func(use, short string, t pb.MemberChangeType) *cobra.Command {
		return &cobra.Command{Use: use + " ID", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				id, err := strconv.ParseUint(args[0], 10, 64)
				if err != nil || id == 0 {
					return fmt.Errorf("member id %q: want a positive integer", args[0])
				}
				return change(&pb.MemberChangeOp{Type: t, Member: &pb.Member{Id: id}})
			}}
	}
	m.AddCommand(list, add, updateCommand(),
		byID("remove", "Remove a member", pb.MemberChangeType_REMOVE_MEMBER),
		byID("promote", "Make a learner a voter", pb.MemberChangeType_ADD_VOTER),
		byID("demote", "Make a voter a learner", pb.MemberChangeType_ADD_LEARNER))
	return m
}

// fromLeader asks the leader again when r came from another member: only
// the leader tracks how far each member's log matches (MATCH). If the
// leader cannot be reached, r stands, with its MATCH column empty (0).
func fromLeader(ctx context.Context, r *pb.MemberListResponse) *pb.MemberListResponse {
	h := r.GetHeader()
	if h.GetLeaderId() == 0 || h.GetLeaderId() == h.GetMemberId() {
		return r
	}
	for _, m := range r.GetMembers() {
		if m.GetId() != h.GetLeaderId() || m.GetGrpcAddr() == "" {
			continue
		}
		cfg, err := clientConfig()
		if err != nil {
			fmt.Fprintf(os.Stderr, "MATCH is known only to the leader (member %d at %s): %v\n", m.GetId(), m.GetGrpcAddr(), err)
			return r
		}
		cfg.Endpoints = []string{m.GetGrpcAddr()}
		lc, err := client.New(ctx, cfg)
		if err != nil {
			fmt.Fprintf(os.Stderr, "MATCH is known only to the leader (member %d at %s): %v\n", m.GetId(), m.GetGrpcAddr(), err)
			return r
		}
		defer lc.Close()
		lr, err := lc.Members(ctx)
		if err != nil || lr.GetHeader().GetMemberId() != lr.GetHeader().GetLeaderId() {
			fmt.Fprintf(os.Stderr, "MATCH is known only to the leader (member %d at %s): %v\n", m.GetId(), m.GetGrpcAddr(), err)
			return r
		}
		return lr
	}
	return r
}

func change(op *pb.MemberChangeOp) error {
	return withClient(func(ctx context.Context, c *client.Client) error { return changeWith(ctx, c, op) })
}

func changeWith(ctx context.Context, c *client.Client, op *pb.MemberChangeOp) error {
	r, err := c.ChangeMembers(ctx, op)
	if err != nil {
		return err
	}
	return printMembers(r)
}

func findMember(r *pb.MemberListResponse, id uint64) *pb.Member {
	for _, m := range r.GetMembers() {
		if m.GetId() == id {
			return m
		}
	}
	return nil
}

func roleOf(m *pb.Member) string {
	if m.GetLearner() {
		return "learner"
	}
	return "voter"
}

// updateCommand is `meridian member update`: a member's addresses and
// location change, its role does not. The change is the same raft
// configuration change as an add of a known id with its current role
// (raft sees no change; the address book, which is replicated with it,
// takes the new record and every member dials the new peer address).
func updateCommand() *cobra.Command {
	var peer, grpcAddr, zk, httpAddr, region, zone string
	cmd := &cobra.Command{
		Use:   "update ID [--peer HOST:PORT] [--grpc HOST:PORT] [--zk HOST:PORT] [--http HOST:PORT] [--region R] [--zone Z]",
		Short: "Change a member's addresses or location (not its role)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil || id == 0 {
				return fmt.Errorf("member id %q: want a positive integer", args[0])
			}
			set := map[string]*string{"peer": &peer, "grpc": &grpcAddr, "zk": &zk, "http": &httpAddr, "region": &region, "zone": &zone}
			changed := false
			for name := range set {
				changed = changed || cmd.Flags().Changed(name)
			}
			if !changed {
				return fmt.Errorf("nothing to change: give at least one of --peer, --grpc, --zk, --http, --region, --zone")
			}
			return withClient(func(ctx context.Context, c *client.Client) error {
				r, err := c.Members(ctx)
				if err != nil {
					return err
				}
				old := findMember(r, id)
				if old == nil {
					return fmt.Errorf("member %d is not a member (member list shows them; member add adds one)", id)
				}
				nm := &pb.Member{Id: id, PeerAddr: old.GetPeerAddr(), GrpcAddr: old.GetGrpcAddr(), ZkAddr: old.GetZkAddr(),
					HttpAddr: old.GetHttpAddr(), Region: old.GetRegion(), Zone: old.GetZone(), Identity: old.GetIdentity()}
				for name, field := range map[string]*string{"peer": &nm.PeerAddr, "grpc": &nm.GrpcAddr, "zk": &nm.ZkAddr,
					"http": &nm.HttpAddr, "region": &nm.Region, "zone": &nm.Zone} {
					if cmd.Flags().Changed(name) {
						*field = *set[name]
					}
				}
				if nm.PeerAddr == "" {
					return fmt.Errorf("--peer: a member needs a peer address")
				}
				op := &pb.MemberChangeOp{Type: pb.MemberChangeType_ADD_VOTER, Member: nm}
				if old.GetLearner() {
					op.Type = pb.MemberChangeType_ADD_LEARNER
				}
				return changeWith(ctx, c, op)
			})
		},
	}
	cmd.Flags().StringVar(&peer, "peer", "", "raft peer address")
	cmd.Flags().StringVar(&grpcAddr, "grpc", "", "native API address")
	cmd.Flags().StringVar(&zk, "zk", "", "ZooKeeper protocol address (\"\" to clear)")
	cmd.Flags().StringVar(&httpAddr, "http", "", "health and metrics address (\"\" to clear)")
	cmd.Flags().StringVar(&region, "region", "", "region")
	cmd.Flags().StringVar(&zone, "zone", "", "zone")
	return cmd
}

func printMembers(r *pb.MemberListResponse) error {
	return output(r, func() {
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tROLE\tREGION\tZONE\tPEER\tGRPC\tZK\tMATCH")
		for _, m := range r.GetMembers() {
			role := "voter"
			if m.GetLearner() {
				role = "learner"
			}
			if m.GetId() == r.GetHeader().GetLeaderId() {
				role += " (leader)"
			}
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", m.GetId(), role, m.GetRegion(), m.GetZone(),
				m.GetPeerAddr(), m.GetGrpcAddr(), m.GetZkAddr(), m.GetMatchIndex())
		}
		fmt.Fprintf(w, "configuration index %d\n", r.GetConfigIndex())
		w.Flush()
	})
}
