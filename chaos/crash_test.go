package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Scenario 1: kill -9 of the daemon while a deployment of its run is in progress. After a
// restart with the same ORCH_INSTANCE the run reads interrupted, the leases it held were
// released at start (not left to their 10-minute TTL), a new run completes, and no service
// saw two runs' steps overlap.
func TestKillDuringPhase2(t *testing.T) {
	w := newWorld(t, coolifytest.WithTiming(coolifytest.Timing{Queued: 10 * time.Millisecond, RunMin: 1500 * time.Millisecond, RunMax: 1500 * time.Millisecond}))
	dir := pipelineDir(t, map[string]string{"prod": w.pipelineYAML(
		[]svc{{name: "a", uuid: appA}, {name: "b", uuid: appB}}, "locks: { ttl: 10m }\n")})
	d := startDaemon(t, "d1", w.env("chaos-crash-1", dir))

	r1 := d.trigger("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"})
	waitFor(t, 30*time.Second, "run 1's deployment of a to start", func() bool {
		_, ok := startedDeployment(w.cf, appA, r1.ID)
		return ok
	})
	d.kill()
	if held := w.heldLocks(); len(held) == 0 {
		t.Fatal("no lease in Redis after kill -9 during Phase 2; the scenario did not catch the run holding its locks")
	}

	d.restart()
	got := d.run(r1.ID)
	if got.Status != runs.StatusInterrupted {
		t.Errorf("run 1 after restart: status %q (%s), want interrupted", got.Status, got.Reason)
	}
	if len(got.Left) == 0 {
		t.Errorf("run 1's interrupted record says nothing of the state it left the services in")
	}
	// Released at start: nothing is held before any new run asks.
	for _, l := range w.heldLocks() {
		t.Errorf("after restart, %s is still held by %s (fence %d, expires %s); want the dead run's leases released at start",
			l.Key, l.Holder, l.Fence, l.ExpiresAt.Format(time.RFC3339))
	}

	r2 := d.trigger("prod", orchestrator.Trigger{Build: "2", ImageTag: "v3"})
	got2 := d.waitEnded(r2.ID, 60*time.Second)
	if got2.Status != runs.StatusSucceeded {
		t.Fatalf("run 2: %q (%s), want succeeded", got2.Status, got2.Reason)
	}
	for _, app := range []string{appA, appB} {
		a, _ := w.cf.App(app)
		if a.DeployedImageTag != "v3" || a.DeployedEnv["BUILD"] != "2" {
			t.Errorf("%s runs tag %q with BUILD=%q, want v3 and 2", app, a.DeployedImageTag, a.DeployedEnv["BUILD"])
		}
	}
	// Run 2 did not deploy a while run 1's deployment still ran.
	dep1, _ := startedDeployment(w.cf, appA, r1.ID)
	for _, r := range requestsOf(w.cf, r2.ID) {
		if r.Route == "POST /deploy" && strings.Contains(r.RawQuery, appA) && (dep1.FinishedAt.IsZero() || r.Start.Before(dep1.FinishedAt)) {
			t.Errorf("run 2 deployed a at %s while run 1's deployment %s ran (finished %s)", r.Start, dep1.UUID, dep1.FinishedAt)
		}
	}
}
