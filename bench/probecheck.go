package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
)

// ProbeRow is one ordered pair of servers: the round trip Meridian's own
// probes measured (the latency matrix, what `meridian probe` prints)
// next to the emulated round trip configured for that pair.
type ProbeRow struct {
	From, To             string // "1 OR"
	Configured           time.Duration
	Count                int64
	P50, P99, P999, Max  time.Duration
	Lost                 int64
	QuorumP50, QuorumP99 time.Duration // the From server's per-round quorum latency
}

// CheckProbes asks every server of a Meridian cluster for its measured
// round trips (the Latency call behind `meridian probe`, totals since
// start) and pairs them with the topology's configured round trips.
func CheckProbes(c *Cluster, t *Topology) ([]ProbeRow, error) {
	var out []ProbeRow
	for i, addr := range c.GRPC {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		l, err := pb.NewMeridianClient(conn).Latency(ctx, &pb.LatencyRequest{})
		cancel()
		conn.Close()
		if err != nil {
			return nil, fmt.Errorf("server %d: %w", i+1, err)
		}
		us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
		for _, p := range l.GetPeers() {
			j := int(p.GetPeerId()) - 1
			if j < 0 || j >= len(t.Servers) {
				continue // a learner outside the topology's voters
			}
			st := p.GetRtt().GetTotal()
			out = append(out, ProbeRow{From: fmt.Sprintf("%d %s", i+1, t.Servers[i]), To: fmt.Sprintf("%d %s", j+1, t.Servers[j]),
				Configured: t.RTT(t.Servers[i], t.Servers[j]), Count: st.GetCount(),
				P50: us(st.GetP50Us()), P99: us(st.GetP99Us()), P999: us(st.GetP999Us()), Max: us(st.GetMaxUs()), Lost: p.GetRtt().GetLost(),
				QuorumP50: us(l.GetQuorum().GetTotal().GetP50Us()), QuorumP99: us(l.GetQuorum().GetTotal().GetP99Us())})
		}
	}
	return out, nil
}

// probeOK: the median measured round trip is at least the configured one
// (a probe cannot beat the emulated delay) and within 10% + 2 ms above it
// (the links' jitter and proxy overhead, as VerifyLinks shows).
func probeOK(r ProbeRow) bool {
	lo, hi := r.Configured, r.Configured+r.Configured/10+2*time.Millisecond
	return r.Count > 0 && r.P50 >= lo*95/100 && r.P50 <= hi
}

func probeMarkdown(b *strings.Builder, topo string, rows []ProbeRow) {
	fmt.Fprintf(b, "Meridian's probe matrix, topology %s (the Latency call behind `meridian probe --total`, after the followsun run; ms). Check: p50 within −5%%/+10%% + 2 ms of the configured round trip.\n\n", topo)
	b.WriteString("| from | to | configured | probes | p50 | p99 | p99.9 | max | lost | check | from's quorum p50 / p99 |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		check := "ok"
		if !probeOK(r) {
			check = "**off**"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %d | %s | %s | %s | %s | %d | %s | %s / %s |\n", r.From, r.To, fmtMs(ms(r.Configured)), r.Count,
			fmtMs(ms(r.P50)), fmtMs(ms(r.P99)), fmtMs(ms(r.P999)), fmtMs(ms(r.Max)), r.Lost, check, fmtMs(ms(r.QuorumP50)), fmtMs(ms(r.QuorumP99)))
	}
	b.WriteString("\n")
}
