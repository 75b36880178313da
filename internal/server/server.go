package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/fsm"
	"github.com/meridian-coord/meridian/internal/latency"
	"github.com/meridian-coord/meridian/internal/pki"
	"github.com/meridian-coord/meridian/internal/replica"
	"github.com/meridian-coord/meridian/internal/session"
	"github.com/meridian-coord/meridian/internal/tree"
	"github.com/meridian-coord/meridian/internal/watch"
	"github.com/meridian-coord/meridian/internal/wire"
)

// Version is reported by Status and the CLI.
const Version = "0.1.0-dev"

// ZooKeeperVersion is the ZooKeeper release whose client protocol and
// features the ZooKeeper listener implements. Four-letter words report it
// first, as "3.8.4-meridian-<Version>", because clients (kazoo's
// server_version, Curator) parse the leading digits to decide which
// features they may use.
const ZooKeeperVersion = "3.8.4"

func zkVersionString() string { return ZooKeeperVersion + "-meridian-" + Version }

// Server is one member of a Meridian cluster.
const (
	grpcMaxStreams = 256 // concurrent calls per native connection
	// grpcStreamWorkers serve native calls on goroutines that live on
	// (each replaced after 65,536 calls), so a call does not start on a
	// new goroutine and grow its stack again; a call that finds them all
	// busy (blocked writes, lock waits, watch streams) gets its own.
	grpcStreamWorkers = 256
)

