package api_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
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
// of plans does not use up CI's triggers), and the engine plans under the lowest outbound
// priority, so that its Coolify reads yield to runs' calls.
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
	f.engine.mu.Lock()
	defer f.engine.mu.Unlock()
	for _, p := range f.engine.planPriorities {
		if p != outbound.PriorityLow {
			t.Errorf("the engine planned with outbound priority %v, want PriorityLow", p)
		}
	}
	if len(f.engine.planPriorities) != 2 {
		t.Errorf("the engine planned %d times, want 2", len(f.engine.planPriorities))
	}
}
