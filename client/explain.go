package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/tree"
)

// Errors that say what and why. A server answers with a declared error
// alone (its code and fixed message, the same on both protocols), which
// names neither the node nor the value that made the request fail. After a
// failure, and only then, the client works out or looks up what the caller
// needs to act on it (the rule a path breaks, the missing parent, the
// current version, the number of children) and wraps the error with it:
// errors.Is still matches the declared value. A look-up that itself fails
// leaves the error as the server sent it.

// explainPath wraps ErrInvalidPath with the rule path breaks.
func explainPath(path string, sequential bool, err error) error {
	if !errors.Is(err, ErrInvalidPath) {
		return err
	}
	if why := tree.PathProblem(path, sequential); why != "" {
		return fmt.Errorf("%w: %q: %s", err, path, why)
	}
	return fmt.Errorf("%w: %q", err, path)
}

// explainRead adds the path to a read's error.
func explainRead(path string, err error) error {
	switch {
	case errors.Is(err, ErrInvalidPath):
		return explainPath(path, false, err)
	case errors.Is(err, ErrNoNode), errors.Is(err, ErrNoAuth):
		return fmt.Errorf("%w: %s", err, path)
	}
	return err
}

// explainCreate names the missing parent of a create that failed with
// ErrNoNode, the existing node of ErrNodeExists, and the ephemeral parent
// of ErrNoChildrenForEphemerals.
func (c *Client) explainCreate(ctx context.Context, path string, mode CreateMode, err error) error {
	sequential := mode == PersistentSequential || mode == EphemeralSequential || mode == PersistentSequentialWithTTL
	switch {
	case errors.Is(err, ErrInvalidPath):
		return explainPath(path, sequential, err)
	case errors.Is(err, ErrNodeExists):
		return fmt.Errorf("%w: %s", err, path)
	case errors.Is(err, ErrNoChildrenForEphemerals):
		return fmt.Errorf("%w: the parent of %s is ephemeral", err, path)
	case errors.Is(err, ErrNoNode):
		// The highest ancestor that is missing: creating it is the first
		// step.
		missing := ""
		for p := parentOf(path); p != "/"; p = parentOf(p) {
			ok, _, lerr := c.Exists(ctx, p)
			if lerr != nil {
				break
			}
			if ok {
				break
			}
			missing = p
		}
		if missing == "" {
			return fmt.Errorf("%w: the parent of %s", err, path)
		}
		return fmt.Errorf("%w: %s (an ancestor of %s) is missing", err, missing, path)
	}
	return err
}

// explainWrite adds the path and, for ErrBadVersion, the expected and the
// current version to a failed Set or Delete; for ErrNotEmpty, how many
// children the node has.
func (c *Client) explainWrite(ctx context.Context, path string, version int32, err error) error {
	switch {
	case errors.Is(err, ErrInvalidPath):
		return explainPath(path, false, err)
	case errors.Is(err, ErrNoNode), errors.Is(err, ErrNoAuth):
		return fmt.Errorf("%w: %s", err, path)
	case errors.Is(err, ErrBadVersion):
		ok, st, lerr := c.Exists(ctx, path)
		if lerr != nil || !ok {
			return fmt.Errorf("%w: %s: expected version %d", err, path, version)
		}
		return fmt.Errorf("%w: %s: expected version %d, current version %d", err, path, version, st.GetVersion())
	case errors.Is(err, ErrNotEmpty):
		ok, st, lerr := c.Exists(ctx, path)
		if lerr != nil || !ok {
			return fmt.Errorf("%w: %s", err, path)
		}
		return fmt.Errorf("%w: %s has %d children", err, path, st.GetNumChildren())
	}
	return err
}

// explainLock says which rule a refused acquire broke (the server answers
// ErrBadArguments for all of them).
func (c *Client) explainLock(ctx context.Context, name string, opts LockOptions, err error) error {
	if !errors.Is(err, ErrBadArguments) {
		return err
	}
	permits := max(opts.Permits, 1)
	switch {
	case opts.LocalFirst < 0 || opts.LocalFirst > coord.MaxLocalFirst:
		return fmt.Errorf("%w: local-first K %d: want 0 (FIFO) to %d", err, opts.LocalFirst, coord.MaxLocalFirst)
	case opts.LocalFirst > 0 && permits > 1:
		return fmt.Errorf("%w: a local-first lock has one holder: local-first K with permits %d", err, permits)
	case permits > coord.MaxPermits:
		return fmt.Errorf("%w: permits %d: at most %d", err, permits, coord.MaxPermits)
	case permits > 1 && opts.Shared:
		return fmt.Errorf("%w: a semaphore (permits %d) has no shared holds", err, permits)
	case opts.Delay < 0 || opts.Delay.Milliseconds() > coord.MaxDelayMs:
		return fmt.Errorf("%w: lock-delay %v: want 0 to %d ms", err, opts.Delay, coord.MaxDelayMs)
	case len(opts.Value) > coord.MaxValueBytes:
		return fmt.Errorf("%w: value of %d bytes: at most %d", err, len(opts.Value), coord.MaxValueBytes)
	}
	// The name is in use with other settings: every acquirer of a name must
	// ask for the same permits and the same local-first K.
	locks, lerr := c.ListLocks(ctx, name)
	if lerr == nil {
		for _, l := range locks {
			if l.GetName() == name && l.GetPermits() != int32(permits) {
				return fmt.Errorf("%w: lock %s is held or awaited with permits %d, this acquire asks for %d (every acquirer of a name must ask for the same permits)",
					err, name, l.GetPermits(), permits)
			}
		}
	}
	return fmt.Errorf("%w: lock %s is held or awaited with another local-first K than %d (every acquirer of a name must give the same K; 0 is FIFO)",
		err, name, opts.LocalFirst)
}

// parentOf returns the parent of an absolute path; the root's is itself.
func parentOf(path string) string {
	i := strings.LastIndexByte(path, '/')
	if i <= 0 {
		return "/"
	}
	return path[:i]
}
