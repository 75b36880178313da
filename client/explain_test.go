package client

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/meridian-coord/meridian/internal/errs"
)

// TestExplainPathKeepsValue: the detail is added by wrapping; errors.Is
// still finds the declared value (and so its ZooKeeper and gRPC codes).
func TestExplainPathKeepsValue(t *testing.T) {
	err := explainPath("app", false, ErrInvalidPath)
	if !errors.Is(err, ErrInvalidPath) || errs.ZKCode(err) != errs.ZKCode(ErrInvalidPath) {
		t.Fatalf("wrapped error lost its value: %v", err)
	}
	if !strings.Contains(err.Error(), `"app": a path must start with /`) {
		t.Fatalf("explainPath = %v", err)
	}
	if err := explainRead("/x", ErrNoNode); !errors.Is(err, ErrNoNode) || err.Error() != "meridian: node does not exist: /x" {
		t.Fatalf("explainRead = %v", err)
	}
	if err := explainRead("/x", ErrTimeout); err != ErrTimeout {
		t.Fatalf("explainRead changed an unrelated error: %v", err)
	}
}

// TestFailFastRefused: with FailFast and every endpoint refusing, New
// fails at once with ErrUnavailable naming each endpoint and why, instead
// of retrying until its context ends.
func TestFailFastRefused(t *testing.T) {
	var eps []string
	for i := 0; i < 2; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, l.Addr().String())
		l.Close() // nothing listens there now: refused
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := New(ctx, Config{Endpoints: eps, FailFast: true})
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("New took %v to give up", took)
	}
	if !errors.Is(err, errs.ErrUnavailable) {
		t.Fatalf("New = %v, want ErrUnavailable", err)
	}
	for _, ep := range eps {
		if !strings.Contains(err.Error(), ep+": dial tcp "+ep+": connect: connection refused") {
			t.Errorf("error does not say why %s failed: %v", ep, err)
		}
	}
}
