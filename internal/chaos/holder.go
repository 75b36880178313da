package chaos

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/errs"
)

// The GC-pause fault needs a lock holder that can be SIGSTOPped: a child
// process (this binary re-executed with holderEnv set) that takes the lock,
// reports its token, and then does fenced writes on command:
//
//	stdout: "token N"
//	stdin "own VALUE"   → fenced Set through its own (possibly expired) session
//	stdin "fresh VALUE" → fenced Set through a new session, as storage that
//	                      does not care about sessions would see it
//	reply:  "ok VERSION" | "err stale|expired|unknown|other MESSAGE"
const holderEnv = "MERIDIAN_CHAOS_HOLDER"

// holderTLSEnv names the cluster's dev PKI directory for the holder.
const holderTLSEnv = "MERIDIAN_CHAOS_HOLDER_TLS"

// holderSession is the holder's session timeout (the server's minimum with
// the harness's session tick is 500 ms).
const holderSession = time.Second

// MaybeRunHolder runs the holder and exits if this process was started as
// one; call it first thing in main or TestMain.
func MaybeRunHolder() {
	eps := os.Getenv(holderEnv)
	if eps == "" {
		return
	}
	if err := runHolder(strings.Split(eps, ","), clientTLS(os.Getenv(holderTLSEnv)), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runHolder(eps []string, tc *tls.Config, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := client.Config{Endpoints: eps, SessionTimeout: holderSession, RequestTimeout: opTimeout, DialTimeout: time.Second, KeepEndpointOrder: true, TLS: tc}
	c, err := client.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	lctx, lcancel := context.WithTimeout(ctx, 20*time.Second)
	lease, err := c.Lock(lctx, lockName, client.LockOptions{})
	lcancel()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "token %d %d\n", lease.Token, c.SessionID())
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		cmd, val, _ := strings.Cut(sc.Text(), " ")
		wctx, wcancel := context.WithTimeout(ctx, opTimeout)
		var st *client.Stat
		switch cmd {
		case "own":
			st, err = c.Fenced(lockName, lease.Token).Set(wctx, lockedPath, []byte(val), client.AnyVersion)
		case "fresh":
			var c2 *client.Client
			c2, err = client.New(wctx, cfg)
			if err == nil {
				st, err = c2.Fenced(lockName, lease.Token).Set(wctx, lockedPath, []byte(val), client.AnyVersion)
				c2.Close()
			}
		default:
			err = fmt.Errorf("unknown command %q", cmd)
		}
		wcancel()
		switch {
		case err == nil:
			fmt.Fprintf(out, "ok %d\n", st.GetVersion())
		case errors.Is(err, errs.ErrStaleToken):
			fmt.Fprintf(out, "err stale %v\n", err)
		case errors.Is(err, errs.ErrSessionExpired):
			fmt.Fprintf(out, "err expired %v\n", err)
		case classify(err) == Unknown:
			fmt.Fprintf(out, "err unknown %v\n", err)
		default:
			fmt.Fprintf(out, "err other %v\n", err)
		}
	}
	return sc.Err()
}

// holderProc is the parent's handle on a holder process.
type holderProc struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string // stdout, line by line; closed at EOF
	done  chan struct{}
	Token uint64
	Sess  int64
}

// startHolder starts a holder and waits (bounded) for its grant.
func startHolder(eps []string, tlsDir string, stderr io.Writer) (*holderProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), holderEnv+"="+strings.Join(eps, ","), holderTLSEnv+"="+tlsDir)
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h := &holderProc{cmd: cmd, in: in, lines: make(chan string, 16), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(outp)
		for sc.Scan() {
			h.lines <- strings.TrimSpace(sc.Text())
		}
		close(h.lines)
	}()
	go func() { cmd.Wait(); close(h.done) }()
	line, err := h.readLine(30 * time.Second)
	if err != nil {
		h.kill()
		return nil, fmt.Errorf("holder did not report a grant: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "token" {
		h.kill()
		return nil, fmt.Errorf("holder said %q", line)
	}
	h.Token, _ = strconv.ParseUint(f[1], 10, 64)
	h.Sess, _ = strconv.ParseInt(f[2], 10, 64)
	return h, nil
}

// readLine reads one line, giving up after d.
func (h *holderProc) readLine(d time.Duration) (string, error) {
	select {
	case l, ok := <-h.lines:
		if !ok {
			return "", io.EOF
		}
		return l, nil
	case <-time.After(d):
		return "", errors.New("timed out")
	}
}

// write asks the holder for a fenced write and returns its reply line.
func (h *holderProc) write(how, val string) (string, error) {
	if _, err := fmt.Fprintf(h.in, "%s %s\n", how, val); err != nil {
		return "", err
	}
	return h.readLine(3 * opTimeout)
}

func (h *holderProc) stop() { h.cmd.Process.Signal(syscall.SIGSTOP) }
func (h *holderProc) cont() { h.cmd.Process.Signal(syscall.SIGCONT) }

func (h *holderProc) kill() {
	h.cmd.Process.Signal(syscall.SIGCONT)
	h.cmd.Process.Kill()
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
	}
}
