package netem

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// timerSlack is how early the Go timer wakes before the precise wait takes
// over: Go's timers wake through the netpoller, whose epoll timeout has
// millisecond resolution, so they overshoot by 0–1 ms (0.6 ms on average on
// the benchmark machine). That would add about 1 ms to every emulated round
// trip and make sub-millisecond delays impossible.
const timerSlack = time.Millisecond

// sleeper waits for a link direction's delivery times. The last stretch
// (at most timerSlack) is waited on a timerfd the netpoller watches: the
// fd becomes readable when the timer fires and the netpoller reports it as
// it reports a socket's data (epoll's millisecond timeout does not apply to
// events), while the waiting goroutine is parked and holds no P. A
// thread-blocking nanosleep, used before, kept its P until the runtime's
// monitor took it back (20 µs to 10 ms later, by the monitor's back-off):
// with GOMAXPROCS 2 and every chunk of every link ending in one, the links
// queued behind each other's sleeps. BenchmarkClosedLoop (32 connections,
// 0.2 ms round trip): see docs/bench/notes/suite.md.
type sleeper struct {
	f   *os.File // nil: no timerfd, nanosleep instead
	buf [8]byte
}

func newSleeper() *sleeper {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return &sleeper{}
	}
	// A non-blocking fd given to os.NewFile is registered with the netpoller.
	return &sleeper{f: os.NewFile(uintptr(fd), "netem-timerfd")}
}

func (s *sleeper) close() {
	if s.f != nil {
		s.f.Close()
	}
}

// until waits until t or until done is closed; false when done closed.
func (s *sleeper) until(t time.Time, done <-chan struct{}) bool {
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
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	if s.f != nil && s.wait(d) {
		return true
	}
	ts := unix.NsecToTimespec(int64(min(d, timerSlack)))
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
	return true
}

// wait arms the timerfd for d and parks until it fires; false on any
// error (the caller sleeps instead).
func (s *sleeper) wait(d time.Duration) bool {
	rc, err := s.f.SyscallConn()
	if err != nil {
		return false
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
		serr = unix.TimerfdSettime(int(fd), 0, &spec, nil)
	})
	if err != nil || serr != nil {
		return false
	}
	// The read returns the expiration count once the timer has fired.
	_, err = s.f.Read(s.buf[:])
	return err == nil
}
