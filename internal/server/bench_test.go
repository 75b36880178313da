package server

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/netem"
	"github.com/meridian-coord/meridian/internal/testutil"
)

// Benchmarks of a 3-replica cluster on loopback with real Pebble (fsync on).
// Run: go test -run '^$' -bench . -benchtime 3s ./internal/server
// They report ops/s and latency percentiles; nothing is asserted.

func benchCluster(b *testing.B) *testCluster {
	tc := newTestCluster(b, 3, func(c *Config) { c.TickMs = 50; c.SessionTickMs = 1000 })
	tc.leader()
	return tc
}

// runLoad runs b.N ops over clients goroutines. An op may report the part of
// it to time; if it reports 0 the whole op is timed.
func runLoad(b *testing.B, clients int, op func(c *client.Client, i int) (time.Duration, error), cl []*client.Client) {
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	per := b.N/clients + 1
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			local := make([]time.Duration, 0, per)
			c := cl[w%len(cl)]
			for i := 0; i < per; i++ {
				t0 := time.Now()
				d, err := op(c, w*per+i)
				if err != nil {
					b.Error(err)
					return
				}
				if d == 0 {
					d = time.Since(t0)
				}
				local = append(local, d)
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(len(lat))/el.Seconds(), "ops/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(pct(0.999), "p99.9-ms")
}

func BenchmarkSetData1KiB(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			tc := benchCluster(b)
			var cls []*client.Client
			for i := 0; i < min(n, 8); i++ {
				cls = append(cls, tc.client())
			}
			ctx := context.Background()
			for i := 0; i < 64; i++ {
				cls[0].Create(ctx, fmt.Sprintf("/k%d", i), nil, client.CreateOptions{})
			}
			val := make([]byte, 1024)
			runLoad(b, n, func(c *client.Client, i int) (time.Duration, error) {
				_, err := c.Set(ctx, fmt.Sprintf("/k%d", i%64), val, -1)
				return 0, err
			}, cls)
		})
	}
}

func BenchmarkRead(b *testing.B) {
	for _, mode := range []client.Consistency{client.Linearizable, client.Sequential} {
		name := map[client.Consistency]string{client.Linearizable: "linearizable", client.Sequential: "sequential"}[mode]
		b.Run(name+"/clients=64", func(b *testing.B) {
			tc := benchCluster(b)
			var cls []*client.Client
			for i := 0; i < 8; i++ {
				cls = append(cls, tc.client())
			}
			ctx := context.Background()
			cls[0].Create(ctx, "/r", make([]byte, 1024), client.CreateOptions{})
			cls[0].Sync(ctx)
			runLoad(b, 64, func(c *client.Client, i int) (time.Duration, error) {
				_, _, err := c.Get(ctx, "/r", client.WithConsistency(mode))
				return 0, err
			}, cls)
		})
	}
}

// BenchmarkLock measures acquire latency (the percentiles; ops/s counts
// whole acquire-hold-release cycles) for the workloads of "Evaluation of
// Key-Value Stores for Distributed Locking Purposes" (Piotr Grzesik and
// Dariusz Mrozek): 1, 3, 5 clients, each on its own lock or all on one lock;
// every client acquires, holds briefly, releases.
func BenchmarkLock(b *testing.B) {
	for _, same := range []bool{false, true} {
		for _, n := range []int{1, 3, 5} {
			name := fmt.Sprintf("clients=%d/different-locks", n)
			if same {
				name = fmt.Sprintf("clients=%d/same-lock", n)
			}
			b.Run(name, func(b *testing.B) {
				tc := benchCluster(b)
				var cls []*client.Client
				for i := 0; i < n; i++ {
					cls = append(cls, tc.client())
				}
				ctx := context.Background()
				runLoad(b, n, func(c *client.Client, i int) (time.Duration, error) {
					lock := "bench"
					if !same {
						lock = fmt.Sprintf("bench-%d", c.SessionID())
					}
					t0 := time.Now()
					l, err := c.Lock(ctx, lock, client.LockOptions{})
					if err != nil {
						return 0, err
					}
					acquire := time.Since(t0)
					time.Sleep(100 * time.Microsecond) // the critical section
					return acquire, l.Unlock(ctx)
				}, cls)
			})
		}
	}
}

