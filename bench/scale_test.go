package bench

import (
	"strings"
	"testing"
)

// TestScaleMarkdownCatchup checks the catch-up columns: figures for a
// measured catch-up, the leader's snapshot where the follower holds no
// file, "not measured" with its reason, and dashes where none was run.
func TestScaleMarkdownCatchup(t *testing.T) {
	res := []ScaleResult{
		{System: "meridian", Created: 10, Catchup: &ScaleCatchup{Procedure: "removed and added", Server: 2, ListenSec: 0.4, Sec: 12.34,
			PeakRSSMiB: 512.4, RSSMiB: 480.2, LeaderSnapshotMiB: 139.9}},
		{System: "zookeeper", Created: 10, Catchup: &ScaleCatchup{Procedure: "wiped", Server: 3, ListenSec: 1, Sec: 30.06,
			PeakRSSMiB: 900, RSSMiB: 850, SnapshotMiB: 120.25}},
		{System: "etcd", Created: 10, Catchup: &ScaleCatchup{Procedure: "member remove and add", Server: 1, Error: "unhealthy cluster"}},
		{System: "old", Created: 10},
	}
	md := ScaleMarkdown(res, "")
	header := strings.SplitN(md, "\n", 2)[0]
	if !strings.HasSuffix(header, "| catch-up s (listening s) | catch-up peak RSS MiB | RSS caught up MiB | snapshot received MiB |") {
		t.Fatalf("header: %s", header)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(md, "\n") {
		if f := strings.Split(l, " | "); len(f) > 1 && strings.HasPrefix(l, "| ") {
			rows[strings.TrimPrefix(f[0], "| ")] = l
		}
	}
	for sys, suffix := range map[string]string{
		"meridian":  "| 12.3 (0.4) | 512 | 480 | 139.9 (leader's) |",
		"zookeeper": "| 30.1 (1.0) | 900 | 850 | 120.2 |",
		"etcd":      "| not measured | — | — | — |",
		"old":       "| — | — | — | — |",
	} {
		if !strings.HasSuffix(rows[sys], suffix) {
			t.Errorf("%s row %q does not end %q", sys, rows[sys], suffix)
		}
		if n, want := strings.Count(rows[sys], "|"), strings.Count(header, "|"); n != want {
			t.Errorf("%s row has %d cells' bars, header %d", sys, n, want)
		}
	}
	for _, want := range []string{"- meridian, server 2: removed and added; the leader's last snapshot (its log) 139.9 MiB.",
		"- zookeeper, server 3: wiped.", "- etcd, server 1: member remove and add; not measured: unhealthy cluster."} {
		if !strings.Contains(md, want) {
			t.Errorf("no line %q in\n%s", want, md)
		}
	}
}
