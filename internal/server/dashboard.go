package server

import (
	"cmp"
	"embed"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/meridian-coord/meridian/internal/coord"
	"github.com/meridian-coord/meridian/internal/tree"
)

// The dashboard: one read-only page on the HTTP port (/) and the JSON it
// polls (/dashboard/state), both computed from what this member has
// applied and measured, never a proposal or a read barrier. The page is
// embedded (web/: HTML, CSS and plain JavaScript, no build step, nothing
// loaded from elsewhere) and renders every name it shows as text, so a
// lock or queue name cannot inject markup.
//
// Who may see it (dashboardOnly): an admin, a monitor (monitor_subjects),
// or, with dashboard_open_on_loopback, a caller on a loopback address;
// with insecure: true, anyone (as every port then). A monitor sees the
// dashboard only: /status and the profiles stay the admins'.

//go:embed web
var dashboardFiles embed.FS

// Dashboard limits: what a listing shows at most (the state says how many
// there are, and the page "first N of M"), how many leader changes each
// group remembers, and how often the state is computed whatever the
// number of viewers.
const (
	dashboardListed        = 100 // locks, queues, simple and double barriers, each
	dashboardListedPerLock = 20  // holders, waiters of one lock, each
	leaderHistoryPerGroup  = 64
	dashboardStateEvery    = time.Second
)

// dashboardSessionIDFormat: session ids in hexadecimal, as `meridian
// locks` and ZooKeeper's tools show them.
const dashboardSessionIDFormat = "0x%x"

// dashboardHandlers adds the dashboard's routes to mux.
func (s *Server) dashboardHandlers(mux *http.ServeMux) {
	page := func(name, contentType string) http.HandlerFunc {
		b, err := dashboardFiles.ReadFile("web/" + name)
		if err != nil {
			panic(err) // embedded at build time: cannot be missing
		}
		return s.dashboardOnly(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", contentType)
			w.Header().Set("Cache-Control", "no-cache")
			w.Write(b)
		})
	}
	mux.HandleFunc("GET /{$}", page("index.html", "text/html; charset=utf-8"))
	mux.HandleFunc("GET /dashboard/app.js", page("app.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /dashboard/app.css", page("app.css", "text/css; charset=utf-8"))
	mux.HandleFunc("GET /dashboard/state", s.dashboardOnly(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(s.dashboard.get(s.dashboardState))
	}))
}

// dashboardOnly serves h to an admin, a monitor, or (with
// dashboard_open_on_loopback) a loopback caller, and 403 to anyone else.
// Every answer forbids framing and other origins' scripts and styles.
func (s *Server) dashboardOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		if !s.cfg.Insecure && !s.mayMonitor(r) {
			http.Error(w, "forbidden: needs an admin or monitor client certificate\n", http.StatusForbidden)
			return
		}
		h(w, r)
	}
}

// mayMonitor reports whether r comes from an admin, a monitor, or a
// loopback address while the dashboard is open there.
func (s *Server) mayMonitor(r *http.Request) bool {
	addr, err := net.ResolveTCPAddr("tcp", r.RemoteAddr)
	if err != nil {
		return false
	}
	if s.cfg.DashboardOpenOnLoopback && addr.IP.IsLoopback() {
		return true
	}
	ids, _ := s.identify(addr, r.TLS, nil)
	if s.isAdmin(ids) {
		return true
	}
	return slices.ContainsFunc(ids, func(id tree.ID) bool {
		return id.Scheme == "x509" && slices.Contains(s.cfg.MonitorSubjects, id.ID)
	})
}

// dashboardCache keeps the last state computed, so that any number of
// viewers cost at most one computation per dashboardStateEvery.
type dashboardCache struct {
	mu   sync.Mutex
	at   time.Time
	body []byte
}

func (c *dashboardCache) get(compute func(now time.Time) any) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.body == nil || now.Sub(c.at) >= dashboardStateEvery {
		b, err := json.Marshal(compute(now))
		if err != nil {
			b = []byte(`{"error":` + fmt.Sprintf("%q", err.Error()) + `}`)
		}
		c.body, c.at = b, now
	}
	return c.body
}

