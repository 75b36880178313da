package server

// ZooKeeper's four-letter words (ruok, srvr, stat, mntr, conf, envi, cons,
// wchs, isro), sent instead of a length prefix on a fresh connection and
// answered in plain text before the connection closes, and the listener's
// request counters they report (zkStats, as ZooKeeper's ServerStats).

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// zkStats are the listener's request counters, as ZooKeeper's ServerStats.
type zkStats struct {
	received, sent, outstanding atomic.Int64
	latCount, latTotalUs        atomic.Int64
	latMinUs, latMaxUs          atomic.Int64 // latMinUs 0: no sample yet
}

func (st *zkStats) observe(d time.Duration) {
	us := max(d.Microseconds(), 1)
	st.latCount.Add(1)
	st.latTotalUs.Add(us)
	for v := st.latMaxUs.Load(); us > v && !st.latMaxUs.CompareAndSwap(v, us); v = st.latMaxUs.Load() {
	}
	for v := st.latMinUs.Load(); (v == 0 || us < v) && !st.latMinUs.CompareAndSwap(v, us); v = st.latMinUs.Load() {
	}
}

// latencyMs returns min/avg/max request latency in milliseconds.
func (st *zkStats) latencyMs() (lo, avg, hi float64) {
	n := st.latCount.Load()
	if n == 0 {
		return 0, 0, 0
	}
	return float64(st.latMinUs.Load()) / 1e3, float64(st.latTotalUs.Load()) / float64(n) / 1e3, float64(st.latMaxUs.Load()) / 1e3
}

// answerFourLetterWord queues the answer to w on a connection that sent it
// instead of a length prefix; the reader returns after it, which closes
// the connection once the answer is written.
func (c *zkConn) answerFourLetterWord(w string) {
	c.fourLetter.Store(true)
	var reply string
	if c.s.cfg.fourLetterWordEnabled(w) {
		reply = c.s.fourLetterWord(w) // counts this connection, as ZooKeeper's does
	} else {
		// ZooKeeper's answer to a word outside 4lw.commands.whitelist;
		// the connection closes after it, as after any word.
		reply = w + " is not executed because it is not in the whitelist.\n"
	}
	// Unregister before the reply can be sent: a client that reads the
	// reply to EOF and asks again must not see this connection counted.
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	c.enqueue([]byte(reply))
}

var fourLetterWords = map[string]bool{"ruok": true, "srvr": true, "stat": true, "mntr": true, "envi": true,
	"conf": true, "cons": true, "wchs": true, "isro": true}

func isFourLetterWord(s string) bool { return fourLetterWords[s] }

func (s *Server) fourLetterWord(w string) string {
	st := s.rep.Status()
	serving := st.Leader != 0
	mode := "follower"
	switch {
	case st.Leader == s.cfg.ID:
		mode = "leader"
	case st.Role == "learner":
		mode = "observer" // ZooKeeper's name for a non-voting member
	}
	if !serving {
		mode = "not serving"
	}
	nodes, ephemerals, sessions := s.treeCounts()
	conns := 0
	var cons strings.Builder
	var st0 *zkStats
	if s.zk != nil {
		st0 = &s.zk.stats
		s.zk.mu.Lock()
		conns = len(s.zk.conns)
		for c := range s.zk.conns {
			fmt.Fprintf(&cons, " %s[1](queued=%d,recved=%d,sent=%d,sid=0x%x,to=%d)\n",
				c.c.RemoteAddr(), c.queued(), c.received.Load(), c.sent.Load(), c.sidForCons.Load(), c.toForCons.Load())
		}
		s.zk.mu.Unlock()
	} else {
		st0 = &zkStats{}
	}
	lo, avg, hi := st0.latencyMs()
	switch w {
	case "ruok":
		if serving {
			return "imok"
		}
		return ""
	case "isro":
		if !serving && s.cfg.ReadOnlyMode {
			return "ro"
		}
		return "rw"
	case "srvr", "stat":
		return fmt.Sprintf("Zookeeper version: %s\nLatency min/avg/max: %.3f/%.3f/%.3f\nReceived: %d\nSent: %d\nConnections: %d\nOutstanding: %d\nZxid: 0x%x\nMode: %s\nNode count: %d\n",
			zkVersionString(), lo, avg, hi, st0.received.Load(), st0.sent.Load(), conns, st0.outstanding.Load(), st.Applied, mode, nodes)
	case "mntr":
		return fmt.Sprintf("zk_version\t%s\nzk_avg_latency\t%.3f\nzk_max_latency\t%.3f\nzk_min_latency\t%.3f\nzk_packets_received\t%d\nzk_packets_sent\t%d\nzk_outstanding_requests\t%d\nzk_server_state\t%s\nzk_znode_count\t%d\nzk_watch_count\t%d\nzk_ephemerals_count\t%d\nzk_num_alive_connections\t%d\nzk_global_sessions\t%d\nzk_raft_term\t%d\nzk_raft_applied_index\t%d\n",
			zkVersionString(), avg, hi, lo, st0.received.Load(), st0.sent.Load(), st0.outstanding.Load(), mode, nodes, s.watches.Count(), ephemerals, conns, sessions, st.Term, st.Applied)
	case "conf":
		self := s.cfg.Self()
		cfgText, _ := s.zkConfig()
		return fmt.Sprintf("serverId=%d\ndataDir=%s\nclientPortAddress=%s\ntickTime=%d\nminSessionTimeout=%d\nmaxSessionTimeout=%d\n%s",
			s.cfg.ID, s.cfg.DataDir, self.ZK, s.cfg.SessionTickMs, 2*s.cfg.SessionTickMs, 20*s.cfg.SessionTickMs, cfgText)
	case "envi":
		return fmt.Sprintf("Environment:\nzookeeper.version=%s\nmeridian.version=%s\n", zkVersionString(), Version)
	case "cons":
		return cons.String() + "\n"
	case "wchs":
		return fmt.Sprintf("%d connections watching\nTotal watches:%d\n", conns, s.watches.Count())
	}
	return ""
}