// zkConns opens n go-zookeeper sessions with addr.
func zkConns(b *testing.B, addr string, n int) []*gozk.Conn {
	var conns []*gozk.Conn
	for i := 0; i < n; i++ {
		c, _ := zkConnect(b, []string{addr})
		conns = append(conns, c)
	}
	return conns
}

// BenchmarkZKGetData: 64 callers over 8 go-zookeeper connections to one
// member reading a 1 KiB node (the ZooKeeper port's serving path: framing,
// decoding, the read, the reply's write).
func BenchmarkZKGetData(b *testing.B) {
	tc := benchCluster(b)
	conns := zkConns(b, tc.zkAddrs()[0], 8)
	if _, err := conns[0].Create("/r", make([]byte, 1024), 0, gozk.WorldACL(gozk.PermAll)); err != nil {
		b.Fatal(err)
	}
	if _, err := conns[0].Sync("/r"); err != nil {
		b.Fatal(err)
	}
	for _, c := range conns {
		if _, _, err := c.Get("/r"); err != nil { // the create reached every connection's member
			b.Fatal(err)
		}
	}
	runLoad(b, 64, func(_ *client.Client, i int) (time.Duration, error) {
		_, _, err := conns[i%len(conns)].Get("/r")
		return 0, err
	}, []*client.Client{nil})
}

// lockOp times a native uncontended acquire of one lock (then releases
// it, untimed), after before when it is not nil.
func lockOp(ctx context.Context, before func()) func(*client.Client, int) (time.Duration, error) {
	return func(c *client.Client, _ int) (time.Duration, error) {
		if before != nil {
			before()
		}
		t0 := time.Now()
		l, err := c.Lock(ctx, "tas", client.LockOptions{})
		if err != nil {
			return 0, err
		}
		return time.Since(t0), l.Unlock(ctx)
	}
}

// zkCreateOp times the test-and-set lock attempt of "The Cost of Consensus:
// Synchronization in Geo-distributed Systems" (Faisal Nawab and Alexander
// Pucher) through the ZooKeeper port, an ephemeral create (then deletes it,
// untimed), after before when it is not nil.
func zkCreateOp(conn *gozk.Conn, before func()) func(*client.Client, int) (time.Duration, error) {
	return func(*client.Client, int) (time.Duration, error) {
		if before != nil {
			before()
		}
		t0 := time.Now()
		if _, err := conn.Create("/tas", nil, gozk.FlagEphemeral, gozk.WorldACL(gozk.PermAll)); err != nil {
			return 0, err
		}
		return time.Since(t0), conn.Delete("/tas", -1)
	}
}