type Server struct {
	cfg       Config
	log       *slog.Logger
	metrics   *metrics
	saslUsers map[string]string // DIGEST-MD5 users from cfg.JAASConfig
	placement placementState
	versions  versionState // the cluster version (version.go)

	// fsm is the replicated state (tree and coord); the replica's raft loop
	// applies to it through stateMachine.
	fsm *fsm.FSM
	// mu is how this member reads fsm: see stateView.
	mu stateView

	rep *replica.Replica
	// root is the root group (rep, fsm, waiters); keyspaceGroups the
	// regional keyspaces' groups this member runs (keyspaces.go). ready
	// is set once rep is, so the root's raft loop may open groups.
	root           *group
	keyspaceGroups groups
	keyspaceMu     sync.Mutex // serialises opening and closing groups
	ended          endedSessions
	dutyKick       chan struct{} // wakes duties early (a session ended)
	ready          atomic.Bool

	// failed closes when a group this member runs stopped by itself
	// (storage failure, a panic, an entry it cannot apply).
	failed   chan struct{}
	failErr  error
	failOnce sync.Once

	watches *watch.Manager
	tracker *session.Tracker
	touches *session.Batcher
	waiters waiters
	grants  grantWaiters
	obs     observers // election observers, by lock name
	// barrierObs wakes WaitBarrier calls, by barrier name.
	barrierObs observers
	hubs       hubs
	// nativeWrites: native API writes in flight (api.write).
	nativeWrites atomic.Int64
	// sessionEpoch rises whenever sessions may have ended (an applied
	// entry ended some, a snapshot replaced the state): a native
	// connection's verified session password holds until it does
	// (checkSessionOwner).
	sessionEpoch atomic.Uint64
	idPrefix     uint64
	idSeq        atomic.Uint64

	// leaders: each group's recent leader changes; dashboard: the last
	// state the dashboard served (dashboard.go).
	leaders   leaderHistory
	dashboard dashboardCache

	zk     *zkListener // nil when no ZooKeeper address is configured
	grpc   *grpc.Server
	http   *http.Server
	lnGRPC net.Listener
	wire   *wire.Server // the native API's lean transport, on lnGRPC's port
	lnHTTP net.Listener

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// New opens the server's storage and replica and binds its listeners. Call
// Serve to start answering requests.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	if err := cfg.Normalize(); err != nil {
		return nil, err
	}
	fdLimit, err := raiseFDLimit()
	if err != nil {
		return nil, fmt.Errorf("file descriptor limit: %w", err)
	}
	if err := cfg.checkFDLimit(fdLimit); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("member", cfg.ID)
	s := &Server{
		cfg:     cfg,
		log:     log,
		metrics: newMetrics(),
		watches: watch.NewManager(cfg.MaxWatchesPerSession),
		tracker: session.NewTracker(realClock{}),
		touches: session.NewBatcher(cfg.MaxSessions),
		stop:    make(chan struct{}),
		failed:  make(chan struct{}),
	}
	s.dutyKick = make(chan struct{}, 1)
	s.keyspaceGroups.m = map[uint64]*group{}
	s.setApplyVersion(cfg.ApplyVersion)
	if cfg.JAASConfig != "" {
		users, err := LoadJAASUsers(cfg.JAASConfig)
		if err != nil {
			return nil, fmt.Errorf("jaas_config: %w", err)
		}
		s.saslUsers = users
	}
	s.fsm = fsm.New(fsm.Hooks{Applied: s.appliedLocked, Restored: s.restoredLocked})
	s.mu = stateView{fsm: s.fsm, tree: s.fsm.Tree(), coord: s.fsm.Coord()}
	s.grants.m = make(map[grantKey]chan coord.Grant)
	s.waiters.m = make(map[uint64]*Future)
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, err
	}
	// Proposal ids: member id in the top byte, a random start so ids from
	// before a restart (still in the log) never match a new waiter.
	s.idPrefix = cfg.ID << 56
	s.idSeq.Store(binary.BigEndian.Uint64(seed[:]) >> 8 & (1<<55 - 1))

	if cfg.ListenZK != "" || cfg.ZKSecureListen != "" {
		s.zk = newZKListener(s)
	}
	peers := make([]replica.Peer, 0, len(cfg.Members))
	for _, m := range cfg.Members {
		peers = append(peers, toPeer(m))
	}
	peerTLS, err := cfg.peerTLS()
	if err != nil {
		return nil, err
	}
	if peerTLS == nil {
		log.Warn("INSECURE: plaintext peer port without member certificates (insecure: true); anyone who can reach the peer port " +
			cfg.ListenPeer + " controls the cluster (reads, writes, membership)")
	}
	rep, err := replica.Open(replica.Config{
		ID:              cfg.ID,
		Peers:           peers,
		Join:            cfg.Join,
		PeerTLS:         peerTLS,
		ClusterToken:    cfg.ClusterToken,
		ListenAddr:      cfg.ListenPeer,
		DataDir:         cfg.DataDir,
		TickInterval:    cfg.tick(),
		MaxTickInterval: time.Duration(cfg.MaxTickMs) * time.Millisecond,
		ElectionTicks:   cfg.ElectionTicks,
		HeartbeatTicks:  cfg.HeartbeatTicks,
		SnapshotEntries: uint64(cfg.SnapshotEntries),
		Logger:          log.With("component", "raft"),
		OnLeaderChange:  s.onLeaderChange,
		OnSideMessage:   s.onSideMessage,
		OnConfigChange:  s.onConfigChange,
		ObserveFsync:    func(d time.Duration) { s.metrics.fsyncDuration.Observe(d.Seconds()) },
		ObserveStage:    func(stage string, d time.Duration) { s.metrics.observeStage(true, stage, d) },
		SnapshotStreams: s.snapshotStreams,
	}, (*stateMachine)(s))
	if err != nil {
		return nil, fmt.Errorf("open replica: %w", err)
	}
	s.rep = rep
	s.root = &group{s: s, rep: rep, fsm: s.fsm, waiters: &s.waiters}
	s.ready.Store(true)
	go func() {
		select {
		case <-rep.Failed():
			s.fail(rep.FailErr())
		case <-s.stop:
		}
	}()
	s.syncKeyspaces()
	s.metrics.register(newLatencyCollector(rep.Latency))

	// Limits of the native port: a call's reply waits for HTTP/2 flow
	// control while its client does not read, so concurrent calls per
	// connection are bounded (further ones wait in the client); connections
	// beyond cfg.MaxClientConnections wait in the listen backlog until one
	// closes.
	//
	// Every call passes unaryAuth/streamAuth (core.go): identity, the
	// method's rule, session ownership. TLS unless the config is insecure.
	//
	// A connection with no call for IdleTimeoutMs is sent GOAWAY (clients
	// reconnect when they next call); keepalive pings are accepted every
	// 10 s at most, with or without calls, and a client pinging faster is
	// disconnected.
	gopts := []grpc.ServerOption{grpc.MaxRecvMsgSize(tree.MaxCommandBytes), grpc.MaxSendMsgSize(tree.MaxCommandBytes),
		grpc.MaxConcurrentStreams(grpcMaxStreams), grpc.NumStreamWorkers(grpcStreamWorkers),
		grpc.StaticStreamWindowSize(meridianpb.StreamWindowBytes), grpc.StaticConnWindowSize(meridianpb.ConnWindowBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: cfg.idleTimeout()}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.UnaryInterceptor(s.unaryAuth), grpc.StreamInterceptor(s.streamAuth)}
	// The same port serves the native API's lean transport (internal/wire),
	// told apart by its preface: the same handlers behind the same
	// interceptors, limits and TLS.
	wopts := wire.Options{Unary: s.unaryAuth, Stream: s.streamAuth, MaxConcurrentCalls: grpcMaxStreams,
		IdleTimeout: cfg.idleTimeout(), Log: log.With("component", "native"), Inline: nativeRead}
	if !cfg.Insecure {
		tc, err := cfg.memberTLSConfig()
		if err != nil {
			rep.Close()
			return nil, err
		}
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(tc)))
		wopts.TLS = tc
	}
	s.grpc = grpc.NewServer(gopts...)
	handlers := &api{s: s}
	meridianpb.RegisterMeridianServer(s.grpc, handlers)
	s.wire = wire.NewServer(&meridianpb.Meridian_ServiceDesc, handlers, wopts)
	if s.lnGRPC, err = net.Listen("tcp", cfg.ListenGRPC); err != nil {
		rep.Close()
		return nil, fmt.Errorf("listen grpc: %w", err)
	}
	// The per-address cap applies to connections the global one admitted:
	// the excess from one address is closed, not left in the backlog.
	s.lnGRPC = limitPerIP(netutil.LimitListener(s.lnGRPC, cfg.MaxClientConnections), cfg.maxClientCnxns(),
		s.deniedConn("grpc"))
	if cfg.ListenZK != "" {
		if err := s.zk.listen(cfg.ListenZK, nil); err != nil {
			s.lnGRPC.Close()
			rep.Close()
			return nil, err
		}
	}
	if cfg.ZKSecureListen != "" {
		tc, err := cfg.zkTLSConfig()
		if err == nil {
			err = s.zk.listen(cfg.ZKSecureListen, tc)
		}
		if err != nil {
			s.zk.close()
			s.lnGRPC.Close()
			rep.Close()
			return nil, err
		}
	}
	if cfg.ListenHTTP != "" {
		if s.lnHTTP, err = net.Listen("tcp", cfg.ListenHTTP); err != nil {
			s.lnGRPC.Close()
			rep.Close()
			return nil, fmt.Errorf("listen http: %w", err)
		}
		// At most MaxHTTPConnections open (further ones wait in the
		// backlog); a slow request or an idle keep-alive connection does
		// not hold its slot past the timeouts.
		s.lnHTTP = netutil.LimitListener(s.lnHTTP, cfg.MaxHTTPConnections)
		// TLS with the member's certificate, as the gRPC port: a client
		// certificate, when given, is verified and names an admin for
		// /status and the profiles (http.go).
		if !cfg.Insecure {
			tc, err := cfg.memberTLSConfig()
			if err != nil {
				s.lnHTTP.Close()
				s.lnGRPC.Close()
				rep.Close()
				return nil, err
			}
			s.lnHTTP = tls.NewListener(s.lnHTTP, tc)
		}
		s.http = &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout: 30 * time.Second, IdleTimeout: cfg.idleTimeout(),
			ErrorLog: slog.NewLogLogger(log.With("component", "http").Handler(), slog.LevelDebug)}
	}
	return s, nil
}

