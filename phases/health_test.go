package phases_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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

// TestHealthCheckTriggerValueStaysInItsPathSegment: a trigger param in a health URL's path
// reaches the health endpoint as one escaped path segment: it adds no segment, query or
// fragment, and the request goes to the file's host.
func TestHealthCheckTriggerValueStaysInItsPathSegment(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	var seen []string
	health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.RequestURI)
		mu.Unlock()
	}))
	t.Cleanup(health.Close)
	h.health = map[string]string{"api": health.URL + "/healthz/${trigger.params.svc}"}
	h.start(h.pipelineYAML("prod", []string{"api"}, ""))
	r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "8", ImageTag: "v3", Params: map[string]string{"svc": "../admin?probe=1#x"}}))
	if r.Status != runs.StatusSucceeded {
		t.Fatalf("run: %s (%s), want succeeded", r.Status, r.Reason)
	}
	mu.Lock()
	defer mu.Unlock()
	want := "/healthz/..%2Fadmin%3Fprobe=1%23x"
	if len(seen) == 0 || seen[0] != want {
		t.Errorf("health requests %q, want %q", seen, want)
	}
}