// ---- leader history ----

// leaderChange is one change of a group's leader as this member saw it.
type leaderChange struct {
	At         time.Time
	Group      uint64
	From, To   uint64 // 0: none known
	Term       uint64
	sequential uint64 // order of recording, across groups
}

// leaderHistory keeps the last leaderHistoryPerGroup leader changes of
// each group this member runs: in memory, not replicated, empty after a
// restart; a removed keyspace's are forgotten with its group. A change is
// recorded when a group's known leader becomes another member (an
// election's interregnum, leader 0, is not a change of its own).
type leaderHistory struct {
	mu     sync.Mutex
	seq    uint64
	last   map[uint64]uint64 // group -> last known leader
	groups map[uint64][]leaderChange
}

func (h *leaderHistory) record(group, leader, term uint64, at time.Time) {
	if leader == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last == nil {
		h.last, h.groups = map[uint64]uint64{}, map[uint64][]leaderChange{}
	}
	from, known := h.last[group]
	if known && from == leader {
		return
	}
	h.last[group] = leader
	h.seq++
	ring := append(h.groups[group], leaderChange{At: at, Group: group, From: from, To: leader, Term: term, sequential: h.seq})
	if len(ring) > leaderHistoryPerGroup {
		ring = slices.Delete(ring, 0, len(ring)-leaderHistoryPerGroup)
	}
	h.groups[group] = ring
}

func (h *leaderHistory) forget(group uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.last, group)
	delete(h.groups, group)
}

// all is every remembered change, newest first.
func (h *leaderHistory) all() []leaderChange {
	h.mu.Lock()
	var out []leaderChange
	for _, ring := range h.groups {
		out = append(out, ring...)
	}
	h.mu.Unlock()
	slices.SortFunc(out, func(a, b leaderChange) int { return cmp.Compare(b.sequential, a.sequential) })
	return out
}

// ---- the state the page shows ----

type dashState struct {
	Member       uint64                  `json:"member"`
	Region       string                  `json:"region"`
	Zone         string                  `json:"zone"`
	Time         time.Time               `json:"time"`
	Leader       uint64                  `json:"leader"`
	Term         uint64                  `json:"term"`
	Role         string                  `json:"role"`
	AppliedIndex uint64                  `json:"applied_index"`
	Version      string                  `json:"version"`
	Placement    string                  `json:"placement"`
	PreferRegion string                  `json:"prefer_region"`
	Counts       dashCounts              `json:"counts"`
	Members      []dashMember            `json:"members"`
	RTT          dashRTT                 `json:"rtt"`
	Leaders      []dashLeaderChange      `json:"leader_history"`
	Keyspaces    []dashKeyspace          `json:"keyspaces"`
	Locks        dashListing[dashLock]   `json:"locks"`
	Queues       dashListing[dashQueue]  `json:"queues"`
	Barriers     dashListing[string]     `json:"barriers"`
	Double       dashListing[dashDouble] `json:"double_barriers"`
	Limits       map[string]int          `json:"limits"`
}

type dashCounts struct {
	Sessions   int64 `json:"sessions"`
	Watches    int64 `json:"watches"`
	Znodes     int64 `json:"znodes"`
	Ephemerals int   `json:"ephemerals"`
	Locks      int   `json:"locks"`
	Queues     int   `json:"queues"`
	Barriers   int   `json:"barriers"`
	Double     int   `json:"double_barriers"`
}

type dashMember struct {
	ID     uint64 `json:"id"`
	Region string `json:"region"`
	Zone   string `json:"zone"`
	Role   string `json:"role"`
	Leader bool   `json:"leader"`
	Self   bool   `json:"self"`
}

// dashRTT: the window median round trip from each member (row) to each
// other (column), in microseconds, as this member knows them: its own
// row always; the others' from their placement reports, which go to the
// leader (so the leader's dashboard has the whole matrix).
type dashRTT struct {
	Rows map[uint64]map[uint64]int64 `json:"rows_us"`
}

