package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Meridian's fsync histogram (meridian_raft_fsync_duration_seconds: one
// synced Pebble batch per raft Ready, every group of a member), read from
// its /metrics, so a run can state the fsync its servers saw under its
// load next to the idle fdatasync measured before it.

const fsyncMetric = "meridian_raft_fsync_duration_seconds_bucket"

// fsyncBuckets is a cumulative histogram: upper bound (s) → count.
type fsyncBuckets map[float64]float64

// parseFsyncBuckets reads the fsync histogram's buckets from Prometheus
// text exposition.
func parseFsyncBuckets(r io.Reader) (fsyncBuckets, error) {
	out := fsyncBuckets{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, fsyncMetric+"{")
		if !ok {
			continue
		}
		i := strings.Index(rest, `le="`)
		if i < 0 {
			continue
		}
		le, after, ok := strings.Cut(rest[i+4:], `"`)
		if !ok {
			continue
		}
		fields := strings.Fields(after[strings.Index(after, "}")+1:])
		if len(fields) == 0 {
			continue
		}
		bound, err1 := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
		n, err2 := strconv.ParseFloat(fields[0], 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("metrics line %q", line)
		}
		out[bound] += n
	}
	return out, sc.Err()
}

// minus returns b − a bucket by bucket (the fsyncs between two scrapes).
func (b fsyncBuckets) minus(a fsyncBuckets) fsyncBuckets {
	out := fsyncBuckets{}
	for k, v := range b {
		out[k] = v - a[k]
	}
	return out
}

// add adds o's counts into b.
func (b fsyncBuckets) add(o fsyncBuckets) {
	for k, v := range o {
		b[k] += v
	}
}

// quantile estimates the q-quantile (0..1) as Prometheus's
// histogram_quantile does: linear within the bucket it falls in (from 0
// for the first); false without observations.
func (b fsyncBuckets) quantile(q float64) (time.Duration, bool) {
	var bounds []float64
	for k := range b {
		bounds = append(bounds, k)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 || b[bounds[len(bounds)-1]] <= 0 {
		return 0, false
	}
	total := b[bounds[len(bounds)-1]]
	rank := q * total
	prevBound, prevCount := 0.0, 0.0
	for _, k := range bounds {
		c := b[k]
		if c >= rank {
			if k > 1e300 { // +Inf: the highest finite bound
				return time.Duration(prevBound * float64(time.Second)), true
			}
			frac := 0.0
			if c > prevCount {
				frac = (rank - prevCount) / (c - prevCount)
			}
			return time.Duration((prevBound + (k-prevBound)*frac) * float64(time.Second)), true
		}
		prevBound, prevCount = k, c
	}
	return 0, false
}

// scrapeFsync sums the fsync histograms of the servers at these HTTP
// addresses.
func scrapeFsync(addrs []string) (fsyncBuckets, error) {
	sum := fsyncBuckets{}
	for _, a := range addrs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a+"/metrics", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			return nil, err
		}
		b, err := parseFsyncBuckets(resp.Body)
		resp.Body.Close()
		cancel()
		if err != nil {
			return nil, err
		}
		sum.add(b)
	}
	return sum, nil
}
