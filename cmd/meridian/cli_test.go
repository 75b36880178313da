package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/client"
)

// parseOnly parses args as main would and runs the global checks, without
// running the command.
func parseOnly(t *testing.T, args ...string) (*cobra.Command, error) {
	t.Helper()
	root := newRootCmd()
	cmd, rest, err := root.Find(args)
	if err != nil {
		t.Fatalf("find %v: %v", args, err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return cmd, err
	}
	return cmd, root.PersistentPreRunE(cmd, cmd.Flags().Args())
}

func TestOutputFormatRefused(t *testing.T) {
	for _, f := range []string{"yaml", "JSON", ""} {
		_, err := parseOnly(t, "-o", f, "ls", "/")
		if err == nil || !strings.Contains(err.Error(), "supported formats are text, json") {
			t.Errorf("-o %q: %v, want the supported formats", f, err)
		}
	}
	for _, f := range []string{"text", "json"} {
		if _, err := parseOnly(t, "-o", f, "ls", "/"); err != nil {
			t.Errorf("-o %s: %v", f, err)
		}
	}
}

// TestConsistencyFlag: read consistency is --consistency; the old global
// --sequential still means it on the read commands, and create's own
// -s/--sequential (a sequential node) is not taken for it.
func TestConsistencyFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    client.Consistency
		seqNode bool
	}{
		{[]string{"get", "/x"}, client.Linearizable, false},
		{[]string{"--consistency", "sequential", "get", "/x"}, client.Sequential, false},
		{[]string{"ls", "/x", "--consistency", "linearizable"}, client.Linearizable, false},
		{[]string{"--sequential", "get", "/x"}, client.Sequential, false},
		{[]string{"stat", "--sequential", "/x"}, client.Sequential, false},
		{[]string{"create", "--sequential", "/x-"}, client.Linearizable, true},
		{[]string{"--sequential", "create", "/x-"}, client.Linearizable, true},
		{[]string{"create", "-s", "/x-", "--consistency", "sequential"}, client.Sequential, true},
	} {
		cmd, err := parseOnly(t, tc.args...)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if got := readConsistency(); got != tc.want {
			t.Errorf("%v: read consistency %v, want %v", tc.args, got, tc.want)
		}
		if cmd.Name() == "create" {
			if got, _ := cmd.Flags().GetBool("sequential"); got != tc.seqNode {
				t.Errorf("%v: create --sequential = %v, want %v", tc.args, got, tc.seqNode)
			}
		}
	}
	for _, args := range [][]string{
		{"--consistency", "eventual", "get", "/x"},
		{"--sequential", "--consistency", "linearizable", "get", "/x"},
	} {
		if _, err := parseOnly(t, args...); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// TestJSONComplete: every field of a message is present, zero or not, and
// empty lists are [], never null or missing.
func TestJSONComplete(t *testing.T) {
	encode := func(v any) string {
		var b bytes.Buffer
		if err := writeJSON(&b, v); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(encode(&pb.Stat{Czxid: 5})), &st); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"czxid", "mzxid", "ctime", "mtime", "version", "cversion", "aversion",
		"ephemeral_owner", "data_length", "num_children", "pzxid"} {
		if v, ok := st[k]; !ok || (k != "czxid" && v != float64(0)) {
			t.Errorf("stat field %s = %v (present %v)", k, v, ok)
		}
	}
	if got := strings.TrimSpace(encode([]*pb.LockInfo(nil))); got != "[]" {
		t.Errorf("no locks = %s, want []", got)
	}
	if got := strings.TrimSpace(encode([]string(nil))); got != "[]" {
		t.Errorf("no children = %s, want []", got)
	}
	var li map[string]any
	if err := json.Unmarshal([]byte(encode(&pb.LockInfo{Name: "a"})), &li); err != nil {
		t.Fatal(err)
	}
	if h, ok := li["holders"].([]any); !ok || len(h) != 0 || li["permits"] != float64(0) {
		t.Errorf("lock without holders: %v", li)
	}
	type row struct {
		Endpoint string     `json:"endpoint"`
		Error    string     `json:"error,omitempty"`
		Status   *pb.Header `json:"status,omitempty"`
	}
	if got := encode(row{Endpoint: "e"}); !strings.Contains(got, `"error": ""`) || !strings.Contains(got, `"status": null`) {
		t.Errorf("omitempty fields dropped: %s", got)
	}
	var enum map[string]any
	if err := json.Unmarshal([]byte(encode(&pb.MemberChangeOp{Type: pb.MemberChangeType_ADD_LEARNER})), &enum); err != nil {
		t.Fatal(err)
	}
	if enum["type"] != "ADD_LEARNER" || enum["member"] != nil {
		t.Errorf("enum and absent message: %v", enum)
	}
}
