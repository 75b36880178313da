package netem

import (
	"syscall"
	"time"
)

// timerSlack is how early the timer wakes before the precise sleep takes
// over: Go's timers wake through the netpoller, whose epoll timeout has
// millisecond resolution, so they overshoot by 0–1 ms (0.6 ms on average on
// the benchmark machine). That would add about 1 ms to every emulated round
// trip and make sub-millisecond delays impossible.
const timerSlack = time.Millisecond

// sleepUntil waits until t or until done is closed: a timer for all but the
// last timerSlack, then nanosleep in this goroutine's thread, accurate to
// tens of microseconds, for the rest.
//
// Only the last stretch may block a thread. A goroutine in nanosleep keeps
// its P until the runtime's monitor takes it back (up to 10 ms later when
// the monitor has backed off), so sleeping whole delays that way starved
// the process: with GOMAXPROCS 2 and a few dozen connections each delivering
// chunks, two sleepers held both Ps while the other links' goroutines sat
// runnable. Seed 002 at 30 ms, 50 gRPC clients: 142 writes/s with the whole
// delay in nanosleep, 525/s with a timer (the links live in the benchmark
// process, Meridian's peer links too).
func sleepUntil(t time.Time, done <-chan struct{}) bool {
	if d := time.Until(t) - timerSlack; d > 0 {
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-done:
			timer.Stop()
			return false
		}
	}
	select {
	case <-done:
		return false
	default:
	}
	if d := time.Until(t); d > 0 {
		ts := syscall.NsecToTimespec(int64(min(d, timerSlack)))
		for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
		}
	}
	return true
}