// Serve starts the listeners and the leader duties; it returns immediately.
func (s *Server) Serve() {
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		if err := s.grpc.Serve(s.wire.Split(s.lnGRPC)); err != nil {
			s.log.Error("grpc serve", "err", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		s.duties()
	}()
	if s.http != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.http.Serve(s.lnHTTP); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("http serve", "err", err)
			}
		}()
	}
	s.log.Info("serving", "grpc", s.lnGRPC.Addr().String(), "peer", s.cfg.ListenPeer)
}

// GRPCAddr is the bound native API address.
func (s *Server) GRPCAddr() string { return s.lnGRPC.Addr().String() }

// Replica exposes the consensus group (status, leader transfer) to tests and tools.
func (s *Server) Replica() *replica.Replica { return s.rep }

// Close stops the server; pending requests fail with errs.ErrStopped.
// Failed is closed when the server's replica stopped by itself (its
// storage failed); FailErr says why. The process should then exit.
func (s *Server) Failed() <-chan struct{} { return s.failed }

// FailErr is why the server failed (nil while it runs).
func (s *Server) FailErr() error {
	select {
	case <-s.failed:
		return s.failErr
	default:
		return nil
	}
}

// fail records that a group this member runs stopped by itself.
func (s *Server) fail(err error) {
	s.failOnce.Do(func() {
		s.failErr = err
		close(s.failed)
	})
}

