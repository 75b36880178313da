package netem

import (
	"syscall"
	"time"
)

// sleepUntil waits until t or until done is closed. Go's timers wake through
// the netpoller, whose epoll timeout has millisecond resolution: they
// overshoot by 0–1 ms (0.5 ms on average), which would add about 1 ms to every
// emulated round trip and make sub-millisecond delays impossible. nanosleep
// in the writer's own thread is accurate to tens of microseconds; it sleeps
// in slices so that a closed connection is noticed within one slice.
func sleepUntil(t time.Time, done <-chan struct{}) bool {
	const slice = 20 * time.Millisecond
	for {
		select {
		case <-done:
			return false
		default:
		}
		d := time.Until(t)
		if d <= 0 {
			return true
		}
		if d > slice {
			d = slice
		}
		ts := syscall.NsecToTimespec(int64(d))
		for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
		}
	}
}
