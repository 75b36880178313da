//go:build !linux

package netem

import "time"

// sleeper waits with Go timers alone (may overshoot by the platform's
// timer resolution).
type sleeper struct{}

func newSleeper() *sleeper { return &sleeper{} }

func (*sleeper) close() {}

// until waits until t or until done is closed; false when done closed.
func (*sleeper) until(t time.Time, done <-chan struct{}) bool {
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-done:
		return false
	}
}
