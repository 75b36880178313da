package errs

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestZKConnectionLossSet pins the errors the ZooKeeper port answers by
// closing the connection: those that mean "this server cannot serve the
// request now" or "its outcome is unknown", and no other.
func TestZKConnectionLossSet(t *testing.T) {
	lost := map[*Error]bool{ErrNotLeader: true, ErrUnavailable: true, ErrOutcomeUnknown: true,
		ErrStopped: true, ErrConnectionLoss: true, ErrTimeout: true, ErrWrongGroup: true,
		ErrNoQuorumInFlight: true, ErrNoQuorumRead: true}
	for _, e := range all {
		if got := ZKConnectionLoss(e); got != lost[e] {
			t.Errorf("ZKConnectionLoss(%q) = %v, want %v", e.Msg, got, lost[e])
		}
		if got := ZKConnectionLoss(fmt.Errorf("propose: %w", e)); got != lost[e] {
			t.Errorf("ZKConnectionLoss(wrapped %q) = %v, want %v", e.Msg, got, lost[e])
		}
		// Nothing that stays a reply carries ZooKeeper's connection loss.
		if !lost[e] && ZKCode(e) == zkConnectionLoss {
			t.Errorf("%q maps to connection loss but is answered in a reply", e.Msg)
		}
	}
	for _, err := range []error{context.DeadlineExceeded, context.Canceled, fmt.Errorf("wait: %w", context.DeadlineExceeded)} {
		if !ZKConnectionLoss(err) {
			t.Errorf("ZKConnectionLoss(%v) = false", err)
		}
	}
	for _, err := range []error{nil, errors.New("something else")} {
		if ZKConnectionLoss(err) {
			t.Errorf("ZKConnectionLoss(%v) = true", err)
		}
	}
}

// A declared error the server wrapped with a detail reaches the client as
// the same value (errors.Is) with the detail, over gRPC; declared messages
// that contain ": " themselves are found whole.
func TestGRPCCarriesDetail(t *testing.T) {
	wrapped := fmt.Errorf("%w: zone survival needs members in 3 zones of region \"eu\"; it has 2 ([a b])", ErrInvalidKeyspace)
	got := FromGRPC(GRPCStatus(wrapped))
	if !errors.Is(got, ErrInvalidKeyspace) || got.Error() != wrapped.Error() {
		t.Fatalf("got %v, want %v", got, wrapped)
	}
	for _, e := range all {
		if got := FromGRPC(GRPCStatus(e)); got != e {
			t.Errorf("%q came back as %v", e.Msg, got)
		}
		w := fmt.Errorf("%w: why: because", e)
		if got := FromGRPC(GRPCStatus(w)); !errors.Is(got, e) || got.Error() != w.Error() {
			t.Errorf("%q with a detail came back as %v", e.Msg, got)
		}
	}
	// Wrapped in front (not the server's detail): the declared message only.
	if got := FromGRPC(GRPCStatus(fmt.Errorf("propose: %w", ErrNoNode))); got != ErrNoNode {
		t.Fatalf("prefixed: %v", got)
	}
}
