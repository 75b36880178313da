package tree

import (
	"strings"
	"testing"
)

// TestPathProblem: every path ValidatePath refuses has a reason, and the
// reason names the rule.
func TestPathProblem(t *testing.T) {
	for _, tc := range []struct {
		path string
		seq  bool
		want string
	}{
		{"app", false, "must start with /"},
		{"", false, "must start with /"},
		{"/app/", false, "may not end with /"},
		{"/app/", true, ""},
		{"/a//b", false, "empty component"},
		{"/a/../b", false, ". or .."},
		{"/a\x01", false, "U+0001"},
		{"/" + strings.Repeat("a", MaxPathBytes), false, "at most"},
		{"/a/b", false, ""},
		{"/", false, ""},
	} {
		got := PathProblem(tc.path, tc.seq)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("PathProblem(%q, %v) = %q, want %q", tc.path, tc.seq, got, tc.want)
		}
		if (ValidatePath(tc.path, tc.seq) == nil) != (got == "") {
			t.Errorf("ValidatePath(%q, %v) disagrees with PathProblem %q", tc.path, tc.seq, got)
		}
	}
}
