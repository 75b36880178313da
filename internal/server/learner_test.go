package server

import (
	"context"
	"testing"
	"time"

	"github.com/meridian-coord/meridian/client"
)

// A learner (non-voting replica) receives the log, serves reads, forwards
// writes and never leads; the quorum is a majority of the voters only.
func TestLearner(t *testing.T) {
	tc := newTestCluster(t, 4, func(c *Config) { c.Members[3].Role = "learner" })
	lead := tc.leader()
	if lead == 3 {
		t.Fatal("the learner leads")
	}
	learner := tc.client(tc.cfgs[3].Self().GRPC)
	if _, _, err := learner.Create(ctx(t), "/from-learner", []byte("w"), client.CreateOptions{}); err != nil {
		t.Fatalf("write through the learner: %v", err)
	}
	if data, _, err := learner.Get(ctx(t), "/from-learner"); err != nil || string(data) != "w" {
		t.Fatalf("linearizable read on the learner: %q %v", data, err)
	}
	voter := tc.client(tc.cfgs[lead].Self().GRPC)
	if _, err := voter.Set(ctx(t), "/from-learner", []byte("v2"), -1); err != nil {
		t.Fatal(err)
	}
	// Another client's write: after a sync (a ReadIndex round from the
	// learner to the leader) the learner's local reads include it.
	if err := learner.Sync(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if data, _, err := learner.Get(ctx(t), "/from-learner", client.WithConsistency(client.Sequential)); err != nil || string(data) != "v2" {
		t.Fatalf("sequential read on the learner after sync: %q %v", data, err)
	}
	for deadline := time.Now().Add(10 * time.Second); tc.servers[3].Replica().Status().Role != "learner"; {
		if time.Now().After(deadline) {
			t.Fatalf("learner's role: %q", tc.servers[3].Replica().Status().Role)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := tc.servers[3].fourLetterWord("srvr"); !containsLine(got, "Mode: observer") {
		t.Fatalf("srvr on the learner:\n%s", got)
	}
	cx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := voter.TransferLeader(cx, 4); err == nil {
		t.Fatal("leadership transferred to a learner")
	}

	// Without the learner the voters still make a quorum.
	tc.stop(3)
	if _, err := voter.Set(ctx(t), "/from-learner", []byte("v3"), -1); err != nil {
		t.Fatalf("write with the learner down: %v", err)
	}
	tc.start(3)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if data, err := treeGet(tc.servers[3], "/from-learner"); err == nil && string(data) == "v3" {
			break
		} else if time.Now().After(deadline) {
			t.Fatal("the restarted learner did not catch up")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Two voters down: one voter and the learner are not a quorum.
	others := []int{}
	for i := 0; i < 3; i++ {
		if i != lead {
			others = append(others, i)
		}
	}
	tc.stop(others[0])
	tc.stop(others[1])
	cx2, cancel2 := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel2()
	if _, err := voter.Set(cx2, "/from-learner", []byte("v4"), -1); err == nil {
		t.Fatal("a write committed with one voter and a learner")
	}
}

func containsLine(text, line string) bool {
	for _, l := range splitLines(text) {
		if l == line {
			return true
		}
	}
	return false
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// treeGet reads a server's tree directly, under its lock.
func treeGet(s *Server, path string) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	data, _, err := s.mu.tree.Get(path)
	return data, err
}
