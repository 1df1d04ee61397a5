package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Issue 41, item 3: `trigger --allow-build-ahead` asks the daemon to let a build past the
// pipeline's max_build_ahead through, which only the admin token may: it sends
// allow_build_ahead with ORCH_ADMIN_TOKEN, not the trigger token. Without the flag neither.
func TestTriggerAllowBuildAheadSendsTheAdminToken(t *testing.T) {
	var mu sync.Mutex
	var auth []string
	var bodies []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b map[string]any
		_ = json.NewDecoder(r.Body).Decode(&b)
		mu.Lock()
		auth, bodies = append(auth, r.Header.Get("Authorization")), append(bodies, b)
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(map[string]any{"run": runs.Run{ID: "r-1", Pipeline: "prod", Status: runs.StatusQueued}})
	}))
	defer srv.Close()
	env := map[string]string{"ORCH_TRIGGER_TOKEN": "trigger-token-0123456789", "ORCH_ADMIN_TOKEN": "admin-token-0123456789ab"}
	for _, args := range [][]string{
		{"trigger", "prod", "--url", srv.URL, "--build", "90000", "--no-follow", "-q", "--allow-build-ahead"},
		{"trigger", "prod", "--url", srv.URL, "--build", "43", "--no-follow", "-q"},
	} {
		if out, errOut, err := invoke(context.Background(), env, args...); err != nil {
			t.Fatalf("%s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(auth) != 2 {
		t.Fatalf("got %d requests, want 2", len(auth))
	}
	if auth[0] != "Bearer admin-token-0123456789ab" || bodies[0]["allow_build_ahead"] != true {
		t.Errorf("with --allow-build-ahead: %q and body %v, want the admin token and allow_build_ahead", auth[0], bodies[0])
	}
	if _, sent := bodies[1]["allow_build_ahead"]; auth[1] != "Bearer trigger-token-0123456789" || sent {
		t.Errorf("without it: %q and body %v, want the trigger token and no allow_build_ahead", auth[1], bodies[1])
	}
}
