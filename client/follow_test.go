package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// When the daemon refuses the event stream (503: too many streams), trigger follows the run
// by polling it instead of failing while the run goes on.
func TestFollowFallsBackToPollingWhenStreamRefused(t *testing.T) {
	var gets atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/runs/r-1/events":
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"code":"too_many_streams","message":"too many event streams are open"}}`))
		case "/v1/runs/r-1":
			st := runs.StatusPhase1
			if gets.Add(1) >= 3 {
				st = runs.StatusSucceeded
			}
			_ = json.NewEncoder(w).Encode(runs.Run{ID: "r-1", Status: st})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	cl := newAPIClient(srv.URL, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.follow(ctx, "r-1", func(runs.Event) error { return nil }); err != nil {
		t.Fatalf("follow with the stream refused: %v", err)
	}
	if n := gets.Load(); n < 3 {
		t.Fatalf("the run was read %d times, want polling until it ended (3)", n)
	}
}
