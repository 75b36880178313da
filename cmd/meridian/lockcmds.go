package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-coord/meridian/client"
)

func lockCommands() []*cobra.Command {
	var shared bool
	var permits, localFirst int
	var region string
	var wait, delay time.Duration
	lock := &cobra.Command{
		Use:   "lock NAME -- COMMAND [ARGS...]",
		Short: "Run a command while holding a lock (its fencing token in MERIDIAN_FENCING_TOKEN)",
		Long: `Acquires NAME (waiting in FIFO order, at most --wait if set), runs COMMAND with
MERIDIAN_LOCK and MERIDIAN_FENCING_TOKEN in its environment, and releases the
lock when it exits. If the lock is lost while COMMAND runs (session expired,
forced release), COMMAND gets SIGTERM and meridian exits with status 3.
Exit status: COMMAND's, 2 if the lock could not be acquired, 3 if it was lost.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer cancel()
			lease, err := c.Lock(ctx, args[0], client.LockOptions{Shared: shared, Timeout: wait, Delay: delay, Permits: permits,
				LocalFirst: localFirst, Region: region})
			if err != nil {
				fmt.Fprintln(os.Stderr, "error: lock:", err)
				os.Exit(2)
			}
			child := exec.Command(args[1], args[2:]...)
			child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
			child.Env = append(os.Environ(), "MERIDIAN_LOCK="+args[0], "MERIDIAN_FENCING_TOKEN="+strconv.FormatUint(lease.Token, 10))
			if err := child.Start(); err != nil {
				lease.Unlock(context.Background())
				return err
			}
			done := make(chan error, 1)
			go func() { done <- child.Wait() }()
			lost := false
			select {
			case err = <-done:
			case <-lease.Lost():
				lost = true
				fmt.Fprintf(os.Stderr, "error: lock %s lost; stopping the command\n", args[0])
				child.Process.Signal(syscall.SIGTERM)
				err = <-done
			case <-ctx.Done():
				child.Process.Signal(syscall.SIGTERM)
				err = <-done
			}
			if !lost {
				uctx, ucancel := context.WithTimeout(context.Background(), flagTimeout)
				if uerr := lease.Unlock(uctx); uerr != nil {
					fmt.Fprintln(os.Stderr, "warning: unlock:", uerr)
				}
				ucancel()
			}
			c.Close()
			if lost {
				os.Exit(3)
			}
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				os.Exit(exit.ExitCode())
			}
			return err
		},
	}
	lock.Flags().BoolVar(&shared, "shared", false, "take a shared (read) hold")
	lock.Flags().DurationVar(&wait, "wait", 0, "give up after waiting this long (0: wait until interrupted)")
	lock.Flags().DurationVar(&delay, "delay", 0, "lock-delay if this session expires while holding")
	lock.Flags().IntVar(&permits, "permits", 1, "N > 1: a semaphore with N permits (at most N holders at once)")
	lock.Flags().IntVar(&localFirst, "local-first", 0, "K > 0: hand the lock to waiters in the holder's region first, at most K times in a row")
	lock.Flags().StringVar(&region, "region", "", "this client's region for --local-first (default: its server's)")

	locks := &cobra.Command{
		Use:   "locks [PREFIX]",
		Short: "List locks, their holders (with tokens) and waiters",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			return withClient(func(ctx context.Context, c *client.Client) error {
				ls, err := c.ListLocks(ctx, prefix)
				if err != nil {
					return err
				}
				return output(ls, func() {
					w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
					fmt.Fprintln(w, "LOCK\tHOLDERS (session:token)\tWAITERS")
					for _, l := range ls {
						hs, ws := "", ""
						for _, h := range l.GetHolders() {
							mode := ""
							if h.GetShared() {
								mode = "(shared)"
							}
							hs += fmt.Sprintf("0x%x:%d%s ", h.GetSessionId(), h.GetToken(), mode)
						}
						for _, wt := range l.GetWaiters() {
							ws += fmt.Sprintf("0x%x ", wt.GetSessionId())
						}
						fmt.Fprintf(w, "%s\t%s\t%s\n", l.GetName(), hs, ws)
					}
					w.Flush()
				})
			})
		},
	}

	unlock := &cobra.Command{
		Use:   "unlock NAME SESSION_ID",
		Short: "Force a holder off a lock (operator action; the holder is told)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[1], 0, 64)
			if err != nil {
				return fmt.Errorf("session id %q: want a number, as locks prints it (0x...)", args[1])
			}
			return withClient(func(ctx context.Context, c *client.Client) error {
				return c.ForceUnlock(ctx, args[0], id)
			})
		},
	}
	elect := &cobra.Command{
		Use:   "elect NAME VALUE",
		Short: "Campaign in an election, lead with VALUE until Ctrl-C (then resign)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return untilInterrupted(func(ctx context.Context, c *client.Client) error {
				fmt.Fprintf(os.Stderr, "campaigning for %s as %q...\n", args[0], args[1])
				lease, err := c.Campaign(ctx, args[0], []byte(args[1]))
				if err != nil {
					return err
				}
				fmt.Printf("elected %s token=%d\n", args[0], lease.Token)
				select {
				case <-ctx.Done():
					rctx, rcancel := context.WithTimeout(context.Background(), flagTimeout)
					defer rcancel()
					return lease.Unlock(rctx)
				case <-lease.Lost():
					return fmt.Errorf("leadership of %s lost", args[0])
				}
			})
		},
	}
	observe := &cobra.Command{
		Use:   "observe NAME",
		Short: "Print an election's leader and every change until Ctrl-C",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return untilInterrupted(func(ctx context.Context, c *client.Client) error {
				ch, err := c.Observe(ctx, args[0])
				if err != nil {
					return err
				}
				for li := range ch {
					if err := output(map[string]any{"elected": li.Elected, "session_id": li.Session, "token": li.Token, "value": string(li.Value)}, func() {
						if !li.Elected {
							fmt.Println("no leader")
							return
						}
						fmt.Printf("leader session=0x%x token=%d value=%s\n", li.Session, li.Token, li.Value)
					}); err != nil {
						return err
					}
				}
				if ctx.Err() != nil {
					return nil // Ctrl-C: the normal way to stop observing
				}
				return fmt.Errorf("observing %s ended: the connection to the server was lost", args[0])
			})
		},
	}
	counter := &cobra.Command{
		Use:   "counter NAME [DELTA]",
		Short: "Atomically add DELTA (default 0: read) to a counter and print its value",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var delta int64
			if len(args) == 2 {
				var err error
				if delta, err = strconv.ParseInt(args[1], 10, 64); err != nil {
					return fmt.Errorf("delta %q: want an integer", args[1])
				}
			}
			return withClient(func(ctx context.Context, c *client.Client) error {
				v, err := c.Add(ctx, args[0], delta)
				if err != nil {
					return err
				}
				return output(map[string]int64{"value": v}, func() { fmt.Println(v) })
			})
		},
	}
	return []*cobra.Command{lock, locks, unlock, elect, observe, counter}
}

// untilInterrupted runs fn with a session and a context that ends on Ctrl-C
// or SIGTERM, then closes the session.
func untilInterrupted(fn func(ctx context.Context, c *client.Client) error) error {
	c, err := dial()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	return fn(ctx, c)
}
