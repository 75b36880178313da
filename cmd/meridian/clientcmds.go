package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/pki"
)

var (
	flagEndpoints string
	flagOutput    string
	flagTimeout   time.Duration
	flagConsist   string
	flagCACert    string
	flagCert      string
	flagKey       string
	flagUser      []string
	flagInsecure  bool
)

// devTLSDir is where meridian dev keeps its throwaway PKI; with no TLS
// flags the CLI uses it when present, so the quick start needs none.
var devTLSDir = filepath.Join("data", "dev", "tls")

// clientConfig is the client configuration the global flags (and their
// MERIDIAN_* environment variables) ask for.
func clientConfig() (client.Config, error) {
	// FailFast: a command typed by hand should say at once that nothing
	// answers, not wait out --timeout.
	cfg := client.Config{Endpoints: endpoints(), RequestTimeout: flagTimeout, SessionTimeout: 10 * time.Second, FailFast: true}
	env := func(flag *string, name string) {
		if *flag == "" {
			*flag = os.Getenv(name)
		}
	}
	env(&flagCACert, "MERIDIAN_CACERT")
	env(&flagCert, "MERIDIAN_CERT")
	env(&flagKey, "MERIDIAN_KEY")
	cfg.Digest = flagUser
	if len(cfg.Digest) == 0 && os.Getenv("MERIDIAN_USER") != "" {
		cfg.Digest = []string{os.Getenv("MERIDIAN_USER")}
	}
	switch {
	case flagInsecure:
		if flagCACert != "" || flagCert != "" || flagKey != "" {
			return cfg, fmt.Errorf("--insecure with --cacert/--cert/--key")
		}
		return cfg, nil
	case flagCACert == "" && flagCert == "" && flagKey == "":
		if _, err := os.Stat(filepath.Join(devTLSDir, pki.CAFile)); err != nil {
			return cfg, fmt.Errorf("no TLS settings: give --cacert (and --cert/--key for a client certificate), or --insecure for a plaintext cluster")
		}
		tc, err := client.DevTLS(devTLSDir)
		if err != nil {
			return cfg, err
		}
		cfg.TLS = tc
		return cfg, nil
	}
	if (flagCert == "") != (flagKey == "") {
		return cfg, fmt.Errorf("--cert and --key go together")
	}
	tc, err := client.TLSConfig(flagCACert, flagCert, flagKey)
	if err != nil {
		return cfg, err
	}
	cfg.TLS = tc
	return cfg, nil
}

// dialRaw opens a bare gRPC connection to ep with the configured security.
func dialRaw(ep string) (*grpc.ClientConn, error) {
	cfg, err := clientConfig()
	if err != nil {
		return nil, err
	}
	return grpc.NewClient(ep, client.DialOptions(cfg)...)
}

