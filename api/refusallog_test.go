package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/api"
	"github.com/deploy-orchestrator/orchestrator/config"
)

// logLines returns the JSON log lines of logs whose msg is msg (any msg when empty) and
// whose level is level (any when empty).
func logLines(t *testing.T, logs string, level, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if (level == "" || m["level"] == level) && (msg == "" || m["msg"] == msg) {
			out = append(out, m)
		}
	}
	return out
}

// Item 6: refusals the daemon means to make (a webhook body past the budget, an event stream
// past the cap) are logged at WARN, at most once per client per minute, never at ERROR,
// which stays for real failures.
func TestRefusalsAreLoggedOnceAtWarn(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) { c.MaxBodyBytes = config.DefaultMaxBodyBytes })

	// One address holds its 1 MiB of unverified body; its next 3 deliveries are refused.
	holdWebhookBodies(t, f, []string{"10.8.0.1"}, 1, config.DefaultMaxBodyBytes, config.DefaultMaxBodyBytes-1)
	body := bytes.Repeat([]byte(" "), 64<<10)
	for i := range 3 {
		req := delivery("github", "workflow_run", fmt.Sprint("busy-", i), body, githubSecret)
		req.RemoteAddr = "10.8.0.1:6000"
		wantError(t, f.serve(req), http.StatusServiceUnavailable, "")
	}

	// One client at its cap of event streams; 3 more are refused.
	h := api.NewServer(api.Deps{Config: f.cfg, Engine: f.engine, Runs: f.store, Locks: f.locker,
		Logger: newTestLogger(f.logs), MaxStreams: 4, MaxStreamsPerClient: 1})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	r := f.trigger("demo", map[string]string{})
	for i := range 4 {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/runs/"+r.ID+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+readToken)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if want := map[bool]int{true: 200, false: 503}[i == 0]; resp.StatusCode != want {
			t.Fatalf("stream %d: got %d, want %d", i, resp.StatusCode, want)
		}
	}

	logs := f.logs.String()
	if errs := logLines(t, logs, "ERROR", ""); len(errs) > 0 {
		t.Errorf("refusals logged at ERROR: %v", errs)
	}
	for _, msg := range []string{"webhook body refused", "event stream refused"} {
		if n := len(logLines(t, logs, "WARN", msg)); n != 1 {
			t.Errorf("3 refusals of one client: %d WARN lines %q, want 1", n, msg)
		}
	}
}
