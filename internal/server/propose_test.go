package server

import (
	"context"
	"errors"
	"testing"

	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/fsm"
	"github.com/meridian-coord/meridian/internal/tree"
)

// A proposal that cannot be encoded, and a write the core refuses, fail at
// once: their Future is done, Wait returns the error, nothing is handed to
// raft (the Server here has no replica) and no waiter is left behind.
func TestSubmitRefusedBeforeRaft(t *testing.T) {
	s := &Server{fsm: fsm.New(fsm.Hooks{})} // routing reads the state; no replica
	s.mu = stateView{fsm: s.fsm, tree: s.fsm.Tree(), coord: s.fsm.Coord()}
	s.waiters.m = map[uint64]*Future{}
	s.root = &group{s: s, fsm: s.fsm, waiters: &s.waiters}
	for name, f := range map[string]*Future{
		"fenced, bad lock name": s.Submit(context.Background(), fencedCommand(&tree.Command{Op: tree.Op{Type: tree.OpSetData, Path: "/a"}}, "", 1)),
		"read-only session":     s.submitWrite(context.Background(), &writeRequest{readOnly: true, op: tree.Op{Type: tree.OpCreate, Path: "/a"}}),
		"too many auth ids": s.Submit(context.Background(), treeCommand(&tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: "/a"},
			Auth: make([]tree.ID, tree.MaxAuthIDs+1)})),
	} {
		select {
		case <-f.Done():
		default:
			t.Errorf("%s: not done", name)
			continue
		}
		if _, err := f.Wait(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := s.submitWrite(context.Background(), &writeRequest{readOnly: true}).Wait(); !errors.Is(err, errs.ErrNotReadOnly) {
		t.Errorf("read-only write: %v, want ErrNotReadOnly", err)
	}
	if n := len(s.waiters.m); n != 0 {
		t.Errorf("%d waiters left", n)
	}
}
