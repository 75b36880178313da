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
		ErrStopped: true, ErrConnectionLoss: true, ErrTimeout: true, ErrWrongGroup: true}
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