func (s *Server) Close() error {
	var err error
	s.stopOnce.Do(func() {
		close(s.stop)
		s.hubs.closeAll()
		if s.zk != nil {
			s.zk.close()
		}
		stopped := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(2 * time.Second):
			s.grpc.Stop()
		}
		s.wire.Close(2 * time.Second)
		if s.http != nil {
			s.http.Close()
		}
		err = s.rep.Close()
		s.wg.Wait()
	})
	return err
}

// ---- state machine adapter (called by the replica's raft loop) ----

// stateView is this member's read handle on the state machine: RLock and
// RUnlock take the fsm's lock, and tree, coord and applied are the fsm's,
// refreshed by its hooks under its write lock. Only the fsm writes: Apply
// triggers watches inside the same lock (appliedLocked), so a read that
// registers a watch under RLock sees either the state before a change (and
// is notified of it) or after it.
type stateView struct {
	fsm     *fsm.FSM
	tree    *tree.Tree
	coord   *coord.State
	applied uint64
}

func (v *stateView) RLock()   { v.fsm.RLock() }
func (v *stateView) RUnlock() { v.fsm.RUnlock() }

type stateMachine Server

func (sm *stateMachine) Apply(index, term uint64, data []byte) error {
	s := (*Server)(sm)
	start := time.Now()
	defer func() { s.metrics.applyDuration.Observe(time.Since(start).Seconds()) }()
	r := s.fsm.Apply(index, data)
	if r.Refused != nil {
		// Newer than this binary: the replica fails and the process exits
		// (see fsm's version.go); a restart with a newer binary applies it.
		return r.Refused
	}
	s.afterApply(&r)
	return nil
}

// appliedLocked is fsm's Applied hook, run under its write lock: watches
// fire before any read can see the change.
func (s *Server) appliedLocked(r *fsm.Result) {
	s.triggerLocked(r)
	s.mu.applied = r.Index
	if len(r.Ended) > 0 {
		s.sessionEpoch.Add(1) // with the removal, under the same lock
	}
}

// triggerLocked fires the watches of an applied entry (any group's), under
// that group's write lock.
func (s *Server) triggerLocked(r *fsm.Result) {
	for _, ev := range r.Events {
		s.watches.Trigger(ev)
	}
}

// afterApply is this member's reaction to an applied entry: session
// tracking, ended sessions' connections and watch streams, observers, the
// requests waiting here for a grant, and the request that proposed the
// entry if it was proposed here.
func (s *Server) afterApply(r *fsm.Result) {
	if r.Skipped != nil {
		s.log.Error("undecodable log entry skipped", "index", r.Index, "err", r.Skipped)
		return
	}
	if r.Started.ID != 0 {
		s.tracker.Add(r.Started.ID, time.Duration(r.Started.TimeoutMs)*time.Millisecond)
	}
	for _, e := range r.Ended {
		s.endSession(e.ID, e.Expired)
		if s.keyspaceGroups.count() > 0 {
			s.ended.add(e.ID, e.Expired)
			select { // keyspace leaders end it there now, not at the next tick
			case s.dutyKick <- struct{}{}:
			default:
			}
		}
	}
	s.afterCoord(r)
	if c := r.KeyspaceCommand; c != nil && r.KeyspaceResult.Err == nil && s.ready.Load() {
		switch c.Op {
		case fsm.KeyspaceCreate:
			s.openKeyspace(r.KeyspaceResult.Keyspace)
		case fsm.KeyspaceRemove:
			s.closeKeyspace(r.KeyspaceResult.Keyspace.Group, true)
		}
	}
	s.waiters.deliver(r.ID, appliedOf(r))
}