func addClientCommands(root *cobra.Command) {
	pf := root.PersistentFlags()
	pf.StringVar(&flagEndpoints, "endpoints", "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003", "comma-separated gRPC endpoints")
	pf.StringVarP(&flagOutput, "output", "o", "text", "output format: text or json")
	pf.DurationVar(&flagTimeout, "timeout", 10*time.Second, "per-command timeout")
	pf.StringVar(&flagCACert, "cacert", "", "CA certificate verifying the servers (env MERIDIAN_CACERT; default: the dev cluster's "+filepath.Join(devTLSDir, pki.CAFile)+" when present)")
	pf.StringVar(&flagCert, "cert", "", "client certificate, the caller's x509 identity (env MERIDIAN_CERT)")
	pf.StringVar(&flagKey, "key", "", "client certificate's key (env MERIDIAN_KEY)")
	pf.StringArrayVar(&flagUser, "user", nil, "digest credential user:password, repeatable (env MERIDIAN_USER)")
	pf.BoolVar(&flagInsecure, "insecure", false, "plaintext, for a cluster configured insecure: true")
	pf.BoolVar(&flagSequentialRead, "sequential", false, "same as --consistency sequential")
	pf.MarkDeprecated("sequential", "use --consistency sequential")
	pf.StringVar(&flagConsist, "consistency", "linearizable", "reads: linearizable, or sequential (served from the connected server's local state, ZooKeeper-style)")
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutputFormat(); err != nil {
			return err
		}
		return checkConsistency(cmd)
	}

	var ephemeral, sequential, container, parents bool
	var ttl time.Duration
	create := &cobra.Command{
		Use:   "create PATH [DATA]",
		Short: "Create a znode",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			mode := client.Persistent
			switch {
			case container:
				mode = client.Container
			case ttl > 0 && sequential:
				mode = client.PersistentSequentialWithTTL
			case ttl > 0:
				mode = client.PersistentWithTTL
			case ephemeral && sequential:
				mode = client.EphemeralSequential
			case ephemeral:
				mode = client.Ephemeral
			case sequential:
				mode = client.PersistentSequential
			}
			return withClient(func(ctx context.Context, c *client.Client) error {
				opts := client.CreateOptions{Mode: mode, TTL: ttl.Milliseconds()}
				path, st, err := c.Create(ctx, args[0], dataArg(args, 1), opts)
				if errors.Is(err, client.ErrNoNode) && parents {
					path, st, err = createParents(ctx, c, args[0], dataArg(args, 1), opts)
				}
				if errors.Is(err, client.ErrNoNode) && !parents {
					err = fmt.Errorf("%w (create -p creates missing parents)", err)
				}
				if err != nil {
					return err
				}
				if ephemeral {
					fmt.Fprintln(os.Stderr, "note: an ephemeral node is deleted when this command's session closes")
				}
				return output(map[string]any{"path": path, "stat": st}, func() { fmt.Println(path) })
			})
		},
	}
	create.Flags().BoolVarP(&ephemeral, "ephemeral", "e", false, "ephemeral (lives as long as the session)")
	create.Flags().BoolVarP(&sequential, "sequential", "s", false, "append a monotonic sequence number")
	create.Flags().BoolVarP(&container, "container", "c", false, "container node (removed once its last child goes)")
	create.Flags().DurationVar(&ttl, "ttl", 0, "TTL node: removed if unchanged and childless for this long")
	create.Flags().BoolVarP(&parents, "parents", "p", false, "create missing parents (persistent, empty); existing ones are fine")

	get := &cobra.Command{
		Use: "get PATH", Short: "Print a znode's data", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, c *client.Client) error {
				data, st, err := c.Get(ctx, args[0], readOpt())
				if err != nil {
					return err
				}
				return output(map[string]any{"data": string(data), "stat": st}, func() { fmt.Println(string(data)) })
			})
		},
	}

	var version int32
	set := &cobra.Command{
		Use: "set PATH DATA", Short: "Replace a znode's data", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, c *client.Client) error {
				st, err := c.Set(ctx, args[0], []byte(args[1]), version)
				if err != nil {
					return err
				}
				return output(st, func() { printStat(st) })
			})
		},
	}
	set.Flags().Int32Var(&version, "version", -1, "expected version (-1: any)")

	var rmVersion int32
	var rmRecursive bool
	rm := &cobra.Command{
		Use: "rm PATH", Short: "Delete a znode (-r: and everything below it)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, c *client.Client) error {
				if rmRecursive {
					return deleteTree(ctx, c, args[0], rmVersion)
				}
				err := c.Delete(ctx, args[0], rmVersion)
				if errors.Is(err, client.ErrNotEmpty) {
					err = fmt.Errorf("%w (rm -r deletes it and everything below it)", err)
				}
				return err
			})
		},
	}
	rm.Flags().Int32Var(&rmVersion, "version", -1, "expected version (-1: any); with -r, of PATH itself")
	rm.Flags().BoolVarP(&rmRecursive, "recursive", "r", false, "delete the children first, depth first")

	ls := &cobra.Command{
		Use: "ls PATH", Short: "List a znode's children", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, c *client.Client) error {
				kids, _, err := c.Children(ctx, args[0], readOpt())
				if err != nil {
					return err
				}
				return output(kids, func() {
					for _, k := range kids {
						fmt.Println(k)
					}
				})
			})
		},
	}

	stat := &cobra.Command{
		Use: "stat PATH", Short: "Print a znode's Stat", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, c *client.Client) error {
				ok, st, err := c.Exists(ctx, args[0], readOpt())
				if err != nil {
					return err
				}
				if !ok {
					return errs.ErrNoNode
				}
				return output(st, func() { printStat(st) })
			})
		},
	}

	var recursive bool
	watchCmd := &cobra.Command{
		Use:   "watch PATH",
		Short: "Print changes to a znode (-r: its whole subtree) until Ctrl-C",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), flagTimeout)
			ch, _, err := c.AddWatch(ctx, args[0], recursive)
			cancel()
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "watching %s (recursive=%v) via %s; Ctrl-C to stop\n", args[0], recursive, c.Endpoint())
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
			for {
				select {
				case <-sig:
					return nil
				case ev, ok := <-ch:
					if !ok {
						return fmt.Errorf("watch ended")
					}
					if err := output(map[string]any{"type": ev.Type.String(), "path": ev.Path, "zxid": ev.Zxid},
						func() { fmt.Printf("%s %s zxid=%d\n", ev.Type, ev.Path, ev.Zxid) }); err != nil {
						return err
					}
					if ev.Type == client.EventSessionExpired {
						return errs.ErrSessionExpired
					}
				}
			}
		},
	}
	watchCmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "watch the whole subtree")

	status := &cobra.Command{
		Use: "status", Short: "Show every endpoint's view of the cluster",
		RunE: func(cmd *cobra.Command, args []string) error { return statusAll() },
	}

	leader := &cobra.Command{Use: "leader", Short: "Leadership commands"}
	leader.AddCommand(&cobra.Command{
		Use: "transfer MEMBER_ID", Short: "Move leadership to a member", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil || id == 0 {
				return fmt.Errorf("member id %q: want a positive integer", args[0])
			}
			return withClient(func(ctx context.Context, c *client.Client) error {
				return c.TransferLeader(ctx, id)
			})
		},
	})
	var clearPref bool
	prefer := &cobra.Command{
		Use: "prefer [REGION] [--clear]", Short: "Keep the leader in a region (replicated; --clear to let placement decide)",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if clearPref == (len(args) == 1) {
				return fmt.Errorf("give a region or --clear")
			}
			region := ""
			if len(args) == 1 {
				region = args[0]
			}
			return withClient(func(ctx context.Context, c *client.Client) error {
				return c.PreferLeaderRegion(ctx, region)
			})
		},
	}
	prefer.Flags().BoolVar(&clearPref, "clear", false, "remove the preference")
	leader.AddCommand(prefer)
	root.AddCommand(create, get, set, rm, ls, stat, watchCmd, status, leader, probeCmd(), zkServersCmd())
	root.AddCommand(lockCommands()...)
	root.AddCommand(queueCommand(), barrierCommand(), memberCommand(), keyspaceCommand(), snapshotCommand())
}