// BenchmarkUncontendedAcquire compares one client's uncontended acquire on
// one member three ways: the native API's server-side lock, the native
// API's ephemeral create (a test-and-set), and an ephemeral create through
// the ZooKeeper port (the test-and-set of "The Cost of Consensus"). Each is
// one commit; the differences are the APIs' own costs. The release is not
// timed.
func BenchmarkUncontendedAcquire(b *testing.B) {
	ctx := context.Background()
	b.Run("native-lock", func(b *testing.B) {
		tc := benchCluster(b)
		c := tc.client()
		runLoad(b, 1, lockOp(ctx, nil), []*client.Client{c})
	})
	b.Run("native-create", func(b *testing.B) {
		tc := benchCluster(b)
		c := tc.client()
		runLoad(b, 1, func(c *client.Client, i int) (time.Duration, error) {
			t0 := time.Now()
			if _, _, err := c.Create(ctx, "/tas", nil, client.CreateOptions{Mode: client.Ephemeral}); err != nil {
				return 0, err
			}
			return time.Since(t0), c.Delete(ctx, "/tas", -1)
		}, []*client.Client{c})
	})
	b.Run("zk-create", func(b *testing.B) {
		tc := benchCluster(b)
		conn, _ := zkConnect(b, []string{tc.zkAddrs()[0]})
		runLoad(b, 1, zkCreateOp(conn, nil), []*client.Client{nil})
	})
	// The same two through a zero-delay userspace link (the benchmark
	// suite's netem, which carries every client and peer connection of its
	// runs): what the link itself adds to each API, and the bytes each
	// cycle puts on it (acquire and release, both directions).
	link := func(b *testing.B, target string) *netem.Link {
		l, err := netem.Listen(netem.Config{Target: target})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		return l
	}
	perOp := func(b *testing.B, l *netem.Link, before netem.Stats) {
		st := l.Stats()
		b.ReportMetric(float64(st.BytesForward-before.BytesForward)/float64(b.N), "B-up/op")
		b.ReportMetric(float64(st.BytesBackward-before.BytesBackward)/float64(b.N), "B-down/op")
		b.ReportMetric(float64(st.ChunksForward-before.ChunksForward)/float64(b.N), "chunks-up/op")
		b.ReportMetric(float64(st.ChunksBackward-before.ChunksBackward)/float64(b.N), "chunks-down/op")
	}
	b.Run("native-lock-link", func(b *testing.B) {
		tc := benchCluster(b)
		l := link(b, tc.endpoints()[0])
		c := tc.client(l.Addr())
		before := l.Stats()
		runLoad(b, 1, lockOp(ctx, nil), []*client.Client{c})
		perOp(b, l, before)
	})
	b.Run("zk-create-link", func(b *testing.B) {
		tc := benchCluster(b)
		l := link(b, tc.zkAddrs()[0])
		conn, _ := zkConnect(b, []string{l.Addr()})
		before := l.Stats()
		runLoad(b, 1, zkCreateOp(conn, nil), []*client.Client{nil})
		perOp(b, l, before)
	})
}

// BenchmarkIdleGap compares one request through each API on the leader,
// back to back and after an idle gap (the clients in the RTT grid of "The
// Cost of Consensus" ask a few times a second). A process whose threads
// have parked pays a wake-up per goroutine hand-off on the request's path,
// so the gap shows how many hand-offs each API makes more than its raw cost
// does.
func BenchmarkIdleGap(b *testing.B) {
	ctx := context.Background()
	for _, gap := range []time.Duration{0, 20 * time.Millisecond} {
		wait := func() {
			if gap > 0 {
				time.Sleep(gap)
			}
		}
		b.Run(fmt.Sprintf("gap=%v/native-read", gap), func(b *testing.B) {
			tc := benchCluster(b)
			c := tc.client(tc.endpoints()[tc.leader()])
			runLoad(b, 1, func(c *client.Client, i int) (time.Duration, error) {
				wait()
				t0 := time.Now()
				_, _, err := c.Get(ctx, "/", client.WithConsistency(client.Sequential))
				return time.Since(t0), err
			}, []*client.Client{c})
		})
		b.Run(fmt.Sprintf("gap=%v/zk-read", gap), func(b *testing.B) {
			tc := benchCluster(b)
			conn, _ := zkConnect(b, []string{tc.zkAddrs()[tc.leader()]})
			runLoad(b, 1, func(_ *client.Client, i int) (time.Duration, error) {
				wait()
				t0 := time.Now()
				_, _, err := conn.Get("/")
				return time.Since(t0), err
			}, []*client.Client{nil})
		})
		b.Run(fmt.Sprintf("gap=%v/native-lock", gap), func(b *testing.B) {
			tc := benchCluster(b)
			c := tc.client(tc.endpoints()[tc.leader()])
			runLoad(b, 1, lockOp(ctx, wait), []*client.Client{c})
		})
		b.Run(fmt.Sprintf("gap=%v/zk-create", gap), func(b *testing.B) {
			tc := benchCluster(b)
			conn, _ := zkConnect(b, []string{tc.zkAddrs()[tc.leader()]})
			runLoad(b, 1, zkCreateOp(conn, wait), []*client.Client{nil})
		})
	}
}