// afterCoord is what any group's apply means for this member's waiting
// requests: observers of a changed election, grants, losses.
func (s *Server) afterCoord(r *fsm.Result) {
	if c := r.CoordCommand; c != nil && r.CoordResult.Err == nil {
		switch c.Op {
		case coord.OpRelease, coord.OpForceRelease, coord.OpProclaim:
			s.obs.notify(c.Name) // a release or proclaim changes what observers see
		}
	}
	s.deliverGrants(r.Grants, r.Losses)
}

// Snapshot serializes the whole replicated state: the tree and the locks.
func (sm *stateMachine) Snapshot() ([]byte, error) {
	return (*Server)(sm).fsm.Snapshot()
}

// SnapshotView is the state as of the last applied entry, for the replica
// to write off its raft loop.
func (sm *stateMachine) SnapshotView() (replica.SnapshotView, error) {
	return (*Server)(sm).fsm.View(), nil
}

func (sm *stateMachine) Restore(index uint64, data []byte) error {
	s := (*Server)(sm)
	if err := s.fsm.Restore(index, data); err != nil {
		return err
	}
	// Only the raft loop (here) changes the state: what it reads now is
	// what it restored.
	s.mu.RLock()
	sessions, c := s.mu.tree.Sessions(), s.mu.coord
	s.mu.RUnlock()
	// Leaders may have changed and barriers been removed in the skipped
	// range: observers and barrier waiters re-read the state, and waiting
	// requests whose grant was in that range get it now.
	s.obs.notifyAll()
	s.barrierObs.notifyAll()
	s.regrant(c, func(name string) bool { // the root's names: none a keyspace owns
		s.mu.RLock()
		defer s.mu.RUnlock()
		_, theirs := s.fsm.KeyspaceForName(name)
		return !theirs
	})
	live := make(map[int64]time.Duration, len(sessions))
	for _, si := range sessions {
		live[si.ID] = time.Duration(si.TimeoutMs) * time.Millisecond
	}
	s.tracker.ResetAll(live)
	if s.ready.Load() { // at start-up, New opens them once the replica runs
		s.syncKeyspaces()
	}
	return nil
}

// restoredLocked is fsm's Restored hook, run under its write lock.
func (s *Server) restoredLocked() {
	s.mu.tree, s.mu.coord, s.mu.applied = s.fsm.Tree(), s.fsm.Coord(), s.fsm.Applied()
	s.sessionEpoch.Add(1) // sessions may have ended in the range skipped
	// The state jumped past changes whose events were never triggered here:
	// make every client re-register its watches relative to its last zxid,
	// which fires those whose node changed (ZooKeeper's setWatches).
	for _, h := range s.hubs.all() {
		s.watches.RemoveAll(h)
		h.reset()
	}
	if s.zk != nil {
		s.zk.closeAllConns("state replaced by a leader snapshot")
	}
}

// endSession forgets a closed or expired session on this server.
func (s *Server) endSession(id int64, expired bool) {
	s.tracker.Remove(id)
	if s.zk != nil {
		s.zk.sessionEnded(id)
	}
	if h := s.hubs.remove(id); h != nil {
		s.watches.RemoveAll(h)
		h.end(expired)
	}
}

// lastZxid is the zxid of the last entry the root group applied here
// (its log index while no keyspace exists).
func (s *Server) lastZxid() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.fsm.LastZxid()
}

// ---- leader duties: session expiry, reaping, keepalive forwarding ----

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (s *Server) onLeaderChange(leader, term uint64) {
	s.waiters.newTerm(term, time.Now())
	s.leaders.record(0, leader, term, time.Now())
	s.metrics.leaderChanges.Inc()
	if leader == s.cfg.ID {
		s.metrics.isLeader.Set(1)
	} else {
		s.metrics.isLeader.Set(0)
	}
	s.log.Info("leader changed", "leader", leader, "term", term)
	if leader != 0 && s.zk != nil {
		s.zk.closeReadOnly()
	}
}

