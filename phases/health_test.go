package phases_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// TestHealthCheckFollowsNoRedirectElsewhere: a health endpoint that answers 307 to another
// host (here another port of 127.0.0.1) is not followed there: the check fails on the 307,
// and the other host gets no request.
func TestHealthCheckFollowsNoRedirectElsewhere(t *testing.T) {
	h := newHarness(t)
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		elsewhere.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(other.Close)
	health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/healthz", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(health.Close)
	h.health = map[string]string{"api": health.URL + "/healthz"}
	h.start(h.pipelineYAML("prod", []string{"api"}, "on_failure: halt\n"))
	r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "8", ImageTag: "v3"}))
	if r.Status != runs.StatusFailed || !strings.Contains(r.Reason, "HTTP 307") {
		t.Errorf("run: %s (%s), want failed on the health check's HTTP 307", r.Status, r.Reason)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect's target got %d health requests, want none", n)
	}
}