// BenchmarkTLSCost measures what TLS on every port costs: the same
// 3-member loopback cluster once with TLS (peers, gRPC) and once with
// insecure: true, writes (setData of 100 bytes) and sequential reads
// through the native API from 1 and 64 clients.
// Run: go test -run '^$' -bench TLSCost -benchtime 5s -count 3 ./internal/server
func BenchmarkTLSCost(b *testing.B) {
	for _, op := range []string{"write", "read"} {
		for _, n := range []int{1, 64} {
			for _, sec := range []string{"tls", "plaintext"} {
				b.Run(fmt.Sprintf("%s/clients=%d/%s", op, n, sec), func(b *testing.B) {
					tc := newTestCluster(b, 3, func(c *Config) {
						c.TickMs, c.SessionTickMs = 50, 1000
						if sec == "plaintext" {
							c.Insecure, c.TLS = true, TLSConfig{}
						}
					})
					tc.leader()
					var cls []*client.Client
					for i := 0; i < min(n, 8); i++ {
						cls = append(cls, tc.client())
					}
					ctx := context.Background()
					for i := 0; i < 64; i++ {
						if _, _, err := cls[0].Create(ctx, fmt.Sprintf("/k%d", i), make([]byte, 100), client.CreateOptions{}); err != nil {
							b.Fatal(err)
						}
					}
					cls[0].Sync(ctx)
					val := make([]byte, 100)
					runLoad(b, n, func(c *client.Client, i int) (time.Duration, error) {
						if op == "write" {
							_, err := c.Set(ctx, fmt.Sprintf("/k%d", i%64), val, -1)
							return 0, err
						}
						_, _, err := c.Get(ctx, fmt.Sprintf("/k%d", i%64), client.WithConsistency(client.Sequential))
						return 0, err
					}, cls)
				})
			}
		}
	}
}

// BenchmarkZKSetData1KiB is BenchmarkSetData1KiB/clients=64 through the
// ZooKeeper port: 64 callers over 8 go-zookeeper connections to one member.
func BenchmarkZKSetData1KiB(b *testing.B) {
	tc := benchCluster(b)
	conns := zkConns(b, tc.zkAddrs()[0], 8)
	for i := 0; i < 64; i++ {
		if _, err := conns[0].Create(fmt.Sprintf("/k%d", i), nil, 0, gozk.WorldACL(gozk.PermAll)); err != nil {
			b.Fatal(err)
		}
	}
	val := make([]byte, 1024)
	runLoad(b, 64, func(_ *client.Client, i int) (time.Duration, error) {
		_, err := conns[i%len(conns)].Set(fmt.Sprintf("/k%d", i%64), val, -1)
		return 0, err
	}, []*client.Client{nil})
}

// BenchmarkZKFill fills znodes of 100 B through the ZooKeeper port with 64
// sessions spread over the three members, each creating in turn, as the
// scale experiment's fill does (bench/scale.go), and reports the CPU time
// of the whole process (the three members and the clients) per create:
// on a shared host that figure moves less with the load than the rate.
func BenchmarkZKFill(b *testing.B) {
	tc := benchCluster(b)
	addrs := tc.zkAddrs()
	const clients = 64
	conns := make([]*gozk.Conn, clients)
	for i := range conns {
		conns[i], _ = zkConnect(b, []string{addrs[i%len(addrs)]})
	}
	if _, err := conns[0].Create("/fill", nil, 0, gozk.WorldACL(gozk.PermAll)); err != nil {
		b.Fatal(err)
	}
	for _, c := range conns {
		if _, err := c.Sync("/fill"); err != nil {
			b.Fatal(err)
		}
	}
	data := make([]byte, 100)
	var cpu0 time.Duration
	b.ResetTimer()
	cpu0 = testutil.ProcessCPU()
	var wg sync.WaitGroup
	errc := make(chan error, clients)
	per := b.N/clients + 1
	start := time.Now()
	for w, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				if _, err := c.Create(fmt.Sprintf("/fill/n%d-%d", w, i), data, 0, gozk.WorldACL(gozk.PermAll)); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	close(errc)
	for err := range errc {
		b.Fatal(err)
	}
	n := float64(per * clients)
	b.ReportMetric(n/el.Seconds(), "creates/s")
	b.ReportMetric(float64((testutil.ProcessCPU()-cpu0).Microseconds())/n, "cpu-µs/create")
}