func dataArg(args []string, i int) []byte {
	if len(args) > i {
		return []byte(args[i])
	}
	return nil
}

// Read consistency is --consistency. The global --sequential, its earlier
// spelling, still works (hidden, deprecated) wherever it does not clash:
// create's own -s/--sequential (a sequential node) shadows it there.
var flagSequentialRead bool

func checkConsistency(cmd *cobra.Command) error {
	switch flagConsist {
	case "linearizable", "sequential":
	default:
		return fmt.Errorf("--consistency %q: want linearizable or sequential", flagConsist)
	}
	if flagSequentialRead && flagConsist == "linearizable" && cmd.Flags().Changed("consistency") {
		return fmt.Errorf("--sequential contradicts --consistency linearizable")
	}
	return nil
}

func readConsistency() client.Consistency {
	if flagSequentialRead || flagConsist == "sequential" {
		return client.Sequential
	}
	return client.Linearizable
}

func readOpt() client.ReadOption {
	return client.WithConsistency(readConsistency())
}

func endpoints() []string {
	var out []string
	for _, e := range strings.Split(flagEndpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

func dial() (*client.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), flagTimeout)
	defer cancel()
	cfg, err := clientConfig()
	if err != nil {
		return nil, err
	}
	return client.New(ctx, cfg)
}

func withClient(fn func(context.Context, *client.Client) error) error {
	c, err := dial()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), flagTimeout)
	defer cancel()
	err = fn(ctx, c)
	if cerr := c.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return err
}

