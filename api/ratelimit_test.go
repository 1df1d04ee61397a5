package api_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/config"
)

// Item 2 of the attacker probe: a captured, correctly signed delivery replayed from 8
// threads (a ping, which is ignored, and a workflow_run that already started its run) takes
// nothing from the provider's bucket: the next genuine delivery still starts its run.
func TestReplayedDeliveriesDoNotUseTheRateLimit(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) { c.RateLimits.Webhook = config.Rate{PerSecond: 0.001, Burst: 2} })
	run := payload(t, "github-workflow-run.json")
	wantHook(t, f, delivery("github", "workflow_run", "first", run, githubSecret), 202, "triggered")
	ping := []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`)

	var wg sync.WaitGroup
	var mu sync.Mutex
	answers := map[string]int{}
	for g := range 8 {
		wg.Go(func() {
			for i := range 10 {
				req := delivery("github", "ping", fmt.Sprintf("ping-%d-%d", g, i), ping, githubSecret)
				if i%2 == 1 { // the captured workflow_run, under its own ID or a new one
					req = delivery("github", "workflow_run", fmt.Sprintf("replay-%d", i%4), run, githubSecret)
				}
				rec := f.serve(req)
				mu.Lock()
				answers[fmt.Sprint(rec.Code)]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if answers["429"] > 0 || answers["200"] != 40 || answers["202"] != 40 {
		t.Errorf("80 replays: answers %v, want 40 × 200 duplicate and 40 × 202 ignored, none 429", answers)
	}
	other := payload(t, "github-push.json")
	wantHook(t, f, delivery("github", "push", "genuine-2", other, githubSecret), 202, "triggered")
	// The bucket still holds: a third run is one too many.
	third := delivery("github", "workflow_run", "genuine-3", []byte(string(run)+" "), githubSecret)
	wantError(t, f.serve(third), 429, "")
}

// Item 3: plans are rate limited per token like triggers, in a bucket of their own (a loop
// of plans does not use up CI's triggers). That a plan's Coolify calls yield to runs' is the
// engine's: TestPlanCallsTakeTheLowestPriority (phases).
func TestPlanIsRateLimitedAndYieldsToRuns(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) { c.RateLimits.Trigger = config.Rate{PerSecond: 0.001, Burst: 2} })
	for i := range 2 {
		if rec := f.do("GET", "/v1/pipelines/demo/plan?image_tag=v1", triggerToken, nil); rec.Code != 200 {
			t.Fatalf("plan %d: got %d: %s", i, rec.Code, rec.Body)
		}
	}
	rec := f.do("GET", "/v1/pipelines/demo/plan?image_tag=v1", triggerToken, nil)
	wantError(t, rec, 429, "")
	if rec.Header().Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	f.trigger("demo", map[string]string{}) // its own bucket: still 202
}

// Item 4: every route that takes a token charges a wrong one to the client's bucket of
// failures and answers 429 once it is empty, while the genuine token still works from the
// same address; a valid token that lacks the role is authenticated, never charged, and told
// which token the route needs.
func TestWrongTokensAreRateLimitedOnEveryRoute(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) { c.RateLimits.Trigger = config.Rate{PerSecond: 0.001, Burst: 3} })
	r := f.trigger("demo", map[string]string{})
	routes := []struct{ method, path, good string }{
		{"GET", "/v1/locks/audit", readToken},
		{"GET", "/metrics", readToken},
		{"GET", "/v1/runs", readToken},
		{"GET", "/v1/runs/" + r.ID, readToken},
		{"GET", "/v1/pipelines", readToken},
		{"GET", "/v1/locks", readToken},
		{"GET", "/v1/services", readToken},
		{"POST", "/v1/runs/" + r.ID + "/cancel", triggerToken},
		{"DELETE", "/v1/locks/coolify:x/freeze", adminToken},
		{"GET", "/", readToken},
		{"GET", "/runs/" + r.ID, readToken},
	}
	for i, rt := range routes {
		addr := fmt.Sprintf("10.9.0.%d:7000", i+1)
		try := func(tok string) int {
			req := request(rt.method, rt.path, tok, nil)
			req.RemoteAddr = addr
			return f.serve(req).Code
		}
		for j := range 3 {
			if got := try(fmt.Sprintf("guess-%d-xxxxxxxxxxxxxxxx", j)); got != 403 {
				t.Fatalf("%s %s, wrong token %d: got %d, want 403", rt.method, rt.path, j, got)
			}
		}
		if got := try("guess-last-xxxxxxxxxxxxxxxx"); got != 429 {
			t.Errorf("%s %s, a fourth wrong token: got %d, want 429", rt.method, rt.path, got)
		}
		if got := try(rt.good); got >= 400 && got != 404 && got != 409 {
			t.Errorf("%s %s with the genuine token from the same address: got %d", rt.method, rt.path, got)
		}
	}
	// The trigger token is valid but not enough for the audit trail: 403 naming the role,
	// however often, from an address whose bucket holds 3.
	for i := range 10 {
		req := request("GET", "/v1/locks/audit", triggerToken, nil)
		req.RemoteAddr = "10.9.1.1:7000"
		e := wantError(t, f.serve(req), 403, "")
		if want := `this route needs the viewer or admin role; token "trigger" has the deployer role, which is not enough`; i == 0 && e.Error.Message != want {
			t.Errorf("a valid token lacking the role: message %q, want %q", e.Error.Message, want)
		}
	}
	req := request("GET", "/v1/locks/audit", "guess-xxxxxxxxxxxxxxxx", nil)
	if e := wantError(t, f.serve(req), 403, ""); strings.Contains(e.Error.Message, "not enough") {
		t.Errorf("an unknown token's message %q speaks of roles", e.Error.Message)
	}
}
