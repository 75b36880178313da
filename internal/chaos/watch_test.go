package chaos

import (
	"strings"
	"testing"
	"time"
)

// TestWatchChecksFail feeds the watch checker each kind of violation it is
// there to catch, and a clean sequence it must accept.
func TestWatchChecksFail(t *testing.T) {
	k := keyPath("", 0)
	exists := nodeState{Exists: true, Mzxid: 10}
	for _, tc := range []struct {
		name string
		run  func(tr *watchTracker)
		want string // "" = no violation
	}{
		{"clean", func(tr *watchTracker) {
			tr.checkEvent("w", k, exists, "changed", k, 12, 10)
			tr.checkAfter("w", k, exists, nodeState{Exists: true, Mzxid: 12}, "changed", 12)
		}, ""},
		{"clean, deleted then absent", func(tr *watchTracker) {
			tr.checkEvent("w", k, exists, "deleted", k, 12, 0)
			tr.checkAfter("w", k, exists, nodeState{}, "deleted", 12)
		}, ""},
		{"clean, reconnect notification", func(tr *watchTracker) {
			tr.checkEvent("w", k, exists, "changed", k, -1, 12)
			tr.checkAfter("w", k, exists, nodeState{Exists: true, Mzxid: 14}, "changed", -1)
		}, ""},
		{"other path", func(tr *watchTracker) { tr.checkEvent("w", k, exists, "changed", keyPath("", 1), 12, 0) }, "got an event for"},
		{"created on existing", func(tr *watchTracker) { tr.checkEvent("w", k, exists, "created", k, 12, 0) }, "watch on existing"},
		{"changed on absent", func(tr *watchTracker) { tr.checkEvent("w", k, nodeState{}, "changed", k, 12, 0) }, "watch on absent"},
		{"event not after the registered state", func(tr *watchTracker) { tr.checkEvent("w", k, exists, "changed", k, 10, 0) }, "not after the state"},
		{"out of order", func(tr *watchTracker) { tr.checkEvent("w", k, exists, "changed", k, 12, 15) }, "out of order"},
		{"read older than the event", func(tr *watchTracker) {
			tr.checkAfter("w", k, nodeState{}, nodeState{Exists: true, Mzxid: 11}, "created", 12)
		}, "shows older data"},
		{"no newer data after an event", func(tr *watchTracker) {
			tr.checkAfter("w", k, exists, exists, "changed", 0)
		}, "shows no newer data"},
		{"missed change", func(tr *watchTracker) {
			tr.set(watchKey{"w", k}, exists)
			tr.awaitFinal([]string{"w"}, 1, map[string]nodeState{k: {Exists: true, Mzxid: 20}}, 50*time.Millisecond)
		}, "has not fired"},
		{"no watch set", func(tr *watchTracker) {
			tr.awaitFinal([]string{"w"}, 1, map[string]nodeState{k: {}}, 50*time.Millisecond)
		}, "has no watch"},
		{"caught up", func(tr *watchTracker) {
			tr.set(watchKey{"w", k}, nodeState{Exists: true, Mzxid: 20})
			tr.awaitFinal([]string{"w"}, 1, map[string]nodeState{k: {Exists: true, Mzxid: 20}}, 50*time.Millisecond)
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newWatchTracker("")
			tc.run(tr)
			got := strings.Join(tr.violations, "\n")
			if tc.want == "" && got != "" {
				t.Fatalf("unexpected violation: %s", got)
			}
			if tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("want a violation containing %q, got %q", tc.want, got)
			}
		})
	}
}
