package server

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpHandler serves /metrics, /livez, /readyz and /status.
func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
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