type dashLeaderChange struct {
	Time     time.Time `json:"time"`
	Group    uint64    `json:"group"`
	Keyspace string    `json:"keyspace"` // "/" for the root group
	From     uint64    `json:"from"`
	To       uint64    `json:"to"`
	Region   string    `json:"region"` // the new leader's
	Term     uint64    `json:"term"`
}

type dashKeyspace struct {
	Prefix   string   `json:"prefix"`
	Home     string   `json:"home"`
	Survival string   `json:"survival"`
	Group    uint64   `json:"group"`
	Leader   uint64   `json:"leader"`
	Voters   []uint64 `json:"voters"`
	Learners []uint64 `json:"learners"`
}

// dashListing is the first entries of a list (Items) and how many there
// are in all (Total).
type dashListing[T any] struct {
	Items []T `json:"items"`
	Total int `json:"total"`
}

type dashLock struct {
	Name         string       `json:"name"`
	Permits      int32        `json:"permits"`
	Holders      []dashHolder `json:"holders"`
	Waiters      []dashHolder `json:"waiters"`
	HoldersTotal int          `json:"holders_total"`
	WaitersTotal int          `json:"waiters_total"`
}

type dashHolder struct {
	Session string `json:"session"`
	Token   uint64 `json:"token,omitempty"` // holders only
	Shared  bool   `json:"shared"`
}

type dashQueue struct {
	Name      string `json:"name"`
	Ready     int    `json:"ready"`
	InFlight  int    `json:"in_flight"`
	Consumers int    `json:"consumers"`
	Bytes     int64  `json:"bytes"`
}

type dashDouble struct {
	Name    string `json:"name"`
	Parties int32  `json:"parties"`
	Entered int    `json:"entered"`
	Leaving int    `json:"leaving"`
	Open    bool   `json:"open"`
}

// dashboardState is what the page shows, from the native Status (members,
// leader, counts, keyspaces), the measured round trips, the leader
// history and every group's coordination state.
func (s *Server) dashboardState(now time.Time) any {
	st := (&api{s: s}).status()
	self := s.cfg.Self()
	out := &dashState{Member: st.GetMemberId(), Region: self.Region, Zone: self.Zone, Time: now.UTC(),
		Leader: st.GetLeaderId(), Term: st.GetTerm(), Role: st.GetRole(), AppliedIndex: st.GetAppliedIndex(),
		Version: st.GetVersion(), Placement: st.GetPlacement(), PreferRegion: st.GetPreferRegion(),
		Counts: dashCounts{Sessions: st.GetSessions(), Watches: st.GetWatches(), Znodes: st.GetZnodes()},
		Limits: map[string]int{"listed": dashboardListed, "listed_per_lock": dashboardListedPerLock, "leader_history_per_group": leaderHistoryPerGroup},
	}
	_, out.Counts.Ephemerals, _ = s.treeCounts()
	region := map[uint64]string{}
	for _, m := range st.GetMembers() {
		region[m.GetId()] = m.GetRegion()
		out.Members = append(out.Members, dashMember{ID: m.GetId(), Region: m.GetRegion(), Zone: m.GetZone(), Role: m.GetRole(),
			Leader: m.GetId() == st.GetLeaderId(), Self: m.GetId() == st.GetMemberId()})
	}
	out.RTT = dashRTT{Rows: map[uint64]map[uint64]int64{}}
	for from, row := range s.rttRows(now) {
		out.RTT.Rows[from] = map[uint64]int64{}
		for to, d := range row {
			out.RTT.Rows[from][to] = d.Microseconds()
		}
	}
	prefixOf := map[uint64]string{0: "/"}
	for _, ks := range st.GetKeyspaces() {
		prefixOf[ks.GetGroup()] = ks.GetPrefix()
		out.Keyspaces = append(out.Keyspaces, dashKeyspace{Prefix: ks.GetPrefix(), Home: ks.GetHome(), Survival: ks.GetSurvival(),
			Group: ks.GetGroup(), Leader: ks.GetLeaderId(), Voters: ks.GetVoters(), Learners: ks.GetLearners()})
	}
	for _, c := range s.leaders.all() {
		out.Leaders = append(out.Leaders, dashLeaderChange{Time: c.At.UTC(), Group: c.Group, Keyspace: prefixOf[c.Group],
			From: c.From, To: c.To, Region: region[c.To], Term: c.Term})
	}
	s.dashboardCoord(out)
	return out
}

