package server

// The proposer: Submit hands a command to raft and returns its Future,
// which Wait turns into the applied result. Every proposal of this member
// goes through it: a request's tree write (plain or fenced), a
// coordination command, and the leader's duties (expiry, reaping, the coord
// tick), which are submitted without a waiter.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/tree"
)

// proposal is a command Submit can hand to raft: encode stamps it with its
// proposal id and the proposer's clock and returns the id and the log
// entry's bytes.
type proposal interface {
	encode(s *Server, nowMs int64) (id uint64, data []byte, err error)
}

// treeProposal is a tree command; it always gets a fresh proposal id.
type treeProposal tree.Command

// treeCommand makes cmd a proposal (a conversion, no allocation).
func treeCommand(cmd *tree.Command) proposal { return (*treeProposal)(cmd) }

func (p *treeProposal) encode(s *Server, nowMs int64) (uint64, []byte, error) {
	cmd := (*tree.Command)(p)
	cmd.ID = s.nextID()
	cmd.TimeMs = nowMs
	data, err := tree.EncodeCommand(cmd)
	return cmd.ID, data, err
}

// coordProposal is a coordination command. A caller that must know the
// proposal id beforehand (a pop registers its grant under it) sets c.ID
// itself; otherwise it gets a fresh one.
type coordProposal coord.Command

func coordCommand(c *coord.Command) proposal { return (*coordProposal)(c) }

func (p *coordProposal) encode(s *Server, nowMs int64) (uint64, []byte, error) {
	c := (*coord.Command)(p)
	if c.ID == 0 {
		c.ID = s.nextID()
	}
	c.TimeMs = nowMs
	data, err := coord.Encode(c)
	return c.ID, data, err
}

// fencedProposal wraps a tree write so it applies only while token is the
// lock's current token (coord.OpFenced); the check and the write are one
// apply. The result arrives as a tree result.
type fencedProposal struct {
	cmd   *tree.Command
	lock  string
	token uint64
}

func fencedCommand(cmd *tree.Command, lock string, token uint64) proposal {
	return &fencedProposal{cmd: cmd, lock: lock, token: token}
}

func (p *fencedProposal) encode(s *Server, nowMs int64) (uint64, []byte, error) {
	if err := coord.ValidName(p.lock); err != nil {
		return 0, nil, err
	}
	p.cmd.TimeMs = nowMs
	inner, err := tree.EncodeCommand(p.cmd)
	if err != nil {
		return 0, nil, err
	}
	c := &coord.Command{ID: s.nextID(), TimeMs: nowMs, Session: p.cmd.Session, Op: coord.OpFenced,
		Name: p.lock, Token: p.token, Inner: inner}
	data, err := coord.Encode(c)
	return c.ID, data, err
}

// dutyProposal is a command of the leader's duties: proposed once, bounded
// by an election timeout, with no waiter (nobody waits for its result, and
// the next tick proposes again if it was lost), and not counted as a
// client write in the placement load.
type dutyProposal struct{ proposal }

func leaderDuty(p proposal) proposal { return dutyProposal{p} }

// applied is what a Future's Wait returns: the index the command applied
// at and its result (res for tree commands and fenced writes, coord for
// coordination commands).
type applied struct {
	index uint64
	res   tree.Result
	coord coord.Result // for coordination commands
	err   error        // set when the outcome became unknowable (leader change)
}

// Future is a submitted proposal. Done is closed once its outcome is known
// (applied on this member, failed to submit, or unknowable after a leader
// change); Wait returns it, or a timeout when the request's deadline
// passes first. Wait is for one goroutine: the one that submitted.
type Future struct {
	s      *Server
	id     uint64 // 0: not registered with the waiters (failed, or a duty)
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	err    error // the submission's error (done is closed)

	// Guarded by s.waiters.mu.
	term       uint64    // raft term when proposed
	staleSince time.Time // when its term ended (zero: not yet)

	result applied // written once, by whoever removes it from the waiters, before done is closed

	waited bool
	out    applied
	outErr error
}

// Done is closed when the outcome is known; Wait then returns at once.
func (f *Future) Done() <-chan struct{} { return f.done }

// Wait waits until this member has applied the proposal and returns its
// result. errs.ErrTimeout: the request's deadline passed first;
// errs.ErrOutcomeUnknown: the member stopped, or the proposal's term ended
// long enough ago that it may have been lost (see waiters.sweep).
func (f *Future) Wait() (applied, error) {
	if !f.waited {
		f.waited = true
		f.out, f.outErr = f.wait()
	}
	return f.out, f.outErr
}

func (f *Future) wait() (applied, error) {
	if f.id == 0 {
		return applied{}, f.err
	}
	s := f.s
	defer f.cancel()
	defer s.waiters.remove(f.id)
	select {
	case <-f.done:
		a := f.result
		if a.err != nil {
			s.metrics.proposals.WithLabelValues("unknown").Inc()
			return applied{}, a.err
		}
		s.metrics.proposals.WithLabelValues("applied").Inc()
		return a, nil
	case <-f.ctx.Done():
		s.metrics.proposals.WithLabelValues("timeout").Inc()
		return applied{}, errs.ErrTimeout
	case <-s.stop:
		// raft has it and may commit it after all (forwarded to the
		// leader): not "stopped", which says it was not applied and lets
		// clients retry it.
		s.metrics.proposals.WithLabelValues("unknown").Inc()
		return applied{}, errs.ErrOutcomeUnknown
	}
}

