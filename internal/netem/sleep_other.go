//go:build !linux

package netem

import "time"

// sleepUntil waits until t or until done is closed (timer-based: may
// overshoot by the platform's timer resolution).
func sleepUntil(t time.Time, done <-chan struct{}) bool {
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