func printStat(st *client.Stat) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 1, ' ', 0)
	fmt.Fprintf(w, "czxid\t%d\nmzxid\t%d\nctime\t%s\nmtime\t%s\nversion\t%d\ncversion\t%d\naversion\t%d\nephemeralOwner\t0x%x\ndataLength\t%d\nnumChildren\t%d\npzxid\t%d\n",
		st.GetCzxid(), st.GetMzxid(), time.UnixMilli(st.GetCtime()).UTC().Format(time.RFC3339Nano),
		time.UnixMilli(st.GetMtime()).UTC().Format(time.RFC3339Nano), st.GetVersion(), st.GetCversion(),
		st.GetAversion(), st.GetEphemeralOwner(), st.GetDataLength(), st.GetNumChildren(), st.GetPzxid())
	w.Flush()
}

// statusAll asks every endpoint directly (no session) so a down member shows as such.
// It fails when no endpoint answers, after printing each one's error.
func statusAll() (err error) {
	type row struct {
		Endpoint string             `json:"endpoint"`
		Error    string             `json:"error,omitempty"`
		Status   *pb.StatusResponse `json:"status,omitempty"`
	}
	var rows []row
	for _, ep := range endpoints() {
		r := row{Endpoint: ep}
		conn, err := dialRaw(ep)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			r.Status, err = pb.NewMeridianClient(conn).Status(ctx, &pb.StatusRequest{})
			cancel()
			conn.Close()
		}
		if err != nil {
			r.Error = client.ConnectFailure(err, 2*time.Second)
		}
		rows = append(rows, r)
	}
	defer func() {
		if err == nil && !slices.ContainsFunc(rows, func(r row) bool { return r.Status != nil }) {
			err = fmt.Errorf("no endpoint answered (%s)", strings.Join(endpoints(), ","))
		}
	}()
	return output(rows, func() {
		w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "ENDPOINT\tMEMBER\tROLE\tLEADER\tTERM\tCOMMIT\tAPPLIED\tZNODES\tSESSIONS\tWATCHES")
		for _, r := range rows {
			if r.Status == nil {
				fmt.Fprintf(w, "%s\t-\tdown\t-\t-\t-\t-\t-\t-\t-\t(%s)\n", r.Endpoint, r.Error)
				continue
			}
			s := r.Status
			fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", r.Endpoint, s.GetMemberId(), s.GetRole(),
				s.GetLeaderId(), s.GetTerm(), s.GetCommitIndex(), s.GetAppliedIndex(), s.GetZnodes(), s.GetSessions(), s.GetWatches())
		}
		w.Flush()
		var statuses []*pb.StatusResponse
		for _, r := range rows {
			statuses = append(statuses, r.Status)
		}
		// The leader's view of placement: the operator's preference and
		// the last decision with its reason.
		for _, r := range rows {
			if s := r.Status; s != nil && s.GetMemberId() == s.GetLeaderId() {
				if s.GetPreferRegion() != "" {
					fmt.Printf("leader region preferred by the operator: %s\n", s.GetPreferRegion())
				}
				if s.GetPlacement() != "" {
					fmt.Printf("placement: %s\n", s.GetPlacement())
				}
				if s.GetTickMs() > 0 {
					fmt.Printf("raft tick: %d ms (election timeout %d ms)\n", s.GetTickMs(), s.GetElectionTimeoutMs())
				}
				fmt.Printf("cluster version: %s%s\n", clusterVersion(s.GetClusterVersion()), olderMembers(statuses, s.GetClusterVersion()))
				for _, ks := range s.GetKeyspaces() {
					fmt.Printf("keyspace %s: home %s, %s survival, voters %s, leader %d\n", ks.GetPrefix(), ks.GetHome(),
						ks.GetSurvival(), ids(ks.GetVoters()), ks.GetLeaderId())
				}
			}
		}
	})
}

// clusterVersion is a recorded cluster version as status shows it.
func clusterVersion(v int64) string {
	if v == 0 {
		return "not recorded yet"
	}
	return strconv.FormatInt(v, 10)
}

// olderMembers names the answering members whose binary applies less than
// the newest binary among them: what holds the cluster version back.
func olderMembers(sts []*pb.StatusResponse, cluster int64) string {
	newest := cluster
	for _, s := range sts {
		newest = max(newest, s.GetApplyVersion())
	}
	var old []string
	for _, s := range sts {
		if s != nil && s.GetApplyVersion() < newest {
			old = append(old, fmt.Sprintf("member %d applies %d", s.GetMemberId(), s.GetApplyVersion()))
		}
	}
	if len(old) == 0 {
		return ""
	}
	return " (" + strings.Join(old, ", ") + ": upgrade them to raise it)"
}