// fail ends a Future whose submission failed.
func (f *Future) fail(err error) *Future {
	f.err = err
	if f.cancel != nil {
		f.cancel()
	}
	close(f.done)
	return f
}

// Submit hands p to raft now, bounded by ctx and the request timeout, and
// returns its Future. Submitting before waiting lets a caller that submits
// in order (one ZooKeeper connection's pipelined writes) keep its writes
// in order while their commits overlap: raft steps them in the order
// given, and a follower forwards them to the leader in that order.
//
// With no leader known raft drops a proposal, so it can never apply; that
// case waits for an election (a restarted server learns the leader within
// a heartbeat or two) and proposes again, until the request deadline,
// rather than failing a client that reconnected a moment too early.
func (s *Server) Submit(ctx context.Context, p proposal) *Future {
	f := &Future{s: s, done: make(chan struct{})}
	if d, ok := p.(dutyProposal); ok {
		return s.submitDuty(f, d.proposal)
	}
	id, data, err := p.encode(s, time.Now().UnixMilli())
	if err != nil {
		return f.fail(err)
	}
	f.ctx, f.cancel = s.withTimeout(ctx)
	s.placement.writes.Add(1)
	for {
		err := s.submitOnce(f, id, data)
		if err == nil {
			return f
		}
		if !errors.Is(err, errs.ErrNotLeader) {
			return f.fail(err)
		}
		select {
		case <-time.After(s.cfg.tick()):
		case <-f.ctx.Done():
			return f.fail(err)
		case <-s.stop:
			return f.fail(errs.ErrStopped)
		}
	}
}

// submitOnce registers f under id and proposes data once.
func (s *Server) submitOnce(f *Future, id uint64, data []byte) error {
	s.waiters.add(id, s.rep.Term(), f)
	if err := s.rep.Propose(f.ctx, data); err != nil {
		s.waiters.remove(id)
		select {
		case <-f.done:
			// Applied meanwhile after all (and answered): a retry under
			// the same id must not register it again.
		default:
			s.metrics.proposals.WithLabelValues("rejected").Inc()
			return err
		}
	}
	f.id = id
	return nil
}

// submitDuty proposes a leader duty's command once, bounded by an election
// timeout; its Future is done at once, with the proposal's error.
func (s *Server) submitDuty(f *Future, p proposal) *Future {
	_, data, err := p.encode(s, time.Now().UnixMilli())
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.tick()*time.Duration(s.cfg.ElectionTicks))
		err = s.rep.Propose(ctx, data)
		cancel()
	}
	if err != nil {
		return f.fail(err)
	}
	close(f.done)
	return f
}

func (s *Server) nextID() uint64 {
	return s.idPrefix | (s.idSeq.Add(1) & (1<<56 - 1))
}

// waiters hands apply results back to the Futures of the requests that
// proposed them.
type waiters struct {
	mu   sync.Mutex
	m    map[uint64]*Future
	term uint64 // the current raft term, as last told
}

func (w *waiters) add(id, term uint64, f *Future) {
	f.term = term
	w.mu.Lock()
	w.m[id] = f
	w.mu.Unlock()
}

// newTerm records that the raft term is now term (from the leader-change
// callback): proposals of earlier terms start their grace.
func (w *waiters) newTerm(term uint64, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if term <= w.term {
		return
	}
	w.term = term
	for _, f := range w.m {
		if f.term < term && f.staleSince.IsZero() {
			f.staleSince = now
		}
	}
}

// sweep fails, as outcome unknown, every proposal whose term ended at
// least grace ago. A leader change does not decide a proposal's fate:
// one in the log when leadership moved commits with the new leader's first
// entry, and one forwarded to a leader that was handing over is passed on
// to the next (replica's held proposals), so answering at the change (as
// before) told clients "unknown" about writes that then applied, on every
// planned move. After grace (two election timeouts) a proposal of an
// earlier term has applied, and so been answered, unless it was lost with
// an old leader or is still travelling: nothing tells which.
func (w *waiters) sweep(now time.Time, grace time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, f := range w.m {
		if !f.staleSince.IsZero() && now.Sub(f.staleSince) >= grace {
			delete(w.m, id)
			f.result = applied{err: errs.ErrOutcomeUnknown}
			close(f.done)
		}
	}
}

func (w *waiters) remove(id uint64) {
	w.mu.Lock()
	delete(w.m, id)
	w.mu.Unlock()
}

// deliver answers the proposal id with its applied result, if it was
// proposed here and is still waited for.
func (w *waiters) deliver(id uint64, a applied) {
	w.mu.Lock()
	f, ok := w.m[id]
	delete(w.m, id)
	w.mu.Unlock()
	if ok {
		f.result = a
		close(f.done)
	}
}
