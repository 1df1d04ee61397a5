package phases_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// A run's Coolify requests do not grow with its deployment's length: with deployments eight
// times longer, a run (after one that showed the engine how long they take) costs about
// what it costs with short ones. Polling the deployment every interval, it would cost
// several times more. Counted from the fake's own log, on both backends (on Redis the look
// at the active deployments goes through the shared board).
func TestRunCostIsFlatInDeploymentTime(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		cost := func(run time.Duration) int {
			h := newHarnessOn(t, backend, coolifytest.WithTiming(coolifytest.Timing{Queued: time.Millisecond, RunMin: run, RunMax: run}))
			h.start(h.pipelineYAML("prod", []string{"api"}, ""))
			if r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"})); r.Status != runs.StatusSucceeded {
				t.Fatalf("first run %s (%s), want succeeded", r.Status, r.Reason)
			}
			before := len(h.coolify.Requests())
			if r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v3"})); r.Status != runs.StatusSucceeded {
				t.Fatalf("second run %s (%s), want succeeded", r.Status, r.Reason)
			}
			return len(h.coolify.Requests()) - before
		}
		short, long := cost(200*time.Millisecond), cost(1600*time.Millisecond)
		t.Logf("Coolify requests of a run: %d with a 200 ms deployment, %d with a 1.6 s one", short, long)
		if float64(long) > 1.5*float64(short) {
			t.Errorf("a run with a 1.6 s deployment made %d Coolify requests, one with a 200 ms deployment %d: want at most 1.5×", long, short)
		}
	})
}

// Every request a run sends to Coolify is counted under its purpose, and each purpose a run
// with a Coolify status health check has shows: the counts add up to the fake's own log.
func TestRunRequestsCountedByPurpose(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	by := map[coolify.Purpose]int{}
	h.purposes = func(p coolify.Purpose) { mu.Lock(); by[p]++; mu.Unlock() }
	h.start(strings.Replace(h.pipelineYAML("prod", []string{"api"}, ""), "    deploy_timeout: 5s\n",
		"    deploy_timeout: 5s\n    health: { coolify_status: running }\n", 1))
	before := len(h.coolify.Requests())
	if r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"})); r.Status != runs.StatusSucceeded {
		t.Fatalf("run %s (%s), want succeeded", r.Status, r.Reason)
	}
	sent := len(h.coolify.Requests()) - before
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, p := range coolify.Purposes {
		total += by[p]
	}
	t.Logf("requests by purpose: %v; %d in the fake's log", by, sent)
	if total != sent {
		t.Errorf("counted %d requests by purpose, the fake received %d", total, sent)
	}
	for _, p := range []coolify.Purpose{coolify.PurposePreflight, coolify.PurposeSync, coolify.PurposeDeploy, coolify.PurposePoll, coolify.PurposeHealth} {
		if by[p] == 0 {
			t.Errorf("no request counted as %s", p)
		}
	}
}

// A plan's estimate of a run's Coolify requests is near what a run of it sends: by purpose
// for the requests whose number the plan knows (the reads and writes of each service), and
// in all within a third (the looks depend on how long deployments take). Counted from the
// fake's log, with the daemon's first run (the token's abilities not yet known).
func TestPlanRequestsMatchARun(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	by := map[coolify.Purpose]int{}
	h.purposes = func(p coolify.Purpose) { mu.Lock(); by[p]++; mu.Unlock() }
	h.start(h.pipelineYAML("prod", []string{"api", "worker", "web"}, "phase2: { parallel: 3 }\n"))
	trig := orchestrator.Trigger{Build: "1", ImageTag: "v2"}
	plan, err := h.engine.Plan(context.Background(), "prod", trig)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	by = map[coolify.Purpose]int{} // the plan's own reads are not the run's
	mu.Unlock()
	before := len(h.coolify.Requests())
	if r := h.wait(h.submit("prod", trig)); r.Status != runs.StatusSucceeded {
		t.Fatalf("run %s (%s), want succeeded", r.Status, r.Reason)
	}
	sent := len(h.coolify.Requests()) - before
	mu.Lock()
	defer mu.Unlock()
	t.Logf("plan: %+v; run: %v, %d in all", plan.Requests, by, sent)
	for _, p := range []coolify.Purpose{coolify.PurposeSync, coolify.PurposeDeploy} {
		if got, want := by[p], plan.Requests.ByPurpose[string(p)]; got != want {
			t.Errorf("%s: the run sent %d requests, the plan said %d", p, got, want)
		}
	}
	if d := float64(sent - plan.Requests.Total); d > float64(plan.Requests.Total)/3 || -d > float64(plan.Requests.Total)/3 {
		t.Errorf("the run sent %d requests, the plan said about %d: want within a third", sent, plan.Requests.Total)
	}
}
