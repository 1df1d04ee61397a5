package api

import (
	"context"
	"net/http"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
)

// readyTimeout bounds each backend ping of /readyz.
const readyTimeout = 2 * time.Second

// handleHealthz serves GET /healthz: 200 while the process serves HTTP.
func (s *server) handleHealthz() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		encode(w, http.StatusOK, map[string]string{"status": "ok"})
	}
}

// handleReadyz serves GET /readyz: 200 when the run store and the lock backend answer a
// ping, else 503 naming which did not. Backend error texts stay in the log.
func (s *server) handleReadyz() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		checks := map[string]string{"runs": "ok", "locks": "ok"}
		ready := true
		if err := s.runs.Ping(ctx); err != nil {
			checks["runs"], ready = "unavailable", false
			s.log.WarnContext(ctx, "readiness check failed", logkey.Check, "runs", logkey.Error, err.Error())
		}
		if err := s.locks.Ping(ctx); err != nil {
			checks["locks"], ready = "unavailable", false
			s.log.WarnContext(ctx, "readiness check failed", logkey.Check, "locks", logkey.Error, err.Error())
		}
		status, code := "ready", http.StatusOK
		if !ready {
			status, code = "not_ready", http.StatusServiceUnavailable
		}
		encode(w, code, map[string]any{"status": status, "checks": checks})
	}
}
