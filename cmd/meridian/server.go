package main

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-coord/meridian/internal/server"
)

// shutdownStuckAfter bounds a graceful stop: raft's state is on disk
// (synced before anything is acknowledged), so exiting then loses nothing
// a crash would not.
const shutdownStuckAfter = 30 * time.Second

// shutdownWatchdog ends a stop that hangs, after shutdownStuckAfter or at
// a second signal, with every goroutine's stack in the log so the hang
// can be found, and exit status 2.
func shutdownWatchdog(log *slog.Logger, sig <-chan os.Signal) {
	why := "still stopping after " + shutdownStuckAfter.String()
	select {
	case <-time.After(shutdownStuckAfter):
	case got := <-sig:
		why = "second " + got.String()
	}
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	log.Error("shutdown did not finish: exiting without it, goroutine stacks follow", "why", why)
	os.Stderr.Write(buf)
	os.Exit(2)
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	switch strings.ToLower(level) {
	case "debug":
		l = slog.LevelDebug
	case "warn":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

func serverCmd() *cobra.Command {
	var configPath, zooCfg string
	var join bool
	var props []string
	cmd := &cobra.Command{
		Use:   "server (--config FILE | --zoo-cfg FILE)",
		Short: "Run one Meridian server",
		Long: `Runs one server until SIGINT or SIGTERM. --config takes Meridian's YAML config.
--zoo-cfg takes a ZooKeeper zoo.cfg instead (server.N, clientPort, dataDir/myid,
tickTime, admin.serverPort; -D passes JVM-style system properties such as
zookeeper.DigestAuthenticationProvider.superDigest), so tools that start
ZooKeeper can start Meridian in its place. A zoo.cfg runs plaintext peers
only with meridian.insecure=true (in the file or -D); sslQuorum,
quorum.auth.* and ssl.* keys Meridian does not implement refuse to start.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var cfg server.Config
			var ignored []string
			switch {
			case (configPath == "") == (zooCfg == ""):
				return fmt.Errorf("give exactly one of --config and --zoo-cfg")
			case configPath != "":
				c, err := server.LoadConfig(configPath)
				if err != nil {
					return err
				}
				cfg = c
			default:
				sys := map[string]string{}
				for _, p := range props {
					k, v, _ := strings.Cut(p, "=")
					sys[k] = v
				}
				z, err := server.FromZooCfg(zooCfg, sys)
				if err != nil {
					return err
				}
				cfg, ignored = z.Config, z.Ignored
			}
			cfg.Join = cfg.Join || join
			log := newLogger(cfg.LogLevel)
			applyGCSettings(cfg, log)
			if len(ignored) > 0 {
				log.Info("zoo.cfg keys without a Meridian equivalent were ignored", "keys", strings.Join(ignored, ","))
			}
			s, err := server.New(cfg, log)
			if err != nil {
				return err
			}
			s.Serve()
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
			select {
			case got := <-sig:
				log.Info("stopping", "signal", got.String())
			case <-s.Failed():
				// The member cannot persist anything any more (a full or
				// failed disk): exit non-zero so a supervisor restarts it
				// once the disk is fixed. Nothing acknowledged is lost:
				// raft state is synced before anything is acknowledged.
				log.Error("replica failed; exiting", "err", s.FailErr())
				go shutdownWatchdog(log, sig)
				s.Close()
				return fmt.Errorf("replica failed: %w", s.FailErr())
			}
			go shutdownWatchdog(log, sig)
			return s.Close()
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "YAML config file")
	cmd.Flags().BoolVar(&join, "join", false, "a new member of a running cluster: wait to be added (meridian member add) instead of bootstrapping")
	cmd.Flags().StringVar(&zooCfg, "zoo-cfg", "", "ZooKeeper zoo.cfg to run from instead of --config")
	cmd.Flags().StringArrayVarP(&props, "define", "D", nil, "system property key=value (with --zoo-cfg)")
	return cmd
}

// awaitListening waits until every address accepts TCP connections, failing
// if a node exits first (its log says why) or timeout passes.
func awaitListening(addrs []string, exited <-chan int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, addr := range addrs {
		for {
			if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				conn.Close()
				break
			}
			select {
			case id := <-exited:
				return fmt.Errorf("node %d exited while starting; see its log", id)
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s does not accept connections after %v", addr, timeout)
			}
		}
	}
	return nil
}

func devCmd() *cobra.Command {
	var nodes, regions, base int
	var dir, logLevel string
	var pprof bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local cluster of real server processes (Ctrl-C stops it)",
		Long: `Starts --nodes server processes on loopback, each with its own data directory
under --data, and prints every endpoint. Ports of node i: ZooKeeper 2180+i,
gRPC 7000+i, HTTP 8080+i, peers 9000+i (all shifted by --base-port).
Data persists across runs; delete the directory to start afresh.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if nodes < 1 || nodes > 9 {
				return fmt.Errorf("--nodes must be 1..9")
			}
			// Every port first: a node that cannot listen exits at once, and
			// the rest would run without it (or none would run at all).
			if err := checkDevPorts(nodes, base); err != nil {
				return err
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			cfgs, err := server.DevConfigs(nodes, regions, base, dir)
			if err != nil {
				return err
			}
			// One process a node, kept under dev's control also when
			// restarted from dev's prompt (restart N), so that Ctrl-C
			// stops every one.
			type node struct {
				path string
				log  *os.File
				p    *exec.Cmd
				done chan struct{}
			}
			nodesByID := map[int]*node{}
			exited := make(chan int, nodes)
			start := func(id int) error {
				n := nodesByID[id]
				p := exec.Command(self, "server", "--config", n.path)
				p.Stdout, p.Stderr = n.log, n.log
				if err := p.Start(); err != nil {
					return err
				}
				done := make(chan struct{})
				n.p, n.done = p, done
				go func() { p.Wait(); close(done); exited <- id }()
				return nil
			}
			running := func(n *node) bool {
				if n.p == nil {
					return false
				}
				select {
				case <-n.done:
					return false
				default:
					return true
				}
			}
			stop := func(n *node) {
				if !running(n) {
					return
				}
				n.p.Process.Signal(syscall.SIGTERM)
				select {
				case <-n.done:
				case <-time.After(10 * time.Second):
					n.p.Process.Kill()
					<-n.done
				}
			}
			stopAll := func() {
				for _, n := range nodesByID {
					if running(n) {
						n.p.Process.Signal(syscall.SIGTERM)
					}
				}
				for _, n := range nodesByID {
					stop(n)
				}
			}
			var endpoints []string
			for _, c := range cfgs {
				c.LogLevel = logLevel
				c.EnablePprof = pprof
				path := filepath.Join(dir, fmt.Sprintf("n%d.yaml", c.ID))
				if err := c.WriteFile(path); err != nil {
					stopAll()
					return err
				}
				logf, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("n%d.log", c.ID)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
				if err != nil {
					stopAll()
					return err
				}
				id := int(c.ID)
				nodesByID[id] = &node{path: path, log: logf}
				if err := start(id); err != nil {
					stopAll()
					return err
				}
				self := c.Self()
				endpoints = append(endpoints, self.GRPC)
				fmt.Printf("node %d  pid %-7d grpc %s  zk %s  http %s  peer %s  log %s\n",
					c.ID, nodesByID[id].p.Process.Pid, self.GRPC, self.ZK, self.HTTP, self.Peer, logf.Name())
			}
			// The endpoints line means ready to use: every node listens.
			if err := awaitListening(endpoints, exited, 30*time.Second); err != nil {
				stopAll()
				return err
			}
			fmt.Printf("\nendpoints: %s\n", strings.Join(endpoints, ","))
			fmt.Printf("dashboard: https://%s/   (open to this machine; the certificate is the dev CA's, %s)\n",
				cfgs[0].Self().HTTP, cfgs[0].TLS.CA)
			fmt.Printf("try:       meridian --endpoints %s create /hello world && meridian --endpoints %s get /hello\n",
				endpoints[0], endpoints[len(endpoints)-1])
			fmt.Println("Ctrl-C stops the cluster. Type stop N or restart N (then Enter) to stop or restart node N.")
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
			commands := make(chan string)
			go func() {
				sc := bufio.NewScanner(os.Stdin)
				for sc.Scan() {
					commands <- strings.TrimSpace(sc.Text())
				}
			}()
			for {
				select {
				case <-sig:
					fmt.Println("\nstopping...")
					stopAll()
					return nil
				case id := <-exited:
					if n := nodesByID[id]; n != nil && !running(n) {
						// A stopped or killed node stays down (so failover
						// can be tried) until restarted from here.
						fmt.Printf("node %d exited; the rest keep running (type restart %d to start it again)\n", id, id)
					}
				case line := <-commands:
					verb, arg, _ := strings.Cut(line, " ")
					id, err := strconv.Atoi(strings.TrimSpace(arg))
					n := nodesByID[id]
					switch {
					case line == "":
					case (verb != "stop" && verb != "restart") || err != nil || n == nil:
						fmt.Printf("unknown command %q: stop N or restart N, N from 1 to %d\n", line, nodes)
					case verb == "stop" && !running(n):
						fmt.Printf("node %d is not running\n", id)
					case verb == "stop":
						stop(n)
					case running(n):
						fmt.Printf("node %d is running; stop %d first\n", id, id)
					default:
						if err := start(id); err != nil {
							fmt.Printf("node %d: %v\n", id, err)
							continue
						}
						fmt.Printf("node %d restarted  pid %d\n", id, n.p.Process.Pid)
					}
				}
			}
		},
	}
	cmd.Flags().IntVar(&nodes, "nodes", 3, "number of servers")
	cmd.Flags().IntVar(&regions, "regions", 1, "spread the servers over this many regions (region-1...), zones a, b, c... in each; try --nodes 9 --regions 3, then: meridian keyspace create /eu --home region-1")
	cmd.Flags().IntVar(&base, "base-port", 0, "shift every port by this much")
	cmd.Flags().StringVar(&dir, "data", "data/dev", "directory for data, configs and logs")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "server log level")
	cmd.Flags().BoolVar(&pprof, "pprof", false, "serve Go's profiles under /debug/pprof/ on each node's HTTP port (enable_pprof)")
	return cmd
}

// defaultGCPercent is the server's GOGC unless the config or the
// environment says otherwise. A server's heap is mostly its tree, live for
// good, and its resident memory about (1 + GOGC/100) times that: at 50
// instead of Go's 100 a million-znode server measured 444 instead of 572
// bytes of RSS a znode; at 35, once a create allocated half the bytes it
// did, 395 (docs/monitoring.md).
const defaultGCPercent = 35

// applyGCSettings sets the Go collector's knobs (they are the process's, so
// the command sets them, not server.New, which tests call many times in
// one process): the config's, else the environment's (GOGC, GOMEMLIMIT,
// which the runtime has read), else defaultGCPercent.
func applyGCSettings(cfg server.Config, log *slog.Logger) {
	pct := cfg.GCPercent
	if pct == 0 && os.Getenv("GOGC") == "" {
		pct = defaultGCPercent
	}
	if pct > 0 {
		debug.SetGCPercent(pct)
		log.Debug("collector setting", "gc_percent", pct)
	}
	if cfg.MemoryLimitMiB > 0 {
		debug.SetMemoryLimit(int64(cfg.MemoryLimitMiB) << 20)
		log.Info("collector setting from the config", "memory_limit_mib", cfg.MemoryLimitMiB)
	}
}