// rttRows: this member's measured round trips and, when fresh, those its
// peers reported for placement (the placement policy's input).
func (s *Server) rttRows(now time.Time) map[uint64]map[uint64]time.Duration {
	rows := map[uint64]map[uint64]time.Duration{s.cfg.ID: s.ownRTT()}
	s.placement.mu.Lock()
	defer s.placement.mu.Unlock()
	for id, r := range s.placement.reports {
		if now.Sub(r.at) <= placementStale && id != s.cfg.ID {
			rows[id] = r.rtt
		}
	}
	return rows
}

// dashboardCoord fills the locks, queues and barriers of every group,
// each listing the first dashboardListed by name.
func (s *Server) dashboardCoord(out *dashState) {
	all, unlock := s.wholeTree()
	defer unlock()
	locks := all.locks("", dashboardListed)
	states := []*coord.State{s.fsm.Coord()}
	for _, g := range all.groups {
		states = append(states, g.fsm.Coord())
	}
	var queues []coord.QueueInfo
	var simple []string
	var double []coord.DoubleBarrierInfo
	for _, c := range states {
		out.Counts.Locks += c.Len()
		qs, nq := c.Queues(dashboardListed)
		sb, db, ns, nd := c.Barriers(dashboardListed)
		queues, simple, double = append(queues, qs...), append(simple, sb...), append(double, db...)
		out.Counts.Queues, out.Counts.Barriers, out.Counts.Double = out.Counts.Queues+nq, out.Counts.Barriers+ns, out.Counts.Double+nd
	}
	for _, l := range locks {
		dl := dashLock{Name: l.Name, Permits: l.Permits, HoldersTotal: len(l.Holders), WaitersTotal: len(l.Waiters),
			Holders: []dashHolder{}, Waiters: []dashHolder{}}
		for _, h := range l.Holders[:min(len(l.Holders), dashboardListedPerLock)] {
			dl.Holders = append(dl.Holders, dashHolder{Session: fmt.Sprintf(dashboardSessionIDFormat, h.Session), Token: h.Token, Shared: h.Mode == coord.Shared})
		}
		for _, w := range l.Waiters[:min(len(l.Waiters), dashboardListedPerLock)] {
			dl.Waiters = append(dl.Waiters, dashHolder{Session: fmt.Sprintf(dashboardSessionIDFormat, w.Session), Shared: w.Mode == coord.Shared})
		}
		out.Locks.Items = append(out.Locks.Items, dl)
	}
	out.Locks.Total = out.Counts.Locks
	slices.SortFunc(queues, func(a, b coord.QueueInfo) int { return cmp.Compare(a.Name, b.Name) })
	for _, q := range queues[:min(len(queues), dashboardListed)] {
		out.Queues.Items = append(out.Queues.Items, dashQueue{Name: q.Name, Ready: q.Ready, InFlight: q.InFlight, Consumers: q.Consumers, Bytes: q.Bytes})
	}
	out.Queues.Total = out.Counts.Queues
	slices.Sort(simple)
	out.Barriers = dashListing[string]{Items: simple[:min(len(simple), dashboardListed)], Total: out.Counts.Barriers}
	slices.SortFunc(double, func(a, b coord.DoubleBarrierInfo) int { return cmp.Compare(a.Name, b.Name) })
	for _, d := range double[:min(len(double), dashboardListed)] {
		out.Double.Items = append(out.Double.Items, dashDouble{Name: d.Name, Parties: d.Parties, Entered: len(d.Entered), Leaving: len(d.Leaving), Open: d.Open})
	}
	out.Double.Total = out.Counts.Double
}