func probeCmd() *cobra.Command {
	var total bool
	cmd := &cobra.Command{
		Use:   "probe",
		Short: "Print the measured round-trip matrix between servers, and quorum latencies",
		Long: `Asks every endpoint for the round trips it measures to its peers (probes on
the raft connections, a few per second) and prints, from each server (row) to
each peer (column), p50/p99/p99.9/max in milliseconds over the sliding window
(or since start with --total), then each server's quorum latency (until a
majority answered: what a commit it leads waits for) and all-peers latency.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			type row struct {
				Endpoint string              `json:"endpoint"`
				Error    string              `json:"error,omitempty"`
				Latency  *pb.LatencyResponse `json:"latency,omitempty"`
			}
			var rows []row
			ids := map[uint64]bool{}
			for _, ep := range endpoints() {
				r := row{Endpoint: ep}
				conn, err := dialRaw(ep)
				if err == nil {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					r.Latency, err = pb.NewMeridianClient(conn).Latency(ctx, &pb.LatencyRequest{})
					cancel()
					conn.Close()
				}
				if err != nil {
					r.Error = errs.FromGRPC(err).Error()
				} else {
					ids[r.Latency.GetMemberId()] = true
					for _, p := range r.Latency.GetPeers() {
						ids[p.GetPeerId()] = true
					}
				}
				rows = append(rows, r)
			}
			pick := func(s *pb.LatencySeries) *pb.LatencyStats {
				if total {
					return s.GetTotal()
				}
				return s.GetWindow()
			}
			cell := func(st *pb.LatencyStats) string {
				if st.GetCount() == 0 {
					return "no data"
				}
				ms := func(us int64) string { return strconv.FormatFloat(float64(us)/1000, 'f', 2, 64) }
				return ms(st.GetP50Us()) + "/" + ms(st.GetP99Us()) + "/" + ms(st.GetP999Us()) + "/" + ms(st.GetMaxUs())
			}
			var order []uint64
			for id := range ids {
				order = append(order, id)
			}
			slices.Sort(order)
			return output(rows, func() {
				what := "over the last window"
				if total {
					what = "since each server started"
				}
				fmt.Printf("Round trip from row to column, p50/p99/p99.9/max ms, %s:\n", what)
				w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
				fmt.Fprint(w, "FROM\\TO")
				for _, id := range order {
					fmt.Fprintf(w, "\t%d", id)
				}
				fmt.Fprintln(w, "\tLOST")
				for _, r := range rows {
					if r.Latency == nil {
						fmt.Fprintf(w, "%s\t(%s)\n", r.Endpoint, r.Error)
						continue
					}
					l := r.Latency
					fmt.Fprintf(w, "%d %s", l.GetMemberId(), l.GetRegion())
					var lost []string
					for _, id := range order {
						if id == l.GetMemberId() {
							fmt.Fprint(w, "\t-")
							continue
						}
						c := "?"
						for _, p := range l.GetPeers() {
							if p.GetPeerId() == id {
								c = cell(pick(p.GetRtt()))
								if p.GetRtt().GetLost() > 0 {
									lost = append(lost, fmt.Sprintf("%d:%d", id, p.GetRtt().GetLost()))
								}
							}
						}
						fmt.Fprintf(w, "\t%s", c)
					}
					fmt.Fprintf(w, "\t%s\n", strings.Join(lost, " "))
				}
				w.Flush()
				fmt.Println("\nPer probe round, p50/p99/p99.9/max ms:")
				w = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(w, "SERVER\tQUORUM (MAJORITY)\tALL PEERS\tROUNDS LOST (QUORUM/ALL)")
				for _, r := range rows {
					if l := r.Latency; l != nil {
						n := len(l.GetPeers()) + 1
						fmt.Fprintf(w, "%d\t%d of %d: %s\t%d of %d: %s\t%d/%d\n", l.GetMemberId(), n/2+1, n, cell(pick(l.GetQuorum())),
							n, n, cell(pick(l.GetAll())), l.GetQuorum().GetLost(), l.GetAll().GetLost())
					}
				}
				w.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&total, "total", false, "since each server started instead of the sliding window")
	return cmd
}
