package server

import (
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/meridian-coord/meridian/internal/jsonform"
	"github.com/meridian-coord/meridian/internal/tree"
)

// httpHandler serves /metrics, /livez, /readyz, /status and the
// dashboard (/, dashboard.go), and with enable_pprof Go's profiles under
// /debug/pprof/. What a monitoring system scrapes needs no identity;
// /status (terms, indexes, addresses) and the profiles need an admin
// (adminOnly); the dashboard an admin or a monitor (dashboardOnly).
func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	if s.cfg.EnablePprof {
		mux.HandleFunc("/debug/pprof/", s.adminOnly(pprof.Index))
		mux.HandleFunc("/debug/pprof/cmdline", s.adminOnly(pprof.Cmdline))
		mux.HandleFunc("/debug/pprof/profile", s.adminOnly(pprof.Profile))
		mux.HandleFunc("/debug/pprof/symbol", s.adminOnly(pprof.Symbol))
		mux.HandleFunc("/debug/pprof/trace", s.adminOnly(pprof.Trace))
	}
	mux.Handle("/metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	// Ready means: part of a quorum that has a leader. CheckQuorum makes a
	// partitioned leader step down, so a known leader implies a quorum.
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if st := s.rep.Status(); st.Leader == 0 {
			http.Error(w, "no leader\n", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/status", s.adminOnly(func(w http.ResponseWriter, r *http.Request) {
		// The native Status in the CLI's JSON form: the same fields, names
		// and encoding as `meridian status -o json` prints per endpoint.
		w.Header().Set("Content-Type", "application/json")
		jsonform.Write(w, (&api{s: s}).status())
	}))
	s.dashboardHandlers(mux)
	return mux
}

// adminOnly serves h to a request whose verified client certificate names
// an admin (admin_subjects), and 403 to any other. With insecure: true
// there are no certificates and h is served to anyone, as every port then.
func (s *Server) adminOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.cfg.Insecure {
			var ids []tree.ID
			if addr, err := net.ResolveTCPAddr("tcp", r.RemoteAddr); err == nil {
				ids, _ = s.identify(addr, r.TLS, nil)
			}
			if !s.isAdmin(ids) {
				http.Error(w, "forbidden: needs an admin client certificate\n", http.StatusForbidden)
				return
			}
		}
		h(w, r)
	}
}