// awaitLeader reports whether a leader is known, waiting up to d (and ctx)
// for an election to produce one.
func (s *Server) awaitLeader(ctx context.Context, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for s.rep.Leader() == 0 {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-time.After(s.cfg.tick() / 4):
		case <-ctx.Done():
			return false
		case <-s.stop:
			return false
		}
	}
	return true
}

func (s *Server) onSideMessage(from uint64, payload []byte) {
	if len(payload) > 0 && payload[0] == placementTag {
		s.onPlacementReport(from, payload)
		return
	}
	if len(payload) > 0 && payload[0] == versionTag {
		s.onVersion(from, payload)
		return
	}
	ids, err := session.DecodeTouches(payload)
	if err != nil {
		s.log.Warn("bad keepalive batch", "from", from, "err", err)
		return
	}
	s.tracker.TouchBatch(ids)
}

// touch records a keepalive: locally on the leader, batched to it otherwise.
func (s *Server) touch(id int64) {
	if s.rep.IsLeader() {
		s.tracker.Touch(id)
		return
	}
	s.touches.Touch(id)
}

func (s *Server) duties() {
	t := time.NewTicker(s.cfg.tick())
	defer t.Stop()
	var leaderTerm uint64
	var lastReap, lastPlacement, slackAt time.Time
	var slack time.Duration
	for {
		select {
		case <-s.stop:
			return
		case <-s.dutyKick:
			s.keyspaceDuties(time.Now())
			continue
		case <-t.C:
		}
		if ids := s.touches.Flush(); len(ids) > 0 {
			if err := s.rep.SendToLeader(session.EncodeTouches(ids)); err != nil {
				s.log.Debug("keepalive forward failed", "err", err)
			}
		}
		st := s.rep.Status()
		s.updateGauges(st)
		// Two election timeouts at the tick in use (ticks adapt to
		// measured round trips): a proposal held while leadership moved is
		// placed within one.
		grace := 2 * max(st.Tick, s.cfg.tick()) * time.Duration(s.cfg.ElectionTicks)
		s.waiters.sweep(time.Now(), grace)
		for _, g := range s.keyspaceGroups.all() {
			g.waiters.sweep(time.Now(), grace)
		}
		s.checkQuorums(time.Now(), max(st.Tick, s.cfg.tick())*time.Duration(s.cfg.ElectionTicks))
		s.keyspaceDuties(time.Now())
		s.advertiseVersion(time.Now(), st.Leader)
		if now := time.Now(); now.Sub(lastPlacement) >= placementEvery {
			lastPlacement = now
			s.placementTick(now, st.Leader == s.cfg.ID)
		}
		if st.Leader != s.cfg.ID {
			leaderTerm = 0
			continue
		}
		if leaderTerm != st.Term {
			// A new leader cannot know when followers last heard from each
			// client, so every live session gets a fresh full timeout.
			leaderTerm = st.Term
			s.resetSessions()
			continue
		}
		s.recordVersion(time.Now(), st.Term, max(st.Tick, s.cfg.tick())*time.Duration(s.cfg.ElectionTicks))
		s.markDeps(s.root, time.Now(), max(st.Tick, s.cfg.tick())*time.Duration(s.cfg.ElectionTicks))
		// A latency snapshot merges and walks every peer's histograms
		// (milliseconds of CPU, and garbage); the slack it yields moves
		// slowly, so it is refreshed once a second, not every tick.
		if now := time.Now(); now.Sub(slackAt) >= slackEvery {
			slack, slackAt = expirySlack(s.cfg.tick(), s.rep.Latency()), now
		}
		if ids := s.tracker.ExpiredAfter(tree.MaxExpireBatch, slack); len(ids) > 0 {
			s.tracker.MarkPending(ids)
			s.log.Info("expiring sessions", "count", len(ids))
			if _, err := s.Submit(context.Background(), leaderDuty(treeCommand(&tree.Command{Op: tree.Op{Type: tree.OpExpire}, Sessions: ids}))).Wait(); err != nil {
				s.log.Warn("propose expire", "err", err)
			}
		}
		now := time.Now()
		s.mu.RLock()
		needTick := s.mu.coord.NeedsTick(now.UnixMilli())
		s.mu.RUnlock()
		if needTick {
			// A lock-delay or a queue delivery's lease has passed: let
			// waiters be granted, redeliver.
			if _, err := s.Submit(context.Background(), leaderDuty(coordCommand(&coord.Command{Op: coord.OpTick}))).Wait(); err != nil {
				s.log.Warn("propose lock tick", "err", err)
			}
		}
		if now.Sub(lastReap) >= time.Second {
			s.mu.RLock()
			need := s.mu.tree.NeedsReap(now.UnixMilli())
			s.mu.RUnlock()
			if need {
				lastReap = now
				if _, err := s.Submit(context.Background(), leaderDuty(treeCommand(&tree.Command{Op: tree.Op{Type: tree.OpReap}}))).Wait(); err != nil {
					s.log.Warn("propose reap", "err", err)
				}
			}
		}
	}
}

