package server

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpHandler serves /metrics, /livez, /readyz and /status, and with
// enable_pprof Go's profiles under /debug/pprof/.
func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	if s.cfg.EnablePprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
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
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.rep.Status())
	})
	return mux
}
