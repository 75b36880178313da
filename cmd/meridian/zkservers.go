package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-coord/meridian/client"
)

// zkServersCmd is `meridian zk-servers`: the ZooKeeper connect string for a
// client on this machine, nearest server first. Most ZooKeeper clients
// shuffle the list (the Java client, Curator, go-zookeeper) unless told not
// to (kazoo's randomize_hosts=False); --near trims it to the servers about
// as close as the nearest, so even a shuffling client stays local, at the
// price of failing over only among those.
func zkServersCmd() *cobra.Command {
	var near float64
	var table bool
	cmd := &cobra.Command{
		Use:   "zk-servers [--near FACTOR] [--table]",
		Short: "Print the ZooKeeper connect string, nearest server first (measured from here)",
		Long: `Lists every member's ZooKeeper address (from the membership), measures the
TCP connect time to each from this machine (best of 3) and prints them as a
connect string, nearest first; unreachable ones go last. --near 2 keeps only
servers within 2x the nearest one's time (plus 1 ms). --table shows the
measurements.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if near != 0 && near < 1 {
				return fmt.Errorf("--near %v: want a factor of at least 1", near)
			}
			return withClient(func(ctx context.Context, c *client.Client) error {
				r, err := c.Members(ctx)
				if err != nil {
					return err
				}
				type zkServer struct {
					ID     uint64  `json:"id"`
					Region string  `json:"region"`
					Role   string  `json:"role"`
					Addr   string  `json:"addr"`
					RTTms  float64 `json:"connect_ms,omitempty"`
					Error  string  `json:"error,omitempty"`
					rtt    time.Duration
				}
				var out []zkServer
				for _, m := range r.GetMembers() {
					if m.GetZkAddr() == "" {
						continue
					}
					s := zkServer{ID: m.GetId(), Region: m.GetRegion(), Role: "voter", Addr: dialable(m.GetZkAddr(), m.GetGrpcAddr())}
					if m.GetLearner() {
						s.Role = "learner"
					}
					if s.rtt, err = connectTime(s.Addr, 3); err != nil {
						s.Error = err.Error()
					} else {
						s.RTTms = float64(s.rtt.Microseconds()) / 1000
					}
					out = append(out, s)
				}
				if len(out) == 0 {
					return fmt.Errorf("no member has a ZooKeeper address (zk_listen)")
				}
				slices.SortStableFunc(out, func(a, b zkServer) int {
					switch {
					case (a.Error == "") != (b.Error == ""):
						if a.Error == "" {
							return -1
						}
						return 1
					case a.rtt < b.rtt:
						return -1
					case a.rtt > b.rtt:
						return 1
					}
					return 0
				})
				if near > 0 && out[0].Error == "" {
					limit := time.Duration(near*float64(out[0].rtt)) + time.Millisecond
					out = slices.DeleteFunc(out, func(s zkServer) bool { return s.Error != "" || s.rtt > limit })
				}
				return output(out, func() {
					addrs := make([]string, len(out))
					for i, s := range out {
						addrs[i] = s.Addr
					}
					fmt.Println(strings.Join(addrs, ","))
					if table {
						w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
						fmt.Fprintln(w, "ID\tROLE\tREGION\tZK\tCONNECT ms")
						for _, s := range out {
							t := fmt.Sprintf("%.2f", s.RTTms)
							if s.Error != "" {
								t = s.Error
							}
							fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", s.ID, s.Role, s.Region, s.Addr, t)
						}
						w.Flush()
					}
				})
			})
		},
	}
	cmd.Flags().Float64Var(&near, "near", 0, "keep only servers within this factor of the nearest one's connect time")
	cmd.Flags().BoolVar(&table, "table", false, "also print the measurements")
	return cmd
}

// dialable replaces an unspecified listen host (0.0.0.0, ::, empty) with
// the host of the member's gRPC address, which clients already reach.
func dialable(zkAddr, grpcAddr string) string {
	host, port, err := net.SplitHostPort(zkAddr)
	if err != nil {
		return zkAddr
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return zkAddr
	}
	if gh, _, err := net.SplitHostPort(grpcAddr); err == nil {
		if ip := net.ParseIP(gh); gh != "" && (ip == nil || !ip.IsUnspecified()) {
			return net.JoinHostPort(gh, port)
		}
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// connectTime is the best of n TCP connects to addr (a handshake is one
// round trip), each bounded by 2 s.
func connectTime(addr string, n int) (time.Duration, error) {
	best := time.Duration(-1)
	var last error
	for i := 0; i < n; i++ {
		start := time.Now()
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			last = err
			continue
		}
		d := time.Since(start)
		conn.Close()
		if best < 0 || d < best {
			best = d
		}
	}
	if best < 0 {
		return 0, last
	}
	return best, nil
}