// BenchmarkPorts runs the suite's loopback throughput rows in-process, the
// native API beside the ZooKeeper port on one plaintext cluster (as
// meridian-bench runs it): 1 or 32 closed-loop clients, each with its own
// connection and session, reading (sequentially, as a getData) or writing
// 1000 B to 64 keys; and 128 writers, the saturated write row in process
// (43 connections a member, under the 60 a member admits from one
// address). Client i reaches the member i places after the
// leader's first follower, so that every run has the same mix (one client
// on a follower; of 32, 11 on that follower, 11 on the other, 10 on the
// leader, about the suite's third on each): which member led used to
// change a run's cost by 20 allocations a write. cpu-µs/op is the whole
// process's (members and clients), the figure the suite's two CPU columns
// add up to.
func BenchmarkPorts(b *testing.B) {
	for _, bc := range []struct {
		op      string
		clients int
	}{{"read", 1}, {"read", 32}, {"write", 1}, {"write", 32}, {"write", 128}} {
		op, clients := bc.op, bc.clients
		b.Run(fmt.Sprintf("%s/clients=%d", op, clients), func(b *testing.B) {
			tc := newTestCluster(b, 3, func(c *Config) {
				c.TickMs, c.SessionTickMs = 50, 1000
				c.Insecure, c.TLS = true, TLSConfig{}
			})
			lead := tc.leader()
			member := func(i int) int { return (lead + 1 + i) % 3 }
			ctx := context.Background()
			val := make([]byte, 1000)
			seed := tc.client(tc.endpoints()[0])
			for i := 0; i < 64; i++ {
				if _, _, err := seed.Create(ctx, fmt.Sprintf("/k%d", i), val, client.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.Run("native", func(b *testing.B) {
				cls := make([]*client.Client, clients)
				for i := range cls {
					cls[i] = tc.client(tc.endpoints()[member(i)])
					defer cls[i].Close() // a member admits 60 connections from one address
				}
				cpu0 := testutil.ProcessCPU()
				runLoad(b, clients, func(c *client.Client, i int) (time.Duration, error) {
					var err error
					if op == "read" {
						_, _, err = c.Get(ctx, fmt.Sprintf("/k%d", i%64), client.WithConsistency(client.Sequential))
					} else {
						_, err = c.Set(ctx, fmt.Sprintf("/k%d", i%64), val, -1)
					}
					return 0, err
				}, cls)
				b.ReportMetric(float64((testutil.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			})
			b.Run("zk", func(b *testing.B) {
				conns := make([]*gozk.Conn, clients)
				for i := range conns {
					conns[i], _ = zkConnect(b, []string{tc.zkAddrs()[member(i)]})
					defer conns[i].Close()
				}
				cpu0 := testutil.ProcessCPU()
				runLoad(b, clients, func(_ *client.Client, i int) (time.Duration, error) {
					var err error
					c := conns[(i/(b.N/clients+1))%clients] // each client goroutine its own connection
					if op == "read" {
						_, _, err = c.Get(fmt.Sprintf("/k%d", i%64))
					} else {
						_, err = c.Set(fmt.Sprintf("/k%d", i%64), val, -1)
					}
					return 0, err
				}, []*client.Client{nil})
				b.ReportMetric(float64((testutil.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			})
		})
	}
}
