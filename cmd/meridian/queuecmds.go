package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-coord/meridian/client"
)

func queueCommand() *cobra.Command {
	q := &cobra.Command{Use: "queue", Short: "FIFO work queues with at-least-once delivery"}
	push := &cobra.Command{
		Use: "push NAME DATA", Short: "Append an item; prints its id", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, c *client.Client) error {
				id, err := c.Queue(args[0]).Push(ctx, []byte(args[1]))
				if err != nil {
					return err
				}
				return output(map[string]uint64{"id": id}, func() { fmt.Println(id) })
			})
		},
	}
	var visibility time.Duration
	var wait, ack bool
	pop := &cobra.Command{
		Use:   "pop NAME",
		Short: "Take the head item; prints id, attempt and data",
		Long: `Takes the head item and prints "id=ID attempt=N" and its data. The item stays
invisible to other consumers for --visibility: settle it with
"meridian queue ack NAME ID" (done) or "meridian queue nack NAME ID" (back
to the front) before then, or it is redelivered. With --ack it is acked at
once (at-most-once from here on). Without --wait an empty queue is an error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			run := withClient
			if wait {
				run = untilInterrupted // block until an item comes or Ctrl-C
			}
			return run(func(ctx context.Context, c *client.Client) error {
				// Detached unless acked here: this command's session ends when
				// it exits, and the item must outlive it for a later ack.
				it, err := c.Queue(args[0]).Pop(ctx, client.PopOptions{Visibility: visibility, TryOnly: !wait, Detach: !ack})
				if err != nil {
					return err
				}
				if ack {
					if err := it.Ack(ctx); err != nil {
						return fmt.Errorf("popped id=%d attempt=%d but ack failed: %w", it.ID, it.Attempt, err)
					}
				}
				return output(map[string]any{"id": it.ID, "attempt": it.Attempt, "data": string(it.Data), "deadline_ms": it.Deadline.UnixMilli()},
					func() { fmt.Printf("id=%d attempt=%d\n%s\n", it.ID, it.Attempt, it.Data) })
			})
		},
	}
	pop.Flags().DurationVar(&visibility, "visibility", 30*time.Second, "how long the item stays invisible to other consumers (at most 12h)")
	pop.Flags().BoolVar(&wait, "wait", false, "wait for an item (FIFO among consumers) until one comes or Ctrl-C")
	pop.Flags().BoolVar(&ack, "ack", false, "ack the item at once")
	var attempt uint32
	settle := func(nack bool) *cobra.Command {
		use, short := "ack NAME ID", "Mark a delivered item done (it leaves the queue)"
		if nack {
			use, short = "nack NAME ID", "Give a delivered item back (to the front of the queue)"
		}
		return &cobra.Command{
			Use: use, Short: short, Args: cobra.ExactArgs(2),
			RunE: func(cmd *cobra.Command, args []string) error {
				id, err := strconv.ParseUint(args[1], 10, 64)
				if err != nil {
					return fmt.Errorf("item id %q: want the number queue pop printed (id=N)", args[1])
				}
				return withClient(func(ctx context.Context, c *client.Client) error {
					if nack {
						return c.Queue(args[0]).Nack(ctx, id, attempt)
					}
					return c.Queue(args[0]).Ack(ctx, id, attempt)
				})
			},
		}
	}
	ackCmd, nackCmd := settle(false), settle(true)
	for _, c := range []*cobra.Command{ackCmd, nackCmd} {
		c.Flags().Uint32Var(&attempt, "attempt", 0, "the delivery's attempt (0: whichever is current)")
	}
	ls := &cobra.Command{
		Use: "ls NAME", Short: "Show a queue's length, in-flight items and waiting consumers", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, c *client.Client) error {
				st, err := c.Queue(args[0]).Stats(ctx, 1000)
				if err != nil {
					return err
				}
				return output(st, func() {
					fmt.Printf("ready=%d in-flight=%d consumers=%d bytes=%d\n", st.GetReady(), st.GetInFlight(), st.GetConsumers(), st.GetBytes())
					if len(st.GetInFlightItems()) == 0 {
						return
					}
					w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
					fmt.Fprintln(w, "ID\tATTEMPT\tSESSION\tLEASE ENDS")
					for _, it := range st.GetInFlightItems() {
						sess := "detached"
						if it.GetSessionId() != 0 {
							sess = fmt.Sprintf("0x%x", it.GetSessionId())
						}
						fmt.Fprintf(w, "%d\t%d\t%s\t%s\n", it.GetId(), it.GetAttempt(), sess, time.UnixMilli(it.GetDeadlineMs()).Format(time.RFC3339))
					}
					w.Flush()
				})
			})
		},
	}
	q.AddCommand(push, pop, ackCmd, nackCmd, ls)
	return q
}

func barrierCommand() *cobra.Command {
	b := &cobra.Command{Use: "barrier", Short: "Barriers: simple (set/wait/rm) and double (run)"}
	simple := func(use, short string, fn func(*client.Barrier, context.Context) error) *cobra.Command {
		return &cobra.Command{
			Use: use, Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return withClient(func(ctx context.Context, c *client.Client) error { return fn(c.Barrier(args[0]), ctx) })
			},
		}
	}
	set := simple("set NAME", "Raise a barrier (waiters block until it is removed)", (*client.Barrier).Set)
	rm := simple("rm NAME", "Remove a barrier, releasing its waiters", (*client.Barrier).Remove)
	var waitFor time.Duration
	wait := &cobra.Command{
		Use: "wait NAME", Short: "Block until the barrier is removed (or not set)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return untilInterrupted(func(ctx context.Context, c *client.Client) error {
				return c.Barrier(args[0]).Wait(ctx, waitFor)
			})
		},
	}
	wait.Flags().DurationVar(&waitFor, "wait", 0, "give up after this long (0: until removed or Ctrl-C)")
	stat := &cobra.Command{
		Use: "stat NAME", Short: "Show a barrier name's state", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, c *client.Client) error {
				st, err := c.BarrierStats(ctx, args[0])
				if err != nil {
					return err
				}
				return output(st, func() {
					fmt.Printf("set=%v parties=%d open=%v entered=%d leaving=%d\n", st.GetSet(), st.GetParties(), st.GetOpen(), len(st.GetEntered()), len(st.GetLeaving()))
				})
			})
		},
	}
	run := &cobra.Command{
		Use:   "run NAME N -- COMMAND [ARGS...]",
		Short: "Double barrier: enter with N parties, run COMMAND, leave",
		Long: `Enters the double barrier NAME for N participants (blocks until N sessions
are inside), runs COMMAND, then leaves (blocks until every participant has
left). Exit status: COMMAND's, or 2 if entering failed.`,
		Args: cobra.MinimumNArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 {
				return fmt.Errorf("participant count %q: want a positive integer", args[1])
			}
			return untilInterrupted(func(ctx context.Context, c *client.Client) error {
				db := c.DoubleBarrier(args[0], n)
				if err := db.Enter(ctx); err != nil {
					fmt.Fprintln(os.Stderr, "error: enter:", err)
					os.Exit(2)
				}
				child := exec.CommandContext(ctx, args[2], args[3:]...)
				child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
				child.Cancel = func() error { return child.Process.Signal(syscall.SIGTERM) }
				cerr := child.Run()
				if err := db.Leave(ctx); err != nil {
					return fmt.Errorf("leave: %w", err)
				}
				var exit *exec.ExitError
				if errors.As(cerr, &exit) {
					c.Close()
					os.Exit(exit.ExitCode())
				}
				return cerr
			})
		},
	}
	b.AddCommand(set, rm, wait, stat, run)
	return b
}