// maxExpirySlack caps expirySlack: past it a peer is effectively cut off.
const maxExpirySlack = 10 * time.Second

// expirySlack is how long past its timeout the leader waits before expiring
// a session. A keepalive relayed by a follower waits up to one tick in the
// follower's batch and then travels one way to the leader; the measured
// p99.9 round trip to the slowest peer over the window bounds that trip
// (a full round trip, for margin). On a LAN this is about one tick, like
// ZooKeeper's tick-sized expiry buckets; at 150 ms RTT it grows by the
// measured tail instead of expiring sessions whose pings are in flight.
// slackEvery is how often the leader refreshes expirySlack.
const slackEvery = time.Second

func expirySlack(tick time.Duration, lat latency.Snapshot) time.Duration {
	var worst time.Duration
	for _, p := range lat.Peers {
		worst = max(worst, p.Window.P999)
	}
	return min(tick+worst, maxExpirySlack)
}

func (s *Server) resetSessions() {
	s.mu.RLock()
	sessions := s.mu.tree.Sessions()
	s.mu.RUnlock()
	live := make(map[int64]time.Duration, len(sessions))
	for _, si := range sessions {
		live[si.ID] = time.Duration(si.TimeoutMs) * time.Millisecond
	}
	s.tracker.ResetAll(live)
	s.log.Info("leader: sessions given a fresh timeout", "sessions", len(live))
}

func (s *Server) updateGauges(st replica.Status) {
	nodes, _, sessions := s.treeCounts()
	s.metrics.znodes.Set(float64(nodes))
	s.metrics.sessions.Set(float64(sessions))
	s.metrics.watches.Set(float64(s.watches.Count()))
	s.metrics.setRaftGauges(st)
	s.metrics.applyVersion.Set(float64(s.applyVersion()))
	s.metrics.clusterVersion.Set(float64(s.recordedVersion()))
	s.mu.RLock()
	list := s.fsm.Keyspaces().List()
	s.mu.RUnlock()
	s.metrics.keyspaces.Set(float64(len(list)))
	s.metrics.keyspaceLeader.Reset() // removed keyspaces leave no series behind
	for _, ks := range list {
		var leader uint64
		if g := s.keyspaceGroups.get(ks.Group); g != nil {
			leader = g.rep.Leader()
		}
		s.metrics.keyspaceLeader.WithLabelValues(ks.Prefix).Set(float64(leader))
	}
}

// peerTLS loads the peer port's mutual TLS material: this member's
// certificate (used both to accept and to dial) and the cluster CA. nil
// when the configuration is insecure.
func (c *Config) peerTLS() (*replica.PeerTLS, error) {
	if c.Insecure {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLS.Cert, c.TLS.Key)
	if err != nil {
		return nil, fmt.Errorf("tls: member certificate: %w", err)
	}
	pool, err := pki.LoadPool(c.TLS.CA)
	if err != nil {
		return nil, fmt.Errorf("tls: ca: %w", err)
	}
	return &replica.PeerTLS{Cert: cert, CA: pool, IdentityPattern: c.TLS.MemberIdentity}, nil
}
